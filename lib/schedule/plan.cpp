// Resolves a genome into nests, loops and buffers, and checks it against the target: the make_plan
// driver and what the nest kinds share (planner.hpp); each kind plans in lib/nests/<kind>/plan.cpp.
#include "kevo/schedule/detail/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>
#include <tuple>

#include "kevo/ir/fn.hpp"
#include "planner.hpp"

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

AffineArg affine_arg(const ir::Expr& e, const std::string& fidx, const target::Target& t) {
  if (e.kind != ir::Expr::Kind::call || e.args.size() != 1 || ir::fn_arity(e.fn) != 1 || e.fn == ir::Fn::cast) return AffineArg::none;
  const ir::Expr& a = e.args[0];
  if (a.kind != ir::Expr::Kind::call || a.args.size() != 2 || (a.fn != ir::Fn::add && a.fn != ir::Fn::sub && a.fn != ir::Fn::mul))
    return AffineArg::none;
  // a scale alone, never a bias: add and sub (k - x is scale -1 and bias k) need one
  if (e.fn == ir::Fn::reciprocal && !t.engine(target::Engine::scalar).reciprocal_bias && a.fn != ir::Fn::mul) return AffineArg::none;
  const bool k0 = a.args[0].kind == ir::Expr::Kind::constant, k1 = a.args[1].kind == ir::Expr::Kind::constant;
  // NeuronCore-v2 takes no constant bias (target::EngineSpec::immediate_bias): a constant scale only
  if (k0 != k1) return a.fn == ir::Fn::mul || t.engine(target::Engine::scalar).immediate_bias ? AffineArg::constant : AffineArg::none;
  if (k0 || a.fn == ir::Fn::mul) return AffineArg::none;
  return expr_uses(a.args[0], fidx) != expr_uses(a.args[1], fidx) ? AffineArg::partition : AffineArg::none;
}

namespace {
// (x op0 s0) op1 o with x along fidx and s0 not, and o along fidx (`tile`) or not: the index of the
// inner operator's argument, or -1
int operator_pair(const ir::Expr& e, const std::string& fidx, bool tile) {
  const auto arith = [](const ir::Expr& x) {
    return x.kind == ir::Expr::Kind::call && x.args.size() == 2 &&
           (x.fn == ir::Fn::add || x.fn == ir::Fn::sub || x.fn == ir::Fn::mul || x.fn == ir::Fn::div ||
            x.fn == ir::Fn::max || x.fn == ir::Fn::min);
  };
  if (fidx.empty() || !arith(e)) return -1;
  const bool commutative = e.fn == ir::Fn::add || e.fn == ir::Fn::mul || e.fn == ir::Fn::max || e.fn == ir::Fn::min;
  for (int j = 0; j < 2; ++j) {
    const ir::Expr& in = e.args[static_cast<std::size_t>(j)];
    const ir::Expr& o = e.args[static_cast<std::size_t>(1 - j)];
    if ((j == 1 && !commutative) || !arith(in) || expr_uses(o, fidx) != tile) continue;
    if (expr_uses(in.args[0], fidx) != expr_uses(in.args[1], fidx)) return j;
  }
  return -1;
}
}  // namespace

int scalar_pair(const ir::Expr& e, const std::string& fidx) { return operator_pair(e, fidx, false); }

bool sub_of_column(const ir::Expr& e, const std::string& fidx) {
  return !fidx.empty() && e.kind == ir::Expr::Kind::call && e.fn == ir::Fn::sub && e.args.size() == 2 &&
         e.args[1].kind != ir::Expr::Kind::constant && expr_uses(e.args[0], fidx) && !expr_uses(e.args[1], fidx);
}

