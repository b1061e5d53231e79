// FLOP and byte counts. Counting rules (docs/KIR.md): a contraction costs 2 FLOPs per
// multiply-add; a map costs one FLOP per function call (operators included) per output element;
// a reduction costs one FLOP per combined element plus its expression's calls per element, and a
// mean one division per output element. Work on positions a mask removes is not counted (below).
#include "kevo/ir/analysis.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "kevo/ir/fn.hpp"

namespace kevo::ir {

namespace {
std::int64_t calls(const Expr& e) {
  std::int64_t n = e.kind == Expr::Kind::call ? 1 : 0;
  for (const auto& a : e.args) n += calls(a);
  return n;
}

// Operators of `e` over their own domains (Analysis::elementwise_ops), and the activation-only
// functions' share of them, in one pass from the leaves up: adds the indices `e` uses (accesses,
// shifted positions, index values) to `used` and returns whether it reads a tensor.
bool domain_work(const Expr& e, const std::vector<std::pair<std::string, std::int64_t>>& idx, std::vector<std::string>& used,
                 std::int64_t& ops, std::int64_t& acts) {
  std::vector<std::string> mine;
  const auto add = [&](const std::string& x) {
    if (!x.empty() && std::find(mine.begin(), mine.end(), x) == mine.end()) mine.push_back(x);
  };
  bool reads_tensor = e.kind == Expr::Kind::access;
  if (e.kind == Expr::Kind::access) {
    for (const auto& x : e.indices) add(x);
    for (const auto& sh : e.shifts) add(sh.plus);
  } else if (e.kind == Expr::Kind::index) {
    add(e.index);
  }
  for (const auto& a : e.args) reads_tensor = domain_work(a, idx, mine, ops, acts) || reads_tensor;
  if (e.kind == Expr::Kind::call && e.fn != Fn::cast && reads_tensor) {
    std::int64_t points = 1;
    for (const auto& [n, ext] : idx)
      if (std::find(mine.begin(), mine.end(), n) != mine.end()) points *= ext;
    ops += points;
    if (activation_only(e.fn)) acts += points;
  }
  for (const auto& x : mine)
    if (std::find(used.begin(), used.end(), x) == used.end()) used.push_back(x);
  return reads_tensor;
}

// The fewest distinct elements of its tensor that access `e` (in an op over indices `idx`) reads:
// every element for plain indices; for a shifted position stride * v + f + offset, the positions
// inside the dimension that some (v, f) reaches (a contiguous range when the windows touch, else
// the whole windows inside the dimension: a lower bound); one element along a dimension whose
// index an earlier dimension already used (a diagonal X[i, i]).
std::int64_t positions_read(const Kernel& k, const Expr& e, const std::vector<std::pair<std::string, std::int64_t>>& idx) {
  const Tensor* t = k.tensor(e.tensor);
  if (t == nullptr) return 0;
  const auto ext = [&](const std::string& n) -> std::int64_t {
    for (const auto& [x, v] : idx)
      if (x == n) return v;
    return 1;
  };
  std::vector<std::string> seen;
  double n = 1;
  for (std::size_t d = 0; d < t->dims.size() && d < e.indices.size(); ++d) {
    const std::int64_t W = k.dim_size(t->dims[d]);
    const std::string& v = e.indices[d];
    const bool again = std::find(seen.begin(), seen.end(), v) != seen.end();
    seen.push_back(v);
    if (again) continue;
    const IndexShift sh = d < e.shifts.size() ? e.shifts[d] : IndexShift{};
    if (sh.plain()) {
      n *= static_cast<double>(W);
      continue;
    }
    const std::int64_t V = ext(v), P = sh.plus.empty() ? 1 : ext(sh.plus), s = sh.stride, o = sh.offset;
    double c = 0;
    if (s <= 0) {
      c = 1;  // (KIR strides are positive; one position at least)
    } else if (P >= s) {  // the windows touch: one range
      const double lo = std::max<double>(0, static_cast<double>(o));
      const double hi = std::min<double>(static_cast<double>(W - 1), static_cast<double>(o) + static_cast<double>(s) * static_cast<double>(V - 1) +
                                                                        static_cast<double>(P - 1));
      c = std::max(0.0, hi - lo + 1);
    } else {  // disjoint windows of P: those wholly inside [0, W)
      const double vmin = std::max(0.0, std::ceil(-static_cast<double>(o) / static_cast<double>(s)));
      const double vmax = std::min(static_cast<double>(V - 1), std::floor(static_cast<double>(W - P - o) / static_cast<double>(s)));
      c = std::max(0.0, vmax - vmin + 1) * static_cast<double>(P);
    }
    n *= c;
  }
  return static_cast<std::int64_t>(std::min(n, static_cast<double>(k.elements(*t))));
}

// Whether `e` reads tensor `t` anywhere.
bool reads(const Expr& e, const std::string& t) {
  if (e.kind == Expr::Kind::access && e.tensor == t) return true;
  for (const auto& a : e.args)
    if (reads(a, t)) return true;
  return false;
}

// How many y in [0, Y) satisfy cmp(b * y + r, 0).
double count_line(Fn cmp, double b, double r, std::int64_t Y) {
  const auto yd = static_cast<double>(Y);
  if (b == 0) return fn_apply_binary(cmp, r, 0.0) != 0.0 ? yd : 0.0;
  if (cmp == Fn::eq || cmp == Fn::ne) {
    const double y = -r / b;
    const bool hit = y == std::floor(y) && y >= 0 && y < yd;
    return cmp == Fn::eq ? (hit ? 1.0 : 0.0) : yd - (hit ? 1.0 : 0.0);
  }
  // b*y + r cmp 0 with b < 0 is (-b)*y - r (reversed cmp) 0
  Fn c = cmp;
  if (b < 0) {
    b = -b;
    r = -r;
    c = cmp == Fn::lt ? Fn::gt : cmp == Fn::le ? Fn::ge : cmp == Fn::gt ? Fn::lt : Fn::le;
  }
  const double t = -r / b;  // the condition is y cmp t
  double n = 0;
  switch (c) {
    case Fn::lt: n = std::ceil(t); break;                      // y < t
    case Fn::le: n = std::floor(t) + 1; break;                 // y <= t
    case Fn::gt: n = yd - (std::floor(t) + 1); break;          // y > t
    default: n = yd - std::ceil(t); break;                     // y >= t
  }
  return std::clamp(n, 0.0, yd);
}

// A comparison of affine index expressions as `d cmp 0`, or nullopt when `cond` is not one.
struct Comparison {
  Fn cmp = Fn::lt;
  AffineIndex d;
};
std::optional<Comparison> comparison(const Expr& cond) {
  if (cond.kind != Expr::Kind::call || !is_comparison(cond.fn) || cond.args.size() != 2) return std::nullopt;
  const auto a = affine_index(cond.args[0]), b = affine_index(cond.args[1]);
  if (!a || !b) return std::nullopt;
  Comparison c{cond.fn, AffineIndex{a->k - b->k, a->coef}};
  for (const auto& [n, x] : b->coef) c.d.coef[n] -= x;
  return c;
}

// The share of the points of `idx` where `d cmp 0` holds (every combination of all but the last
// index, at most 2^24, the last counted on its line), or nullopt when d uses an index not in idx.
std::optional<double> share_where(Fn cmp, const AffineIndex& d, const std::vector<std::pair<std::string, std::int64_t>>& idx) {
  std::vector<std::pair<double, std::int64_t>> vars;  // (coefficient, extent)
  for (const auto& [n, c] : d.coef) {
    if (c == 0) continue;
    std::int64_t ext = -1;
    for (const auto& [x, e] : idx)
      if (x == n) ext = e;
    if (ext <= 0) return std::nullopt;  // an index the op does not iterate
    vars.emplace_back(c, ext);
  }
  if (vars.empty()) return count_line(cmp, 0, d.k, 1);
  // every combination of all but the last index, the last one counted on its line
  double outer = 1, all = static_cast<double>(vars.back().second);
  for (std::size_t v = 0; v + 1 < vars.size(); ++v) outer *= static_cast<double>(vars[v].second), all *= static_cast<double>(vars[v].second);
  if (outer > static_cast<double>(std::int64_t{1} << 24)) return std::nullopt;
  std::vector<std::int64_t> at(vars.size() - 1, 0);
  double kept = 0;
  for (;;) {
    double r = d.k;
    for (std::size_t v = 0; v < at.size(); ++v) r += vars[v].first * static_cast<double>(at[v]);
    kept += count_line(cmp, vars.back().first, r, vars.back().second);
    std::size_t v = 0;
    for (; v < at.size(); ++v) {
      if (++at[v] < vars[v].second) break;
      at[v] = 0;
    }
    if (v == at.size()) break;
  }
  return kept / all;
}

// The share of an op's positions where `cond` (a comparison of affine index expressions of its
// indices) holds, or nullopt when it is not of that form.
std::optional<double> kept_share(const Expr& cond, const std::vector<std::pair<std::string, std::int64_t>>& idx) {
  const auto c = comparison(cond);
  if (!c) return std::nullopt;
  return share_where(c->cmp, c->d, idx);
}

// The comparison that holds exactly where `cmp` does not.
Fn negated(Fn cmp) {
  switch (cmp) {
    case Fn::lt: return Fn::ge;
    case Fn::le: return Fn::gt;
    case Fn::gt: return Fn::le;
    case Fn::ge: return Fn::lt;
    case Fn::eq: return Fn::ne;
    default: return Fn::eq;
  }
}

// The share of an access's elements that some kept position reads, when the kept positions are
// those where `cond` holds (`keep` false: where it does not) and the access reads its tensor with
// plain indices `used` (a subset of the op's indices `idx`). An element is needed exactly when
// some value of the op's other indices satisfies the condition beside it; for an inequality that
// is the condition with those indices at the end of their extents that favours it. An (in)equality
// is projected only when the access uses all of its indices or none of them; nullopt otherwise.
std::optional<double> projected_share(const Expr& cond, bool keep, const std::vector<std::string>& used,
                                      const std::vector<std::pair<std::string, std::int64_t>>& idx) {
  auto c = comparison(cond);
  if (!c) return std::nullopt;
  if (!keep) c->cmp = negated(c->cmp);
  if (c->cmp == Fn::eq || c->cmp == Fn::ne) {
    std::size_t mine = 0, all = 0;
    for (const auto& [n, coef] : c->d.coef)
      if (coef != 0) ++all, mine += std::find(used.begin(), used.end(), n) != used.end() ? 1 : 0;
    const auto s = share_where(c->cmp, c->d, idx);
    if (!s || mine == all) return s;  // the condition on the element's own indices: its share
    if (mine == 0) return *s > 0 ? 1.0 : 0.0;  // every element, or none, beside a kept position
    return std::nullopt;
  }
  const bool below = c->cmp == Fn::lt || c->cmp == Fn::le;  // d < 0: the other indices at d's least
  AffineIndex d{c->d.k, {}};
  std::vector<std::pair<std::string, std::int64_t>> mine;
  for (const auto& [n, coef] : c->d.coef) {
    if (coef == 0) continue;
    std::int64_t ext = -1;
    for (const auto& [x, e] : idx)
      if (x == n) ext = e;
    if (ext <= 0) return std::nullopt;
    if (std::find(used.begin(), used.end(), n) != used.end()) {
      d.coef[n] = coef;
      mine.emplace_back(n, ext);
    } else {
      const double end = coef * static_cast<double>(ext - 1);
      d.k += below ? std::min(0.0, end) : std::max(0.0, end);
    }
  }
  return share_where(c->cmp, d, mine);
}

// Masked values: a map `select(cond, x, -inf)` (or `select(cond, -inf, x)`), cond a comparison of
// affine index expressions, is -inf outside a share `d` of its positions; x - y and x + y of it
// (y not masked) stay -inf there; exp of those is 0 there, and a cast or a product of a 0-masked
// value stays 0. Work that reads a masked value at its own positions and contributes nothing
// there — a max over -inf, a sum over 0, a contraction with a 0 operand, the maps above — is
// counted on the share `d` only, as is the work of a value whose only reader is the mask itself
// (the scores under a causal mask). A flash nest skips that work tile by tile.
enum class Mask : std::uint8_t { none, neg_inf, zero };
struct Masked {
  Mask m = Mask::none;
  double share = 1.0;
  // The kept positions, when one select's condition says exactly which they are: where `cond`
  // holds (or, `keep` false, where it does not), in the op's index names; null for a conjunction.
  const Expr* cond = nullptr;
  bool keep = true;
};

// The mask of access `e` when it reads tensor `t` at `t`'s own positions.
Masked aligned(const Expr& e, const std::map<std::string, std::pair<Masked, std::vector<std::string>>>& masks) {
  if (e.kind != Expr::Kind::access || !e.shifts.empty()) return {};
  const auto it = masks.find(e.tensor);
  if (it == masks.end() || it->second.second != e.indices) return {};
  return it->second.first;
}

bool neg_inf(const Expr& e) { return e.kind == Expr::Kind::constant && std::isinf(e.value) && e.value < 0; }

// The share of positions `select(cond, x, -inf)` (or `select(cond, -inf, x)`) keeps, when `e` is
// such a select over a condition kept_share reads; the kept operand in `x`.
std::optional<double> select_share(const Expr& e, const std::vector<std::pair<std::string, std::int64_t>>& idx, const Expr** x,
                                   bool* keep = nullptr) {
  if (e.kind != Expr::Kind::call || e.fn != Fn::select || e.args.size() != 3) return std::nullopt;
  const bool neg_false = neg_inf(e.args[2]), neg_true = neg_inf(e.args[1]);
  if (neg_false == neg_true) return std::nullopt;
  const auto d = kept_share(e.args[0], idx);
  if (!d) return std::nullopt;
  if (x != nullptr) *x = &e.args[neg_false ? 1 : 2];
  if (keep != nullptr) *keep = neg_false;
  return neg_false ? *d : 1.0 - *d;
}

// The mask of a map's value `e` (see above), reading masked tensors through `masks`; `idx`, the
// op's indices (a select inside the expression masks too: `select(j < 128, s, -inf) * scale`).
Masked map_mask(const Expr& e, const std::map<std::string, std::pair<Masked, std::vector<std::string>>>& masks,
                const std::vector<std::pair<std::string, std::int64_t>>& idx) {
  if (e.kind == Expr::Kind::access) return aligned(e, masks);
  if (e.kind != Expr::Kind::call) return {};
  bool keep = true;
  if (const Expr* x = nullptr; const auto d = select_share(e, idx, &x, &keep)) {
    // also masked where x is: kept on both shares, at least d + dx - 1 of the positions
    const Masked in = map_mask(*x, masks, idx);
    if (in.m == Mask::neg_inf) return Masked{Mask::neg_inf, std::max(0.0, *d + in.share - 1.0)};
    return Masked{Mask::neg_inf, *d, &e.args[0], keep};
  }
  if (e.fn == Fn::exp && e.args.size() == 1) {
    const Masked a = map_mask(e.args[0], masks, idx);
    return a.m == Mask::neg_inf ? Masked{Mask::zero, a.share, a.cond, a.keep} : Masked{};
  }
  if (e.fn == Fn::cast && e.args.size() == 1) {
    const Masked a = map_mask(e.args[0], masks, idx);
    return a.m == Mask::zero ? a : Masked{};
  }
  if (e.args.size() == 2 && (e.fn == Fn::add || e.fn == Fn::sub || e.fn == Fn::mul || e.fn == Fn::div)) {
    Masked a = map_mask(e.args[0], masks, idx), b = map_mask(e.args[1], masks, idx);
    const Expr* other = &e.args[1];
    if (b.m != Mask::none && a.m == Mask::none && (e.fn == Fn::add || e.fn == Fn::mul)) {
      std::swap(a, b);  // commutes: the masked operand on the left
      other = &e.args[0];
    }
    if (b.m != Mask::none) return {};  // both masked, or masked on the right: -inf - -inf, x / 0
    if (a.m == Mask::neg_inf && (e.fn == Fn::add || e.fn == Fn::sub)) return a;
    // -inf times or over a positive constant (a scale after the mask) stays -inf
    if (a.m == Mask::neg_inf && (e.fn == Fn::mul || e.fn == Fn::div) && other->kind == Expr::Kind::constant &&
        std::isfinite(other->value) && other->value > 0)
      return a;
    if (a.m == Mask::zero && (e.fn == Fn::mul || (e.fn == Fn::div && other == &e.args[1]))) return a;
  }
  return {};
}
// The fewest elements access `e` reads in an op over `idx` whose positions matter only on a share
// `kept.share` of them, `kept.cond` saying which where one condition does. Two lower bounds, the larger
// taken: the kept positions over the most positions that can read one element (the extents of
// the indices no plain dimension fixes), and, for plain indices under one inequality, the
// elements the condition reaches (projected_share: under `j < 128` only K's first 128 rows).
std::int64_t masked_reads(const Kernel& k, const Expr& e, const std::vector<std::pair<std::string, std::int64_t>>& idx,
                          const Masked& kept) {
  const Tensor* t = k.tensor(e.tensor);
  if (t == nullptr) return 0;
  std::vector<std::string> fixed;  // indices a plain dimension of the access pins
  bool plain = true;
  for (std::size_t d = 0; d < e.indices.size(); ++d) {
    const bool shifted = d < e.shifts.size() && !e.shifts[d].plain();
    const bool again = std::find(fixed.begin(), fixed.end(), e.indices[d]) != fixed.end();
    plain = plain && !shifted && !again;
    if (!shifted && !again) fixed.push_back(e.indices[d]);
  }
  double positions = 1, per_element = 1;
  for (const auto& [n, ext] : idx) {
    positions *= static_cast<double>(ext);
    if (std::find(fixed.begin(), fixed.end(), n) == fixed.end()) per_element *= static_cast<double>(ext);
  }
  double n = std::ceil(kept.share * positions / per_element - 1e-9);
  if (plain && kept.cond != nullptr)
    if (const auto p = projected_share(*kept.cond, kept.keep, e.indices, idx))
      n = std::max(n, std::ceil(*p * static_cast<double>(k.elements(*t)) - 1e-9));
  return static_cast<std::int64_t>(std::clamp(n, 0.0, static_cast<double>(k.elements(*t))));
}
}  // namespace

std::optional<AffineIndex> affine_index(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::constant: return AffineIndex{e.value, {}};
    case Expr::Kind::index: return AffineIndex{0, {{e.index, 1.0}}};
    case Expr::Kind::access: return std::nullopt;
    case Expr::Kind::call: break;
  }
  if (e.fn == Fn::neg && e.args.size() == 1) {
    auto a = affine_index(e.args[0]);
    if (!a) return a;
    a->k = -a->k;
    for (auto& [n, c] : a->coef) c = -c;
    return a;
  }
  if (e.args.size() != 2 || (e.fn != Fn::add && e.fn != Fn::sub && e.fn != Fn::mul)) return std::nullopt;
  auto a = affine_index(e.args[0]), b = affine_index(e.args[1]);
  if (!a || !b) return std::nullopt;
  if (e.fn == Fn::mul) {
    if (!a->coef.empty() && !b->coef.empty()) return std::nullopt;
    const AffineIndex& v = a->coef.empty() ? *b : *a;
    const double m = a->coef.empty() ? a->k : b->k;
    AffineIndex r{v.k * m, v.coef};
    for (auto& [n, c] : r.coef) c *= m;
    return r;
  }
  const double sg = e.fn == Fn::sub ? -1.0 : 1.0;
  AffineIndex r{a->k + sg * b->k, a->coef};
  for (const auto& [n, c] : b->coef) r.coef[n] += sg * c;
  return r;
}

