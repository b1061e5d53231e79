// Lowering of a flash nest: QKᵀ, an online softmax and PV per kv tile (FlashAttention-2).
#include "lower/lowerer.hpp"

namespace kevo::lower::detail {

namespace {
// Software pipelining over steps 0..n-1: front(i) runs `lead` steps ahead of back(i), i.e.
// front(0..lead-1), then front(i + lead) before back(i). lead 0 is front(i), back(i) in turn.
template <class Front, class Back>
void skewed(std::size_t n, std::size_t lead, Front&& front, Back&& back) {
  for (std::size_t i = 0; i < std::min(lead, n); ++i) front(i);
  for (std::size_t i = 0; i < n; ++i) {
    if (i + lead < n) front(i + lead);
    back(i);
  }
}
}  // namespace

void Lowerer::flash_load_t(const NestPlan& np, int r, int slot, std::int64_t row0, std::int64_t rows,
                  const std::vector<std::pair<std::string, std::int64_t>>& fixed, int& nat_inst) {
  const auto& f = np.f;
  const auto& fs = s_.flashes[static_cast<std::size_t>(f.slot)];
  const auto ur = static_cast<std::size_t>(r);
  const int q = r == 0 ? fs.q_operand : 1 - fs.q_operand;
  const ir::Expr& acc = k_.ops[static_cast<std::size_t>(fs.qk)].expr.args[static_cast<std::size_t>(q)];
  const int hb = hbm_of(acc.tensor);
  const std::int64_t sk = stride_of(acc.tensor, acc.indices, fs.hd);
  const std::int64_t sr = stride_of(acc.tensor, acc.indices, r == 0 ? fs.row : fs.kv);
  std::int64_t base = 0;
  for (const auto& [x, v] : fixed) base += v * stride_of(acc.tensor, acc.indices, x);
  const std::int64_t tile = r == 0 ? f.tq : f.tkv;
  const int bid = buf(f.buf_t[ur]);
  const int queues = f.queues[ur];
  const std::int64_t pm = t_.pmax;
  for (std::int64_t dt = 0; dt < f.nk; ++dt) {
    const std::int64_t d0 = dt * f.tk, kr = std::min(f.tk, fs.ext_hd - d0);
    const AccessPattern dst = tile_ap(bid, slot, static_cast<int>(kr), dt * tile, rows);
    const auto hbm = [&](std::int64_t r0, std::int64_t n, bool natural) {
      AccessPattern a;
      a.buffer = hb;
      a.offset = base + d0 * sk + r0 * sr;
      a.part_stride = s32(natural ? sr : sk);
      a.part_count = static_cast<std::int32_t>(natural ? n : kr);
      a.free_stride = {0, 0, s32(natural ? sk : sr)};
      a.free_size = {1, 1, static_cast<std::int32_t>(natural ? kr : n)};
      return a;
    };
    const Transpose tr = f.tr[ur];
    if (tr == Transpose::none || tr == Transpose::strided) {
      dma(dst, hbm(row0, rows, false), queues);
    } else if (tr == Transpose::dma_transpose) {
      dma(dst, hbm(row0, rows, true), queues, true);
    } else {  // natural tile -> nc_transpose into PSUM (128 rows at a time) -> copy
      const int nat = buf(f.buf_nat[ur]), tps = buf(f.buf_tpsum[ur]);
      const int ns = nat_inst++;
      for (std::int64_t ch = 0; ch * pm < rows; ++ch) {
        const std::int64_t crow = std::min(pm, rows - ch * pm);
        const AccessPattern nd = tile_ap(nat, ns, static_cast<int>(crow), ch * f.tk, kr);
        dma(nd, hbm(row0 + ch * pm, crow, true), queues);
        Instr& in = compute(Opcode::nc_transpose, Engine::tensor, tile_ap(tps, ns, static_cast<int>(kr), ch * pm, crow));
        in.src[0] = nd;
        in.nsrc = 1;
        emit(in, 0);
      }
      copy(Engine::vector, dst, tile_ap(tps, ns, static_cast<int>(kr), 0, rows));
    }
  }
}

Lowerer::Range Lowerer::range_of(const ir::Expr& e, const Ctx& c, const std::vector<std::pair<std::string, Range>>& vals) const {
  switch (e.kind) {
    case ir::Expr::Kind::constant: return exact_range(e.value, e.value);
    case ir::Expr::Kind::index:
      if (e.index == c.pidx) return exact_range(static_cast<double>(c.p0), static_cast<double>(c.p0 + c.P - 1));
      if (e.index == c.fidx) return exact_range(static_cast<double>(c.f0), static_cast<double>(c.f0 + c.F - 1));
      for (const auto& [n, v] : c.fixed)
        if (n == e.index) return exact_range(static_cast<double>(v), static_cast<double>(v));
      return Range{};
    case ir::Expr::Kind::access:
      for (const auto& [n, r] : vals)
        if (n == e.tensor) return r;
      return Range{};
    case ir::Expr::Kind::call: break;
  }
  std::vector<Range> a;
  for (const auto& x : e.args) a.push_back(range_of(x, c, vals));
  for (const auto& r : a)
    if (!r.exact) {
      if (e.fn == ir::Fn::select) break;  // a decided condition still picks one branch
      return Range{};
    }
  const auto cmp = [&](bool always, bool never) { return always ? exact_range(1, 1) : never ? exact_range(0, 0) : exact_range(0, 1); };
  switch (e.fn) {
    case ir::Fn::lt: return cmp(a[0].hi < a[1].lo, a[0].lo >= a[1].hi);
    case ir::Fn::le: return cmp(a[0].hi <= a[1].lo, a[0].lo > a[1].hi);
    case ir::Fn::gt: return cmp(a[0].lo > a[1].hi, a[0].hi <= a[1].lo);
    case ir::Fn::ge: return cmp(a[0].lo >= a[1].hi, a[0].hi < a[1].lo);
    case ir::Fn::select: {
      if (!a[0].exact) return Range{};
      if (a[0].lo == 0 && a[0].hi == 0) return a[2];
      if (a[0].lo > 0 || a[0].hi < 0) return a[1];
      if (!a[1].exact || !a[2].exact) return Range{};
      return exact_range(std::min(a[1].lo, a[2].lo), std::max(a[1].hi, a[2].hi));
    }
    default: break;
  }
  // other functions: only single values fold (e.g. -inf * scale = -inf)
  for (const auto& r : a)
    if (r.lo != r.hi) return Range{};
  const double v = fold(e.fn, a[0].lo, a.size() > 1 ? a[1].lo : 0);
  if (std::isnan(v)) return Range{};
  return exact_range(v, v);
}

bool Lowerer::flash_tile_masked(const NestPlan& np, const Ctx& c) const {
  if (np.tc.ops.empty()) return false;
  std::vector<std::pair<std::string, Range>> vals;
  for (int oi : np.tc.ops) {
    const auto& op = k_.ops[static_cast<std::size_t>(oi)];
    vals.emplace_back(op.out, range_of(op.expr, c, vals));
  }
  const Range& r = vals.back().second;
  return r.exact && r.hi == -kInf;
}

void Lowerer::lower_flash(const NestPlan& np) {
  const auto& f = np.f;
  const auto& fs = s_.flashes[static_cast<std::size_t>(f.slot)];
  const auto& qkop = k_.ops[static_cast<std::size_t>(fs.qk)];
  const auto& pvop = k_.ops[static_cast<std::size_t>(fs.pv)];
  const auto& os = s_.ops[static_cast<std::size_t>(fs.qk)];
  std::vector<std::int64_t> oext;
  for (const auto& x : fs.outer) oext.push_back(os.extent(x));
  std::vector<std::int64_t> oc(fs.outer.size(), 0);
  const Engine e_mx = plan_.op_engine[static_cast<std::size_t>(fs.mx)];
  const Engine e_sum = plan_.op_engine[static_cast<std::size_t>(fs.sum)];
  const ir::Expr& vacc = pvop.expr.args[static_cast<std::size_t>(1 - fs.e_operand)];
  const int vhb = hbm_of(vacc.tensor);
  const std::int64_t sj = stride_of(vacc.tensor, vacc.indices, fs.kv), svd = stride_of(vacc.tensor, vacc.indices, fs.vd);
  const std::int64_t vd = fs.ext_vd, pm = t_.pmax;
  int it = 0, qi = 0, tcount = 0, ran = 0, kvran = 0;
  std::array<int, 2> nat{0, 0};
  const auto qb = static_cast<std::size_t>(f.qblock);
  // per row tile of a block (qblock): its running max and which of its two slots holds it
  std::vector<AccessPattern> m_old(qb);
  std::vector<int> mslot(qb, 0);
  // One kv tile of one row tile that runs (a tile masked out for every row is skipped).
  struct Item {
    std::int64_t qt = 0, j0 = 0, J = 0;
    int it = 0, qi = 0, P = 0;
    int kv = 0;                        // rotation slot of its K and V tiles
    bool kvload = true;                // loads them: the first of the block's row tiles to run this kv tile
    bool first = false, last = false;  // first / last kv tile of its row tile that runs
    Ctx mc;
    AccessPattern sps;
  };
  while (true) {
    std::vector<std::pair<std::string, std::int64_t>> fixed;
    std::int64_t vbase = 0;
    for (std::size_t q = 0; q < fs.outer.size(); ++q) {
      fixed.emplace_back(fs.outer[q], oc[q]);
      vbase += oc[q] * stride_of(vacc.tensor, vacc.indices, fs.outer[q]);
    }
    // the work of this batch iteration, in order: (row tile, kv tile) pairs that run; with
    // qblock > 1, per block of row tiles, each kv tile for every row tile of the block in turn
    // (loaded by the first of them to run it, read by the others)
    std::vector<Item> items;
    for (std::int64_t qb0 = 0; qb0 < f.nq; qb0 += f.qblock) {
      const std::int64_t qend = std::min(f.nq, qb0 + f.qblock);
      std::vector<char> started(static_cast<std::size_t>(qend - qb0), 0);
      std::vector<std::size_t> last_of(started.size(), 0);
      for (std::int64_t kt = 0; kt < f.nkv; ++kt) {
        bool loaded = false;
        for (std::int64_t qt = qb0; qt < qend; ++qt) {
          const auto r = static_cast<std::size_t>(qt - qb0);
          const std::int64_t i0 = qt * f.tq;
          const int P = static_cast<int>(std::min(f.tq, fs.ext_row - i0));
          const std::int64_t j0 = kt * f.tkv, J = std::min(f.tkv, fs.ext_kv - j0);
          const int it_here = it + static_cast<int>((qt - qb0) * f.nkv + kt);
          Ctx mc;
          mc.pidx = fs.row;
          mc.fidx = fs.kv;
          mc.p0 = i0;
          mc.f0 = j0;
          mc.P = P;
          mc.F = J;
          mc.fixed = fixed;
          // a tile masked out for every row is skipped (not the last one of a row tile none of
          // whose tiles ran: that row's softmax is then the reference's 0/0)
          if (flash_tile_masked(np, mc) && (started[r] || kt + 1 < f.nkv)) continue;
          Item x;
          // the rotation slot of the tile's scores and work buffers (and, one row tile per
          // block, its K and V): the kv tile's count, or skewed, the count of tiles that run,
          // so that two consecutive ones never share a slot (a skipped tile between them would,
          // and the later one's loads would overwrite the earlier one's before its PV). Shared
          // K and V tiles rotate by the count of loads.
          x.it = f.skew ? ran++ : it_here;
          x.kvload = !loaded;
          if (!loaded) kvran++;
          x.kv = f.qblock == 1 ? x.it : kvran - 1;
          loaded = true;
          x.qt = qt, x.j0 = j0, x.J = J, x.qi = qi + static_cast<int>(qt - qb0), x.P = P, x.first = !started[r];
          x.mc = std::move(mc);
          started[r] = 1;
          last_of[r] = items.size();
          items.push_back(std::move(x));
        }
      }
      for (const auto l : last_of) items[l].last = true;
      it += static_cast<int>((qend - qb0) * f.nkv);
      qi += static_cast<int>(qend - qb0);
    }
    // front: the row tile's Qᵀ (with its first kv tile), K and V of the kv tile, S = Q·Kᵀ
    const auto front = [&](Item& x) {
      const std::int64_t i0 = x.qt * f.tq;
      if (x.first) flash_load_t(np, 0, x.qi, i0, x.P, fixed, nat[0]);
      if (x.kvload) flash_load_t(np, 1, x.kv, x.j0, x.J, fixed, nat[1]);
      for (std::int64_t ch = 0; x.kvload && ch * pm < x.J; ++ch) {  // V, kv rows on partitions
        const std::int64_t crow = std::min(pm, x.J - ch * pm);
        AccessPattern src;
        src.buffer = vhb;
        src.offset = vbase + (x.j0 + ch * pm) * sj;
        src.part_stride = s32(sj);
        src.part_count = static_cast<std::int32_t>(crow);
        src.free_stride = {0, 0, s32(svd)};
        src.free_size = {1, 1, static_cast<std::int32_t>(vd)};
        dma(tile_ap(buf(f.buf_v), x.kv, static_cast<int>(crow), ch * vd, vd), src, f.queues[2]);
      }
      // S = Q·Kᵀ over the tiles of the contracted index
      x.sps = tile_ap(buf(f.buf_spsum), x.it, x.P, 0, x.J);
      for (std::int64_t dt = 0; dt < f.nk; ++dt) {
        const int kr = static_cast<int>(std::min(f.tk, fs.ext_hd - dt * f.tk));
        matmul(x.sps, tile_ap(buf(f.buf_t[0]), x.qi, kr, dt * f.tq, x.P), tile_ap(buf(f.buf_t[1]), x.kv, kr, dt * f.tkv, x.J),
               dt > 0);
      }
    };
    // back: the maps on the scores, the online softmax, PV, and after a row tile's last kv tile
    // the delayed division and the stores
    AccessPattern corr;
    const auto back = [&](const Item& x) {
      const int P = x.P, it_ = x.it;
      const auto r = static_cast<std::size_t>(x.qt % f.qblock);
      const bool first = x.first;
      const AccessPattern lap = tile_ap(buf(f.buf_l), x.qi, P, 0, 1);
      const AccessPattern acc = tile_ap(buf(f.buf_acc), x.qi, P, 0, vd);
      const AccessPattern& sps = x.sps;
      // the maps on the scores (scale, mask) on the [rows, kv] tile read S straight from PSUM
      // unless one of them runs on GpSimd (which cannot access PSUM); else S is evicted first
      const bool from_psum = f.s_in_psum;
      const AccessPattern ssb = from_psum ? sps : tile_ap(buf(f.buf_s), it_, P, 0, x.J);
      if (!from_psum) copy(f.evict, ssb, sps);
      AccessPattern pap = ssb;
      if (!np.tc.ops.empty()) {
        const Ctx& c = x.mc;  // the same [rows, kv] tile the mask test saw
        TileState ts;
        ts.slot = it_;
        ts.values.emplace_back(qkop.out, Val{false, 0, ssb, true});
        for (std::size_t oi = 0; oi < np.tc.ops.size(); ++oi) eval_op(np, np.tc, oi, c, ts, f.queues[0], nullptr, 1);
        pap = ts.values.back().second.ap;
      }
      // the online softmax on this tile (online_softmax_step), the exp writing P itself: e, or e in
      // the cast's dtype (FlashSlot::ecast), its row sums taken before the rounding, as l sums the
      // kernel's fp32 e. The row tile's running max takes its two slots (2r and 2r + 1 of the block's)
      // in turn.
      const AccessPattern m_new = tile_ap(buf(f.buf_m), static_cast<int>(2 * r) + (mslot[r]++ % 2), P, 0, 1);
      const int pbuf = f.buf_ec >= 0 ? f.buf_ec : f.buf_e;
      corr = online_softmax_step(e_mx, e_sum, first, pap, m_old[r], m_new, tile_ap(buf(f.buf_rmax), it_, P, 0, 1),
                                 tile_ap(buf(f.buf_negm), it_, P, 0, 1), tile_ap(buf(f.buf_corr), it_, P, 0, 1),
                                 tile_ap(buf(pbuf), it_, P, 0, x.J), lap, fs.exp_scale);
      // eᵀ (kv on partitions, 128 rows at a time) and PV into PSUM
      // (skewed, chunk ch+1's transpose and copy are issued before chunk ch's matmul, so the
      // Tensor engine transposes while Vector copies the previous chunk out of PSUM)
      const AccessPattern pvps = tile_ap(buf(f.buf_pvpsum), it_, P, 0, vd);
      const std::int64_t nch = (x.J + pm - 1) / pm;
      const auto transpose_chunk = [&](std::int64_t ch) {
        const int crow = static_cast<int>(std::min(pm, x.J - ch * pm));
        const AccessPattern tp = tile_ap(buf(f.buf_etpsum), tcount++, crow, 0, P);
        Instr& in = compute(Opcode::nc_transpose, Engine::tensor, tp);
        in.src[0] = tile_ap(buf(pbuf), it_, P, ch * pm, crow);
        in.nsrc = 1;
        emit(in, 0);
        copy(Engine::vector, tile_ap(buf(f.buf_et), it_, crow, ch * f.tq, P), tp);
      };
      skewed(static_cast<std::size_t>(nch), f.skew ? 1 : 0, [&](std::size_t ch) { transpose_chunk(static_cast<std::int64_t>(ch)); },
             [&](std::size_t uch) {
               const auto ch = static_cast<std::int64_t>(uch);
               const int crow = static_cast<int>(std::min(pm, x.J - ch * pm));
               matmul(pvps, tile_ap(buf(f.buf_et), it_, crow, ch * f.tq, P), tile_ap(buf(f.buf_v), x.kv, crow, ch * vd, vd), ch > 0);
             });
      // acc = acc·corr + PV
      if (first) {
        copy(Engine::vector, acc, pvps);
      } else {
        tensor_scalar(Engine::vector, acc, acc, ir::Fn::mul, Val{false, 0, corr, false}, false);
        tensor_tensor(Engine::vector, acc, acc, pvps, ir::Fn::add);
      }
      m_old[r] = m_new;
      if (!x.last) return;
      // the delayed division (the maps on PV's output), cast and store
      Ctx c;
      c.pidx = fs.row;
      c.fidx = fs.vd;
      c.p0 = x.qt * f.tq;
      c.f0 = 0;
      c.P = P;
      c.F = vd;
      c.fixed = fixed;
      // pv's output and the row statistics, when they leave the nest: cast, then stored
      const auto leave = [&](int spec, const AccessPattern& src, int op) {
        if (spec < 0) return;
        const auto& o = k_.ops[static_cast<std::size_t>(op)];
        const AccessPattern out = tile_ap(buf(spec), x.qi, P, 0, src.free_size[2]);
        copy(Engine::vector, out, src);
        store_tile(o.out, o.out_indices, out, c, f.queues[0]);
      };
      leave(f.buf_out, acc, fs.pv);
      leave(f.buf_mx_out, m_old[r], fs.mx);
      leave(f.buf_l_out, lap, fs.sum);
      TileState ts;
      ts.slot = x.qi;
      ts.values.emplace_back(pvop.out, Val{false, 0, acc, true});
      ts.values.emplace_back(k_.ops[static_cast<std::size_t>(fs.mx)].out, Val{false, 0, m_old[r], false});
      ts.values.emplace_back(k_.ops[static_cast<std::size_t>(fs.sum)].out, Val{false, 0, lap, false});
      for (std::size_t oi = 0; oi < f.post.ops.size(); ++oi) {
        eval_op(np, f.post, oi, c, ts, f.queues[0], nullptr, 1);
        const auto& op = k_.ops[static_cast<std::size_t>(f.post.ops[oi])];
        if (f.post.store[oi]) store_tile(op.out, op.out_indices, ts.values.back().second.ap, c, f.queues[0]);
      }
    };
    // In program order, each engine's queue runs in order: with `skew` the next kv tile's loads
    // and scores are issued before this tile's softmax and PV, so the Tensor engine computes
    // S(j+1) while the Vector and Scalar engines work on tile j (software pipelining).
    skewed(items.size(), f.skew ? 1 : 0, [&](std::size_t i) { front(items[i]); }, [&](std::size_t i) { back(items[i]); });
    if (!next(oc, oext)) break;
  }
}

}  // namespace kevo::lower::detail