int scalar_tensor_pair(const ir::Expr& e, const std::string& fidx) {
  return scalar_pair(e, fidx) >= 0 ? -1 : operator_pair(e, fidx, true);
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

ir::Expr out_access(const ir::Op& op) {
  ir::Expr a;
  a.kind = ir::Expr::Kind::access;
  a.tensor = op.out;
  a.indices = op.out_indices;
  return a;
}

bool transposed_load(const ir::Expr& e, const std::string& pidx, const std::string& fidx) {
  if (e.kind != ir::Expr::Kind::access || !ir::is_plain(e) || e.indices.empty() || pidx.empty() || fidx.empty() ||
      pidx == fidx || e.indices.back() != pidx)
    return false;
  const auto n = [&](const std::string& x) { return std::count(e.indices.begin(), e.indices.end(), x); };
  return n(pidx) == 1 && n(fidx) >= 1;
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

namespace detail {

// Builds the per-tile computation of `ops` on [P, F] tiles; `produced` maps tensors already
// held on chip (by name) to their buffer; returns a reason when an op cannot run in this nest.
std::optional<Invalid> build_tc(const Ctx& cx, NestPlan& n, TileCompute& tc, const std::vector<int>& ops, int P,
                               std::int64_t F, const std::string& pidx, const std::string& fidx, int nbufs,
                               std::vector<std::pair<std::string, int>>& produced,
                               const std::vector<std::vector<std::string>>& produced_idx,
                               const OutsideReads& outside_reads, const std::set<int>& no_body) {
  const auto& k = cx.s.kernel;
  std::vector<std::vector<std::string>> prod_idx = produced_idx;
  for (int oi : ops) {
    const auto& op = k.ops[static_cast<std::size_t>(oi)];
    const auto& t = cx.s.tensor(op.out);
    const bool has_f = !fidx.empty() && std::find(op.out_indices.begin(), op.out_indices.end(), fidx) != op.out_indices.end();
    const std::int64_t w = has_f ? F : 1;
    const bool is_reduce = !op.reduce_indices.empty();
    const bool stored = t.role == ir::Role::output || outside_reads.contains(op.out);
    tc.ops.push_back(oi);
    tc.store.push_back(stored);
    tc.dst.push_back(add_buf(n, BufSpec{op.out, false, is_reduce ? ir::DType::fp32 : t.dtype, P, w, nbufs}));
    tc.partial.push_back(is_reduce && !fidx.empty() && std::find(op.reduce_indices.begin(), op.reduce_indices.end(), fidx) != op.reduce_indices.end()
                             ? add_buf(n, BufSpec{op.out + ".part", false, ir::DType::fp32, P, 1, nbufs})
                             : -1);
    std::vector<const ir::Expr*> nodes;
    preorder(op.expr, nodes);
    std::vector<int> nb(nodes.size(), -1);
    std::vector<int> sb(nodes.size(), -1);
    std::vector<int> ngb(nodes.size(), -1);
    std::vector<int> cvb(nodes.size(), -1);
    // the op on the Scalar engine where that engine's tensor_scalar cannot subtract (Lowerer::eval)
    const bool scalar_no_sub = cx.op_engine(oi) == target::Engine::scalar &&
                               !target::runs_tensor_scalar(cx.s.target.engine(target::Engine::scalar), ir::Fn::sub, nullptr);
    // the argument of a unary map that joins its activation (affine_arg) needs no tile, or [P, 1]
    std::vector<AffineArg> joined(nodes.size(), AffineArg::none);
    for (std::size_t q = 0; q + 1 < nodes.size(); ++q) joined[q + 1] = affine_arg(*nodes[q], fidx, cx.s.target);
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
          // a [P, 1] column is loaded as fp32 (the DMA converts, exactly): it may be a tensor_scalar
          // operand, which "must be float32" (nki.isa.tensor_scalar)
          tc.loads.emplace_back(key, add_buf(n, BufSpec{"ld." + key, false, ew == 1 ? ir::DType::fp32 : in.dtype, P, ew, nbufs}));
        }
        continue;
      }
      if (e.kind == ir::Expr::Kind::constant) continue;
      if (scalar_no_sub && joined[q] == AffineArg::none && sub_of_column(e, fidx))
        ngb[q] = add_buf(n, BufSpec{fmt::format("{}.n{}.neg", op.out, q), false, ir::DType::fp32, P, 1, nbufs});
      const bool root_to_dst = q == 0 && !is_reduce;
      if (!root_to_dst && joined[q] != AffineArg::constant) {
        const ir::DType dt = e.kind == ir::Expr::Kind::call && e.fn == ir::Fn::cast ? e.dtype : ir::DType::fp32;
        nb[q] = add_buf(n, BufSpec{fmt::format("{}.n{}", op.out, q), false, dt, P, joined[q] == AffineArg::partition ? 1 : ew, nbufs});
      }
      // a select's predicate (Lowerer::select), unless its condition is a comparison, whose own
      // node buffer is the predicate
      const ir::Expr& cond = e.kind == ir::Expr::Kind::call && e.fn == ir::Fn::select ? e.args[0] : e;
      if (e.kind == ir::Expr::Kind::call && e.fn == ir::Fn::select && !(cond.kind == ir::Expr::Kind::call && ir::is_comparison(cond.fn))) {
        sb[q] = add_buf(n, BufSpec{fmt::format("{}.n{}.pred", op.out, q), false, ir::DType::fp32, P, ew, nbufs});
      }
      if (e.kind == ir::Expr::Kind::call && e.fn == ir::Fn::select && e.args.size() == 3 && e.args[1].kind != ir::Expr::Kind::constant) {
        // the taken branch in the select's own dtype, where its value has another (decided when lowered)
        const ir::DType dq = root_to_dst ? t.dtype : ir::DType::fp32;
        cvb[q] = add_buf(n, BufSpec{fmt::format("{}.n{}.conv", op.out, q), false, dq, P, ew, nbufs});
      }
    }
    tc.node_buf.push_back(std::move(nb));
    tc.sel_buf.push_back(std::move(sb));
    tc.neg_buf.push_back(std::move(ngb));
    tc.conv_buf.push_back(std::move(cvb));
    produced.emplace_back(op.out, tc.dst.back());
    prod_idx.push_back(op.out_indices);
  }
  return std::nullopt;
}

}  // namespace detail

using detail::Ctx;
using detail::kib;
using detail::reject;

