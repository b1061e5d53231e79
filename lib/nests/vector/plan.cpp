// Planning of a vector (row) nest: partition/free layout, tiles, windows and folds, and every buffer.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "schedule/planner.hpp"

namespace kevo::schedule::detail {

std::optional<Invalid> plan_vector(const Ctx& cx, NestPlan& n, int /*slot*/) {
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
  v.issue = slot.issue < 0 ? IssueOrder::steps : static_cast<IssueOrder>(cx.val(slot.issue));
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
    const bool across = !op.reduce_indices.empty() &&
                        std::find(op.reduce_indices.begin(), op.reduce_indices.end(), v.pidx) != op.reduce_indices.end();
    if (!v.pidx.empty() && !across && std::find(op.out_indices.begin(), op.out_indices.end(), v.pidx) == op.out_indices.end())
      return Invalid{"unfusable", fmt::format("{}: '{}' has no index {} to put on partitions", n.name, op.out, v.pidx), fg, 0};
    std::vector<const ir::Expr*> nodes;
    preorder(op.expr, nodes);
    for (const auto* e : nodes)
      if (e->kind == ir::Expr::Kind::access && reduced_here.count(e->tensor) && first_consumer < 0) {
        first_consumer = oi;
        consumed = e->tensor;
      }
    if (!op.reduce_indices.empty()) {
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
      reduced_here.insert(op.out);
    }
  }
  v.complete_rows = first_consumer >= 0;
  v.p_reduced = !v.pidx.empty() && std::find(v.reduce_set.begin(), v.reduce_set.end(), v.pidx) != v.reduce_set.end();
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
      // (an index of extent 1 is whole in any step, unless it is the partition index: a
      // reduction down the partitions is combined after the nest's last tile, whatever its extent)
      if (x == v.fidx || (slot.ext[static_cast<std::size_t>(xi)] == 1 && x != v.pidx)) continue;
      const auto& cons = cx.s.ops[static_cast<std::size_t>(first_consumer)];
      if (x == v.pidx)
        return Invalid{"illegal_fusion",
                      fmt::format("{}: '{}' reads '{}' before its reduction over {} is complete ({} runs down the partitions: "
                                  "the partials combine after the nest's last tile)",
                                  n.name, cons.name, consumed, x, x),
                      cons.fuse_gene, 0};
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
                        OutsideReads(cx.s, n.ops), no_body))
    return r;
  if (slot.transpose >= 0 && cx.val(slot.transpose) > 0) {
    // the inputs this layout loads transposed: read from HBM (not produced in the nest)
    v.transpose = cx.val(slot.transpose) == 1 ? Transpose::dma_transpose : Transpose::pe_transpose;
    std::vector<ir::DType> dts;
    for (int oi : n.ops) {
      std::vector<const ir::Expr*> nodes;
      preorder(k.ops[static_cast<std::size_t>(oi)].expr, nodes);
      for (const auto* e : nodes) {
        if (!transposed_load(*e, v.pidx, v.fidx)) continue;
        if (std::any_of(produced.begin(), produced.end(), [&](const auto& pb) { return pb.first == e->tensor; })) continue;
        const ir::DType dt = cx.s.tensor(e->tensor).dtype;
        if (v.transpose == Transpose::dma_transpose && ir::dtype_bytes(dt) != 2)
          return Invalid{"unsupported",
                        fmt::format("{}: dma_transpose moves 2-byte elements only; {} is {}", n.name, e->tensor, ir::to_string(dt)),
                        slot.transpose, 2};
        dts.push_back(dt);
      }
    }
    if (v.transpose == Transpose::pe_transpose && !dts.empty()) {
      // per <= 128 free elements: a natural [F, P] tile, transposed into PSUM, one bank per copy
      const std::int64_t bank = t.psum_bank_bytes / 4;
      const std::int64_t cols = std::min(v.ftile, bank);
      const std::int64_t chunks = (cols + t.pmax - 1) / t.pmax;
      for (auto dt : dts)  // one staging tile per input dtype (a DMA does not convert)
        if (buf_for(v.buf_nat, dt) < 0)
          v.buf_nat.emplace_back(dt, add_buf(n, BufSpec{fmt::format("{}.nat.{}", n.name, ir::to_string(dt)), false, dt,
                                                        static_cast<int>(std::min<std::int64_t>(cols, t.pmax)),
                                                        chunks * v.ptile, 2}));
      for (auto dt : dts)  // nki.isa.nc_transpose: "dst must have the same data type as data"
        if (buf_for(v.buf_tpsum, dt) < 0)
          v.buf_tpsum.emplace_back(dt, add_buf(n, BufSpec{fmt::format("{}.T.{}", n.name, ir::to_string(dt)), true, dt,
                                                          static_cast<int>(v.ptile), bank, 2}));
    }
  }
  if (v.transpose != Transpose::none)
    for (std::size_t i = 0; i < n.tc.ops.size(); ++i) {
      const auto& op = k.ops[static_cast<std::size_t>(n.tc.ops[i])];
      if (!n.tc.store[i] || !transposed_load(out_access(op), v.pidx, v.fidx)) continue;
      const ir::DType dt = cx.s.tensor(op.out).dtype;
      const int rows = static_cast<int>(std::min<std::int64_t>(v.ftile, t.pmax));
      // the tile transposed is the op's (TileCompute::dst): its dtype
      const ir::DType tdt = n.buffers[static_cast<std::size_t>(n.tc.dst[i])].dtype;
      if (buf_for(v.buf_opsum, tdt) < 0)
        v.buf_opsum.emplace_back(tdt, add_buf(n, BufSpec{fmt::format("{}.oT.{}", n.name, ir::to_string(tdt)), true, tdt, rows,
                                                         t.psum_bank_bytes / 4, 2}));
      if (buf_for(v.buf_ost, dt) < 0)
        v.buf_ost.emplace_back(dt, add_buf(n, BufSpec{fmt::format("{}.ost.{}", n.name, ir::to_string(dt)), false, dt, rows,
                                                     v.ptile, 2}));
    }
  if (v.p_reduced) {
    // the partials' combination: per <= 128 output columns, the accumulator transposed into
    // PSUM, reduced along the free dim into a result column in the output's dtype, stored
    const std::int64_t cols = std::min<std::int64_t>(v.f_reduced || v.fidx.empty() ? 1 : v.ftile, t.pmax);
    v.buf_ptr = add_buf(n, BufSpec{n.name + ".pT", true, ir::DType::fp32, static_cast<int>(cols), t.psum_bank_bytes / 4, 2});
    for (int oi : n.ops) {
      const auto& op = k.ops[static_cast<std::size_t>(oi)];
      if (op.reduce_indices.empty()) continue;
      const ir::DType dt = cx.s.tensor(op.out).dtype;
      if (buf_for(v.buf_pres, dt) < 0)
        v.buf_pres.emplace_back(dt, add_buf(n, BufSpec{fmt::format("{}.pres.{}", n.name, ir::to_string(dt)), false, dt,
                                                      static_cast<int>(cols), 1, 2}));
    }
  }
  v.window = slot.window >= 0 && cx.val(slot.window) >= 1 && v.inner.size() == 1 && !v.f_reduced && !v.p_reduced;
  v.fold = v.window && cx.val(slot.window) == 2;
  v.pad_halo = slot.pad >= 0 && cx.val(slot.pad) == 1;
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
    bool ok = !acc.empty() && !root.reduce_indices.empty();
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
    if (slot.hold >= 0 && cx.val(slot.hold) == 1) {
      // The operand that does not move with the output columns (a filter) goes to PSUM; the
      // multiply then reads one input from PSUM. GpSimd cannot read PSUM.
      const auto fix = [&](std::string why) {
        return Invalid{"unsupported", fmt::format("{}: hold psum {}", n.name, why), slot.hold, 0};
      };
      if (acc.size() != 2) return fix("needs the reduction to be a product of two accesses");
      for (int a = 0; a < 2 && v.hold_arg < 0; ++a)
        if (!v.fidx.empty() && !ir::access_uses(*acc[static_cast<std::size_t>(a)], v.fidx)) v.hold_arg = a;
      if (v.hold_arg < 0)
        return fix(fmt::format("needs a multiply operand that does not move with the output columns ({})", v.fidx));
      const int eg = cx.s.ops[static_cast<std::size_t>(n.root_op)].engine_gene;
      if (eg >= 0 && cx.val(eg) == 2)
        return fix("needs the Vector or Scalar engine (GpSimd cannot read PSUM)");
      const auto& ha = *acc[static_cast<std::size_t>(v.hold_arg)];
      const auto hg = window_geom(ha, v.pidx, v.fidx, v.inner[0], v.ftile, v.inner_ext[0]);
      const std::int64_t elems = hg.ok ? hg.elems : 1;
      if (elems * 4 > t.psum_bank_bytes)
        return fix(fmt::format("holds {} fp32 elements per partition, above one {}-byte PSUM bank", elems, t.psum_bank_bytes));
      // every multiply reads a [P, chunk, taps] view of the PSUM tile
      if (width > t.psum_free_max_elems)
        return Invalid{"tile_limit",
                      fmt::format("{}: hold psum reads {} x {} = {} free elements per multiply from PSUM, above {} on {}",
                                  n.name, v.chunk, v.inner_ext[0], width, t.psum_free_max_elems, t.name),
                      slot.chunk, cx.at_most(slot.chunk, t.psum_free_max_elems / v.inner_ext[0])};
      v.hold_psum = true;
      v.buf_hold = add_buf(n, BufSpec{ha.tensor + ".psum", true, ir::DType::fp32, static_cast<int>(v.ptile), elems, v.bufs});
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
  if (!v.window) {
    // loads that are the same tile in every step (VectorPlan::resident): one slot, loaded once
    const bool one_p = v.pidx.empty() || v.ptile >= v.pext;
    const bool one_f = v.fidx.empty() || v.ftile >= v.fext;
    std::set<std::string> looped;  // the looped indices that take more than one value
    for (std::size_t q = 0; q < v.outer.size(); ++q)
      if (v.outer_ext[q] > 1) looped.insert(v.outer[q]);
    for (std::size_t q = 0; q < v.inner.size(); ++q)
      if (v.inner_ext[q] > 1) looped.insert(v.inner[q]);
    for (int oi : n.ops) {
      std::vector<const ir::Expr*> nodes;
      preorder(k.ops[static_cast<std::size_t>(oi)].expr, nodes);
      for (const auto* e : nodes) {
        if (e->kind != ir::Expr::Kind::access || !ir::is_plain(*e)) continue;
        if (v.transpose != Transpose::none && transposed_load(*e, v.pidx, v.fidx)) continue;
        bool same = true;
        for (const auto& x : e->indices)
          same = same && !looped.count(x) && (x != v.pidx || one_p) && (x != v.fidx || one_f);
        const std::string key = access_key(*e);
        if (!same || std::find(v.resident.begin(), v.resident.end(), key) != v.resident.end()) continue;
        for (const auto& [kk, b] : n.tc.loads)
          if (kk == key) {
            n.buffers[static_cast<std::size_t>(b)].nbufs = 1;
            v.resident.push_back(key);
          }
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

// The gene change most likely to shrink this nest's SBUF use (make_plan's sbuf_overflow hint).
std::pair<int, int> sbuf_fix_vector(const Ctx& cx, const NestPlan& n) {
  const auto& slot = cx.s.vectors[static_cast<std::size_t>(n.v.slot)];
  if (cx.val(slot.bufs) > 0) return {slot.bufs, cx.val(slot.bufs) - 1};
  if (n.v.complete_rows) return {cx.s.ops[static_cast<std::size_t>(n.ops.back())].fuse_gene, 0};
  for (std::size_t q = 0; q < slot.dom.size(); ++q)
    if (slot.dom[q] == n.v.fidx && slot.tile[q] >= 0 && cx.val(slot.tile[q]) > 0) return {slot.tile[q], cx.val(slot.tile[q]) - 1};
  return {-1, 0};
}

}  // namespace kevo::schedule::detail
