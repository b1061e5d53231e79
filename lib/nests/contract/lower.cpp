// Lowering of a contraction nest: its block and tile loops in the genome's order, with loads,
// matmuls, PSUM evictions, SBUF accumulation, epilogues and stores where the plan puts them.
#include "lower/lowerer.hpp"

namespace kevo::lower::detail {

void Lowerer::cache_contract(const NestPlan& np) {
  const auto& c = np.c;
  const auto& sl = s_.contracts[static_cast<std::size_t>(c.slot)];
  const auto& op = k_.ops[static_cast<std::size_t>(np.root_op)];
  for (int cl = 0; cl < 3; ++cl) {
    cc_.pb[static_cast<std::size_t>(cl)] = c.pos_of(cl, true);
    cc_.pt[static_cast<std::size_t>(cl)] = c.pos_of(cl, false);
  }
  for (std::size_t q = 0; q < 2; ++q) {
    cc_.fp_load[q] = c.footprint(c.load_level[q]);
    cc_.outer_stride[q].clear();
    cc_.shared[q] = false;
    if (sl.ones && q == 0) {  // the implicit ones: in SBUF only (load() sets them)
      cc_.hb[q] = -1;
      cc_.sk[q] = cc_.sq[q] = 0;
      cc_.outer_stride[q].assign(sl.outer.size(), 0);
      continue;
    }
    const ir::Expr& acc = sl.ones ? op.expr : op.expr.args[q];
    cc_.hb[q] = hbm_of(acc.tensor);
    cc_.sk[q] = stride_of(acc.tensor, acc.indices, sl.idx[2]);
    cc_.sq[q] = sl.present[q] ? stride_of(acc.tensor, acc.indices, sl.idx[q]) : 0;
    for (const auto& x : sl.outer) cc_.outer_stride[q].push_back(stride_of(acc.tensor, acc.indices, x));
    cc_.acc[q] = &acc;
    cc_.shared[q] = !sl.outer.empty() && std::none_of(sl.outer.begin(), sl.outer.end(), [&](const std::string& x) { return ir::access_uses(acc, x); });
    cc_.shape[q] = k_.shape(s_.tensor(acc.tensor));
    // a convolution's shifted operand steps `stride` positions per element of its own index
    for (std::size_t d = 0; d < acc.shifts.size(); ++d)
      if (sl.present[q] && acc.indices[d] == sl.idx[q]) cc_.sq[q] *= acc.shifts[d].stride;
  }
  cc_.fp_psum = c.footprint(c.scope - 1);
  cc_.fp_store = c.footprint(c.store_level);
  const auto us = static_cast<std::size_t>(c.stat);
  const DmaGran g = c.load_dma[us];
  cc_.s_natural = c.out_interleave && (c.tr[us] == Transpose::none || c.tr[us] == Transpose::strided) && cc_.sq[us] == 1 &&
                  g != DmaGran::tile && g != DmaGran::pair;
  // kedge slices: the smallest row tile the target has that holds the edge's rows, if more than
  // one fits in the k tile's partitions (else the gene changes nothing)
  cc_.kedge = -1;
  cc_.kedge_rows = 0;
  cc_.kslice = cc_.kslices = 0;
  kslice_next_ = 0;
  cc_.sedge = -1;
  cc_.scol = cc_.scols = 0;
  const std::int64_t slast = c.ntiles[us] - 1, scols = tsize(c, sl, c.stat, slast);
  if (c.sedge_slices && t_.row_tile_min > 0 && scols < c.tile[us]) {
    std::int64_t w = t_.row_tile_min;
    while (w < scols) w *= 2;
    if (2 * w <= c.tile[us]) {
      cc_.sedge = slast;
      cc_.scol = static_cast<int>(w);
      cc_.scols = static_cast<int>(c.tile[us] / w);
    }
  }
  const std::int64_t last = c.ntiles[2] - 1, rows = tsize(c, sl, 2, last);
  if (c.kedge_slices && t_.row_tile_min > 0 && rows < c.tile[2]) {
    std::int64_t slice = t_.row_tile_min;
    while (slice < rows) slice *= 2;
    if (2 * slice <= c.tile[2]) {
      cc_.kedge = last;
      cc_.kedge_rows = rows;
      cc_.kslice = static_cast<int>(slice);
      cc_.kslices = static_cast<int>(c.tile[2] / slice);
    }
  }
}

void Lowerer::lower_contract(const NestPlan& np) {
  const auto& c = np.c;
  const auto& sl = s_.contracts[static_cast<std::size_t>(c.slot)];
  const auto& op = k_.ops[static_cast<std::size_t>(np.root_op)];
  std::vector<std::int64_t> oext;
  for (const auto& x : sl.outer) oext.push_back(s_.ops[static_cast<std::size_t>(np.root_op)].extent(x));
  std::vector<std::int64_t> oc(sl.outer.size(), 0);
  CState st;
  cur_ = &np;
  cache_contract(np);
  while (true) {
    st.first_outer = std::all_of(oc.begin(), oc.end(), [](std::int64_t v) { return v == 0; });
    st.fixed.clear();
    for (std::size_t q = 0; q < sl.outer.size(); ++q) st.fixed.emplace_back(sl.outer[q], oc[q]);
    st.blk = {0, 0, 0};
    st.til = {0, 0, 0};
    level_begin(np, st, -1);
    walk(np, st, 0);
    level_end(np, st, -1);
    if (!next(oc, oext)) break;
  }
  (void)op;
}

void Lowerer::level_begin(const NestPlan& np, CState& st, int level) {
  const auto& c = np.c;
  // an operand loaded at the root that no outer index moves (cc_.shared) is loaded by the first
  // outer iteration only; the later ones read that slot
  for (int q = 0; q < 2; ++q)
    if (c.load_level[static_cast<std::size_t>(q)] == level &&
        !(level == -1 && cc_.shared[static_cast<std::size_t>(q)] && !st.first_outer))
      load(np, st, q);
  if (c.store_level == level) ++st.store_inst;
  if (c.scope == level + 1) ++st.psum_inst;
}

void Lowerer::walk(const NestPlan& np, CState& st, int pos) {
  const auto& c = np.c;
  if (pos == static_cast<int>(c.loops.size())) {
    body(np, st);
    return;
  }
  const auto& L = c.loops[static_cast<std::size_t>(pos)];
  if (c.rest_tiles && pos == c.scope) {
    // the loop the accumulators span (the outer k loop, block or tile): every iteration of the
    // loops outside it but the nest's first (all at 0 in the first outer iteration) runs tile by tile
    bool first = st.first_outer;
    for (int p = 0; p < pos; ++p) {
      const auto& Q = c.loops[static_cast<std::size_t>(p)];
      const auto uq = static_cast<std::size_t>(Q.cls);
      first = first && (Q.block ? st.blk[uq] : st.til[uq]) == 0;
    }
    if (!first) {
      by_tiles(np, st, pos);
      return;
    }
  }
  const auto u = static_cast<std::size_t>(L.cls);
  const std::int64_t trip = L.block ? c.nblocks[u] : std::min(c.bf[u], c.ntiles[u] - st.blk[u] * c.bf[u]);
  for (std::int64_t i = 0; i < trip; ++i) {
    (L.block ? st.blk : st.til)[u] = i;
    if (L.block) st.til[u] = 0;
    level_begin(np, st, pos);
    walk(np, st, pos + 1);
    level_end(np, st, pos);
  }
  (L.block ? st.blk : st.til)[u] = 0;
}

void Lowerer::by_tiles(const NestPlan& np, CState& st, int pos) {
  const auto& c = np.c;
  // the output tiles of the loops from `pos` in, in the genome's tile order, each over every k
  // iteration from `pos` in (the k blocks when `pos` is the k block loop, and the k tiles)
  std::vector<int> cls;
  for (std::size_t p = static_cast<std::size_t>(pos); p < c.loops.size(); ++p)
    if (!c.loops[p].block && c.loops[p].cls != 2) cls.push_back(c.loops[p].cls);
  const bool kblocks = c.loops[static_cast<std::size_t>(pos)].block;
  const int S = c.stat, M = 1 - c.stat;
  const auto tiles = [&](const auto& self, std::size_t d) -> void {
    if (d == cls.size()) {
      const std::int64_t kb0 = kblocks ? 0 : st.blk[2], kb1 = kblocks ? c.nblocks[2] : st.blk[2] + 1;
      for (std::int64_t kb = kb0; kb < kb1; ++kb) {
        st.blk[2] = kb;
        const std::int64_t ktrip = std::min(c.bf[2], c.ntiles[2] - kb * c.bf[2]);
        for (std::int64_t kt = 0; kt < ktrip; ++kt) {
          st.til[2] = kt;
          body(np, st);
        }
      }
      if (kblocks) st.blk[2] = 0;
      st.til[2] = 0;
      store(np, st, gtile(st, c, S), gtile(st, c, M));
      return;
    }
    const auto u = static_cast<std::size_t>(cls[d]);
    const std::int64_t trip = std::min(c.bf[u], c.ntiles[u] - st.blk[u] * c.bf[u]);
    for (std::int64_t i = 0; i < trip; ++i) {
      st.til[u] = i;
      self(self, d + 1);
    }
    st.til[u] = 0;
  };
  tiles(tiles, 0);
  st.stored = true;
}

void Lowerer::load(const NestPlan& np, CState& st, int q) {
  const auto& c = np.c;
  const auto& sl = s_.contracts[static_cast<std::size_t>(c.slot)];
  const auto uq = static_cast<std::size_t>(q);
  const int level = c.load_level[uq];
  const int slot = ++st.load_inst[uq];
  const auto& fpmax = cc_.fp_load[uq];
  const std::int64_t Lq = c.span(q, fpmax[uq]);
  const auto [k0, kn] = fp_range(st, c, 2, level);
  const auto [q0, qn] = fp_range(st, c, q, level);
  const int bid = buf(c.buf_load[uq]);
  const std::int64_t sk = cc_.sk[uq], sq = cc_.sq[uq];
  std::int64_t base = 0;
  for (std::size_t x = 0; x < st.fixed.size(); ++x) base += st.fixed[x].second * cc_.outer_stride[uq][x];
  const int hb = cc_.hb[uq];
  if (sl.ones && q == 0) {
    // the implicit ones of a column sum: the whole buffer (every partition of the k tiles, so the
    // row tiles of kedge slices read ones too) set to 1 by one memset, as an NKI kernel's
    // nl.ones tile; its first matmul waits for it like for a load
    Instr& in = compute(Opcode::memset, Engine::vector, tile_ap(bid, slot, static_cast<int>(c.tile[2]), 0, kn * Lq));
    in.imm0 = 1.0;
    emit(in, 0);
    return;
  }
  const std::int64_t qelems_end = std::min((q0 + qn) * c.tile[uq], sl.ext[uq]);
  const std::int64_t qlen = qelems_end - q0 * c.tile[uq];  // elements of q in the footprint
  // k tile kt's first row and the row step between its partitions (ContractPlan::k_rows: bf[2]
  // in an interleaved k block)
  const auto krow = [&](std::int64_t kt) { return c.k_rows(kt); };
  const auto hbm_ap = [&](std::int64_t kt, std::int64_t krows, std::int64_t qstart, std::int64_t qcount) {
    const auto [r0, rs] = krow(kt);
    AccessPattern a;
    a.buffer = hb;
    a.offset = base + r0 * sk + qstart * sq;
    a.part_stride = rs * sk;
    a.part_count = static_cast<std::int32_t>(krows);
    a.free_stride = {0, 0, s32(sq)};
    a.free_size = {1, 1, static_cast<std::int32_t>(qcount)};
    return a;
  };
  // The source of a DMA transpose: [rows of q from element qstart, krows of k] in the operand's
  // natural layout.
  const auto natural_ap = [&](std::int64_t kt, std::int64_t krows, std::int64_t qstart, std::int64_t rows) {
    const auto [r0, rs] = krow(kt);
    AccessPattern a;
    a.buffer = hb;
    a.offset = base + r0 * sk + qstart * sq;
    a.part_stride = sq;
    a.part_count = static_cast<std::int32_t>(rows);
    a.free_stride = {0, 0, s32(rs * sk)};
    a.free_size = {1, 1, static_cast<std::int32_t>(krows)};
    return a;
  };
  const Transpose tr = c.tr[uq];
  // the first instance's DMA transfers wait for their first matmul (lowerer.hpp, HeldDma); the
  // PE-transpose path's natural loads feed Tensor-engine work and are issued here
  hold_ = slot == 0 && tr != Transpose::pe_transpose;
  hold_queues_ = c.prologue_spread ? t_.dma_queues : 0;
  if (!sl.taps.empty()) {
    load_taps(np, st, q, slot);
    hold_ = false;
    return;
  }
  // PE transpose of the k tile kt of qc rows of q (the first q0r, qstep apart) into dst: natural
  // tile -> nc_transpose into PSUM -> copy into the stationary/moving layout
  const auto pe_tile = [&](std::int64_t kt, std::int64_t krows, const AccessPattern& dst, std::int64_t q0r, std::int64_t qstep,
                           std::int64_t qc) {
    const int nat = buf(c.buf_nat[uq]), tps = buf(c.buf_tpsum[uq]);
    const int ns = st.nat_inst++;
    const std::int64_t pm = t_.pmax;
    const auto [r0, rs] = krow(kt);
    for (std::int64_t ch = 0; ch * pm < qc; ++ch) {
      const std::int64_t rows = std::min(pm, qc - ch * pm);
      AccessPattern s;
      s.buffer = hb;
      s.offset = base + r0 * sk + (q0r + ch * pm * qstep) * sq;
      s.part_stride = qstep * sq;
      s.part_count = static_cast<std::int32_t>(rows);
      s.free_stride = {0, 0, s32(rs * sk)};
      s.free_size = {1, 1, static_cast<std::int32_t>(krows)};
      const AccessPattern nd = tile_ap(nat, ns, static_cast<int>(rows), ch * c.tile[2], krows);
      dma(nd, s, c.load_q[uq]);
      pe_transpose(tile_ap(tps, ns, static_cast<int>(krows), ch * pm, rows), nd);
    }
    copy(Engine::vector, dst, tile_ap(tps, ns, static_cast<int>(krows), 0, qc));
  };
  if (q == c.stat && c.out_interleave) {
    // rows interleave_out|_all: the stationary operand's free index in the output's partition
    // order (ContractPlan::s_rows). Per k tile: without a transpose (dma=row|region), every
    // interleaved block of the footprint in one transfer ([k rows, blocks, J, tile] read as tile
    // t = every J-th row); with dma_transpose_block, one 3-D transpose per interleaved block and
    // k tile; with _region, one 4-D transpose per interleaved block over all full k tiles (per k
    // tile in the held prologue); under interleave_all, one 4-D transpose per interleaved S block
    // and whole interleaved k block; otherwise, and in natural blocks, each tile alone with its
    // rows' step.
    const std::int64_t J = c.bf[uq], T = c.tile[uq];
    const DmaGran g = c.load_dma[uq];
    const bool plain = tr == Transpose::none || tr == Transpose::strided;
    const std::int64_t Jk = c.bf[2];
    for (std::int64_t kk = 0; kk < kn; ++kk) {
      const std::int64_t kt = k0 + kk;
      const auto krows = tsize(c, sl, 2, kt);
      if (tr == Transpose::dma_transpose && c.tr_gran[uq] != schedule::TransposeGran::tile && c.k_blocks(kt, kn - kk) > 0) {
        // interleave_all: per interleaved S block, one 4-D transpose of the whole interleaved k
        // block (nki.isa.dma_transpose's permutation (3, 1, 2, 0)): source row p*J + t of the S
        // block, k row kp*Jk + j of the k block, into [k partitions kp, Jk, J, T] — each tile's
        // columns where a natural block transpose puts them, so a partition's Jk*J*T elements
        // land in one run; a natural S tile (the tail) per S tile, [Jk, tile] into [k, Jk, S tile]
        for (std::int64_t qq = 0; qq < qn; ++qq) {
          const std::int64_t qt = q0 + qq;
          const auto [s0, ss] = c.s_rows(qt);
          if (c.s_blocks(qt, qn - qq) > 0) {
            AccessPattern src = natural_ap(kt, c.tile[2], s0, T);
            src.part_stride = J * sq;
            src.free_stride = {s32(sk), s32(sq), s32(Jk * sk)};
            src.free_size = {static_cast<std::int32_t>(Jk), static_cast<std::int32_t>(J), static_cast<std::int32_t>(c.tile[2])};
            AccessPattern d = tile_ap(bid, slot, static_cast<int>(c.tile[2]), kk * Lq + qq * T, T);
            d.free_stride = {s32(Lq), s32(T), 1};
            d.free_size = {static_cast<std::int32_t>(Jk), static_cast<std::int32_t>(J), static_cast<std::int32_t>(T)};
            load_dma(q, d, src, c.load_q[uq], true, kt, Jk, qt, J);
            qq += J - 1;
            continue;
          }
          const auto qc = tsize(c, sl, q, qt);
          AccessPattern src = natural_ap(kt, c.tile[2], s0, qc);
          src.part_stride = ss * sq;
          src.free_stride = {0, s32(sk), s32(Jk * sk)};
          src.free_size = {1, static_cast<std::int32_t>(Jk), static_cast<std::int32_t>(c.tile[2])};
          AccessPattern d = tile_ap(bid, slot, static_cast<int>(c.tile[2]), kk * Lq + qq * T, qc);
          d.free_stride = {0, s32(Lq), 1};
          d.free_size = {1, static_cast<std::int32_t>(Jk), static_cast<std::int32_t>(qc)};
          load_dma(q, d, src, c.load_q[uq], true, kt, Jk, qt, 1);
        }
        kk += Jk - 1;
        continue;
      }
      std::int64_t full = 0;  // full k tiles from kt on, for one region transpose across them
      if (tr == Transpose::dma_transpose && c.tr_gran[uq] == schedule::TransposeGran::region && !c.interleave && !hold_)
        while (kk + full < kn && tsize(c, sl, 2, kt + full) == c.tile[2]) ++full;
      if (full > 1) {
        // interleave_out, dma_transpose_region: per interleaved S block, one 4-D transpose of all
        // full k tiles of the footprint (permutation (3, 1, 2, 0)): source row p*J + t of the S
        // block, k row j*tile + kp, into [k partitions kp, full, J, T]. Not in the held prologue,
        // which stays per k tile so that the first matmul waits for its own k tile only. A
        // natural S tile (the tail) per k tile.
        for (std::int64_t qq = 0; qq < qn;) {
          const std::int64_t qt = q0 + qq;
          const auto [s0, ss] = c.s_rows(qt);
          if (c.s_blocks(qt, qn - qq) > 0) {
            AccessPattern src = natural_ap(kt, c.tile[2], s0, T);
            src.part_stride = J * sq;
            src.free_stride = {s32(c.tile[2] * sk), s32(sq), s32(sk)};
            src.free_size = {static_cast<std::int32_t>(full), static_cast<std::int32_t>(J), static_cast<std::int32_t>(c.tile[2])};
            AccessPattern d = tile_ap(bid, slot, static_cast<int>(c.tile[2]), kk * Lq + qq * T, T);
            d.free_stride = {s32(Lq), s32(T), 1};
            d.free_size = {static_cast<std::int32_t>(full), static_cast<std::int32_t>(J), static_cast<std::int32_t>(T)};
            load_dma(q, d, src, c.load_q[uq], true, kt, full, qt, J);
            qq += J;
            continue;
          }
          const auto qc = tsize(c, sl, q, qt);
          for (std::int64_t f = 0; f < full; ++f) {
            AccessPattern src = natural_ap(kt + f, c.tile[2], s0, qc);
            src.part_stride = ss * sq;
            load_dma(q, tile_ap(bid, slot, static_cast<int>(c.tile[2]), (kk + f) * Lq + qq * T, qc), src, c.load_q[uq], true, kt + f, 1, qt, 1);
          }
          ++qq;
        }
        kk += full - 1;
        continue;
      }
      for (std::int64_t qq = 0; qq < qn;) {
        const std::int64_t qt = q0 + qq;
        const auto [s0, ss] = c.s_rows(qt);
        if (tr == Transpose::dma_transpose && c.tr_gran[uq] != schedule::TransposeGran::tile && c.s_blocks(qt, qn - qq) > 0) {
          // one 3-D transpose per interleaved block: source [T rows p, J tiles t, k] (row p*J + t of
          // the block) into [k partitions, J, T], the block's tiles side by side
          AccessPattern src = natural_ap(kt, krows, s0, T);
          src.part_stride = J * sq;
          src.free_stride = {0, s32(sq), src.free_stride[2]};
          src.free_size = {1, static_cast<std::int32_t>(J), static_cast<std::int32_t>(krows)};
          load_dma(q, tile_ap(bid, slot, static_cast<int>(krows), kk * Lq + qq * T, J * T), src, c.load_q[uq], true, kt, 1, qt, J);
          qq += J;
          continue;
        }
        const std::int64_t nb = plain && g != DmaGran::tile && g != DmaGran::pair ? c.s_blocks(qt, qn - qq) : 0;
        if (nb > 0) {
          AccessPattern d = tile_ap(bid, slot, static_cast<int>(krows), kk * Lq + qq * T, nb * J * T);
          // the blocks in their natural order where the S index is contiguous (cc_.s_natural: the
          // matmul reads them strided), else tile t of each block gathered as every J-th row
          AccessPattern src = hbm_ap(kt, krows, s0, cc_.s_natural ? nb * J * T : 1);
          if (!cc_.s_natural) {
            src.free_stride = {s32(J * T * sq), s32(sq), s32(J * sq)};
            src.free_size = {static_cast<std::int32_t>(nb), static_cast<std::int32_t>(J), static_cast<std::int32_t>(T)};
          }
          load_dma(q, d, src, c.load_q[uq], false, kt, 1, qt, nb * J);
          qq += nb * J;
          continue;
        }
        const auto qc = tsize(c, sl, q, qt);
        const AccessPattern dst = tile_ap(bid, slot, static_cast<int>(krows), kk * Lq + qq * T, qc);
        if (plain) {
          AccessPattern src = hbm_ap(kt, krows, s0, qc);
          src.free_stride[2] = s32(ss * sq);
          load_dma(q, dst, src, c.load_q[uq], false, kt, 1, qt, 1);
        } else if (tr == Transpose::dma_transpose) {
          AccessPattern src = natural_ap(kt, krows, s0, qc);
          src.part_stride = ss * sq;
          load_dma(q, dst, src, c.load_q[uq], true, kt, 1, qt, 1);
        } else {
          pe_tile(kt, krows, dst, s0, ss, qc);
        }
        ++qq;
      }
    }
    hold_ = false;
    return;
  }
  for (std::int64_t kk = 0; kk < kn; ++kk) {
    const std::int64_t kt = k0 + kk;
    const auto krows = tsize(c, sl, 2, kt);
    const std::int64_t J = c.bf[2];
    // interleaved k blocks from kt on inside the footprint (kt starts a block there: footprints
    // cover whole blocks or one tile); a held transfer (the prologue) takes one block, so the
    // first matmul waits for its own block's rows rather than for every block of the footprint
    const std::int64_t kblocks = c.k_blocks(kt, kn - kk);
    const std::int64_t iblocks = hold_ ? std::min<std::int64_t>(1, kblocks) : kblocks;
    if (tr == Transpose::none || tr == Transpose::strided) {
      const DmaGran g = c.load_dma[uq];
      if (g == DmaGran::region && iblocks > 0) {
        // rows interleave: every interleaved block of the footprint in one transfer, a
        // partition's J rows of a block adjacent in HBM: [blocks, J tiles, q] per partition
        AccessPattern d = tile_ap(bid, slot, static_cast<int>(c.tile[2]), kk * Lq, qlen);
        d.free_stride = {s32(J * Lq), s32(Lq), 1};
        d.free_size = {static_cast<std::int32_t>(iblocks), static_cast<std::int32_t>(J), static_cast<std::int32_t>(qlen)};
        AccessPattern s = hbm_ap(kt, c.tile[2], q0 * c.tile[uq], qlen);
        s.free_stride = {s32(J * c.tile[2] * sk), s32(sk), s32(sq)};
        s.free_size = {static_cast<std::int32_t>(iblocks), static_cast<std::int32_t>(J), static_cast<std::int32_t>(qlen)};
        load_dma(q, d, s, c.load_q[uq], false, kt, iblocks * J, q0, qn);
        kk += iblocks * J - 1;
        continue;
      }
      if (g == DmaGran::region && krows == c.tile[2] && kn > 1) {
        // all full k tiles of the footprint in one 3-D transfer (the partial last tile separately)
        std::int64_t full = 0;
        while (kk + full < kn && tsize(c, sl, 2, kt + full) == c.tile[2]) ++full;
        AccessPattern d = tile_ap(bid, slot, static_cast<int>(c.tile[2]), kk * Lq, qlen);
        d.free_stride = {0, s32(Lq), 1};
        d.free_size = {1, static_cast<std::int32_t>(full), static_cast<std::int32_t>(qlen)};
        AccessPattern s = hbm_ap(kt, c.tile[2], q0 * c.tile[uq], qlen);
        s.free_stride = {0, s32(c.tile[2] * sk), s32(sq)};
        s.free_size = {1, static_cast<std::int32_t>(full), static_cast<std::int32_t>(qlen)};
        load_dma(q, d, s, c.load_q[uq], false, kt, full, q0, qn);
        kk += full - 1;
        continue;
      }
      if (g == DmaGran::tile || g == DmaGran::pair) {
        // one transfer per tile, or per two tiles (the last one alone when the count is odd)
        const std::int64_t per = g == DmaGran::pair ? 2 : 1;
        for (std::int64_t qq = 0; qq < qn; qq += per) {
          const std::int64_t qt = q0 + qq;
          const auto qc = per == 1 ? tsize(c, sl, q, qt) : std::min(per * c.tile[uq], qlen - qq * c.tile[uq]);
          load_dma(q, tile_ap(bid, slot, static_cast<int>(krows), kk * Lq + qq * c.tile[uq], qc),
                   hbm_ap(kt, krows, qt * c.tile[uq], qc), c.load_q[uq], false, kt, 1, qt, std::min(per, qn - qq));
        }
      } else {
        load_dma(q, tile_ap(bid, slot, static_cast<int>(krows), kk * Lq, qlen), hbm_ap(kt, krows, q0 * c.tile[uq], qlen), c.load_q[uq],
                 false, kt, 1, q0, qn);
      }
      continue;
    }
    if (tr == Transpose::dma_transpose && c.tr_gran[uq] != schedule::TransposeGran::tile && iblocks > 0) {
      // rows interleave, dma_transpose_block or _region: one 3-D transpose per interleaved k
      // block, whose rows [qlen, J*tile k] are contiguous in the operand: read as [qlen, J, tile]
      // (tile t of the block is every J-th k) into [tile partitions, J, qlen]
      AccessPattern d = tile_ap(bid, slot, static_cast<int>(c.tile[2]), kk * Lq, qlen);
      d.free_stride = {0, s32(Lq), 1};
      d.free_size = {1, static_cast<std::int32_t>(J), static_cast<std::int32_t>(qlen)};
      AccessPattern s = natural_ap(kt, c.tile[2], q0 * c.tile[uq], qlen);
      s.free_stride = {0, s32(sk), s32(J * sk)};
      s.free_size = {1, static_cast<std::int32_t>(J), static_cast<std::int32_t>(c.tile[2])};
      load_dma(q, d, s, c.load_q[uq], true, kt, J, q0, qn);
      kk += J - 1;
      continue;
    }
    if (tr == Transpose::dma_transpose && c.tr_gran[uq] == schedule::TransposeGran::region && krows == c.tile[2] && kn > 1) {
      // one 3-D transpose for all full k tiles of the footprint (nki.isa.dma_transpose's
      // permutation (2, 1, 0)): [qlen rows, full k tiles, k] into [k partitions, full, qlen]; the
      // partial last k tile, if any, as a block below
      std::int64_t full = 0;
      while (kk + full < kn && tsize(c, sl, 2, kt + full) == c.tile[2]) ++full;
      if (full > 1) {
        AccessPattern d = tile_ap(bid, slot, static_cast<int>(c.tile[2]), kk * Lq, qlen);
        d.free_stride = {0, s32(Lq), 1};
        d.free_size = {1, static_cast<std::int32_t>(full), static_cast<std::int32_t>(qlen)};
        AccessPattern s = natural_ap(kt, c.tile[2], q0 * c.tile[uq], qlen);
        s.free_stride = {0, s32(c.tile[2] * sk), s32(sk)};
        s.free_size = {1, static_cast<std::int32_t>(full), static_cast<std::int32_t>(c.tile[2])};
        load_dma(q, d, s, c.load_q[uq], true, kt, full, q0, qn);
        kk += full - 1;
        continue;
      }
    }
    for (std::int64_t qq = 0; qq < qn; ++qq) {
      const std::int64_t qt = q0 + qq;
      const auto qc = tsize(c, sl, q, qt);
      const AccessPattern dst = tile_ap(bid, slot, static_cast<int>(krows), kk * Lq + qq * c.tile[uq], qc);
      if (tr == Transpose::dma_transpose && c.tr_gran[uq] != schedule::TransposeGran::tile) {
        // one transpose per k tile of the footprint, all its q tiles at once: [qlen rows, krows]
        // into [krows partitions, qlen]
        load_dma(q, tile_ap(bid, slot, static_cast<int>(krows), kk * Lq, qlen), natural_ap(kt, krows, q0 * c.tile[uq], qlen),
                 c.load_q[uq], true, kt, 1, q0, qn);
        break;
      }
      if (tr == Transpose::dma_transpose) {
        load_dma(q, dst, natural_ap(kt, krows, qt * c.tile[uq], qc), c.load_q[uq], true, kt, 1, qt, 1);
        continue;
      }
      pe_tile(kt, krows, dst, qt * c.tile[uq], 1, qc);
    }
  }
  hold_ = false;
}

Lowerer::TapPlace Lowerer::tap_place(const ContractPlan& c, const schedule::ContractSlot& sl, const CState& st, int q,
                                     std::int64_t kt) const {
  const auto uq = static_cast<std::size_t>(q);
  const ir::Expr& acc = *cc_.acc[uq];
  const auto& shape = cc_.shape[uq];
  // k row r = kt * tile: channel r % kc at tap r / kc, taps row-major over sl.taps
  const std::int64_t r = kt * c.tile[2], ch = r % sl.kc;
  std::int64_t tap = r / sl.kc;
  std::vector<std::int64_t> tv(sl.taps.size(), 0);
  for (std::size_t i = sl.taps.size(); i-- > 0;) {
    tv[i] = tap % sl.tap_ext[i];
    tap /= sl.tap_ext[i];
  }
  const auto value = [&](const std::string& x) -> std::int64_t {
    for (std::size_t i = 0; i < sl.taps.size(); ++i)
      if (sl.taps[i] == x) return tv[i];
    for (const auto& [n, v] : st.fixed)
      if (n == x) return v;
    return 0;
  };
  TapPlace p;
  p.hi = sl.present[uq] ? sl.ext[uq] : 1;
  std::int64_t ds = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    const ir::IndexShift sh = d < acc.shifts.size() ? acc.shifts[d] : ir::IndexShift{};
    const std::string& x = acc.indices[d];
    if (x == sl.idx[2]) {
      p.offset += ch * ds;
    } else if (sl.present[uq] && x == sl.idx[uq]) {
      // element j of q sits at position stride * j + b: inside for j in [ceil(-b / stride), ceil((size - b) / stride))
      const std::int64_t b = value(sh.plus) + sh.offset, a = sh.stride;
      p.offset += b * ds;
      if (b < 0) p.lo = std::max(p.lo, (-b + a - 1) / a);
      p.hi = std::min(p.hi, shape[d] - b <= 0 ? 0 : (shape[d] - b + a - 1) / a);
    } else {
      const std::int64_t pos = sh.stride * value(x) + value(sh.plus) + sh.offset;
      if (pos < 0 || pos >= shape[d]) p.hi = p.lo;
      p.offset += pos * ds;
    }
    ds *= shape[d];
  }
  if (p.hi < p.lo) p.hi = p.lo;
  return p;
}

