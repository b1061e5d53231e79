// Resolves a genome into nests, loops and buffers, and checks it against the target.
#include "kevo/schedule/detail/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace kevo::schedule {

bool detail::check_coverage = true;

std::int64_t BufSpec::bytes_per_partition() const {
  return psum ? free_elems * 4 * nbufs : free_elems * static_cast<std::int64_t>(ir::dtype_bytes(dtype)) * nbufs;
}

void preorder(const ir::Expr& e, std::vector<const ir::Expr*>& out) {
  out.push_back(&e);
  for (const auto& a : e.args) preorder(a, out);
}

bool expr_uses(const ir::Expr& e, const std::string& index) {
  if (index.empty()) return false;
  if (e.kind == ir::Expr::Kind::access) return ir::access_uses(e, index);
  if (e.kind == ir::Expr::Kind::index) return e.index == index;
  for (const auto& a : e.args)
    if (expr_uses(a, index)) return true;
  return false;
}

std::string access_key(const ir::Expr& a) {
  std::string s = a.tensor + "[";
  for (std::size_t i = 0; i < a.indices.size(); ++i) {
    std::string x = ir::index_text(a, i);
    x.erase(std::remove(x.begin(), x.end(), ' '), x.end());
    s += (i ? "," : "") + x;
  }
  return s + "]";
}

WindowGeom window_geom(const ir::Expr& e, const std::string& pidx, const std::string& fidx, const std::string& r,
                       std::int64_t F, std::int64_t T) {
  WindowGeom w;
  if (e.kind != ir::Expr::Kind::access || r.empty() || !ir::access_uses(e, r)) return w;
  const auto coef = [&](std::size_t d, const std::string& x) -> std::int64_t {
    if (x.empty()) return 0;
    const ir::IndexShift sh = d < e.shifts.size() ? e.shifts[d] : ir::IndexShift{};
    return (e.indices[d] == x ? sh.stride : 0) + (sh.plus == x ? 1 : 0);
  };
  int found = -1;
  for (std::size_t d = 0; d < e.indices.size(); ++d)
    if (coef(d, r) > 0) {
      if (found >= 0) return w;  // r moves two dims
      found = static_cast<int>(d);
    }
  const auto d = static_cast<std::size_t>(found);
  if (coef(d, pidx) > 0) return w;  // a window along partitions
  for (std::size_t o = 0; o < e.indices.size(); ++o)
    if (o != d && coef(o, fidx) > 0) return w;  // wide along another dim
  w.ok = true;
  w.dim = d;
  w.a_r = coef(d, r);
  w.a_f = coef(d, fidx);
  w.elems = w.a_f * (F - 1) + w.a_r * (T - 1) + 1;
  return w;
}

int ContractPlan::pos_of(int cls, bool block) const {
  for (std::size_t i = 0; i < loops.size(); ++i)
    if (loops[i].cls == cls && loops[i].block == block) return static_cast<int>(i);
  return -1;
}
bool ContractPlan::nontrivial(const Loop& l) const {
  return l.block ? nblocks[static_cast<std::size_t>(l.cls)] > 1 : bf[static_cast<std::size_t>(l.cls)] > 1;
}
std::array<std::int64_t, 3> ContractPlan::footprint(int level) const {
  std::array<std::int64_t, 3> fp{1, 1, 1};
  for (int c = 0; c < 3; ++c) {
    const int pb = pos_of(c, true), pt = pos_of(c, false);
    if (pt < 0) continue;
    if (pt <= level) fp[static_cast<std::size_t>(c)] = 1;
    else if (pb <= level) fp[static_cast<std::size_t>(c)] = bf[static_cast<std::size_t>(c)];
    else fp[static_cast<std::size_t>(c)] = ntiles[static_cast<std::size_t>(c)];
  }
  return fp;
}

