// Derives the schedule space of any kernel: fusion chains, stats patterns and the per-op genes; each
// nest kind derives its own genes in lib/nests/<kind>/derive.cpp (deriver.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <chrono>
#include <optional>
#include <set>

#include "kevo/ir/reshape.hpp"
#include "kevo/schedule/detail/plan.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/schedule/detail/structure.hpp"
#include "deriver.hpp"

namespace kevo::schedule {

const ir::Tensor& SpaceImpl::tensor(std::string_view name) const {
  const auto* t = kernel.tensor(name);
  if (!t) throw Error(fmt::format("kevo: unknown tensor '{}'", name));
  return *t;
}
int SpaceImpl::tensor_index(std::string_view name) const {
  for (std::size_t i = 0; i < kernel.tensors.size(); ++i)
    if (kernel.tensors[i].name == name) return static_cast<int>(i);
  return -1;
}

namespace detail {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

void reads_of(const ir::Expr& e, std::set<std::string>& out) {
  if (e.kind == ir::Expr::Kind::access) out.insert(e.tensor);
  for (const auto& a : e.args) reads_of(a, out);
}

// Tile sizes offered for an index: powers of two up to the cap (from 16, or smaller for small
// extents) plus the extent itself, so that both dividing and edge-tiled sizes are reachable.
std::vector<std::int64_t> tile_values(std::int64_t ext, std::int64_t cap) {
  std::vector<std::int64_t> v;
  // below 32 elements a tile is all fixed overhead, and the unrolled program explodes in size
  const std::int64_t lo = std::min<std::int64_t>(32, ext);
  for (std::int64_t p = 1; p <= cap && p < ext; p *= 2)
    if (p >= lo) v.push_back(p);
  if (ext <= cap) v.push_back(ext);
  if (v.empty()) v.push_back(std::min(ext, cap));
  return v;
}

std::vector<std::int64_t> block_values(std::int64_t max_tiles) {
  std::vector<std::int64_t> v;
  for (std::int64_t b = 1; b <= 64; b *= 2) {
    v.push_back(b);
    if (b >= max_tiles) break;
  }
  return v;
}

bool ones_contraction(const ir::Op& op) {
  const auto& e = op.expr;
  if ((op.reduce != ir::ReduceOp::sum && op.reduce != ir::ReduceOp::mean) || op.reduce_indices.size() != 1 || op.out_indices.empty() ||
      e.kind != ir::Expr::Kind::access || !ir::is_plain(e) || e.indices.empty())
    return false;
  const std::string& r = op.reduce_indices[0];
  if (e.indices.back() == r || !contains(e.indices, r)) return false;
  const std::set<std::string> distinct(e.indices.begin(), e.indices.end());
  return distinct.size() == e.indices.size();
}

bool contraction_rootable(const ir::Op& op) {
  const auto& e = op.expr;
  if (op.reduce_indices.size() != 1 || e.kind != ir::Expr::Kind::call || e.args.size() != 2) return false;
  const std::string& kx = op.reduce_indices[0];
  return std::all_of(e.args.begin(), e.args.end(),
                     [&](const ir::Expr& a) { return a.kind == ir::Expr::Kind::access && contains(a.indices, kx); });
}

void set_value(const Space& sp, Genome& g, int gene, int value) {
  if (gene >= 0) sp.slots(g, static_cast<std::size_t>(gene))[0] = value;
}

int value_index(const Gene& g, std::int64_t want) {
  // the largest value <= want (values ascend)
  int best = 0;
  for (std::size_t i = 0; i < g.values.size(); ++i)
    if (g.values[i] <= want) best = static_cast<int>(i);
  return best;
}

bool is_access(const ir::Expr& e, const std::string& t, const std::vector<std::string>& idx) {
  return e.kind == ir::Expr::Kind::access && e.tensor == t && e.indices == idx;
}

// Long indices split across partitions (docs/SCHEDULE.md, "Long indices split across
// partitions"). A vector nest lays one index down the partitions and one along the free dim, so
// an op whose other indices are short (a 1-D map or sum, `Y[r, c]` with few rows) runs on few
// partitions or on one. Such an index's class of dims (ir::dim_classes) can be reshaped row-major
// into P x N/P, P the largest divisor of N in [pmax/16, pmax] (kMinSplitOuterDivisor), so that its outer
// part lies down the partitions and its inner part along the free dim: the same tensors, bytes and order in HBM
// (ir::split_class). The other indices then loop: R of them cost R passes of N/P elements against
// one pass of N on R partitions, each pass paying a tile's fixed costs (an instruction's issue,
// a DMA's latency: kSplitTileOverhead element-times). The class splits when, for every op using
// it, R * (N/P + o) <= N + o. A contraction's class splits by the same rule: a dot product
// (R = 1) runs on the Vector engine with partials across the partitions instead of one
// [128, 1] x [128, 1] matmul per k tile, while a matmul's or a matrix-vector product's
// contracted index (R = M * N or M, large) stays whole on the partitions. A column sum the Tensor
// engine takes with ones keeps its shape.
// Measured (`kevo search F -n 400`, simulated trn2, fp32, C = 32768 unless said): rows R = 1, 4,
// 16 gain (softmax over C: 66.8 -> 7.7 µs at R = 1, 68.2 -> 55.2 µs at R = 16; a row sum at
// R = 16 19.8 -> 10.6 µs), R = 32 and 64 lose (softmax 75.7 -> 112.2 µs at R = 32), as does R = 16
// at C = 4096 (a map 4.9 -> 9.0 µs); the rule splits exactly the gaining cases.
constexpr std::int64_t kSplitTileOverhead = 1024;
// Below this many elements a split gains little and adds the partials' combination of a sum.
constexpr std::int64_t kMinSplitExtent = 1024;
// The fewest partitions a split may use, as a share of pmax (8 of 128 on trn2): an extent with no
// divisor in [pmax/2, pmax] still splits over the largest one down to here (GPT-2's vocabulary of
// 50,257 = 29 x 1,733: a softmax over it 101.5 -> 10.4 µs, `kevo search -n 300`), where it gains at least that factor
// per pass over one partition. Extents with no such divisor (a prime) stay whole.
constexpr std::int64_t kMinSplitOuterDivisor = 16;

namespace {

// The split rule above for class c of k: the outer part P, or 0 where the class stays whole.
std::int64_t split_outer(const ir::Kernel& k, const ir::DimClass& c, std::int64_t pmax) {
  if (!c.splittable || c.size < kMinSplitExtent) return 0;
  std::int64_t outer = 0;
  for (std::int64_t p = pmax; p >= std::max<std::int64_t>(2, pmax / kMinSplitOuterDivisor) && outer == 0; --p)
    if (c.size % p == 0) outer = p;
  if (outer == 0) return 0;
  std::set<int> seen;
  for (const auto& [oi, x] : c.uses) {
    const ir::Op& op = k.ops[static_cast<std::size_t>(oi)];
    // two indices of one op in the class, or a column sum on the PE array
    if (!seen.insert(oi).second || ones_contraction(op)) return 0;
    std::int64_t rows = 1;
    for (const auto& [y, ext] : k.op_indices(static_cast<std::size_t>(oi)))
      if (y != x) rows = std::min<std::int64_t>(rows * ext, c.size + 1);
    if (rows * (c.size / outer + kSplitTileOverhead) > c.size + kSplitTileOverhead) return 0;
  }
  return outer;
}

// The distinct lines of a step's description, joined by "; " in first-seen order.
std::string join_distinct(const std::vector<std::string>& lines) {
  std::string out;
  std::set<std::string> seen;
  for (const auto& l : lines)
    if (seen.insert(l).second) out += (out.empty() ? "" : "; ") + l;
  return out;
}

// A merge as `kevo space` prints it: "r and c held as one, rc = 4096*r + c (RC = R x C)".
std::string merge_step(const ir::Merge& what, std::string_view how) {
  std::vector<std::string> idx;
  for (const auto& x : what.indices)
    idx.push_back(fmt::format("{} and {} {}, {} = {}*{} + {}", x.first, x.second, how, x.merged, what.inner, x.first, x.second));
  std::string dims;
  for (const auto& d : what.dims) dims += fmt::format("{}{} = {} x {}", dims.empty() ? "" : ", ", d.merged, d.first, d.second);
  return fmt::format("{} ({})", join_distinct(idx), dims);
}

bool holds_any(const std::set<std::string>& names, const std::vector<std::string>& dims) {
  return std::any_of(dims.begin(), dims.end(), [&](const std::string& d) { return names.count(d) > 0; });
}

}  // namespace

ir::Kernel split_long_indices(const ir::Kernel& user, const target::Target& t, std::vector<ir::Split>& splits,
                              std::vector<ir::Merge>& merges, std::vector<std::string>& steps) {
  ir::Kernel k = user;
  const std::int64_t pmax = t.pmax;
  std::set<std::string> made;  // dims a split made: never merged again (their classes would split anew)
  // A product of two accesses summed over several indices (C[m, n] = sum(k, l) A[m, k, l] *
  // B[k, l, n], an einsum such as a multi-head output projection) has no PE-array form: a matmul
  // contracts one index down the partitions. Where the contracted indices lie side by side in
  // both operands, in one order, they are one index of a flat view of the same memory
  // (A[m, kl], B[kl, n]; ir::merge_classes), which the Tensor engine contracts in k tiles of kl.
  // Likewise the output indices of one operand alone (a linear layer's batch and sequence,
  // Y[b, s, n] = sum(d) X[b, s, d] * W[d, n]): held as one row index (bs), the nest tiles and
  // blocks all B*S rows against each W tile, where the batch index looped around a nest of S rows
  // and moved W once per batch.
  for (bool changed = true; changed;) {
    changed = false;
    const auto classes = ir::dim_classes(k);
    const auto class_of = [&](int oi, const std::string& x) -> const ir::DimClass* {
      for (const auto& c : classes)
        for (const auto& [o, y] : c.uses)
          if (o == oi && y == x) return &c;
      return nullptr;
    };
    for (std::size_t oi = 0; oi < k.ops.size() && !changed; ++oi) {
      const ir::Op& op = k.ops[oi];
      const auto& e = op.expr;
      if (op.reduce != ir::ReduceOp::sum || op.reduce_indices.empty() || e.kind != ir::Expr::Kind::call ||
          e.fn != ir::Fn::mul || e.args.size() != 2 ||
          !std::all_of(e.args.begin(), e.args.end(), [](const ir::Expr& a) { return a.kind == ir::Expr::Kind::access; }))
        continue;
      // merges the first pair of `group` that can be held as one; whether it did
      const auto merge_pair = [&](const std::vector<std::string>& group, std::string_view how) {
        for (const auto& x : group)
          for (const auto& y : group) {
            const ir::DimClass* a = class_of(static_cast<int>(oi), x);
            const ir::DimClass* b = class_of(static_cast<int>(oi), y);
            if (x == y || !a || !b || a == b || holds_any(made, a->dims) || holds_any(made, b->dims) ||
                !ir::why_not_merge(k, *a, *b).empty())
              continue;
            ir::Merge what;
            k = ir::merge_classes(k, *a, *b, &what);
            steps.push_back(merge_step(what, how));
            merges.push_back(std::move(what));
            return true;
          }
        return false;
      };
      // the contracted indices, and each operand's own output indices (copies: a merge replaces k)
      const std::vector<std::string> contracted = op.reduce_indices;
      std::array<std::vector<std::string>, 2> own;
      for (const auto& x : op.out_indices) {
        const bool in0 = contains(e.args[0].indices, x), in1 = contains(e.args[1].indices, x);
        if (in0 != in1) own[in0 ? 0 : 1].push_back(x);
      }
      changed = merge_pair(contracted, "contracted as one") || merge_pair(own[0], "held as one") ||
                merge_pair(own[1], "held as one");
    }
  }
  for (int round = 0; round < 8; ++round) {  // a kernel has few classes; each step renames dims, so look again
    const auto classes = ir::dim_classes(k);
    bool changed = false;
    for (const auto& c : classes) {
      const std::int64_t outer = split_outer(k, c, pmax);
      if (outer == 0) continue;
      ir::Split what;
      k = ir::split_class(k, c, outer, &what);
      std::vector<std::string> idx;
      for (const auto& x : what.indices) idx.push_back(fmt::format("{} = {}*{} + {}", x.from, what.inner, x.outer, x.inner));
      std::string dims;
      for (const auto& d : what.dims) {
        dims += fmt::format("{}{} = {} x {}", dims.empty() ? "" : ", ", d.from, d.outer, d.inner);
        made.insert(d.outer);
        made.insert(d.inner);
      }
      steps.push_back(fmt::format("{} ({}; {} x {})", join_distinct(idx), dims, what.outer, what.inner));
      splits.push_back(std::move(what));
      changed = true;
      break;
    }
    if (changed) continue;
    // a few rows of a pure map beside a long index (Y[r, c] = gelu(X[r, c]), 32 <= R < 128): no
    // split gains, but the rows and the long index held as one (a flat view of the same memory)
    // split with all of it down the partitions
    for (const auto& a : classes) {
      if (changed || a.size >= pmax || holds_any(made, a.dims)) continue;
      for (const auto& b : classes) {
        if (&a == &b || holds_any(made, b.dims) || !ir::why_not_merge(k, a, b).empty()) continue;
        ir::Merge what;
        const ir::Kernel m = ir::merge_classes(k, a, b, &what);
        const auto mc = ir::dim_classes(m);
        const auto it = std::find_if(mc.begin(), mc.end(), [&](const ir::DimClass& x) {
          return std::find(x.dims.begin(), x.dims.end(), what.dims.front().merged) != x.dims.end();
        });
        if (it == mc.end() || split_outer(m, *it, pmax) == 0) continue;
        steps.push_back(merge_step(what, "held as one"));
        merges.push_back(std::move(what));
        k = m;
        changed = true;
        break;
      }
    }
    if (!changed) break;
  }
  return k;
}

}  // namespace detail

using namespace detail;

std::string_view Unsupported::code() const noexcept {
  switch (why) {
    case Why::no_ops: return "no_ops";
    case Why::contraction_operands: return "contraction_operands";
    case Why::contraction_indices: return "contraction_indices";
    case Why::contraction_index_unshared: return "contraction_index_unshared";
    case Why::no_layout: return "no_layout";
    case Why::dtype: return "dtype";
  }
  return "unsupported";
}

std::string Unsupported::str() const {
  return op.empty() ? fmt::format("kernel '{}': {}", kernel, message) : fmt::format("kernel '{}', op '{}': {}", kernel, op, message);
}

ScheduleSpace ScheduleSpace::derive(const ir::Kernel& k, const target::Target& t, DeriveOptions opt) {
  auto s = try_derive(k, t, opt);
  if (!s) throw Error("kevo: " + s.error().str());
  return std::move(s).value();
}

DeriveOptions ScheduleSpace::options() const noexcept { return impl_->options; }

Expected<ScheduleSpace, Unsupported> ScheduleSpace::try_derive(const ir::Kernel& user, const target::Target& t, DeriveOptions opt) {
  const auto unsupported = [&](Unsupported::Why why, std::string op, std::string message) {
    return unexpected(Unsupported{why, user.name, std::move(op), std::move(message)});
  };
  if (user.ops.empty()) return unsupported(Unsupported::Why::no_ops, "", "has no ops");
  {  // every dtype the kernel stores or casts to must be one the target has
    const auto refuse = [&](ir::DType d, std::string op, std::string_view what) {
      std::string has;
      for (const auto x : t.dtypes) has += (has.empty() ? "" : ", ") + std::string(ir::to_string(x));
      std::string why = fmt::format("{} is {}, which target '{}' does not store (it stores {})", what, ir::to_string(d), t.name, has);
      if (d == ir::DType::fp8_e4m3fn && t.stores(ir::DType::fp8_e4m3))
        why += "; its fp8 is the IEEE-style fp8_e4m3 (largest finite 240, not 448)";
      return unsupported(Unsupported::Why::dtype, std::move(op), std::move(why));
    };
    for (const auto& ts : user.tensors)
      if (!t.stores(ts.dtype)) return refuse(ts.dtype, "", fmt::format("tensor '{}'", ts.name));
    for (const auto& op : user.ops) {
      std::vector<const ir::Expr*> nodes;
      preorder(op.expr, nodes);
      for (const auto* e : nodes)
        if (e->kind == ir::Expr::Kind::call && e->fn == ir::Fn::cast && !t.stores(e->dtype)) return refuse(e->dtype, op.out, "a cast");
    }
  }
  auto impl = std::make_shared<SpaceImpl>();
  SpaceImpl& s = *impl;
  s.source = user;
  s.kernel = ir::divisions_as_products(opt.split_long_indices ? split_long_indices(user, t, s.splits, s.merges, s.view_steps) : user);
  const ir::Kernel& k = s.kernel;  // everything below schedules the (possibly split) view
  s.target = t;
  s.options = opt;

  for (std::size_t i = 0; i < k.ops.size(); ++i) {  // each tensor's readers, ascending
    std::vector<const ir::Expr*> nodes;
    preorder(k.ops[i].expr, nodes);
    for (const auto* e : nodes) {
      if (e->kind != ir::Expr::Kind::access) continue;
      auto& r = s.readers[e->tensor];
      if (r.empty() || r.back() != static_cast<int>(i)) r.push_back(static_cast<int>(i));
    }
  }

  // Which op writes each tensor.
  std::vector<std::string> writes;
  for (const auto& op : k.ops) writes.push_back(op.out);

  for (std::size_t i = 0; i < k.ops.size(); ++i) {
    OpSlot o;
    o.op = static_cast<int>(i);
    o.kind = ones_contraction(k.ops[i]) ? ir::OpKind::contract : k.ops[i].kind();
    // a product summed over several indices, or over one that an operand lacks, has no PE-array
    // form here: the Vector engine reduces it like any other expression
    if (o.kind == ir::OpKind::contract && !ones_contraction(k.ops[i]) && !contraction_rootable(k.ops[i])) o.kind = ir::OpKind::reduce;
    // a convolution written as a product: a contraction whose k loop spans the taps
    if (!ir::conv_taps(k.ops[i]).empty()) o.kind = ir::OpKind::contract;
    o.name = k.ops[i].out;
    for (auto& [n, e] : k.op_indices(i)) {
      o.idx.push_back(n);
      o.ext.push_back(e);
    }
    s.ops.push_back(std::move(o));
  }

  // Static fusion chains: op j may join the nest holding op j-1 when it reads a tensor that
  // nest writes and its indices fit the chain root's loop domain.
  for (std::size_t j = 0; j < s.ops.size(); ++j) {
    auto& o = s.ops[j];
    o.chain_root = static_cast<int>(j);
    if (j == 0 || o.kind == ir::OpKind::contract) continue;
    const int r = s.ops[j - 1].chain_root;
    const auto& root = s.ops[static_cast<std::size_t>(r)];
    std::set<std::string> rd;
    reads_of(k.ops[j].expr, rd);
    bool reads_chain = false;
    for (int q = r; q < static_cast<int>(j); ++q) reads_chain = reads_chain || rd.count(writes[static_cast<std::size_t>(q)]);
    if (!reads_chain) continue;
    bool fits = true;
    if (root.kind == ir::OpKind::contract) {
      const auto& ro = k.ops[static_cast<std::size_t>(r)].out_indices;
      const auto& jo = k.ops[j].out_indices;
      fits = o.kind == ir::OpKind::map && ro.size() == jo.size() &&
             std::all_of(jo.begin(), jo.end(), [&](const std::string& x) { return contains(ro, x); });
    } else {
      fits = std::all_of(o.idx.begin(), o.idx.end(), [&](const std::string& x) { return contains(root.idx, x); });
    }
    if (!fits) continue;
    o.chain_root = r;
  }

  // Variance patterns (the LayerNorm tutorial's bn_stats/bn_aggr move): var = mean over one index
  // f of square(xc) (or xc * xc), xc = E - mu, mu = mean over f of E, all in one static chain.
  const auto producer = [&](const std::string& t, std::size_t before) {  // op writing t, or -1
    const auto it = std::find(writes.begin(), writes.begin() + static_cast<std::ptrdiff_t>(before), t);
    return it == writes.begin() + static_cast<std::ptrdiff_t>(before) ? -1 : static_cast<int>(it - writes.begin());
  };
  const auto is_mean_over = [&](const ir::Op& op, const std::vector<std::string>& red) {
    return op.kind() == ir::OpKind::reduce && op.reduce == ir::ReduceOp::mean && op.reduce_indices == red;
  };
  for (std::size_t j = 0; j < s.ops.size(); ++j) {
    const auto& vop = k.ops[j];
    if (vop.reduce_indices.size() != 1 || !is_mean_over(vop, vop.reduce_indices)) continue;
    const ir::Expr& body = vop.expr;
    const bool squared = body.kind == ir::Expr::Kind::call &&
                         ((body.fn == ir::Fn::square && body.args.size() == 1) ||
                          (body.fn == ir::Fn::mul && body.args.size() == 2 && body.args[0] == body.args[1]));
    if (!squared || body.args[0].kind != ir::Expr::Kind::access) continue;
    const int m = producer(body.args[0].tensor, j);
    if (m < 0) continue;
    const auto& mop = k.ops[static_cast<std::size_t>(m)];
    const ir::Expr& centre = mop.expr;
    if (mop.kind() != ir::OpKind::map || !is_access(body.args[0], mop.out, mop.out_indices) ||
        centre.kind != ir::Expr::Kind::call || centre.fn != ir::Fn::sub || centre.args.size() != 2)
      continue;
    const int mu = producer(centre.args[1].tensor, static_cast<std::size_t>(m));
    if (mu < 0) continue;
    const auto& muop = k.ops[static_cast<std::size_t>(mu)];
    if (!is_mean_over(muop, vop.reduce_indices) || muop.out_indices != vop.out_indices ||
        !is_access(centre.args[1], muop.out, muop.out_indices) || !(muop.expr == centre.args[0]))
      continue;
    const int root = s.ops[j].chain_root;
    if (s.ops[static_cast<std::size_t>(m)].chain_root != root || s.ops[static_cast<std::size_t>(mu)].chain_root != root) continue;
    s.ops[j].stats_mean = mu;
  }

  Space& sp = s.space;
  const auto cat = [&](const std::string& n, std::vector<std::string> v, const std::string& grp) {
    return static_cast<int>(sp.add(Gene::categorical(n, std::move(v), grp)));
  };
  const Deriver dr{s, sp, k, t, opt};

  for (std::size_t j = 0; j < s.ops.size(); ++j) {
    auto& o = s.ops[j];
    const std::string& grp = o.name;
    if (o.chain_root != static_cast<int>(j)) o.fuse_gene = static_cast<int>(sp.add(Gene::boolean("fuse." + o.name, grp)));
    if (o.kind != ir::OpKind::contract) o.engine_gene = cat("engine." + o.name, {"vector", "scalar", "gpsimd"}, grp);
    if (o.stats_mean >= 0) o.stats_gene = cat("stats." + o.name, {"reduce", "bn"}, grp);

    // the genes of the nest the op roots: a contraction's, or a map's or reduce's (lib/nests/<kind>/derive.cpp)
    if (auto why = o.kind == ir::OpKind::contract ? derive_contract(dr, j) : derive_vector(dr, j))
      return unexpected(std::move(*why));
  }

  // Flash attention: one online-softmax nest for a QKᵀ -> softmax -> PV pattern (lib/nests/flash/derive.cpp).
  derive_flash(dr);
  // A row softmax over rows longer than a tile: running max and sum, then a second read (lib/nests/online/derive.cpp).
  derive_online(dr);

  // Defaults: one tile per engine limit, no blocking, loads at their innermost useful level,
  // double buffering, PSUM accumulation, everything fused that may fuse.
  Genome d = sp.first();
  const auto set = [&](int gi, int val) { set_value(sp, d, gi, val); };
#define KEVO_DEFAULTS_CALL(kind) defaults_##kind(dr, d);
  KEVO_NEST_KINDS(KEVO_DEFAULTS_CALL)
#undef KEVO_DEFAULTS_CALL
  for (const auto& o : s.ops) set(o.fuse_gene, 1);
  s.defaults = d;

  ScheduleSpace out;
  out.impl_ = impl;
  Rng rng(0x5eed);
  Genome dd = d;
  if (!out.repair(dd, rng)) dd = d;  // no valid schedule reached: the unrepaired defaults (their plan says why)
  impl->defaults = dd;
  std::vector<Genome> ex;
  experts_contract(dr, d, ex);
  for (auto& e : ex)
    if (out.repair(e, rng) && e != impl->defaults &&
        std::find(impl->experts.begin(), impl->experts.end(), e) == impl->experts.end())
      impl->experts.push_back(std::move(e));
  return Expected<ScheduleSpace, Unsupported>(std::move(out));
}

const Space& ScheduleSpace::genes() const noexcept { return impl_->space; }
const ir::Kernel& ScheduleSpace::kernel() const noexcept { return impl_->source; }
const ir::Kernel& ScheduleSpace::scheduled_kernel() const noexcept { return impl_->kernel; }
const std::vector<std::string>& ScheduleSpace::splits() const noexcept { return impl_->view_steps; }
const target::Target& ScheduleSpace::target() const noexcept { return impl_->target; }
Genome ScheduleSpace::default_genome() const { return impl_->defaults; }
const std::vector<Genome>& ScheduleSpace::expert_genomes() const noexcept { return impl_->experts; }

bool ScheduleSpace::repair(Genome& g, Rng& rng) const {
  (void)rng;
  const Space& sp = impl_->space;
  if (!sp.contains(g)) return false;
  // One fix per plan: a kernel of many nests can need one per nest (a 1,000-op chain drawn at
  // random has hundreds), so the bound grows with the genes.
  const std::size_t max_fixes = std::max<std::size_t>(64, 2 * sp.size());
  for (std::size_t iter = 0; iter < max_fixes; ++iter) {
    auto p = make_plan(*this, g);
    if (p) return true;
    const auto& r = p.error();
    if (r.fix_gene < 0) return false;
    // a hint outside its gene's values (a plan with no value left to suggest) ends the repair: the
    // genome stays one of this space's
    if (static_cast<std::size_t>(r.fix_gene) >= sp.size() || r.fix_value < 0 ||
        static_cast<std::size_t>(r.fix_value) >= sp.gene(static_cast<std::size_t>(r.fix_gene)).choices())
      return false;
    auto sl = sp.slots(g, static_cast<std::size_t>(r.fix_gene));
    if (sl[0] == r.fix_value) return false;
    sl[0] = r.fix_value;
  }
  return false;
}

double ScheduleSpace::sampled_validity(std::size_t samples, std::uint64_t seed) const {
  return sampled_validity(samples, seed, std::numeric_limits<double>::infinity()).share;
}

ScheduleSpace::Validity ScheduleSpace::sampled_validity(std::size_t samples, std::uint64_t seed, double max_seconds) const {
  return sampled_validity(samples, seed, max_seconds, {});
}

ScheduleSpace::Validity ScheduleSpace::sampled_validity(std::size_t samples, std::uint64_t seed, double max_seconds,
                                                        const std::function<bool()>& stop) const {
  constexpr std::size_t kAskEvery = 256;
  Validity v;
  if (samples == 0) return v;
  std::size_t ok = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < samples; ++i) {
    if (i > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > max_seconds) break;
    if (i > 0 && i % kAskEvery == 0 && stop && stop()) break;
    Rng rng(seed, i);
    Genome g = impl_->space.random(rng);
    if (repair(g, rng)) ++ok;
    v.samples = i + 1;
  }
  v.share = static_cast<double>(ok) / static_cast<double>(v.samples);
  return v;
}

}  // namespace kevo::schedule