void Lowerer::load_taps(const NestPlan& np, CState& st, int q, int slot) {
  const auto& c = np.c;
  const auto& sl = s_.contracts[static_cast<std::size_t>(c.slot)];
  const auto uq = static_cast<std::size_t>(q);
  const int level = c.load_level[uq];
  const std::int64_t Lq = c.span(q, cc_.fp_load[uq][uq]);
  const auto [k0, kn] = fp_range(st, c, 2, level);
  const auto [q0, qn] = fp_range(st, c, q, level);
  const int bid = buf(c.buf_load[uq]);
  const std::int64_t sk = cc_.sk[uq], sq = cc_.sq[uq], T = c.tile[uq];
  const std::int64_t qs = q0 * T, qe = std::min((q0 + qn) * T, sl.ext[uq]);
  const Transpose tr = c.tr[uq];
  const DmaGran g = c.load_dma[uq];
  const auto zero = [&](const AccessPattern& a) {
    if (a.free_elems() <= 0 || a.part_count <= 0) return;
    Instr& in = compute(Opcode::memset, Engine::gpsimd, a);
    in.imm0 = 0;
    emit(in, 0);
  };
  if (tr == Transpose::pe_transpose && sl.tap_run[uq] > 1) {
    // weights with the taps inside each channel (ContractSlot::tap_run; plain, never outside):
    // per channel tile of the footprint and 128 elements of q, the natural rows with every tap
    // in one run, loaded once, then each of the footprint's taps of that channel tile transposed
    // through the PE array (its columns, every run-th) and copied into its k tile
    const std::int64_t nct = sl.kc / c.tile[2], run = sl.tap_run[uq], pm = t_.pmax;
    const int nat = buf(c.buf_nat[uq]), tps = buf(c.buf_tpsum[uq]);
    std::vector<std::vector<std::int64_t>> by_ct(static_cast<std::size_t>(nct));
    for (std::int64_t kk = 0; kk < kn; ++kk) by_ct[static_cast<std::size_t>((k0 + kk) % nct)].push_back(kk);
    for (std::int64_t ct = 0; ct < nct; ++ct) {
      const auto& kks = by_ct[static_cast<std::size_t>(ct)];
      if (kks.empty()) continue;
      const TapPlace p0 = tap_place(c, sl, st, q, ct);  // tap 0 of the channel tile
      const auto krows = static_cast<int>(tsize(c, sl, 2, ct));
      std::vector<std::int64_t> tap_col;  // per k tile of kks: its tap's first column in the natural rows
      for (const std::int64_t kk : kks) tap_col.push_back(tap_place(c, sl, st, q, k0 + kk).offset - p0.offset);
      for (std::int64_t e0 = qs; e0 < qe; e0 += pm) {
        const std::int64_t rows = std::min(pm, qe - e0);
        const int ns = st.nat_inst++;
        const AccessPattern nd = tile_ap(nat, ns, static_cast<int>(rows), 0, krows * run);
        AccessPattern src;
        src.buffer = cc_.hb[uq];
        src.offset = p0.offset + e0 * sq;
        src.part_stride = sq;
        src.part_count = static_cast<std::int32_t>(rows);
        src.free_stride = {0, 0, 1};
        src.free_size = {1, 1, static_cast<std::int32_t>(krows * run)};
        dma(nd, src, c.load_q[uq]);
        for (std::size_t i = 0; i < kks.size(); ++i) {
          const std::int64_t kk = kks[i];
          AccessPattern cols = nd;
          cols.offset += tap_col[i];
          cols.free_stride[2] = s32(run);
          cols.free_size[2] = krows;
          const int ts = st.nat_inst++;
          const AccessPattern tp = tile_ap(tps, ts, krows, 0, rows);
          pe_transpose(tp, cols);
          copy(Engine::vector, tile_ap(bid, slot, krows, kk * Lq + (e0 - qs), rows), tp);
        }
      }
    }
    return;
  }
  for (std::int64_t kk = 0; kk < kn; ++kk) {
    const std::int64_t kt = k0 + kk;
    const auto krows = static_cast<int>(tsize(c, sl, 2, kt));
    const TapPlace pl = tap_place(c, sl, st, q, kt);
    // q elements [a, b) of this k tile (q tiles [qt, qt + nt)): the part inside by one transfer,
    // the rest zeroed
    const auto piece = [&](std::int64_t a, std::int64_t b, std::int64_t qt, std::int64_t nt) {
      const AccessPattern dst = tile_ap(bid, slot, krows, kk * Lq + (a - qs), b - a);
      const std::int64_t lo = std::clamp(pl.lo, a, b), hi = std::clamp(pl.hi, lo, b);
      if (tr == Transpose::pe_transpose) {
        // per 128 elements: natural tile [elements, k rows] (zeroed first where partly outside),
        // transposed through the PE array into PSUM, copied into place
        const int nat = buf(c.buf_nat[uq]), tps = buf(c.buf_tpsum[uq]);
        const int ns = st.nat_inst++;
        const std::int64_t pm = t_.pmax;
        for (std::int64_t ch = 0; ch * pm < b - a; ++ch) {
          const std::int64_t e0 = a + ch * pm, rows = std::min(pm, b - e0);
          const AccessPattern nd = tile_ap(nat, ns, static_cast<int>(rows), ch * c.tile[2], krows);
          const std::int64_t l = std::clamp(lo, e0, e0 + rows), h = std::clamp(hi, l, e0 + rows);
          if (l > e0 || h < e0 + rows) zero(nd);
          if (h > l) {
            AccessPattern s;
            s.buffer = cc_.hb[uq];
            s.offset = pl.offset + l * sq;
            s.part_stride = sq;
            s.part_count = static_cast<std::int32_t>(h - l);
            s.free_stride = {0, 0, s32(sk)};
            s.free_size = {1, 1, krows};
            AccessPattern d = nd;
            d.offset += (l - e0) * nd.part_stride;
            d.part_count = s.part_count;
            dma(d, s, c.load_q[uq]);
          }
          pe_transpose(tile_ap(tps, ns, krows, ch * pm, rows), nd);
        }
        copy(Engine::vector, dst, tile_ap(tps, ns, krows, 0, b - a));
        return;
      }
      if (hi <= lo) {  // wholly outside: zeroes only
        zero(dst);
        return;
      }
      AccessPattern z = dst;
      z.free_size[2] = static_cast<std::int32_t>(lo - a);
      zero(z);
      z.offset = dst.offset + (hi - a) * dst.free_stride[2];
      z.free_size[2] = static_cast<std::int32_t>(b - hi);
      zero(z);
      AccessPattern d = dst;
      d.offset += (lo - a) * dst.free_stride[2];
      d.free_size[2] = static_cast<std::int32_t>(hi - lo);
      AccessPattern s;
      s.buffer = cc_.hb[uq];
      s.offset = pl.offset + lo * sq;
      const bool transposed = tr == Transpose::dma_transpose;
      if (transposed) {  // [elements, k rows] in HBM into [k rows, elements]
        s.part_stride = sq;
        s.part_count = static_cast<std::int32_t>(hi - lo);
        s.free_stride = {0, 0, s32(sk)};
        s.free_size = {1, 1, krows};
      } else {
        s.part_stride = sk;
        s.part_count = krows;
        s.free_stride = {0, 0, s32(sq)};
        s.free_size = {1, 1, static_cast<std::int32_t>(hi - lo)};
      }
      load_dma(q, d, s, c.load_q[uq], transposed, kt, 1, qt, nt);
    };
    // one transfer for the footprint's q elements (dma row, dma_transpose_block), else per tile
    // or per two tiles (dma pair); a PE transpose per tile
    const bool plain = tr == Transpose::none || tr == Transpose::strided;
    const bool whole = plain ? g != DmaGran::tile && g != DmaGran::pair
                             : tr == Transpose::dma_transpose && c.tr_gran[uq] != schedule::TransposeGran::tile;
    const std::int64_t per = whole ? qn : plain && g == DmaGran::pair ? 2 : 1;
    for (std::int64_t qq = 0; qq < qn; qq += per) {
      const std::int64_t a = qs + qq * T, b = std::min(qe, a + per * T);
      piece(a, b, q0 + qq, std::min(per, qn - qq));
    }
  }
}

