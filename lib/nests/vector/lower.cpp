// Lowering of a vector (row) nest: row tiles of the fused map/reduce ops, evaluated on [P, F] tiles.
#include "lower/lowerer.hpp"

namespace kevo::lower::detail {

void Lowerer::lower_vector(const NestPlan& np) {
  const auto& v = np.v;
  const auto& tc = np.tc;
  std::int64_t rcount = 1;
  for (const auto& x : v.reduce_set) {
    const auto& os = s_.ops[static_cast<std::size_t>(np.root_op)];
    for (std::size_t q = 0; q < os.idx.size(); ++q)
      if (os.idx[q] == x) rcount *= os.ext[q];
  }
  const std::int64_t np_tiles = (v.pext + v.ptile - 1) / v.ptile;
  const std::int64_t nf_tiles = v.fidx.empty() ? 1 : (v.fext + v.ftile - 1) / v.ftile;
  std::vector<std::int64_t> oc(v.outer.size(), 0);
  int iter = 0, otile = 0;
  while (true) {
    for (std::int64_t pt = 0; pt < np_tiles; ++pt) {
      const std::int64_t nfo = v.f_reduced ? 1 : nf_tiles;
      for (std::int64_t fo = 0; fo < nfo; ++fo) {
        win_.clear();
        // one output tile: iterate the reduction (inner looped indices, then f tiles when reduced)
        std::vector<std::int64_t> ic(v.inner.size(), 0);
        const std::int64_t nfi = v.f_reduced ? nf_tiles : 1;
        std::int64_t inner_total = nfi;
        for (auto e : v.inner_ext) inner_total *= e;
        if (v.fold) inner_total = 1;  // the taps run inside one instruction
        std::int64_t step = 0;
        while (true) {
          for (std::int64_t fi = 0; fi < nfi; ++fi, ++step) {
            Ctx c;
            c.pidx = v.pidx;
            c.fidx = v.fidx;
            c.p0 = pt * v.ptile;
            c.P = static_cast<int>(std::min(v.ptile, v.pext - c.p0));
            const std::int64_t ft = v.f_reduced ? fi : fo;
            c.f0 = ft * v.ftile;
            c.F = v.fidx.empty() ? 1 : std::min(v.ftile, v.fext - c.f0);
            for (std::size_t q = 0; q < v.outer.size(); ++q) c.fixed.emplace_back(v.outer[q], oc[q]);
            for (std::size_t q = 0; q < v.inner.size(); ++q) c.fixed.emplace_back(v.inner[q], ic[q]);
            TileState st;
            st.slot = iter++;
            st.acc_slot = otile;
            st.first = step == 0;
            st.last = step + 1 == inner_total;
            for (std::size_t oi = 0; oi < tc.ops.size(); ++oi) {
              eval_op(np, tc, oi, c, st, v.queues, nullptr, rcount);
              const auto& op = k_.ops[static_cast<std::size_t>(tc.ops[oi])];
              const bool is_reduce = op.kind() == ir::OpKind::reduce;
              if (tc.store[oi] && (!is_reduce || st.last)) store_tile(op.out, op.out_indices, st.values.back().second.ap, c, v.queues);
            }
          }
          if (v.fold || !next(ic, v.inner_ext)) break;
        }
        ++otile;
      }
    }
    if (!next(oc, v.outer_ext)) break;
  }
}

}  // namespace kevo::lower::detail