bool activation_only(Fn f) noexcept {
  // the Vector engine's ALU has the rest: square as a product, reciprocal, sqrt and rsqrt as divide
  // and power (nki.isa.tensor_scalar's arithmetic operators)
  switch (f) {
    case Fn::exp: case Fn::log: case Fn::tanh: case Fn::gelu_tanh: case Fn::gelu_erf: case Fn::silu: case Fn::sigmoid:
      return true;
    default:
      return false;
  }
}

Analysis analyze(const Kernel& k) {
  Analysis a;
  std::vector<std::vector<std::pair<std::string, std::int64_t>>> op_idx;  // each op's indices, for every pass below
  for (std::size_t i = 0; i < k.ops.size(); ++i) op_idx.push_back(k.op_indices(i));
  std::vector<std::int64_t> dom_ops, dom_acts;
  for (std::size_t i = 0; i < k.ops.size(); ++i) {
    const Op& op = k.ops[i];
    std::int64_t points = 1, outs = 1;
    const auto& idx = op_idx[i];
    for (std::size_t j = 0; j < idx.size(); ++j) {
      points *= idx[j].second;
      if (j < op.out_indices.size()) outs *= idx[j].second;
    }
    std::int64_t f = 0;
    switch (op.kind()) {
      case OpKind::contract:
        f = 2 * points;
        break;
      case OpKind::map: f = calls(op.expr) * outs; break;
      case OpKind::reduce:
        f = (calls(op.expr) + 1) * points + (op.reduce == ReduceOp::mean ? outs : 0);
        break;
    }
    a.op_flops.push_back(f);
    std::int64_t ops = 0, acts = 0;
    if (!pe_product(op)) {
      std::vector<std::string> used;
      domain_work(op.expr, idx, used, ops, acts);
      if (op.kind() == OpKind::reduce) ops += points + (op.reduce == ReduceOp::mean ? outs : 0);
    }
    dom_ops.push_back(ops);
    dom_acts.push_back(acts);
  }
  // masked work (above): shares per op, applied once every op is known
  std::map<std::string, std::pair<Masked, std::vector<std::string>>> masks;
  // per op: the share of its positions its work counts on, and which they are where one
  // condition says (Masked{} for an op no mask touches: share 1)
  std::vector<Masked> kept(k.ops.size());
  for (std::size_t i = 0; i < k.ops.size(); ++i) {
    const Op& op = k.ops[i];
    const Expr& e = op.expr;
    Masked out;
    const auto& idx = op_idx[i];
    if (op.kind() == OpKind::map) {
      out = map_mask(e, masks, idx);
      kept[i] = out;
      // Where a map's value is masked, its other operands' values do not matter: a temp it reads at
      // its own positions, when it is that temp's only reader, is needed on the share only, and so
      // on back through the temps those are made from (the scores under a causal mask, and the
      // scaling map between them and the mask: `t = s * scale; p = select(j <= i, t, -inf)`).
      if (out.m != Mask::none) {
        std::vector<std::size_t> work{i};
        while (!work.empty()) {
          const std::size_t r = work.back();
          work.pop_back();
          std::vector<const Expr*> stack{&k.ops[r].expr};
          while (!stack.empty()) {
            const Expr* y = stack.back();
            stack.pop_back();
            for (const auto& z : y->args) stack.push_back(&z);
            if (y->kind != Expr::Kind::access || !y->shifts.empty() || y->indices != k.ops[r].out_indices) continue;
            for (std::size_t j = 0; j < r; ++j) {
              if (k.ops[j].out != y->tensor || k.ops[j].out_indices != y->indices || kept[j].share <= out.share) continue;
              const Tensor* t = k.tensor(y->tensor);
              bool only = t != nullptr && t->role == Role::temp;
              for (std::size_t q = 0; only && q < k.ops.size(); ++q) only = q == r || !reads(k.ops[q].expr, y->tensor);
              if (!only) continue;
              kept[j] = out;  // the same index names: j's output is read at its own positions
              work.push_back(j);
            }
          }
        }
      }
    } else if (op.kind() == OpKind::reduce) {
      const Masked in = map_mask(e, masks, idx);
      if ((op.reduce == ReduceOp::max && in.m == Mask::neg_inf) || (op.reduce == ReduceOp::sum && in.m == Mask::zero)) {
        kept[i] = in;
      }
    } else if (op.kind() == OpKind::contract && e.args.size() == 2) {
      const Masked x = aligned(e.args[0], masks), y = aligned(e.args[1], masks);
      if (x.m == Mask::zero) kept[i] = x;
      else if (y.m == Mask::zero) kept[i] = y;
    }
    if (out.m != Mask::none) masks[op.out] = {out, op.out_indices};
  }
  for (std::size_t i = 0; i < k.ops.size(); ++i) {
    auto& f = a.op_flops[i];
    const double share = kept[i].share;
    const auto on_share = [share](std::int64_t x) {
      return share < 1.0 ? static_cast<std::int64_t>(std::llround(static_cast<double>(x) * share)) : x;
    };
    f = on_share(f);
    a.flops += f;
    a.elementwise_ops += on_share(dom_ops[i]);
    a.activation_evals += on_share(dom_acts[i]);
    if (pe_product(k.ops[i])) a.contraction_flops += f;  // a convolution written as a product too
  }
  // Each output written once; each input's elements that some access reads, read once (an input
  // read only at a stride or an offset need not be read whole: Y[v] = X[4096*v] reads V of X's
  // elements, and counting all of them made the bound 5x the kernel's time). An op whose work
  // counts on a masked share needs its operands only there (masked_reads).
  std::map<std::string, std::int64_t> read;
  for (std::size_t i = 0; i < k.ops.size(); ++i) {
    const auto& idx = op_idx[i];
    std::vector<const Expr*> stack{&k.ops[i].expr};
    while (!stack.empty()) {
      const Expr* e = stack.back();
      stack.pop_back();
      for (const auto& x : e->args) stack.push_back(&x);
      if (e->kind != Expr::Kind::access) continue;
      auto& r = read[e->tensor];
      std::int64_t n = positions_read(k, *e, idx);
      if (kept[i].share < 1.0) n = std::min(n, masked_reads(k, *e, idx, kept[i]));
      r = std::max(r, n);
    }
  }
  for (const auto& t : k.tensors) {
    const auto b = static_cast<std::int64_t>(dtype_bytes(t.dtype));
    if (t.role == Role::output) a.min_hbm_bytes += k.elements(t) * b;
    else if (t.role == Role::input) a.min_hbm_bytes += (read.count(t.name) ? read[t.name] : 0) * b;
  }
  a.intensity = a.min_hbm_bytes > 0 ? static_cast<double>(a.flops) / static_cast<double>(a.min_hbm_bytes) : 0.0;
  return a;
}

}  // namespace kevo::ir