void Lowerer::body(const NestPlan& np, CState& st) {
  const auto& c = np.c;
  const auto& sl = s_.contracts[static_cast<std::size_t>(c.slot)];
  const int S = c.stat, M = 1 - c.stat;
  const auto uM = static_cast<std::size_t>(M);
  const std::int64_t gk = gtile(st, c, 2), gs = gtile(st, c, S), gm = gtile(st, c, M);
  release(0, gk, c.stat == 0 ? gs : gm);
  release(1, gk, c.stat == 1 ? gs : gm);
  const auto krows = tsize(c, sl, 2, gk), ssz = tsize(c, sl, S, gs), msz = tsize(c, sl, M, gm);
  const auto operand_ap = [&](int q, std::int64_t qt, std::int64_t qsz) {
    const auto uq = static_cast<std::size_t>(q);
    const int level = c.load_level[uq];
    const std::int64_t Lq = c.span(q, cc_.fp_load[uq][uq]);
    const auto [k0, kn] = fp_range(st, c, 2, level);
    const auto [q0, qn] = fp_range(st, c, q, level);
    (void)kn;
    AccessPattern a = tile_ap(buf(c.buf_load[uq]), st.load_inst[uq], static_cast<int>(krows), (gk - k0) * Lq + (qt - q0) * c.tile[uq], qsz);
    if (q == S && cc_.s_natural) {
      // a tile of an interleaved block that the load moved whole, in its natural order
      // (cc_.s_natural): column p of tile t is the block's column p*J + t
      const std::int64_t J = c.bf[uq], b0 = qt / J * J;
      if (c.s_rows(qt).second > 1 && b0 >= q0 && b0 + J <= q0 + qn) {
        a.offset += (b0 - qt) * c.tile[uq] + (qt - b0);
        a.free_stride[2] = s32(J);
      }
    }
    return a;
  };
  // PSUM group of this output tile
  const auto& pfp = cc_.fp_psum;
  const auto [ps0, psn] = fp_range(st, c, S, c.scope - 1);
  const auto [pm0, pmn] = fp_range(st, c, M, c.scope - 1);
  (void)psn;
  (void)pmn;
  const std::int64_t group = (gs - ps0) * pfp[uM] + (gm - pm0);
  AccessPattern ps = tile_ap(buf(c.buf_psum), st.psum_inst, static_cast<int>(ssz), group * (t_.psum_bank_bytes / 4), msz);
  const std::int64_t col0 = scol0(gs, gm);  // sedge slices: the edge tile's column tile
  ps.offset += col0 * ps.part_stride;
  const int pkb = c.pos_of(2, true);
  const bool scope_is_kb = c.scope == pkb;
  const std::int64_t ktrip = std::min(c.bf[2], c.ntiles[2] - st.blk[2] * c.bf[2]);
  const bool first = scope_is_kb ? gk == 0 : st.til[2] == 0;
  const bool last = scope_is_kb ? gk == c.ntiles[2] - 1 : st.til[2] == ktrip - 1;
  // acc.zero=memset: the accumulator spanning k is zeroed by a Vector-engine memset (GpSimd
  // cannot write PSUM) instead of the first matmul's start flag; every matmul then accumulates
  const bool zero_memset = c.acc_zero == schedule::AccZero::memset;
  if (zero_memset && first && !c.acc_sbuf) {
    Instr& z = compute(Opcode::memset, Engine::vector, ps);
    z.imm0 = 0.0;
    emit(z, 0);
  }
  if (zero_memset && first && c.acc_sbuf && st.blk[2] == 0) {
    Instr& z = compute(Opcode::memset, Engine::vector, c_tile(np, st, c.buf_c, gs, gm, ssz, msz, c.c_footprint));
    z.imm0 = 0.0;
    emit(z, 0);
  }
  Instr& in = compute(Opcode::nc_matmul, Engine::tensor, ps);
  in.src[0] = operand_ap(S, gs, ssz);
  in.src[1] = operand_ap(M, gm, msz);
  in.nsrc = 2;
  if (cc_.kslices > 1 && gk == cc_.kedge) {
    // kedge slices: the next row tile in turn, reading the copy of both operands' edge rows there
    const int row0 = kslice_next_++ % cc_.kslices * cc_.kslice;
    for (std::size_t q = 0; q < 2; ++q) in.src[q].offset += static_cast<std::int64_t>(row0) * in.src[q].part_stride;
    in.pe_rows = static_cast<std::uint8_t>(cc_.kslice);
    in.pe_row0 = static_cast<std::uint8_t>(row0);
  }
  if (cc_.scols > 1 && gs == cc_.sedge) {
    in.pe_cols = static_cast<std::uint8_t>(cc_.scol);
    in.pe_col0 = static_cast<std::uint8_t>(col0);
  }
  in.accumulate = !first || (zero_memset && !c.acc_sbuf);
  const std::int64_t fl = 2 * krows * ssz * msz;
  prog_.stats.matmul_flops += fl;
  emit(in, fl);
  if (last) evict(np, st, ps, gs, gm, ssz, msz);
}

