// Lowering of a vector (row) nest: row tiles of the fused map/reduce ops, evaluated on [P, F] tiles.
#include <array>

#include "lower/lowerer.hpp"

namespace kevo::lower::detail {

namespace {
// A vector nest's element count per reduced value (the product of its reduced extents: a mean's
// divisor) and its partition and free tile counts.
std::array<std::int64_t, 3> vector_counts(const schedule::SpaceImpl& s, const NestPlan& np) {
  const auto& v = np.v;
  std::int64_t rcount = 1;
  const auto& os = s.ops[static_cast<std::size_t>(np.root_op)];
  for (const auto& x : v.reduce_set) rcount *= os.extent(x, 1);
  return {rcount, (v.pext + v.ptile - 1) / v.ptile, v.fidx.empty() ? 1 : (v.fext + v.ftile - 1) / v.ftile};
}

// The context of one step of a vector nest: partition tile pt, free tile ft, the looped indices'
// values (outer oc, inner ic).
Ctx step_ctx(const schedule::VectorPlan& v, std::int64_t pt, std::int64_t ft, const std::vector<std::int64_t>& oc,
             const std::vector<std::int64_t>& ic) {
  Ctx c;
  c.pidx = v.pidx;
  c.fidx = v.fidx;
  c.p0 = pt * v.ptile;
  c.P = static_cast<int>(std::min(v.ptile, v.pext - c.p0));
  c.f0 = ft * v.ftile;
  c.F = v.fidx.empty() ? 1 : std::min(v.ftile, v.fext - c.f0);
  for (std::size_t q = 0; q < v.outer.size(); ++q) c.fixed.emplace_back(v.outer[q], oc[q]);
  for (std::size_t q = 0; q < v.inner.size(); ++q) c.fixed.emplace_back(v.inner[q], ic[q]);
  return c;
}
}  // namespace

void Lowerer::lower_vector(const NestPlan& np) {
  if (np.v.p_reduced) return lower_vector_partials(np);
  const auto& v = np.v;
  const auto& tc = np.tc;
  const auto [rcount, np_tiles, nf_tiles] = vector_counts(s_, np);
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
            const Ctx c = step_ctx(v, pt, v.f_reduced ? fi : fo, oc, ic);
            TileState st;
            st.slot = iter++;
            st.acc_slot = otile;
            st.first = step == 0;
            st.last = step + 1 == inner_total;
            for (std::size_t oi = 0; oi < tc.ops.size(); ++oi) {
              eval_op(np, tc, oi, c, st, v.queues, nullptr, rcount);
              const auto& op = k_.ops[static_cast<std::size_t>(tc.ops[oi])];
              const bool is_reduce = !op.reduce_indices.empty();
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

// `layout p=<reduced index>`: per output tile (a free tile of an output index, or one tile
// when the free index is reduced too; per value of the outer indices), every step — partition
// tiles, free tiles of a reduced free index, looped reduced indices — folds into the
// accumulators [P, w] elementwise (eval_op with last = false: its first step is partition tile 0,
// a full tile wherever there are two, so every row starts there); then combine_partials.
void Lowerer::lower_vector_partials(const NestPlan& np) {
  const auto& v = np.v;
  const auto& tc = np.tc;
  const auto [rcount, np_tiles, nf_tiles] = vector_counts(s_, np);
  std::vector<std::int64_t> oc(v.outer.size(), 0);
  int iter = 0, otile = 0;
  while (true) {
    const std::int64_t nfo = v.f_reduced ? 1 : nf_tiles;
    for (std::int64_t fo = 0; fo < nfo; ++fo) {
      win_.clear();
      const std::int64_t nfi = v.f_reduced ? nf_tiles : 1;
      std::vector<std::int64_t> ic(v.inner.size(), 0);
      std::int64_t step = 0;
      Ctx c;
      while (true) {
        for (std::int64_t pt = 0; pt < np_tiles; ++pt)
          for (std::int64_t fi = 0; fi < nfi; ++fi, ++step) {
            c = step_ctx(v, pt, v.f_reduced ? fi : fo, oc, ic);
            TileState st;
            st.slot = iter++;
            st.acc_slot = otile;
            st.first = step == 0;
            st.last = false;
            for (std::size_t oi = 0; oi < tc.ops.size(); ++oi) {
              eval_op(np, tc, oi, c, st, v.queues, nullptr, rcount);
              const auto& op = k_.ops[static_cast<std::size_t>(tc.ops[oi])];
              if (tc.store[oi] && op.reduce_indices.empty())
                store_tile(op.out, op.out_indices, st.values.back().second.ap, c, v.queues);
            }
          }
        if (!next(ic, v.inner_ext)) break;
      }
      // the output tile's free extent: that of its (last) step when the free index is an output's
      c.p0 = 0;
      c.P = static_cast<int>(std::min(v.ptile, v.pext));
      for (std::size_t oi = 0; oi < tc.ops.size(); ++oi)
        if (!k_.ops[static_cast<std::size_t>(tc.ops[oi])].reduce_indices.empty()) combine_partials(np, oi, c, otile, rcount);
      ++otile;
    }
    if (!next(oc, v.outer_ext)) break;
  }
}

void Lowerer::combine_partials(const NestPlan& np, std::size_t oi, const Ctx& c, int acc_slot, std::int64_t reduce_count) {
  const auto& v = np.v;
  const auto& tc = np.tc;
  const auto& op = k_.ops[static_cast<std::size_t>(tc.ops[oi])];
  const bool has_f = !c.fidx.empty() && std::find(op.out_indices.begin(), op.out_indices.end(), c.fidx) != op.out_indices.end();
  const std::int64_t w = has_f ? c.F : 1;
  const Engine eng = tt_engine(plan_.op_engine[static_cast<std::size_t>(tc.ops[oi])]);
  const AccessPattern acc = tile_ap(buf(tc.dst[oi]), acc_slot, c.P, 0, w);
  if (op.reduce == ir::ReduceOp::mean)
    tensor_scalar(eng, acc, acc, ir::Fn::mul, Val{true, 1.0 / static_cast<double>(reduce_count), {}, false}, false);
  const ir::DType dt = s_.tensor(op.out).dtype;
  const int res = buf(v.buf_pres, dt);
  if (res < 0 || v.buf_ptr < 0) throw std::logic_error("lower: no partials buffers for " + op.out);
  const int pt = buf(v.buf_ptr);
  const std::int64_t pm = t_.pmax;
  for (std::int64_t j0 = 0; j0 < w; j0 += pm) {
    // columns [j0, j0 + r) of the partials: [r, P] in PSUM, reduced along the free dim
    const std::int64_t r = std::min(pm, w - j0);
    const int slot = tr_slot_++;
    AccessPattern part = acc;
    part.offset += j0;
    part.free_size[2] = static_cast<std::int32_t>(r);
    const AccessPattern tp = tile_ap(pt, slot, static_cast<int>(r), 0, c.P);
    pe_transpose(tp, part);
    const AccessPattern col = tile_ap(res, slot, static_cast<int>(r), 0, 1);
    Instr& red = compute(Opcode::tensor_reduce, Engine::vector, col);  // GpSimd cannot read PSUM
    red.src[0] = tp;
    red.nsrc = 1;
    red.reduce = op.reduce == ir::ReduceOp::mean ? ir::ReduceOp::sum : op.reduce;
    red.reduce_free_dims = 1;
    emit(red, tp.elems());
    // stored with the output's free index (if any) down the partitions
    Ctx o;
    o.pidx = has_f ? c.fidx : std::string();
    o.p0 = has_f ? c.f0 + j0 : 0;
    o.P = static_cast<int>(r);
    o.fixed = c.fixed;
    store_tile(op.out, op.out_indices, col, o, v.queues);
  }
}

}  // namespace kevo::lower::detail
