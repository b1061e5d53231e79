// Lowering of an online-softmax nest: per row tile, a running max and sum over the row's tiles,
// then e and the maps after the sum from a second read of the row.
#include "lower/lowerer.hpp"

namespace kevo::lower::detail {

void Lowerer::lower_online(const NestPlan& np) {
  const auto& o = np.o;
  const auto& os = s_.onlines[static_cast<std::size_t>(o.slot)];
  const auto& mxop = k_.ops[static_cast<std::size_t>(os.mx)];
  const auto& exop = k_.ops[static_cast<std::size_t>(os.ex)];
  const auto& sumop = k_.ops[static_cast<std::size_t>(os.sum)];
  const ir::Expr& aacc = mxop.expr;  // A[.., j]
  const std::string akey = schedule::access_key(aacc);
  const Engine e_mx = plan_.op_engine[static_cast<std::size_t>(os.mx)];
  const Engine e_sum = plan_.op_engine[static_cast<std::size_t>(os.sum)];
  const auto& ms = s_.ops[static_cast<std::size_t>(os.mx)];
  std::vector<std::int64_t> oext;
  for (const auto& x : os.outer) oext.push_back(ms.extent(x));
  std::vector<std::int64_t> oc(os.outer.size(), 0);
  int it = 0, ri = 0, mcount = 0;
  while (true) {
    std::vector<std::pair<std::string, std::int64_t>> fixed;
    for (std::size_t q = 0; q < os.outer.size(); ++q) fixed.emplace_back(os.outer[q], oc[q]);
    for (std::int64_t rt = 0; rt < o.nr; ++rt, ++ri) {
      Ctx c;
      c.pidx = os.row;
      c.fidx = os.j;
      c.p0 = rt * o.tr;
      c.P = static_cast<int>(std::min(o.tr, os.ext_row - c.p0));
      c.fixed = fixed;
      const int P = c.P;
      const auto at = [&](std::int64_t t) {
        c.f0 = t * o.tj;
        c.F = std::min(o.tj, os.ext_j - c.f0);
      };
      const AccessPattern lap = tile_ap(buf(o.buf_l), ri, P, 0, 1);
      AccessPattern m_old, negm_last, e_last, x_last;
      int last_slot = 0;
      // first pass: the online softmax per tile (online_softmax_step): running max and sum
      for (std::int64_t t = 0; t < o.nj; ++t) {
        at(t);
        const int slot = it++;
        const AccessPattern xap = tile_ap(buf(o.buf_x), slot, P, 0, c.F);
        load_access(xap, aacc, c, true, o.queues, e_mx);
        const AccessPattern m_new = tile_ap(buf(o.buf_m), mcount++, P, 0, 1);
        const AccessPattern negm = tile_ap(buf(o.buf_negm), slot, P, 0, 1);
        const AccessPattern eap = tile_ap(buf(o.buf_e), slot, P, 0, c.F);
        online_softmax_step(e_mx, e_sum, t == 0, xap, m_old, m_new, tile_ap(buf(o.buf_rmax), slot, P, 0, 1), negm,
                            tile_ap(buf(o.buf_corr), slot, P, 0, 1), eap, lap);
        m_old = m_new;
        if (t + 1 == o.nj) last_slot = slot, e_last = eap, negm_last = negm, x_last = xap;
      }
      // the row statistics, when they leave the nest: cast, then stored
      at(0);
      c.F = 1;
      const auto leave = [&](int spec, const AccessPattern& src, const ir::Op& op) {
        if (spec < 0) return;
        const AccessPattern out = tile_ap(buf(spec), ri, P, 0, 1);
        copy(Engine::vector, out, src);
        store_tile(op.out, op.out_indices, out, c, o.queues);
      };
      leave(o.buf_mx_out, m_old, mxop);
      leave(o.buf_l_out, lap, sumop);
      // second pass, from the last tile back: the last tile's e used the final max already and
      // is still on chip; every other tile is read again and its e recomputed
      for (std::int64_t t = o.nj; t-- > 0;) {
        at(t);
        int slot = last_slot;
        AccessPattern eap = e_last, xap = x_last;
        if (t + 1 != o.nj) {
          slot = it++;
          xap = tile_ap(buf(o.buf_x), slot, P, 0, c.F);
          load_access(xap, aacc, c, true, o.queues, e_mx);
          eap = tile_ap(buf(o.buf_e), slot, P, 0, c.F);
          activation(ir::Fn::exp, eap, xap, negm_last);
        }
        TileState ts;
        ts.slot = slot;
        ts.loaded.emplace_back(akey, xap);
        ts.values.emplace_back(exop.out, Val{false, 0, eap, true});
        ts.values.emplace_back(mxop.out, Val{false, 0, m_old, false});
        ts.values.emplace_back(sumop.out, Val{false, 0, lap, false});
        for (std::size_t pi = 0; pi < np.tc.ops.size(); ++pi) {
          eval_op(np, np.tc, pi, c, ts, o.queues, nullptr, 1);
          const auto& op = k_.ops[static_cast<std::size_t>(np.tc.ops[pi])];
          if (np.tc.store[pi]) store_tile(op.out, op.out_indices, ts.values.back().second.ap, c, o.queues);
        }
      }
    }
    if (!next(oc, oext)) break;
  }
}

}  // namespace kevo::lower::detail