namespace {

std::string kib(std::int64_t b) {
  if (b % 1024 == 0) return fmt::format("{} KiB", b / 1024);
  return fmt::format("{:.1f} KiB", static_cast<double>(b) / 1024.0);
}

struct Ctx {
  const ScheduleSpace& space;
  const SpaceImpl& s;
  const Space& sp;
  const Genome& g;
  [[nodiscard]] int val(int gene) const { return gene < 0 ? 0 : sp.at(g, static_cast<std::size_t>(gene)); }
  [[nodiscard]] std::int64_t num(int gene) const {
    return sp.gene(static_cast<std::size_t>(gene)).values[static_cast<std::size_t>(val(gene))];
  }
  [[nodiscard]] std::span<const std::int32_t> perm(int gene) const { return sp.slots(g, static_cast<std::size_t>(gene)); }
  // A DMA granularity gene's value, by its label (kDmaLabels)
  [[nodiscard]] DmaGran dma(int gene) const {
    const auto& l = sp.gene(static_cast<std::size_t>(gene)).labels[static_cast<std::size_t>(val(gene))];
    for (std::size_t i = 0; i < std::size(kDmaLabels); ++i)
      if (l == kDmaLabels[i]) return static_cast<DmaGran>(i);
    throw Error("kevo: unknown DMA granularity '" + l + "'");
  }
  // The value index of the largest ordinal value <= want (at least index 0).
  [[nodiscard]] int at_most(int gene, std::int64_t want) const {
    const auto& v = sp.gene(static_cast<std::size_t>(gene)).values;
    int best = 0;
    for (std::size_t i = 0; i < v.size(); ++i)
      if (v[i] <= want) best = static_cast<int>(i);
    return best;
  }
};

Unexpected<Invalid> reject(std::string code, std::string msg, int gene = -1, int value = -1) {
  return unexpected(Invalid{std::move(code), std::move(msg), gene, value});
}

int add_buf(NestPlan& n, BufSpec b) {
  n.buffers.push_back(std::move(b));
  return static_cast<int>(n.buffers.size()) - 1;
}

// Builds the per-tile computation of `ops` on [P, F] tiles; `produced` maps tensors already
// held on chip (by name) to their buffer; returns a reason when an op cannot run in this nest.
std::optional<Invalid> build_tc(const Ctx& cx, NestPlan& n, TileCompute& tc, const std::vector<int>& ops, int P,
                               std::int64_t F, const std::string& pidx, const std::string& fidx, int nbufs,
                               std::vector<std::pair<std::string, int>>& produced,
                               const std::vector<std::vector<std::string>>& produced_idx,
                               const std::set<std::string>& outside_reads, const std::set<int>& no_body = {}) {
  const auto& k = cx.s.kernel;
  std::vector<std::vector<std::string>> prod_idx = produced_idx;
  for (int oi : ops) {
    const auto& op = k.ops[static_cast<std::size_t>(oi)];
    const auto& t = cx.s.tensor(op.out);
    const bool has_f = !fidx.empty() && std::find(op.out_indices.begin(), op.out_indices.end(), fidx) != op.out_indices.end();
    const std::int64_t w = has_f ? F : 1;
    const bool is_reduce = op.kind() == ir::OpKind::reduce;
    const bool stored = t.role == ir::Role::output || outside_reads.count(op.out) > 0;
    tc.ops.push_back(oi);
    tc.store.push_back(stored);
    tc.dst.push_back(add_buf(n, BufSpec{op.out, false, is_reduce ? ir::DType::fp32 : t.dtype, P, w, nbufs}));
    std::vector<const ir::Expr*> nodes;
    preorder(op.expr, nodes);
    std::vector<int> nb(nodes.size(), -1);
    std::vector<std::array<int, 2>> sb(nodes.size(), {-1, -1});
    for (std::size_t q = 0; q < (no_body.count(oi) ? 0 : nodes.size()); ++q) {
      const ir::Expr& e = *nodes[q];
      const std::int64_t ew = expr_uses(e, fidx) ? F : 1;
      if (e.kind == ir::Expr::Kind::access) {
        auto it = std::find_if(produced.begin(), produced.end(), [&](const auto& pr) { return pr.first == e.tensor; });
        if (it != produced.end()) {
          const auto& want = prod_idx[static_cast<std::size_t>(it - produced.begin())];
          if (want != e.indices) {
            // (2) of the dependence rule: the element read is produced in another step of the nest
            const auto join = [](const std::vector<std::string>& v) {
              std::string r;
              for (const auto& x : v) r += (r.empty() ? "" : ",") + x;
              return r;
            };
            return Invalid{"illegal_fusion",
                          fmt::format("{}: '{}' reads {}[{}] but the nest produces {}[{}] one tile at a time: that element "
                                      "may not be produced yet",
                                      n.name, op.out, e.tensor, join(e.indices), e.tensor, join(want)),
                          cx.s.ops[static_cast<std::size_t>(oi)].fuse_gene, 0};
          }
          continue;
        }
        const std::string key = access_key(e);
        // a shifted dim moving with both the partition and the free index reads a diagonal band,
        // not a rectangle: one DMA per tile cannot load it
        for (std::size_t d = 0; d < e.shifts.size(); ++d) {
          const auto& sh = e.shifts[d];
          const auto has = [&](const std::string& x) { return !x.empty() && (e.indices[d] == x || sh.plus == x); };
          if (!sh.plain() && has(pidx) && has(fidx)) {
            const auto& vs = cx.s.ops[static_cast<std::size_t>(n.root_op)];
            int gene = -1, value = -1;
            if (n.kind == NestKind::vector && vs.vec >= 0) {  // the first layout that separates them
              const auto& slot = cx.s.vectors[static_cast<std::size_t>(vs.vec)];
              gene = slot.layout;
              for (std::size_t l = 0; l < slot.layouts.size() && value < 0; ++l) {
                const auto [lp, lf] = slot.layouts[l];
                const std::string P2 = lp >= 0 ? slot.dom[static_cast<std::size_t>(lp)] : "";
                const std::string F2 = lf >= 0 ? slot.dom[static_cast<std::size_t>(lf)] : "";
                if (!(has(P2) && has(F2))) value = static_cast<int>(l);
              }
            }
            return Invalid{"unsupported",
                          fmt::format("{}: {} puts partition index {} and free index {} into one shifted position "
                                      "(a diagonal band, not a tile)",
                                      n.name, key, pidx, fidx),
                          gene, value};
          }
        }
        if (std::none_of(tc.loads.begin(), tc.loads.end(), [&](const auto& l) { return l.first == key; })) {
          const auto& in = cx.s.tensor(e.tensor);
          tc.loads.emplace_back(key, add_buf(n, BufSpec{"ld." + key, false, in.dtype, P, ew, nbufs}));
        }
        continue;
      }
      if (e.kind == ir::Expr::Kind::constant) continue;
      const bool root_to_dst = q == 0 && !is_reduce;
      if (!root_to_dst) {
        const ir::DType dt = e.kind == ir::Expr::Kind::call && e.fn == ir::Fn::cast ? e.dtype : ir::DType::fp32;
        nb[q] = add_buf(n, BufSpec{fmt::format("{}.n{}", op.out, q), false, dt, P, ew, nbufs});
      }
      if (e.kind == ir::Expr::Kind::call && e.fn == ir::Fn::select) {
        sb[q][0] = add_buf(n, BufSpec{fmt::format("{}.n{}.s0", op.out, q), false, ir::DType::fp32, P, ew, nbufs});
        sb[q][1] = add_buf(n, BufSpec{fmt::format("{}.n{}.s1", op.out, q), false, ir::DType::fp32, P, ew, nbufs});
      }
    }
    tc.node_buf.push_back(std::move(nb));
    tc.sel_buf.push_back(std::move(sb));
    produced.emplace_back(op.out, tc.dst.back());
    prod_idx.push_back(op.out_indices);
  }
  return std::nullopt;
}

std::set<std::string> reads_outside(const ir::Kernel& k, const std::vector<int>& nest_ops) {
  std::set<std::string> r;
  for (std::size_t i = 0; i < k.ops.size(); ++i) {
    if (std::find(nest_ops.begin(), nest_ops.end(), static_cast<int>(i)) != nest_ops.end()) continue;
    std::vector<const ir::Expr*> nodes;
    preorder(k.ops[i].expr, nodes);
    for (const auto* e : nodes)
      if (e->kind == ir::Expr::Kind::access) r.insert(e->tensor);
  }
  return r;
}

std::optional<Invalid> plan_contract(const Ctx& cx, NestPlan& n) {
  const auto& t = cx.s.target;
  const auto& slot = cx.s.contracts[static_cast<std::size_t>(cx.s.ops[static_cast<std::size_t>(n.root_op)].contract)];
  const auto& op = cx.s.kernel.ops[static_cast<std::size_t>(n.root_op)];
  ContractPlan& c = n.c;
  c.slot = cx.s.ops[static_cast<std::size_t>(n.root_op)].contract;
  for (int cl : slot.cls_list) {
    const auto u = static_cast<std::size_t>(cl);
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

  for (int q = 0; q < 2; ++q) {
    const auto uq = static_cast<std::size_t>(q);
    const int tv = cx.val(slot.transpose[q]);
    c.tr[uq] = !slot.needs_transpose[uq] ? Transpose::none
               : tv == kTransposeDmaBlock ? Transpose::dma_transpose
                                          : static_cast<Transpose>(1 + tv);
    if (slot.needs_transpose[uq] && tv == kTransposeDmaBlock) c.tr_gran[uq] = TransposeGran::block;
    if (c.tr[uq] == Transpose::dma_transpose && ir::dtype_bytes(cx.s.tensor(slot.operand[uq]).dtype) != 2)
      return Invalid{"unsupported",
                    fmt::format("{}: dma_transpose moves 2-byte elements only; {} is {}", n.name, slot.operand[uq],
                                ir::to_string(cx.s.tensor(slot.operand[uq]).dtype)),
                    slot.transpose[q], 0};
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
  if (c.acc_out_dtype) {
    // Partial sums rounded to C's dtype after every k block: the error grows with the number of
    // roundings. Measured against verify's tolerance (test/verify "acc dtype=out"): bf16 passes at
    // up to 16 k blocks and fails from 32 (K = 4096..16384); kevo allows 8 for a margin, and no
    // 1-byte partials at all.
    const auto& ct = cx.s.tensor(op.out);
    const auto bytes = ir::dtype_bytes(ct.dtype);
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
  c.store_bufs = static_cast<int>(cx.num(slot.store_bufs));
  c.store_dma = cx.dma(slot.store_dma);
  c.store_q = static_cast<int>(cx.num(slot.store_q));
  c.evict = cx.val(slot.evict) == 1 ? target::Engine::scalar : target::Engine::vector;

  // Buffers.
  const int Pk = static_cast<int>(c.tile[2]);
  for (int q = 0; q < 2; ++q) {
    const auto uq = static_cast<std::size_t>(q);
    const auto fp = c.footprint(c.load_level[uq]);
    const auto& tn = slot.operand[uq];
    const ir::DType dt = cx.s.tensor(tn).dtype;
    c.buf_load[uq] = add_buf(n, BufSpec{fmt::format("{}.{}", n.name, q == 0 ? tn : tn + "#2"), false, dt, Pk,
                                        fp[2] * fp[uq] * c.tile[uq], c.load_bufs[uq]});
    if (c.tr[uq] == Transpose::pe_transpose) {
      const int rows = static_cast<int>(std::min<std::int64_t>(c.tile[uq], t.pmax));
      const std::int64_t chunks = (c.tile[uq] + t.pmax - 1) / t.pmax;
      c.buf_nat[uq] = add_buf(n, BufSpec{fmt::format("{}.{}.nat", n.name, tn), false, dt, rows, chunks * c.tile[2], 2});
      c.buf_tpsum[uq] = add_buf(n, BufSpec{fmt::format("{}.{}.T", n.name, tn), true, ir::DType::fp32, Pk,
                                           std::max<std::int64_t>(c.tile[uq], t.psum_bank_bytes / 4), 2});
    }
  }
  const auto pfp = c.footprint(c.scope - 1);
  const std::int64_t bank_elems = t.psum_bank_bytes / 4;
  const std::int64_t groups = pfp[us] * pfp[um];
  c.buf_psum = add_buf(n, BufSpec{n.name + ".psum", true, ir::DType::fp32, static_cast<int>(c.tile[us]),
                                  groups * bank_elems, c.psum_bufs});
  const auto sfp = c.footprint(c.store_level);
  const std::int64_t Lmov = sfp[um] * c.tile[um];
  const auto& ct = cx.s.tensor(op.out);
  const auto outside = reads_outside(cx.s.kernel, n.ops);
  const bool c_stored = ct.role == ir::Role::output || outside.count(op.out) > 0;
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
    c.buf_otpsum = add_buf(n, BufSpec{op.out + ".oT", true, ir::DType::fp32, cols,
                                      std::max<std::int64_t>(c.tile[us], t.psum_bank_bytes / 4), 2});
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
  }

  // PSUM banks: accumulation groups outstanding, times rotation, plus PE-transpose staging.
  const std::int64_t group_banks = groups * ((c.tile[um] * 4 + t.psum_bank_bytes - 1) / t.psum_bank_bytes);
  std::int64_t staging = 0;
  for (int q = 0; q < 2; ++q)
    if (c.buf_tpsum[static_cast<std::size_t>(q)] >= 0)
      staging += 2 * ((c.tile[static_cast<std::size_t>(q)] * 4 + t.psum_bank_bytes - 1) / t.psum_bank_bytes);
  if (c.store_tr) staging += 2 * ((c.tile[us] * 4 + t.psum_bank_bytes - 1) / t.psum_bank_bytes);
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

std::optional<Invalid> plan_vector(const Ctx& cx, NestPlan& n) {
  const auto& t = cx.s.target;
  const auto& k = cx.s.kernel;
  const auto& os = cx.s.ops[static_cast<std::size_t>(n.root_op)];
  const auto& slot = cx.s.vectors[static_cast<std::size_t>(os.vec)];
  VectorPlan& v = n.v;
  v.slot = os.vec;
  const auto [pp, fp] = slot.layouts[static_cast<std::size_t>(cx.val(slot.layout))];
  if (pp >= 0) {
    v.pidx = slot.dom[static_cast<std::size_t>(pp)];
    v.pext = slot.ext[static_cast<std::size_t>(pp)];
    v.ptile = std::min(cx.num(slot.tile[static_cast<std::size_t>(pp)]), v.pext);
  }
  if (fp >= 0) {
    v.fidx = slot.dom[static_cast<std::size_t>(fp)];
    v.fext = slot.ext[static_cast<std::size_t>(fp)];
    v.ftile = std::min(cx.num(slot.tile[static_cast<std::size_t>(fp)]), v.fext);
  }
  v.bufs = static_cast<int>(cx.num(slot.bufs));
  v.queues = static_cast<int>(cx.num(slot.queues));

  // Legality from dependences, derived from the index expressions of the nest's ops (no patterns).
  // The nest runs once per step of its iteration space, the root op's indices (p and f tiles,
  // outer and inner loops), and its ops in program order within a step. An op is correct when
  //  (1) it writes every element of its output: each of its indices is one the nest iterates (an
  //      index the nest does not iterate would be pinned to 0, leaving the rest unwritten), and
  //  (2) every element it reads of a tensor produced in the nest is final when read: the producer
  //      wrote exactly that element earlier in the same step (build_tc: same index expressions),
  //      and a reduction is complete, i.e. each index it reduces over lies whole inside one step.
  // A violation names the op, the tensor and the index; repair unfuses the op.
  for (int oi : n.ops) {
    if (!detail::check_coverage) break;
    const auto& os = cx.s.ops[static_cast<std::size_t>(oi)];
    for (const auto& x : os.idx)
      if (std::find(slot.dom.begin(), slot.dom.end(), x) == slot.dom.end()) {
        std::string dom;
        for (const auto& d : slot.dom) dom += (dom.empty() ? "" : ", ") + d;
        return Invalid{"illegal_fusion",
                      fmt::format("{}: '{}' needs index {} but the nest rooted at '{}' iterates only {}{}{}: fused, {} "
                                  "would be computed for {} = 0 alone",
                                  n.name, os.name, x, cx.s.ops[static_cast<std::size_t>(n.root_op)].name, "{", dom, "}",
                                  os.name, x),
                      os.fuse_gene, 0};
      }
  }

  // Rows on partitions in every op; one shared set of reduce indices.
  std::set<std::string> reduced_here;
  bool have_r = false;
  int first_consumer = -1;  // first op that reads a reduction made in this nest
  std::string consumed;     // the reduction it reads
  for (int oi : n.ops) {
    const auto& op = k.ops[static_cast<std::size_t>(oi)];
    const int fg = cx.s.ops[static_cast<std::size_t>(oi)].fuse_gene;
    if (!v.pidx.empty() && std::find(op.out_indices.begin(), op.out_indices.end(), v.pidx) == op.out_indices.end())
      return Invalid{"unfusable", fmt::format("{}: '{}' has no index {} to put on partitions", n.name, op.out, v.pidx), fg, 0};
    std::vector<const ir::Expr*> nodes;
    preorder(op.expr, nodes);
    for (const auto* e : nodes)
      if (e->kind == ir::Expr::Kind::access && reduced_here.count(e->tensor) && first_consumer < 0) {
        first_consumer = oi;
        consumed = e->tensor;
      }
    if (op.kind() == ir::OpKind::reduce) {
      if (!have_r) {
        v.reduce_set = op.reduce_indices;
        have_r = true;
      } else {
        auto a = v.reduce_set, b = op.reduce_indices;
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        if (a != b)
          return Invalid{"unfusable", fmt::format("{}: '{}' reduces over other indices than the nest", n.name, op.out), fg, 0};
      }
      if (!v.pidx.empty() &&
          std::find(op.reduce_indices.begin(), op.reduce_indices.end(), v.pidx) != op.reduce_indices.end())
        return Invalid{"unfusable", fmt::format("{}: '{}' reduces over the partition index {}", n.name, op.out, v.pidx), fg, 0};
      reduced_here.insert(op.out);
    }
  }
  v.complete_rows = first_consumer >= 0;
  v.f_reduced = std::find(v.reduce_set.begin(), v.reduce_set.end(), v.fidx) != v.reduce_set.end() && !v.fidx.empty();
  for (std::size_t q = 0; q < slot.dom.size(); ++q) {
    const auto& x = slot.dom[q];
    if (x == v.pidx || x == v.fidx) continue;
    const bool red = std::find(v.reduce_set.begin(), v.reduce_set.end(), x) != v.reduce_set.end();
    (red ? v.inner : v.outer).push_back(x);
    (red ? v.inner_ext : v.outer_ext).push_back(slot.ext[q]);
  }
  if (v.complete_rows) {
    // (2) a consumer of a reduction made in this nest reads it in the same step, so every index
    // the reduction runs over must lie whole inside one step: the free index with the whole row
    // as its tile (forced here), or an index of extent 1. A looped or partition index is not.
    for (const auto& x : v.reduce_set) {
      const auto xi = std::find(slot.dom.begin(), slot.dom.end(), x) - slot.dom.begin();
      if (x == v.fidx || slot.ext[static_cast<std::size_t>(xi)] == 1) continue;
      const auto& cons = cx.s.ops[static_cast<std::size_t>(first_consumer)];
      return Invalid{"illegal_fusion",
                    fmt::format("{}: '{}' reads '{}' before its reduction over {} is complete ({} is looped over, not "
                                "held whole in one tile; only the free index {} can be)",
                                n.name, cons.name, consumed, x, x, v.fidx.empty() ? "-" : v.fidx),
                    cons.fuse_gene, 0};
    }
    if (v.f_reduced) v.ftile = v.fext;
  }
  if (v.ptile > t.pmax)
    return Invalid{"tile_limit", fmt::format("{}: partition tile {}={} exceeds pmax {} on {}", n.name, v.pidx, v.ptile, t.pmax, t.name),
                  slot.tile[static_cast<std::size_t>(pp)], cx.at_most(slot.tile[static_cast<std::size_t>(pp)], t.pmax)};
  if (v.ftile > t.sbuf_free_max_elems) {
    int gene = -1, val = 0;
    if (!v.complete_rows) {
      gene = slot.tile[static_cast<std::size_t>(fp)];
      val = cx.at_most(gene, t.sbuf_free_max_elems);
    } else {
      gene = cx.s.ops[static_cast<std::size_t>(n.ops.back())].fuse_gene;
    }
    return Invalid{"tile_limit",
                  fmt::format("{}: free tile {}={} exceeds {} elements per instruction on {}", n.name, v.fidx, v.ftile,
                              t.sbuf_free_max_elems, t.name),
                  gene, val};
  }
  // bn_stats/bn_aggr for a variance and its mean in this nest, when the genome asks and the row
  // is whole on the free dim (the nest's only reduced index)
  std::vector<std::pair<int, int>> bn;  // (mean op, var op)
  std::set<int> no_body, paired;         // an op takes part in one pair at most (the first)
  if (v.complete_rows && v.f_reduced && v.inner.empty() && v.reduce_set.size() == 1)
    for (int oi : n.ops) {
      const auto& o = cx.s.ops[static_cast<std::size_t>(oi)];
      if (o.stats_gene < 0 || cx.val(o.stats_gene) != 1) continue;
      if (std::find(n.ops.begin(), n.ops.end(), o.stats_mean) == n.ops.end()) continue;
      if (paired.count(o.stats_mean) || paired.count(oi)) continue;
      bn.emplace_back(o.stats_mean, oi);
      no_body.insert(oi);
      paired.insert({oi, o.stats_mean});
    }
  std::vector<std::pair<std::string, int>> produced;
  std::vector<std::vector<std::string>> pidx;
  if (auto r = build_tc(cx, n, n.tc, n.ops, static_cast<int>(v.ptile), v.ftile, v.pidx, v.fidx, v.bufs, produced, pidx,
                        reads_outside(k, n.ops), no_body))
    return r;
  v.window = slot.window >= 0 && cx.val(slot.window) >= 1 && v.inner.size() == 1 && !v.f_reduced;
  v.fold = v.window && cx.val(slot.window) == 2;
  if (v.fold) {
    // the root is a reduction of one access or of a product of two, each either windowed or
    // not moving with the taps
    const auto& root = k.ops[static_cast<std::size_t>(n.root_op)];
    const auto& e = root.expr;
    std::vector<const ir::Expr*> acc;
    if (e.kind == ir::Expr::Kind::access) acc.push_back(&e);
    else if (e.kind == ir::Expr::Kind::call && e.fn == ir::Fn::mul && e.args.size() == 2 &&
             e.args[0].kind == ir::Expr::Kind::access && e.args[1].kind == ir::Expr::Kind::access)
      acc = {&e.args[0], &e.args[1]};
    bool ok = !acc.empty() && root.kind() == ir::OpKind::reduce;
    for (const auto* a : acc) {
      for (const auto& [pn, pb] : produced) ok = ok && pn != a->tensor;  // read from HBM
      ok = ok && (!ir::access_uses(*a, v.inner[0]) ||
                  window_geom(*a, v.pidx, v.fidx, v.inner[0], v.ftile, v.inner_ext[0]).ok);
    }
    if (!ok)
      return Invalid{"unsupported",
                    fmt::format("{}: window fold needs the reduction to be one access or a product of two whose taps "
                                "lie along one dim each",
                                n.name),
                    slot.window, 1};
    v.chunk = std::min(cx.num(slot.chunk), v.ftile);
    const std::int64_t width = v.chunk * v.inner_ext[0];
    if (width > t.sbuf_free_max_elems)
      return Invalid{"tile_limit",
                    fmt::format("{}: window fold reads {} x {} = {} free elements per instruction, above {} on {}", n.name,
                                v.chunk, v.inner_ext[0], width, t.sbuf_free_max_elems, t.name),
                    slot.chunk, cx.at_most(slot.chunk, t.sbuf_free_max_elems / v.inner_ext[0])};
    if (e.kind == ir::Expr::Kind::call) {
      const int nb = n.tc.node_buf[0][0];
      if (nb >= 0) n.buffers[static_cast<std::size_t>(nb)].free_elems = width;
    }
  }
  if (v.window) {
    // windowed loads hold the whole reduction's range: widen their buffers
    for (int oi : n.ops) {
      std::vector<const ir::Expr*> nodes;
      preorder(k.ops[static_cast<std::size_t>(oi)].expr, nodes);
      for (const auto* e : nodes) {
        if (e->kind != ir::Expr::Kind::access) continue;
        const auto geom = window_geom(*e, v.pidx, v.fidx, v.inner[0], v.ftile, v.inner_ext[0]);
        if (!geom.ok) continue;
        for (const auto& [key, b] : n.tc.loads)
          if (key == access_key(*e)) n.buffers[static_cast<std::size_t>(b)].free_elems = geom.elems;
      }
    }
  }
  const auto pos = [&](int op) {
    return static_cast<std::size_t>(std::find(n.tc.ops.begin(), n.tc.ops.end(), op) - n.tc.ops.begin());
  };
  const std::int64_t chunks = (v.ftile + target::kBnStatsFmax - 1) / target::kBnStatsFmax;
  for (const auto& [mu, var] : bn) {
    TileCompute::BnStats b;
    b.mean = pos(mu);
    b.var = pos(var);
    const std::string& nm = k.ops[static_cast<std::size_t>(var)].out;
    b.stats = add_buf(n, BufSpec{nm + ".bn_stats", false, ir::DType::fp32, static_cast<int>(v.ptile), 6 * chunks, v.bufs});
    b.aggr = add_buf(n, BufSpec{nm + ".bn_aggr", false, ir::DType::fp32, static_cast<int>(v.ptile), 2, v.bufs});
    n.tc.bn.push_back(b);
  }
  return std::nullopt;
}

// The flash nest (FlashSlot) of the ops [first, last]: tiles, transposes and every buffer.
std::optional<Invalid> plan_flash(const Ctx& cx, NestPlan& n, int fi) {
  const auto& t = cx.s.target;
  const auto& k = cx.s.kernel;
  const auto& fs = cx.s.flashes[static_cast<std::size_t>(fi)];
  FlashPlan& f = n.f;
  f.slot = fi;
  const auto& o1 = cx.s.ops[static_cast<std::size_t>(fs.qk)];
  const auto& c1 = cx.s.contracts[static_cast<std::size_t>(o1.contract)];
  const auto& c2 = cx.s.contracts[static_cast<std::size_t>(cx.s.ops[static_cast<std::size_t>(fs.pv)].contract)];
  const std::int64_t bank = t.psum_bank_bytes / 4;
  f.tq = std::min(cx.num(fs.tile_row), fs.ext_row);
  f.tkv = std::min(cx.num(fs.tile_kv), fs.ext_kv);
  f.nq = (fs.ext_row + f.tq - 1) / f.tq;
  f.nkv = (fs.ext_kv + f.tkv - 1) / f.tkv;
  f.outer = 1;
  for (const auto& x : fs.outer)
    for (std::size_t q = 0; q < o1.idx.size(); ++q)
      if (o1.idx[q] == x) f.outer *= o1.ext[q];
  f.tk = std::min<std::int64_t>(t.pmax, fs.ext_hd);
  f.nk = (fs.ext_hd + f.tk - 1) / f.tk;
  f.chunks = (f.tkv + t.pmax - 1) / t.pmax;
  f.bufs = static_cast<int>(cx.num(fs.bufs));
  f.psum_bufs = static_cast<int>(cx.num(fs.psum_bufs));
  f.evict = cx.val(c1.evict) == 1 ? target::Engine::scalar : target::Engine::vector;
  const std::int64_t vcap = std::min<std::int64_t>(t.moving_fmax, bank);
  if (fs.ext_vd > vcap)
    return Invalid{"tile_limit",
                  fmt::format("{}: {}={} exceeds one PV matmul's moving free size {} on {} (the flash nest does not split it)",
                              n.name, fs.vd, fs.ext_vd, vcap, t.name),
                  fs.gene, 0};
  const int qo = fs.q_operand, ko = 1 - fs.q_operand;
  for (int r = 0; r < 2; ++r) {
    const int q = r == 0 ? qo : ko;
    const auto uq = static_cast<std::size_t>(q);
    // the flash nest transposes per tile: dma_transpose_block is dma_transpose there
    const int tv = cx.val(c1.transpose[q]);
    f.tr[static_cast<std::size_t>(r)] = !c1.needs_transpose[uq]      ? Transpose::none
                                        : tv == kTransposeDmaBlock ? Transpose::dma_transpose
                                                                   : static_cast<Transpose>(1 + tv);
    if (f.tr[static_cast<std::size_t>(r)] == Transpose::dma_transpose && ir::dtype_bytes(cx.s.tensor(c1.operand[uq]).dtype) != 2)
      return Invalid{"unsupported",
                    fmt::format("{}: dma_transpose moves 2-byte elements only; {} is {}", n.name, c1.operand[uq],
                                ir::to_string(cx.s.tensor(c1.operand[uq]).dtype)),
                    c1.transpose[q], 0};
    f.queues[static_cast<std::size_t>(r)] = static_cast<int>(cx.num(c1.load_q[q]));
  }
  f.queues[2] = static_cast<int>(cx.num(c2.load_q[1 - fs.e_operand]));

  // PSUM: scores and PV (x psum_bufs), eᵀ staging (2), PE-transpose staging of Q (1) and K (2).
  f.banks = 2 * f.psum_bufs + 2 + (f.tr[0] == Transpose::pe_transpose ? 1 : 0) + (f.tr[1] == Transpose::pe_transpose ? 2 : 0);
  if (f.banks > t.psum_banks) {
    int gene = fs.gene, v = 0;
    if (f.psum_bufs > 1) {
      gene = fs.psum_bufs;
    } else if (f.tr[1] == Transpose::pe_transpose) {
      gene = c1.transpose[ko];
      v = ir::dtype_bytes(cx.s.tensor(c1.operand[static_cast<std::size_t>(ko)]).dtype) == 2 ? 1 : 0;
    }
    return Invalid{"psum_banks",
                  fmt::format("{}: needs {} PSUM banks (scores and PV x {} rotation{}, eT staging{}{}), {} has {}", n.name,
                              f.banks, f.psum_bufs, f.psum_bufs == 1 ? "" : "s",
                              f.tr[0] == Transpose::pe_transpose ? ", Q transposes" : "",
                              f.tr[1] == Transpose::pe_transpose ? ", K transposes" : "", t.name, t.psum_banks),
                  gene, v};
  }

  const auto dt = [&](const std::string& tn) { return cx.s.tensor(tn).dtype; };
  const std::int64_t tile_of[2] = {f.tq, f.tkv};
  for (int r = 0; r < 2; ++r) {
    const int q = r == 0 ? qo : ko;
    const auto& tn = c1.operand[static_cast<std::size_t>(q)];
    const int nb = r == 0 ? std::min(f.bufs, 2) : f.bufs;
    f.buf_t[static_cast<std::size_t>(r)] =
        add_buf(n, BufSpec{fmt::format("{}T", tn), false, dt(tn), static_cast<int>(f.tk), f.nk * tile_of[r], nb});
    if (f.tr[static_cast<std::size_t>(r)] == Transpose::pe_transpose) {
      const int rows = static_cast<int>(std::min<std::int64_t>(tile_of[r], t.pmax));
      const std::int64_t ch = (tile_of[r] + t.pmax - 1) / t.pmax;
      f.buf_nat[static_cast<std::size_t>(r)] = add_buf(n, BufSpec{tn + ".nat", false, dt(tn), rows, ch * f.tk, 2});
      f.buf_tpsum[static_cast<std::size_t>(r)] = add_buf(
          n, BufSpec{tn + ".T", true, ir::DType::fp32, static_cast<int>(f.tk), std::max(tile_of[r], bank), r == 0 ? 1 : 2});
    }
  }
  const auto& vt = c2.operand[static_cast<std::size_t>(1 - fs.e_operand)];
  const int kvrows = static_cast<int>(std::min<std::int64_t>(f.tkv, t.pmax));
  const int P = static_cast<int>(f.tq);
  f.buf_v = add_buf(n, BufSpec{vt, false, dt(vt), kvrows, f.chunks * fs.ext_vd, f.bufs});
  const auto& sname = k.ops[static_cast<std::size_t>(fs.qk)].out;
  f.buf_spsum = add_buf(n, BufSpec{sname + ".psum", true, ir::DType::fp32, P, bank, f.psum_bufs});
  // maps on the scores read S from PSUM unless one runs on GpSimd (no PSUM access); else S is evicted
  f.s_in_psum = !fs.pre.empty();
  for (int o : fs.pre) f.s_in_psum = f.s_in_psum && cx.val(cx.s.ops[static_cast<std::size_t>(o)].engine_gene) != 2;
  if (!f.s_in_psum) f.buf_s = add_buf(n, BufSpec{sname, false, dt(sname), P, f.tkv, f.bufs});
  f.buf_rmax = add_buf(n, BufSpec{"rowmax", false, ir::DType::fp32, P, 1, f.bufs});
  f.buf_m = add_buf(n, BufSpec{k.ops[static_cast<std::size_t>(fs.mx)].out, false, ir::DType::fp32, P, 1, 2});
  f.buf_negm = add_buf(n, BufSpec{"negmax", false, ir::DType::fp32, P, 1, f.bufs});
  f.buf_corr = add_buf(n, BufSpec{"corr", false, ir::DType::fp32, P, 1, f.bufs});
  f.buf_l = add_buf(n, BufSpec{k.ops[static_cast<std::size_t>(fs.sum)].out, false, ir::DType::fp32, P, 1, 2});
  const auto& ename = k.ops[static_cast<std::size_t>(fs.ex)].out;
  f.buf_e = add_buf(n, BufSpec{ename, false, dt(ename), P, f.tkv, f.bufs});
  f.buf_etpsum = add_buf(n, BufSpec{ename + ".T.psum", true, ir::DType::fp32, kvrows, bank, 2});
  f.buf_et = add_buf(n, BufSpec{ename + ".T", false, dt(ename), kvrows, f.chunks * f.tq, f.bufs});
  const auto& pvop = k.ops[static_cast<std::size_t>(fs.pv)];
  f.buf_pvpsum = add_buf(n, BufSpec{pvop.out + ".psum", true, ir::DType::fp32, P, bank, f.psum_bufs});
  f.buf_acc = add_buf(n, BufSpec{pvop.out + ".acc", false, ir::DType::fp32, P, fs.ext_vd, 2});
  const auto outside = reads_outside(k, n.ops);
  // values final at the end of the kv loop that leave the nest: pv's output, the row max and sum
  const auto leaves = [&](int op) {
    const auto& nm = k.ops[static_cast<std::size_t>(op)].out;
    return cx.s.tensor(nm).role == ir::Role::output || outside.count(nm) > 0;
  };
  if (leaves(fs.pv)) f.buf_out = add_buf(n, BufSpec{pvop.out, false, dt(pvop.out), P, fs.ext_vd, 2});
  if (leaves(fs.mx)) f.buf_mx_out = add_buf(n, BufSpec{k.ops[static_cast<std::size_t>(fs.mx)].out + ".out", false,
                                                        dt(k.ops[static_cast<std::size_t>(fs.mx)].out), P, 1, 2});
  if (leaves(fs.sum)) f.buf_l_out = add_buf(n, BufSpec{k.ops[static_cast<std::size_t>(fs.sum)].out + ".out", false,
                                                        dt(k.ops[static_cast<std::size_t>(fs.sum)].out), P, 1, 2});

  if (!fs.pre.empty()) {
    std::vector<std::pair<std::string, int>> produced{{sname, f.buf_s}};
    std::vector<std::vector<std::string>> pidx{k.ops[static_cast<std::size_t>(fs.qk)].out_indices};
    if (auto r = build_tc(cx, n, n.tc, fs.pre, P, f.tkv, fs.row, fs.kv, f.bufs, produced, pidx, outside)) return r;
  }
  if (!fs.post.empty()) {
    const auto& xr = k.ops[static_cast<std::size_t>(fs.mx)].out_indices;
    std::vector<std::pair<std::string, int>> produced{
        {pvop.out, f.buf_acc}, {k.ops[static_cast<std::size_t>(fs.mx)].out, f.buf_m}, {k.ops[static_cast<std::size_t>(fs.sum)].out, f.buf_l}};
    std::vector<std::vector<std::string>> pidx{pvop.out_indices, xr, xr};
    if (auto r = build_tc(cx, n, f.post, fs.post, P, fs.ext_vd, fs.row, fs.vd, 2, produced, pidx, outside)) return r;
  }
  return std::nullopt;
}

// The gene change most likely to shrink a nest's SBUF use.
std::pair<int, int> sbuf_fix(const Ctx& cx, const NestPlan& n) {
  if (n.kind == NestKind::contract) {
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
  if (n.kind == NestKind::flash) {
    const auto& fs = cx.s.flashes[static_cast<std::size_t>(n.f.slot)];
    for (int gi : {fs.bufs, fs.tile_kv})
      if (cx.val(gi) > 0) return {gi, cx.val(gi) - 1};
    return {fs.gene, 0};
  }
  const auto& slot = cx.s.vectors[static_cast<std::size_t>(n.v.slot)];
  if (cx.val(slot.bufs) > 0) return {slot.bufs, cx.val(slot.bufs) - 1};
  if (n.v.complete_rows) return {cx.s.ops[static_cast<std::size_t>(n.ops.back())].fuse_gene, 0};
  for (std::size_t q = 0; q < slot.dom.size(); ++q)
    if (slot.dom[q] == n.v.fidx && slot.tile[q] >= 0 && cx.val(slot.tile[q]) > 0) return {slot.tile[q], cx.val(slot.tile[q]) - 1};
  return {-1, 0};
}

}  // namespace

Expected<Plan, Invalid> make_plan(const ScheduleSpace& space, const Genome& g) {
  const SpaceImpl& s = space.impl();
  const Ctx cx{space, s, s.space, g};
  if (!s.space.contains(g)) return reject("malformed", "genome does not belong to this schedule space");
  Plan plan;
  const auto& k = s.kernel;
  plan.op_nest.assign(k.ops.size(), -1);
  plan.op_engine.assign(k.ops.size(), target::Engine::vector);
  // ops covered by a flash nest that is on
  std::vector<int> in_flash(k.ops.size(), -1);
  for (std::size_t fi = 0; fi < s.flashes.size(); ++fi) {
    const auto& f = s.flashes[fi];
    if (cx.val(f.gene) == 1)
      for (int o = f.first; o <= f.last; ++o) in_flash[static_cast<std::size_t>(o)] = static_cast<int>(fi);
  }
  std::vector<int> nest_flash;  // per nest: its flash slot or -1
  for (std::size_t j = 0; j < k.ops.size(); ++j) {
    const auto& o = s.ops[j];
    const int fl = in_flash[j];
    if (fl >= 0) {
      if (static_cast<int>(j) == s.flashes[static_cast<std::size_t>(fl)].first) {
        NestPlan n;
        n.kind = NestKind::flash;
        n.name = "flash." + s.flashes[static_cast<std::size_t>(fl)].name;
        n.root_op = static_cast<int>(j);
        plan.nests.push_back(std::move(n));
        nest_flash.push_back(fl);
      }
      plan.nests.back().ops.push_back(static_cast<int>(j));
      plan.op_nest[j] = static_cast<int>(plan.nests.size()) - 1;
      if (o.engine_gene >= 0) {
        const int e = cx.val(o.engine_gene);
        plan.op_engine[j] = e == 1 ? target::Engine::scalar : e == 2 ? target::Engine::gpsimd : target::Engine::vector;
      }
      continue;
    }
    // an op after a flash nest cannot join it: it roots its own nest
    const bool fused = o.fuse_gene >= 0 && cx.val(o.fuse_gene) == 1 && !(j > 0 && in_flash[j - 1] >= 0);
    if (!fused) {
      nest_flash.push_back(-1);
      NestPlan n;
      n.kind = o.kind == ir::OpKind::contract ? NestKind::contract : NestKind::vector;
      n.name = o.name;
      n.root_op = static_cast<int>(j);
      plan.nests.push_back(std::move(n));
    }
    plan.nests.back().ops.push_back(static_cast<int>(j));
    plan.op_nest[j] = static_cast<int>(plan.nests.size()) - 1;
    if (o.engine_gene >= 0) {
      const int e = cx.val(o.engine_gene);
      plan.op_engine[j] = e == 1 ? target::Engine::scalar : e == 2 ? target::Engine::gpsimd : target::Engine::vector;
    }
  }
  const auto& t = s.target;
  for (std::size_t ni = 0; ni < plan.nests.size(); ++ni) {
    auto& n = plan.nests[ni];
    auto r = n.kind == NestKind::contract ? plan_contract(cx, n)
             : n.kind == NestKind::flash  ? plan_flash(cx, n, nest_flash[ni])
                                          : plan_vector(cx, n);
    if (r) return unexpected(std::move(*r));
    if (n.kind == NestKind::contract)
      plan.op_engine[static_cast<std::size_t>(n.root_op)] = n.c.evict;
    for (const auto& b : n.buffers) (b.psum ? n.psum_bytes : n.sbuf_bytes) += b.bytes_per_partition();
    if (n.sbuf_bytes > t.sbuf_bytes_per_partition) {
      auto [gene, v] = sbuf_fix(cx, n);
      return reject("sbuf_overflow",
                    fmt::format("needs {} per partition, {} has {} (nest {})", kib(n.sbuf_bytes), t.name,
                                kib(t.sbuf_bytes_per_partition), n.name),
                    gene, v);
    }
    if (n.psum_bytes > t.psum_bytes_per_partition) {
      int gene = -1, v = 0;
      if (n.kind == NestKind::flash) {
        const auto& fs = s.flashes[static_cast<std::size_t>(n.f.slot)];
        gene = cx.val(fs.psum_bufs) > 0 ? fs.psum_bufs : fs.gene;
      }
      return reject("psum_overflow",
                    fmt::format("needs {} of PSUM per partition, {} has {} (nest {})", kib(n.psum_bytes), t.name,
                                kib(t.psum_bytes_per_partition), n.name),
                    gene, v);
    }
    plan.sbuf_peak = std::max(plan.sbuf_peak, n.sbuf_bytes);
    plan.psum_peak = std::max(plan.psum_peak, n.psum_bytes);
  }
  return plan;
}

}  // namespace kevo::schedule
