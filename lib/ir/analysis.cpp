// FLOP and byte counts. Counting rules (docs/KIR.md): a contraction costs 2 FLOPs per
// multiply-add; a map costs one FLOP per function call (operators included) per output element;
// a reduction costs one FLOP per combined element plus its expression's calls per element, and a
// mean one division per output element. Work on positions a mask removes is not counted (below).
#include "kevo/ir/analysis.hpp"

#include <algorithm>
#include <cmath>

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

// The share of an op's positions where `cond` (a comparison of affine index expressions over at
// most two of its indices) holds, or nullopt when it is not of that form.
std::optional<double> kept_share(const Expr& cond, const std::vector<std::pair<std::string, std::int64_t>>& idx) {
  if (cond.kind != Expr::Kind::call || !is_comparison(cond.fn) || cond.args.size() != 2) return std::nullopt;
  const auto a = affine_index(cond.args[0]), b = affine_index(cond.args[1]);
  if (!a || !b) return std::nullopt;
  AffineIndex d{a->k - b->k, a->coef};  // cond: d cmp 0
  for (const auto& [n, c] : b->coef) d.coef[n] -= c;
  std::vector<std::pair<double, std::int64_t>> vars;  // (coefficient, extent)
  for (const auto& [n, c] : d.coef) {
    if (c == 0) continue;
    std::int64_t ext = -1;
    for (const auto& [x, e] : idx)
      if (x == n) ext = e;
    if (ext <= 0) return std::nullopt;  // an index the op does not iterate
    vars.emplace_back(c, ext);
  }
  if (vars.size() > 2) return std::nullopt;
  if (vars.empty()) return count_line(cond.fn, 0, d.k, 1);
  if (vars.size() == 1) return count_line(cond.fn, vars[0].first, d.k, vars[0].second) / static_cast<double>(vars[0].second);
  if (vars[0].second > (std::int64_t{1} << 24)) return std::nullopt;
  double kept = 0;
  for (std::int64_t x = 0; x < vars[0].second; ++x)
    kept += count_line(cond.fn, vars[1].first, d.k + vars[0].first * static_cast<double>(x), vars[1].second);
  return kept / (static_cast<double>(vars[0].second) * static_cast<double>(vars[1].second));
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
};

// The mask of access `e` when it reads tensor `t` at `t`'s own positions.
Masked aligned(const Expr& e, const std::map<std::string, std::pair<Masked, std::vector<std::string>>>& masks) {
  if (e.kind != Expr::Kind::access || !e.shifts.empty()) return {};
  const auto it = masks.find(e.tensor);
  if (it == masks.end() || it->second.second != e.indices) return {};
  return it->second.first;
}

