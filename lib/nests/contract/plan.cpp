// Planning of a contraction nest: loops, blocks, transposes, load/store levels, PSUM or SBUF
// accumulation, the epilogue and every buffer.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "schedule/planner.hpp"

namespace kevo::schedule::detail {

// The most SBUF per partition a resident epilogue load (ContractPlan::resident_cols) may take:
// 16 KiB, a bias of 4,096 fp32 columns (beyond it, loaded per output tile as before)
constexpr std::int64_t kResidentColsBytes = 16 * 1024;

std::optional<Invalid> plan_contract(const Ctx& cx, NestPlan& n, int /*slot*/) {
  const auto& t = cx.s.target;
  const auto& slot = cx.s.contracts[static_cast<std::size_t>(cx.s.ops[static_cast<std::size_t>(n.root_op)].contract)];
  const auto& op = cx.s.kernel.ops[static_cast<std::size_t>(n.root_op)];
  ContractPlan& c = n.c;
  c.slot = cx.s.ops[static_cast<std::size_t>(n.root_op)].contract;
  for (int cl : slot.cls_list) {
    const auto u = static_cast<std::size_t>(cl);
    c.ext[u] = slot.ext[u];
    c.tile[u] = std::min(cx.num(slot.tile[cl]), slot.ext[u]);
    c.ntiles[u] = (slot.ext[u] + c.tile[u] - 1) / c.tile[u];
    c.bf[u] = std::min(cx.num(slot.block[cl]), c.ntiles[u]);
    c.nblocks[u] = (c.ntiles[u] + c.bf[u] - 1) / c.bf[u];
  }
  for (auto q : cx.perm(slot.order_b)) c.loops.push_back({slot.cls_list[static_cast<std::size_t>(q)], true});
  for (auto q : cx.perm(slot.order_t)) c.loops.push_back({slot.cls_list[static_cast<std::size_t>(q)], false});
  {
    const int sv = cx.val(slot.stationary);
    c.store_tr = sv == kStationaryOutPe;
    c.stat = c.store_tr ? slot.out_tr_operand : sv;
  }
  const int mov = 1 - c.stat;
  const auto us = static_cast<std::size_t>(c.stat), um = static_cast<std::size_t>(mov);

  // Tile limits of the PE array and of a PSUM bank.
  const std::int64_t stat_cap = std::min<std::int64_t>(t.stationary_fmax, t.pmax);
  if (slot.present[us] && c.tile[us] > stat_cap)
    return Invalid{"tile_limit",
                  fmt::format("{}: stationary free size {}={} exceeds {} on {}", n.name, slot.idx[us], c.tile[us], stat_cap, t.name),
                  slot.tile[c.stat], cx.at_most(slot.tile[c.stat], stat_cap)};
  const std::int64_t mov_cap = std::min<std::int64_t>(t.moving_fmax, t.psum_bank_bytes / 4);
  if (slot.present[um] && c.tile[um] > mov_cap)
    return Invalid{"tile_limit",
                  fmt::format("{}: moving free size {}={} exceeds {} (one PSUM bank of fp32) on {}", n.name, slot.idx[um],
                              c.tile[um], mov_cap, t.name),
                  slot.tile[mov], cx.at_most(slot.tile[mov], mov_cap)};

  // nki.isa.nc_matmul: "if one of the input tiles is tfloat32/float32, the other tile must also be
  // tfloat32/float32". An operand narrower than an fp32 other one is held in fp32 on chip: its
  // loads convert on the way (dma_copy), a PE transpose's copy out of PSUM converts; a DMA
  // transpose cannot (its destination keeps its source's dtype), and the matmul runs at fp32's rate.
  const auto operand_dtype = [&](int q) { return cx.s.tensor(slot.ones && q == 0 ? slot.operand[1] : slot.operand[static_cast<std::size_t>(q)]).dtype; };
  const bool any_fp32 = ir::dtype_bytes(operand_dtype(0)) == 4 || ir::dtype_bytes(operand_dtype(1)) == 4;
  for (int q = 0; q < 2; ++q) c.mm_dtype[static_cast<std::size_t>(q)] = any_fp32 ? ir::DType::fp32 : operand_dtype(q);
  for (int q = 0; q < 2; ++q) {
    const auto uq = static_cast<std::size_t>(q);
    const int tv = cx.val(slot.transpose[q]);
    c.tr[uq] = !slot.needs_transpose[uq] ? Transpose::none
               : tv >= kTransposeDmaBlock ? Transpose::dma_transpose
                                          : static_cast<Transpose>(1 + tv);
    if (slot.needs_transpose[uq] && tv == kTransposeDmaBlock) c.tr_gran[uq] = TransposeGran::block;
    if (slot.needs_transpose[uq] && tv == kTransposeDmaRegion) c.tr_gran[uq] = TransposeGran::region;
    if (c.tr[uq] == Transpose::dma_transpose && ir::dtype_bytes(cx.s.tensor(slot.operand[uq]).dtype) != 2)
      return Invalid{"unsupported",
                    fmt::format("{}: dma_transpose moves 2-byte elements only; {} is {}", n.name, slot.operand[uq],
                                ir::to_string(cx.s.tensor(slot.operand[uq]).dtype)),
                    slot.transpose[q], 0};
    if (c.tr[uq] == Transpose::dma_transpose && c.mm_dtype[uq] != operand_dtype(q))
      return Invalid{"unsupported",
                     fmt::format("{}: {} is {} and the other operand fp32, so the matmul takes it in fp32 (nki.isa.nc_matmul); "
                                 "dma_transpose keeps its input's dtype (pe_transpose or strided converts)",
                                 n.name, slot.operand[uq], ir::to_string(operand_dtype(q))),
                     slot.transpose[q], 0};
    if (slot.ones && q == 0) {  // the implicit ones: one memset at the nest's root, never reloaded
      c.load_level[uq] = -1;
      c.load_bufs[uq] = 1;
      c.load_dma[uq] = DmaGran::region;
      c.load_q[uq] = 1;
      continue;
    }
    const int lv = cx.val(slot.load_level[q]);
    if (lv == 0) {  // auto: inside the innermost nontrivial loop over the operand's own indices
      int best = -1;
      for (std::size_t p = 0; p < c.loops.size(); ++p)
        if ((c.loops[p].cls == q || c.loops[p].cls == 2) && c.nontrivial(c.loops[p])) best = static_cast<int>(p);
      c.load_level[uq] = best;
    } else if (lv == 1) {
      c.load_level[uq] = -1;
    } else {
      const std::string& lab = slot.level_labels[static_cast<std::size_t>(lv)];
      const bool blk = lab.size() > 2 && lab.substr(lab.size() - 2) == ".b";
      const std::string ix = blk ? lab.substr(0, lab.size() - 2) : lab;
      int cl = 0;
      for (int z = 0; z < 3; ++z)
        if (slot.idx[static_cast<std::size_t>(z)] == ix) cl = z;
      c.load_level[uq] = c.pos_of(cl, blk);
    }
    c.load_bufs[uq] = static_cast<int>(cx.num(slot.load_bufs[q]));
    c.load_dma[uq] = cx.dma(slot.load_dma[q]);
    c.load_q[uq] = static_cast<int>(cx.num(slot.load_q[q]));
  }
  c.acc_sbuf = cx.val(slot.acc) >= 1;
  c.acc_out_dtype = cx.val(slot.acc) == kAccSbufOut;
  c.acc_zero = static_cast<AccZero>(cx.val(slot.acc_zero));
  // a PSUM accumulator zeroed by a memset is accumulated onto by every matmul: undefined on the
  // hardware of NeuronCore-v2 and -v3 (nki.isa.nc_matmul), so the first matmul starts it there
  if (!c.acc_sbuf && c.acc_zero == AccZero::memset && !t.matmul_accumulate_after_memset)
    return Invalid{"unsupported",
                   fmt::format("{}: acc psum zero=memset accumulates every matmul onto PSUM a memset zeroed, which is undefined "
                               "behavior on {} hardware (nki.isa.nc_matmul); zero=start (the first matmul starts the group)",
                               n.name, t.generation),
                   slot.acc_zero, static_cast<int>(AccZero::start)};
  c.prologue_spread = cx.val(slot.prologue) == 1;
  c.kedge_slices = slot.kedge >= 0 && cx.val(slot.kedge) == 1;
  c.sedge_slices = slot.sedge >= 0 && cx.val(slot.sedge) == 1;
  if (c.sedge_slices && (c.store_tr || n.ops.size() > 1))
    return Invalid{"unsupported",
                   fmt::format("{}: sedge slices keeps the stationary's edge output tiles on the PSUM and SBUF partitions of their "
                               "column tiles; it is not offered with {}",
                               n.name, c.store_tr ? "the output transposed on chip (out=pe_transpose)" : "an epilogue"),
                   slot.sedge, 0};
  if (c.kedge_slices)
    for (int q = 0; q < 2; ++q)
      if (c.tr[static_cast<std::size_t>(q)] == Transpose::pe_transpose)
        return Invalid{"unsupported",
                       fmt::format("{}: kedge slices places the edge rows in every row tile of the PE array by DMA; {} is transposed "
                                   "through the PE array (pe_transpose), whose copy out of PSUM cannot move rows across partitions",
                                   n.name, slot.operand[static_cast<std::size_t>(q)]),
                       slot.kedge, 0};
  {
    const int rv = slot.rows >= 0 ? cx.val(slot.rows) : 0;
    c.interleave = (rv == kRowsK || rv == kRowsAll) && c.bf[2] > 1;
    c.out_interleave = (rv == kRowsOut || rv == kRowsAll) && c.bf[static_cast<std::size_t>(c.stat)] > 1;
    if (c.out_interleave && (c.store_tr || n.ops.size() > 1))
      return Invalid{"unsupported",
                    fmt::format("{}: rows {} orders the output's rows; it is not offered with {}", n.name,
                                rv == kRowsOut ? "interleave_out" : "interleave_all",
                                c.store_tr ? "the output transposed on chip (out=pe_transpose)" : "an epilogue"),
                    slot.rows, rv == kRowsAll ? kRowsK : 0};
  }
  if (c.acc_out_dtype) {
    // Partial sums rounded to C's dtype after every k block: the error grows with the number of
    // roundings. Measured against verify's tolerance (test/verify "acc dtype=out"): bf16 passes at
    // up to 16 k blocks and fails from 32 (K = 4096..16384); kevo allows 8 for a margin, and no
    // 1-byte partials at all.
    const auto& ct = cx.s.tensor(op.out);
    const auto bytes = ir::dtype_bytes(ct.dtype);
    // fp16's range (+-65504) can overflow in a partial sum where the fp32 sum, and the result,
    // do not (bench/differential seed 1 case 6672: inf for 6480); bf16 has fp32's exponent range
    if (ct.dtype == ir::DType::fp16)
      return Invalid{"precision",
                    fmt::format("{}: partial sums kept in fp16 can overflow its range (65504) where the fp32 sum does not "
                                "(bf16 partial sums have fp32's range)",
                                n.name),
                    slot.acc, 1};
    if (bytes < 2 || (bytes == 2 && c.nblocks[2] > kAccOutMaxBlocks))
      return Invalid{"precision",
                    fmt::format("{}: partial sums kept in {} over {} k blocks (at most {} for 2-byte dtypes, none for 1-byte) "
                                "would drift past the verify tolerance",
                                n.name, ir::to_string(ct.dtype), c.nblocks[2], kAccOutMaxBlocks),
                    slot.acc, 1};
  }
  c.psum_bufs = static_cast<int>(cx.num(slot.psum_bufs));
  const int pkb = c.pos_of(2, true), pkt = c.pos_of(2, false);
  const int outer_k = c.nblocks[2] > 1 ? pkb : c.bf[2] > 1 ? pkt : -1;
  c.scope = c.acc_sbuf ? pkt : (c.nblocks[2] > 1 ? pkb : pkt);
  {
    const int sv = cx.val(slot.store_level);
    if (sv == 0) {
      c.store_level = outer_k >= 0 ? outer_k - 1 : static_cast<int>(c.loops.size()) - 1;
    } else if (sv == 1) {
      c.store_level = -1;
    } else {
      const auto& lab = cx.sp.gene(static_cast<std::size_t>(slot.store_level)).labels[static_cast<std::size_t>(sv)];
      const bool blk = lab.size() > 2 && lab.substr(lab.size() - 2) == ".b";
      const std::string ix = blk ? lab.substr(0, lab.size() - 2) : lab;
      int cl = 0;
      for (int z = 0; z < 2; ++z)
        if (slot.idx[static_cast<std::size_t>(z)] == ix) cl = z;
      c.store_level = c.pos_of(cl, blk);
      if (outer_k >= 0 && c.store_level >= outer_k)
        return Invalid{"illegal_order",
                      fmt::format("{}: 'store {}@{}' sits inside the {} loop, before the sum over {} is complete", n.name,
                                  op.out, lab, slot.idx[2] + (outer_k == pkb ? ".b" : ""), slot.idx[2]),
                      slot.store_level, 0};
    }
  }
  if (slot.rest >= 0 && cx.val(slot.rest) == 1) {
    // the loops the accumulators span, reordered tile by tile, need every piece the reorder
    // moves to be per tile already: accumulators in PSUM (one bank per output tile of the
    // scope), an output tile loop inside the outer k loop (else there is nothing to reorder),
    // no block loop inside it but k's, the store just outside it, both operands loaded outside it
    bool tile_inside = false, block_inside = false;
    for (std::size_t p = static_cast<std::size_t>(std::max(c.scope, 0)) + 1; p < c.loops.size(); ++p) {
      const auto& l = c.loops[p];
      if (l.cls == 2) continue;
      if (l.block) block_inside = block_inside || c.nblocks[static_cast<std::size_t>(l.cls)] > 1;
      else tile_inside = tile_inside || c.bf[static_cast<std::size_t>(l.cls)] > 1;
    }
    const char* why = c.acc_sbuf                   ? "its partial sums are in SBUF (acc sbuf)"
                      : outer_k < 0                ? "it has one k tile"
                      : !tile_inside               ? "no output tile loop of more than one tile runs inside its outer k loop"
                      : block_inside               ? "a block loop of an output index runs inside its outer k loop"
                      : c.store_level != c.scope - 1 ? "its store is not just outside its outer k loop (store @auto)"
                      : c.load_level[0] >= c.scope || c.load_level[1] >= c.scope ? "an operand is loaded inside its outer k loop"
                      : c.store_tr                 ? "its output is transposed on chip (out=pe_transpose)"
                                                   : nullptr;
    if (why)
      return Invalid{"unsupported",
                     fmt::format("{}: rest tiles runs its later blocks tile by tile, which this nest cannot: {}", n.name, why),
                     slot.rest, 0};
    c.rest_tiles = true;
  }
  c.store_bufs = static_cast<int>(cx.num(slot.store_bufs));
  c.store_dma = cx.dma(slot.store_dma);
  c.store_q = static_cast<int>(cx.num(slot.store_q));
  c.evict = cx.val(slot.evict) == 1 ? target::Engine::scalar : target::Engine::vector;
  c.evict_alternate = cx.val(slot.evict) == 2;

  // Buffers.
  const int Pk = static_cast<int>(c.tile[2]);
  for (int q = 0; q < 2; ++q) {
    const auto uq = static_cast<std::size_t>(q);
    const auto fp = c.footprint(c.load_level[uq]);
    const auto& tn = slot.operand[uq];
    const ir::DType dt = operand_dtype(q);  // the ones in X's dtype
    c.buf_load[uq] = add_buf(n, BufSpec{fmt::format("{}.{}", n.name, q == 0 ? tn : tn + ".2"), false, c.mm_dtype[uq], Pk,
                                        fp[2] * c.span(q, fp[uq]), c.load_bufs[uq]});
    if (c.tr[uq] == Transpose::pe_transpose) {
      const int rows = static_cast<int>(std::min<std::int64_t>(c.tile[uq], t.pmax));
      const std::int64_t chunks = (c.tile[uq] + t.pmax - 1) / t.pmax;
      // (a convolution's weights with the taps inside each channel: every tap of a k row, ContractSlot::tap_run)
      c.buf_nat[uq] = add_buf(n, BufSpec{fmt::format("{}.{}.nat", n.name, tn), false, dt, rows,
                                         chunks * c.tile[2] * slot.tap_run[uq], 2});
      // nki.isa.nc_transpose: "the output dst tile must have the same data type as that of data"
      c.buf_tpsum[uq] = add_buf(n, BufSpec{fmt::format("{}.{}.T", n.name, tn), true, dt, Pk,
                                           std::max<std::int64_t>(c.tile[uq], t.psum_bank_bytes / 4), 2});
    }
  }
  const auto pfp = c.footprint(c.scope - 1);
  const std::int64_t bank_elems = t.psum_bank_bytes / 4;
  const std::int64_t groups = pfp[us] * pfp[um];
  c.buf_psum = add_buf(n, BufSpec{n.name + ".psum", true, ir::DType::fp32, static_cast<int>(c.tile[us]),
                                  groups * bank_elems, c.psum_bufs});
  const auto sfp = c.footprint(c.store_level);
  const std::int64_t Lmov = c.span(mov, sfp[um]);
  const auto& ct = cx.s.tensor(op.out);
  const OutsideReads outside(cx.s, n.ops);
  const bool c_stored = ct.role == ir::Role::output || outside.contains(op.out);
  c.c_footprint = c.acc_sbuf || c_stored;
  if (c.c_footprint)
    c.buf_c = add_buf(n, BufSpec{op.out, false, c.acc_sbuf && !c.acc_out_dtype ? ir::DType::fp32 : ct.dtype, static_cast<int>(c.tile[us]),
                                 sfp[us] * Lmov, c.store_bufs});
  else
    c.buf_c = add_buf(n, BufSpec{op.out, false, ct.dtype, static_cast<int>(c.tile[us]), c.tile[um], c.store_bufs});

  // stationary ... out=pe_transpose: per 128 columns of the moving index, the footprint's rows
  // are transposed into PSUM ([columns, stationary tile]) and copied into a staging tile
  // [columns, stationary rows of the footprint] that one DMA stores along contiguous rows.
  if (c.store_tr) {
    const int cols = static_cast<int>(std::min<std::int64_t>(t.pmax, Lmov));
    c.buf_ostage = add_buf(n, BufSpec{op.out + ".ostage", false, ct.dtype, cols, sfp[us] * c.tile[us], 2});
  }

  // Epilogue: the fused maps, computed per output tile [stationary-free, moving-free].
  std::vector<int> epi(n.ops.begin() + 1, n.ops.end());
  // Legality from dependences (as in plan_vector): an epilogue op runs once per finished output
  // tile, so it must be a map over exactly the contraction's output indices.
  for (int oi : epi) {
    if (!detail::check_coverage) break;
    const auto& os = cx.s.ops[static_cast<std::size_t>(oi)];
    if (os.kind != ir::OpKind::map)
      return Invalid{"illegal_fusion", fmt::format("{}: '{}' is not elementwise and cannot run per output tile", n.name, os.name),
                    os.fuse_gene, 0};
    for (const auto& x : os.idx)
      if (std::find(op.out_indices.begin(), op.out_indices.end(), x) == op.out_indices.end())
        return Invalid{"illegal_fusion",
                      fmt::format("{}: '{}' needs index {}, which the output tiles of '{}' do not iterate: fused, {} would "
                                  "be computed for {} = 0 alone",
                                  n.name, os.name, x, op.out, os.name, x),
                      os.fuse_gene, 0};
  }
  if (!epi.empty()) {
    std::vector<std::pair<std::string, int>> produced{{op.out, c.buf_c}};
    std::vector<std::vector<std::string>> pidx{op.out_indices};
    // Epilogue values that are stored live in footprint-sized staging buffers; build_tc makes
    // per-tile buffers, which the lowering uses for unstored values and we widen here for stored ones.
    if (auto r = build_tc(cx, n, n.tc, epi, static_cast<int>(c.tile[us]), c.tile[um], slot.idx[us], slot.idx[um], c.store_bufs,
                          produced, pidx, outside))
      return r;
    for (std::size_t q = 0; q < n.tc.ops.size(); ++q) {
      if (!n.tc.store[q]) continue;
      auto& b = n.buffers[static_cast<std::size_t>(n.tc.dst[q])];
      b.free_elems = b.free_elems == 1 ? sfp[us] : sfp[us] * Lmov;
    }
    // loads of the moving index alone (ContractPlan::resident_cols), up to kResidentColsBytes per partition
    const std::string& mx = slot.idx[um];
    const std::int64_t cols = c.ntiles[um] * c.tile[um];
    for (int oi : epi) {
      std::vector<const ir::Expr*> nodes;
      preorder(cx.s.kernel.ops[static_cast<std::size_t>(oi)].expr, nodes);
      for (const auto* e : nodes) {
        if (mx.empty() || e->kind != ir::Expr::Kind::access || !ir::is_plain(*e) || e->indices.empty() ||
            !std::all_of(e->indices.begin(), e->indices.end(), [&](const std::string& x) { return x == mx; }))
          continue;
        const std::string key = access_key(*e);
        if (std::find(c.resident_cols.begin(), c.resident_cols.end(), key) != c.resident_cols.end()) continue;
        for (const auto& [kk, b] : n.tc.loads) {
          auto& buf = n.buffers[static_cast<std::size_t>(b)];
          if (kk != key || buf.free_elems != c.tile[um] || cols * ir::dtype_bytes(buf.dtype) > kResidentColsBytes) continue;
          buf.free_elems = cols;
          buf.nbufs = 1;
          c.resident_cols.push_back(key);
        }
      }
    }
  }
  if (c.store_tr) {
    // the transposes' PSUM tiles, one per dtype of the tiles stored (nki.isa.nc_transpose writes
    // its input's dtype): the contraction's own output and the stored epilogue values
    std::vector<ir::DType> dts;
    if (c_stored) dts.push_back(n.buffers[static_cast<std::size_t>(c.buf_c)].dtype);
    for (std::size_t q = 0; q < n.tc.ops.size(); ++q)
      if (n.tc.store[q]) dts.push_back(n.buffers[static_cast<std::size_t>(n.tc.dst[q])].dtype);
    const int cols = static_cast<int>(std::min<std::int64_t>(t.pmax, Lmov));
    for (const auto dt : dts)
      if (buf_for(c.buf_otpsum, dt) < 0)
        c.buf_otpsum.emplace_back(dt, add_buf(n, BufSpec{fmt::format("{}.oT.{}", op.out, ir::to_string(dt)), true, dt, cols,
                                                         std::max<std::int64_t>(c.tile[us], t.psum_bank_bytes / 4), 2}));
  }

  // PSUM banks: accumulation groups outstanding, times rotation, plus PE-transpose staging.
  const std::int64_t group_banks = groups * ((c.tile[um] * 4 + t.psum_bank_bytes - 1) / t.psum_bank_bytes);
  std::int64_t staging = 0;
  for (int q = 0; q < 2; ++q)
    if (c.buf_tpsum[static_cast<std::size_t>(q)] >= 0)
      staging += 2 * ((c.tile[static_cast<std::size_t>(q)] * 4 + t.psum_bank_bytes - 1) / t.psum_bank_bytes);
  if (c.store_tr)
    staging += 2 * static_cast<std::int64_t>(c.buf_otpsum.size()) * ((c.tile[us] * 4 + t.psum_bank_bytes - 1) / t.psum_bank_bytes);
  const std::int64_t banks = group_banks * c.psum_bufs + staging;
  if (banks > t.psum_banks) {
    int gene = -1, v = 0;
    if (c.psum_bufs > 1) {
      // the deepest rotation that fits (at least one slot)
      gene = slot.psum_bufs;
      v = cx.at_most(slot.psum_bufs, std::max<std::int64_t>(1, (t.psum_banks - staging) / group_banks));
    } else {
      // shrink the larger out block inside the accumulation scope
      const int cl = pfp[us] >= pfp[um] ? c.stat : mov;
      if (cx.val(slot.block[cl]) > 0) {
        gene = slot.block[cl];
        v = cx.val(slot.block[cl]) - 1;
      } else if (c.tr[0] == Transpose::pe_transpose || c.tr[1] == Transpose::pe_transpose) {
        gene = slot.transpose[c.tr[0] == Transpose::pe_transpose ? 0 : 1];
      } else if (!c.acc_sbuf) {
        gene = slot.acc;
        v = 1;
      } else if (c.store_tr) {
        gene = slot.stationary;
        v = slot.out_tr_operand;
      }
    }
    return Invalid{"psum_banks",
                  fmt::format("{}: needs {} PSUM banks ({} accumulation group{} x {} rotation{}{}), {} has {}", n.name, banks,
                              groups, groups == 1 ? "" : "s", c.psum_bufs, c.psum_bufs == 1 ? "" : "s",
                              c.buf_tpsum[0] >= 0 || c.buf_tpsum[1] >= 0 || c.store_tr ? " + transposes" : "", t.name, t.psum_banks),
                  gene, v};
  }
  return std::nullopt;
}

// The gene change most likely to shrink this nest's SBUF use (make_plan's sbuf_overflow hint).
std::pair<int, int> sbuf_fix_contract(const Ctx& cx, const NestPlan& n) {
  const auto& slot = cx.s.contracts[static_cast<std::size_t>(n.c.slot)];
  for (int gi : {slot.load_bufs[0], slot.load_bufs[1], slot.store_bufs})
    if (cx.val(gi) > 0) return {gi, cx.val(gi) - 1};
  for (int q = 0; q < 2; ++q)
    if (cx.val(slot.load_level[q]) != 0) return {slot.load_level[q], 0};
  if (cx.val(slot.store_level) != 0) return {slot.store_level, 0};
  int best = -1;
  for (int cl : slot.cls_list)
    if (cx.val(slot.block[cl]) > 0 && (best < 0 || cx.val(slot.block[cl]) > cx.val(slot.block[best]))) best = cl;
  if (best >= 0) return {slot.block[best], cx.val(slot.block[best]) - 1};
  for (int cl : slot.cls_list)
    if (cx.val(slot.tile[cl]) > 0) return {slot.tile[cl], cx.val(slot.tile[cl]) - 1};
  return {-1, 0};
}

}  // namespace kevo::schedule::detail