AccessPattern Lowerer::c_tile(const NestPlan& np, CState& st, int spec, std::int64_t gs, std::int64_t gm, std::int64_t ssz,
                     std::int64_t msz, bool footprint) {
  const auto& c = np.c;
  const int S = c.stat, M = 1 - c.stat;
  const std::int64_t col0 = scol0(gs, gm);  // sedge slices: on its column tile's partitions
  if (!footprint) {
    AccessPattern a = tile_ap(buf(spec), st.tile_inst, static_cast<int>(ssz), 0, msz);
    a.offset += col0 * a.part_stride;
    return a;
  }
  const std::int64_t Lm = c.span(M, cc_.fp_store[static_cast<std::size_t>(M)]);
  const auto [s0, sn] = fp_range(st, c, S, c.store_level);
  const auto [m0, mn] = fp_range(st, c, M, c.store_level);
  (void)sn;
  (void)mn;
  const std::int64_t f = (gs - s0) * Lm + (gm - m0) * c.tile[static_cast<std::size_t>(M)];
  AccessPattern a = tile_ap(buf(spec), st.store_inst, static_cast<int>(ssz), f, msz);
  a.offset += col0 * a.part_stride;
  return a;
}

void Lowerer::evict(const NestPlan& np, CState& st, const AccessPattern& ps, std::int64_t gs, std::int64_t gm, std::int64_t ssz,
           std::int64_t msz) {
  const auto& c = np.c;
  const auto& sl = s_.contracts[static_cast<std::size_t>(c.slot)];
  const AccessPattern cdst = c_tile(np, st, c.buf_c, gs, gm, ssz, msz, c.c_footprint);
  bool final_value = true;
  if (c.acc_sbuf) {
    final_value = st.blk[2] == c.nblocks[2] - 1;
    // the first k block initialises the SBUF accumulator by a copy, unless a memset zeroed it
    // (acc.zero=memset: every k block adds, as the NKI tutorial's kernel does)
    if (st.blk[2] == 0 && c.acc_zero == schedule::AccZero::start) copy(evict_engine(c, st), cdst, ps);
    else tensor_tensor(Engine::vector, cdst, cdst, ps, ir::Fn::add);
  } else if (sl.scale != 1.0) {
    // a column mean: the sum times 1 / R as it leaves PSUM, so that it is rounded to C's dtype
    // once, as the reference rounds it (a sum of 150 values near 1.6 overflowed fp8_e4m3's 240
    // when it was evicted first and scaled after)
    tensor_scalar(evict_engine(c, st), cdst, ps, ir::Fn::mul, Val{true, sl.scale, {}, false}, false);
  } else {
    copy(evict_engine(c, st), cdst, ps);
  }
  if (final_value && c.acc_sbuf && sl.scale != 1.0) {
    // the SBUF accumulator's finished sum times 1 / R, in place on the Vector engine
    tensor_scalar(Engine::vector, cdst, cdst, ir::Fn::mul, Val{true, sl.scale, {}, false}, false);
  }
  if (!c.c_footprint) ++st.tile_inst;
  if (!final_value || np.tc.ops.empty()) return;
  // Epilogue on the finished tile.
  const auto& op = k_.ops[static_cast<std::size_t>(np.root_op)];
  const int S = c.stat, M = 1 - c.stat;
  Ctx cx;
  cx.pidx = sl.idx[static_cast<std::size_t>(S)];
  cx.fidx = sl.idx[static_cast<std::size_t>(M)];
  cx.p0 = gs * c.tile[static_cast<std::size_t>(S)];
  cx.f0 = gm * c.tile[static_cast<std::size_t>(M)];
  cx.P = static_cast<int>(ssz);
  cx.F = msz;
  cx.fixed = st.fixed;
  TileState ts;
  ts.slot = epi_iter_++;
  ts.values.emplace_back(op.out, Val{false, 0, cdst, true});
  for (std::size_t oi = 0; oi < np.tc.ops.size(); ++oi) {
    if (np.tc.store[oi]) {
      const AccessPattern d = c_tile(np, st, np.tc.dst[oi], gs, gm, ssz, msz, true);
      eval_op(np, np.tc, oi, cx, ts, c.store_q, &d, 1);
    } else {
      eval_op(np, np.tc, oi, cx, ts, c.store_q, nullptr, 1);
    }
  }
}