Expected<Plan, Invalid> make_plan(const ScheduleSpace& space, const Genome& g) {
  const SpaceImpl& s = space.impl();
  const Ctx cx{space, s, s.space, g};
  if (!s.space.contains(g)) return reject("malformed", "genome does not belong to this schedule space");
  Plan plan;
  const auto& k = s.kernel;
  // The lowering's access patterns have 32-bit strides: a tensor past 2^31-1 elements has no
  // schedule at all, whatever the genome (its HBM buffer, or any tile of it, cannot be addressed).
  for (const auto& t : k.tensors)
    if (k.elements(t) > std::numeric_limits<std::int32_t>::max())
      return reject("too_large", fmt::format("tensor {} holds {} elements; kevo's access patterns address at most 2^31-1", t.name,
                                             k.elements(t)));
  plan.op_nest.assign(k.ops.size(), -1);
  plan.op_engine.assign(k.ops.size(), target::Engine::vector);
  // ops covered by a pattern nest that is on (flash, online): its kind and slot per op
  std::vector<std::pair<NestKind, int>> in_pat(k.ops.size(), {NestKind::vector, -1});
  std::vector<std::tuple<NestKind, int, int, int, std::string>> pats;  // kind, slot, first, last, name
  for (std::size_t fi = 0; fi < s.flashes.size(); ++fi) {
    const auto& f = s.flashes[fi];
    if (cx.val(f.gene) == 1) pats.emplace_back(NestKind::flash, static_cast<int>(fi), f.first, f.last, "flash." + f.name);
  }
  for (std::size_t oi = 0; oi < s.onlines.size(); ++oi) {
    const auto& o = s.onlines[oi];
    if (cx.val(o.gene) == 1) pats.emplace_back(NestKind::online, static_cast<int>(oi), o.first, o.last, "online." + o.name);
  }
  for (const auto& [kind, slot, first, last, name] : pats)
    for (int o = first; o <= last; ++o) in_pat[static_cast<std::size_t>(o)] = {kind, slot};
  std::vector<int> nest_slot;  // per nest: its pattern slot or -1
  for (std::size_t j = 0; j < k.ops.size(); ++j) {
    const auto& o = s.ops[j];
    const int fl = in_pat[j].second;
    if (fl >= 0) {
      if (j == 0 || in_pat[j - 1] != in_pat[j]) {
        NestPlan n;
        n.kind = in_pat[j].first;
        for (const auto& [kind, slot, first, last, name] : pats)
          if (kind == n.kind && slot == fl) n.name = name;
        n.root_op = static_cast<int>(j);
        plan.nests.push_back(std::move(n));
        nest_slot.push_back(fl);
      }
      plan.nests.back().ops.push_back(static_cast<int>(j));
      plan.op_nest[j] = static_cast<int>(plan.nests.size()) - 1;
      if (o.engine_gene >= 0) plan.op_engine[j] = cx.op_engine(static_cast<int>(j));
      continue;
    }
    // an op after a pattern nest cannot join it: it roots its own nest
    const bool fused = o.fuse_gene >= 0 && cx.val(o.fuse_gene) == 1 && !(j > 0 && in_pat[j - 1].second >= 0);
    if (!fused) {
      nest_slot.push_back(-1);
      NestPlan n;
      n.kind = o.kind == ir::OpKind::contract ? NestKind::contract : NestKind::vector;
      n.name = o.name;
      n.root_op = static_cast<int>(j);
      plan.nests.push_back(std::move(n));
    }
    plan.nests.back().ops.push_back(static_cast<int>(j));
    plan.op_nest[j] = static_cast<int>(plan.nests.size()) - 1;
    if (o.engine_gene >= 0) plan.op_engine[j] = cx.op_engine(static_cast<int>(j));
  }
  const auto& t = s.target;
  for (std::size_t ni = 0; ni < plan.nests.size(); ++ni) {
    auto& n = plan.nests[ni];
    std::optional<Invalid> r;
    switch (n.kind) {  // each kind's planning: lib/nests/<kind>/plan.cpp
#define KEVO_PLAN_CASE(kind)                            \
  case NestKind::kind:                                  \
    r = detail::plan_##kind(cx, n, nest_slot[ni]);     \
    break;
      KEVO_NEST_KINDS(KEVO_PLAN_CASE)
#undef KEVO_PLAN_CASE
    }
    if (r) return unexpected(std::move(*r));
    if (n.kind == NestKind::contract)
      plan.op_engine[static_cast<std::size_t>(n.root_op)] = n.c.evict;
    for (const auto& b : n.buffers) (b.psum ? n.psum_bytes : n.sbuf_bytes) += b.bytes_per_partition();
    if (n.sbuf_bytes > t.sbuf_bytes_per_partition) {
      std::pair<int, int> fix{-1, 0};
      switch (n.kind) {
#define KEVO_SBUF_FIX_CASE(kind)                \
  case NestKind::kind:                          \
    fix = detail::sbuf_fix_##kind(cx, n);       \
    break;
        KEVO_NEST_KINDS(KEVO_SBUF_FIX_CASE)
#undef KEVO_SBUF_FIX_CASE
      }
      auto [gene, v] = fix;
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
  }
  return plan;
}

}  // namespace kevo::schedule