// The mask of a map's value `e` (see above), reading masked tensors through `masks`.
Masked map_mask(const Expr& e, const std::map<std::string, std::pair<Masked, std::vector<std::string>>>& masks) {
  if (e.kind == Expr::Kind::access) return aligned(e, masks);
  if (e.kind != Expr::Kind::call) return {};
  if (e.fn == Fn::exp && e.args.size() == 1) {
    const Masked a = map_mask(e.args[0], masks);
    return a.m == Mask::neg_inf ? Masked{Mask::zero, a.share} : Masked{};
  }
  if (e.fn == Fn::cast && e.args.size() == 1) {
    const Masked a = map_mask(e.args[0], masks);
    return a.m == Mask::zero ? a : Masked{};
  }
  if (e.args.size() == 2 && (e.fn == Fn::add || e.fn == Fn::sub || e.fn == Fn::mul || e.fn == Fn::div)) {
    const Masked a = map_mask(e.args[0], masks), b = map_mask(e.args[1], masks);
    if (b.m != Mask::none) return {};  // a masked right operand: -inf - -inf, x / 0
    if (a.m == Mask::neg_inf && (e.fn == Fn::add || e.fn == Fn::sub)) return a;
    if (a.m == Mask::zero && (e.fn == Fn::mul || e.fn == Fn::div)) return a;
  }
  return {};
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
  std::vector<std::int64_t> dom_ops, dom_acts;
  for (std::size_t i = 0; i < k.ops.size(); ++i) {
    const Op& op = k.ops[i];
    std::int64_t points = 1, outs = 1;
    const auto idx = k.op_indices(i);
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
    if (op.kind() != OpKind::contract) {
      std::vector<std::string> used;
      domain_work(op.expr, idx, used, ops, acts);
      if (op.kind() == OpKind::reduce) ops += points + (op.reduce == ReduceOp::mean ? outs : 0);
    }
    dom_ops.push_back(ops);
    dom_acts.push_back(acts);
  }
  // masked work (above): shares per op, applied once every op is known
  std::map<std::string, std::pair<Masked, std::vector<std::string>>> masks;
  std::vector<double> share(k.ops.size(), 1.0);
  for (std::size_t i = 0; i < k.ops.size(); ++i) {
    const Op& op = k.ops[i];
    const Expr& e = op.expr;
    Masked out;
    if (op.kind() == OpKind::map && e.kind == Expr::Kind::call && e.fn == Fn::select && e.args.size() == 3) {
      const bool neg_false = e.args[2].kind == Expr::Kind::constant && std::isinf(e.args[2].value) && e.args[2].value < 0;
      const bool neg_true = e.args[1].kind == Expr::Kind::constant && std::isinf(e.args[1].value) && e.args[1].value < 0;
      if (neg_false != neg_true) {
        if (auto d = kept_share(e.args[0], k.op_indices(i))) {
          out = Masked{Mask::neg_inf, neg_false ? *d : 1.0 - *d};
          share[i] = out.share;
          // the value it masks, when the mask is its only reader, is needed on the share only
          const Expr& x = e.args[neg_false ? 1 : 2];
          std::vector<const Expr*> stack{&x};
          while (!stack.empty()) {
            const Expr* y = stack.back();
            stack.pop_back();
            for (const auto& z : y->args) stack.push_back(&z);
            if (y->kind != Expr::Kind::access || !y->shifts.empty()) continue;
            for (std::size_t j = 0; j < i; ++j) {
              if (k.ops[j].out != y->tensor || k.ops[j].out_indices != y->indices || k.ops[j].out_indices != op.out_indices) continue;
              const Tensor* t = k.tensor(y->tensor);
              bool only = t != nullptr && t->role == Role::temp;
              for (std::size_t r = 0; only && r < k.ops.size(); ++r) only = r == i || !reads(k.ops[r].expr, y->tensor);
              if (only) share[j] = std::min(share[j], out.share);
            }
          }
        }
      }
    } else if (op.kind() == OpKind::map) {
      out = map_mask(e, masks);
      share[i] = out.share;
    } else if (op.kind() == OpKind::reduce) {
      const Masked in = map_mask(e, masks);
      if ((op.reduce == ReduceOp::max && in.m == Mask::neg_inf) || (op.reduce == ReduceOp::sum && in.m == Mask::zero))
        share[i] = in.share;
    } else if (op.kind() == OpKind::contract && e.args.size() == 2) {
      const Masked x = aligned(e.args[0], masks), y = aligned(e.args[1], masks);
      if (x.m == Mask::zero) share[i] = x.share;
      else if (y.m == Mask::zero) share[i] = y.share;
    }
    if (out.m != Mask::none) masks[op.out] = {out, op.out_indices};
  }
  for (std::size_t i = 0; i < k.ops.size(); ++i) {
    auto& f = a.op_flops[i];
    const auto kept = [&](std::int64_t x) {
      return share[i] < 1.0 ? static_cast<std::int64_t>(std::llround(static_cast<double>(x) * share[i])) : x;
    };
    f = kept(f);
    a.flops += f;
    a.elementwise_ops += kept(dom_ops[i]);
    a.activation_evals += kept(dom_acts[i]);
    if (k.ops[i].kind() == OpKind::contract) a.contraction_flops += f;
  }
  for (const auto& t : k.tensors)
    if (t.role != Role::temp) a.min_hbm_bytes += k.elements(t) * static_cast<std::int64_t>(dtype_bytes(t.dtype));
  a.intensity = a.min_hbm_bytes > 0 ? static_cast<double>(a.flops) / static_cast<double>(a.min_hbm_bytes) : 0.0;
  return a;
}

}  // namespace kevo::ir