void Lowerer::store(const NestPlan& np, CState& st, std::int64_t only_s, std::int64_t only_m) {
  const auto& c = np.c;
  const auto& sl = s_.contracts[static_cast<std::size_t>(c.slot)];
  const auto& op = k_.ops[static_cast<std::size_t>(np.root_op)];
  std::vector<std::pair<int, int>> outs;  // (buffer spec, op index)
  if (c.c_footprint && (s_.tensor(op.out).role == ir::Role::output || stored_c(np)))
    outs.emplace_back(c.buf_c, np.root_op);
  for (std::size_t oi = 0; oi < np.tc.ops.size(); ++oi)
    if (np.tc.store[oi]) outs.emplace_back(np.tc.dst[oi], np.tc.ops[oi]);
  const int S = c.stat, M = 1 - c.stat;
  const auto uS = static_cast<std::size_t>(S), uM = static_cast<std::size_t>(M);
  const std::int64_t Lm = c.span(M, cc_.fp_store[uM]);
  const auto [s0, sn] = fp_range(st, c, S, c.store_level);
  const auto [m0, mn] = fp_range(st, c, M, c.store_level);
  const bool one = only_s >= 0;
  const std::int64_t mstart = one ? only_m * c.tile[uM] : m0 * c.tile[uM];
  const std::int64_t mlen = one ? tsize(c, sl, M, only_m) : std::min((m0 + mn) * c.tile[uM], sl.ext[uM]) - mstart;
  for (const auto& [spec, oi] : outs) {
    const auto& o = k_.ops[static_cast<std::size_t>(oi)];
    const int hb = hbm_of(o.out);
    const std::int64_t ss = stride_of(o.out, o.out_indices, sl.idx[uS]);
    const std::int64_t sm = sl.present[uM] ? stride_of(o.out, o.out_indices, sl.idx[uM]) : 0;
    std::int64_t base = 0;
    for (const auto& [x, v] : st.fixed) base += v * stride_of(o.out, o.out_indices, x);
    const int bid = buf(spec);
    // the output rows of S tile stl (their first row and step: ContractPlan::s_rows)
    const auto hap = [&](std::int64_t stl, std::int64_t rows, std::int64_t mst, std::int64_t mcount) {
      const auto [r0, rs] = c.s_rows(stl);
      AccessPattern a;
      a.buffer = hb;
      a.offset = base + r0 * ss + mst * sm;
      a.part_stride = rs * ss;
      a.part_count = static_cast<std::int32_t>(rows);
      a.free_stride = {0, 0, s32(sm)};
      a.free_size = {1, 1, static_cast<std::int32_t>(mcount)};
      return a;
    };
    if (c.store_tr) {
      // stationary ... out=pe_transpose: per <= 128 columns of the moving index, every S tile of
      // the footprint goes through the PE array (nc_transpose into PSUM: [columns, rows]) and is
      // copied into a staging tile [columns, S rows of the footprint], which one DMA stores with
      // S, the output's contiguous index, along the free dim
      const std::int64_t slen = std::min((s0 + sn) * c.tile[uS], sl.ext[uS]) - s0 * c.tile[uS];
      const int tps = buf(c.buf_otpsum, B(bid).dtype), stg = buf(c.buf_ostage);
      if (tps < 0) throw std::logic_error("lower: no transposed-store PSUM tile for " + o.out);
      const std::int64_t pm = t_.pmax;
      for (std::int64_t ch = 0; ch * pm < mlen; ++ch) {
        const std::int64_t cols = std::min(pm, mlen - ch * pm);
        const int sslot = st.ostage_inst++;
        for (std::int64_t si = 0; si < sn; ++si) {
          const auto rows = tsize(c, sl, S, s0 + si);
          const int ps = st.otr_inst++;
          const AccessPattern tp = tile_ap(tps, ps, static_cast<int>(cols), 0, rows);
          pe_transpose(tp, tile_ap(bid, st.store_inst, static_cast<int>(rows), si * Lm + ch * pm, cols));
          copy(evict_engine(c, st), tile_ap(stg, sslot, static_cast<int>(cols), si * c.tile[uS], rows), tp);
        }
        AccessPattern d;
        d.buffer = hb;
        d.offset = base + (mstart + ch * pm) * sm + s0 * c.tile[uS] * ss;
        d.part_stride = sm;
        d.part_count = static_cast<std::int32_t>(cols);
        d.free_stride = {0, 0, s32(ss)};
        d.free_size = {1, 1, static_cast<std::int32_t>(slen)};
        dma(d, tile_ap(stg, sslot, static_cast<int>(cols), 0, slen), c.store_q);
      }
      continue;
    }
    if (one) {
      // one output tile of the footprint (rest tiles)
      const auto rows = tsize(c, sl, S, only_s);
      AccessPattern src = tile_ap(bid, st.store_inst, static_cast<int>(rows), (only_s - s0) * Lm + (only_m - m0) * c.tile[uM], mlen);
      src.offset += scol0(only_s, only_m) * src.part_stride;
      dma(hap(only_s, rows, mstart, mlen), src, c.store_q);
      continue;
    }
    for (std::int64_t si = 0; si < sn; ++si) {
      const std::int64_t stl = s0 + si;
      const auto rows = tsize(c, sl, S, stl);
      const std::int64_t J = c.bf[uS];
      // rows interleave_out: interleaved blocks of the footprint from stl
      const std::int64_t nb = c.store_dma == DmaGran::region ? c.s_blocks(stl, sn - si) : 0;
      if (nb > 0) {
        // every interleaved block in one transfer: a partition's J rows of a block adjacent in C
        AccessPattern d = hap(stl, rows, mstart, mlen);
        d.free_stride = {s32(J * c.tile[uS] * ss), s32(ss), s32(sm)};
        d.free_size = {static_cast<std::int32_t>(nb), static_cast<std::int32_t>(J), static_cast<std::int32_t>(mlen)};
        AccessPattern s = tile_ap(bid, st.store_inst, static_cast<int>(rows), si * Lm, mlen);
        s.free_stride = {s32(J * Lm), s32(Lm), 1};
        s.free_size = {static_cast<std::int32_t>(nb), static_cast<std::int32_t>(J), static_cast<std::int32_t>(mlen)};
        dma(d, s, c.store_q);
        si += nb * J - 1;
        continue;
      }
      if (c.store_dma == DmaGran::region && rows == c.tile[uS] && sn > 1) {
        std::int64_t full = 0;
        while (si + full < sn && tsize(c, sl, S, s0 + si + full) == c.tile[uS]) ++full;
        AccessPattern d = hap(stl, rows, mstart, mlen);
        d.free_stride = {0, s32(c.tile[uS] * ss), s32(sm)};
        d.free_size = {1, static_cast<std::int32_t>(full), static_cast<std::int32_t>(mlen)};
        AccessPattern s = tile_ap(bid, st.store_inst, static_cast<int>(rows), si * Lm, mlen);
        s.free_stride = {0, s32(Lm), 1};
        s.free_size = {1, static_cast<std::int32_t>(full), static_cast<std::int32_t>(mlen)};
        dma(d, s, c.store_q);
        si += full - 1;
        continue;
      }
      if (c.store_dma == DmaGran::tile || (cc_.scols > 1 && stl == cc_.sedge)) {
        // one transfer per output tile (sedge slices: the edge tiles sit on their column tiles'
        // partitions, so a row of them is no longer one partition range)
        for (std::int64_t mi = 0; mi < mn; ++mi) {
          const auto mc = tsize(c, sl, M, m0 + mi);
          AccessPattern src = tile_ap(bid, st.store_inst, static_cast<int>(rows), si * Lm + mi * c.tile[uM], mc);
          src.offset += scol0(stl, m0 + mi) * src.part_stride;
          dma(hap(stl, rows, (m0 + mi) * c.tile[uM], mc), src, c.store_q);
        }
      } else {
        dma(hap(stl, rows, mstart, mlen), tile_ap(bid, st.store_inst, static_cast<int>(rows), si * Lm, mlen),
            c.store_q);
      }
    }
  }
}

bool Lowerer::stored_c(const NestPlan& np) const {
  const auto& op = k_.ops[static_cast<std::size_t>(np.root_op)];
  for (std::size_t i = 0; i < k_.ops.size(); ++i) {
    if (std::find(np.ops.begin(), np.ops.end(), static_cast<int>(i)) != np.ops.end()) continue;
    std::vector<const ir::Expr*> nodes;
    schedule::preorder(k_.ops[i].expr, nodes);
    for (const auto* e : nodes)
      if (e->kind == ir::Expr::Kind::access && e->tensor == op.out) return true;
  }
  return false;
}

}  // namespace kevo::lower::detail
