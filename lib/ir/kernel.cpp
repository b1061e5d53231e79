#include <algorithm>
#include <set>
#include "kevo/ir/kernel.hpp"

#include <fmt/format.h>

#include <array>
#include <utility>

#include "kevo/core/error.hpp"

namespace kevo::ir {

namespace {
constexpr std::array<std::pair<DType, std::string_view>, 5> kDTypes{{
    {DType::bf16, "bf16"},
    {DType::fp16, "fp16"},
    {DType::fp32, "fp32"},
    {DType::fp8_e4m3, "fp8_e4m3"},
    {DType::fp8_e4m3fn, "fp8_e4m3fn"},
}};

struct FnInfo {
  Fn fn;
  std::string_view name;
  int arity;
};
constexpr std::array<FnInfo, 29> kFns{{
    {Fn::add, "add", 2},         {Fn::sub, "sub", 2},           {Fn::mul, "mul", 2},
    {Fn::div, "div", 2},         {Fn::max, "max", 2},           {Fn::min, "min", 2},
    {Fn::lt, "lt", 2},           {Fn::le, "le", 2},             {Fn::gt, "gt", 2},
    {Fn::ge, "ge", 2},           {Fn::eq, "eq", 2},             {Fn::ne, "ne", 2},
    {Fn::exp, "exp", 1},         {Fn::log, "log", 1},           {Fn::tanh, "tanh", 1},
    {Fn::gelu_tanh, "gelu", 1},  {Fn::gelu_erf, "gelu_erf", 1}, {Fn::silu, "silu", 1},
    {Fn::relu, "relu", 1},       {Fn::sigmoid, "sigmoid", 1},   {Fn::rsqrt, "rsqrt", 1},
    {Fn::sqrt, "sqrt", 1},       {Fn::square, "square", 1},     {Fn::abs, "abs", 1},
    {Fn::neg, "neg", 1},         {Fn::reciprocal, "reciprocal", 1}, {Fn::cast, "cast", 1},
    {Fn::select, "select", 3},   {Fn::gelu_tanh, "gelu_tanh", 1},
}};
}  // namespace

std::string_view to_string(DType t) noexcept {
  for (const auto& [d, n] : kDTypes)
    if (d == t) return n;
  return "?";
}

std::optional<DType> dtype_from_string(std::string_view s) noexcept {
  for (const auto& [d, n] : kDTypes)
    if (n == s) return d;
  return std::nullopt;
}

std::size_t dtype_bytes(DType t) noexcept {
  switch (t) {
    case DType::bf16:
    case DType::fp16: return 2;
    case DType::fp32: return 4;
    case DType::fp8_e4m3:
    case DType::fp8_e4m3fn: return 1;
  }
  return 4;
}

std::string_view dtype_names() noexcept { return "bf16, fp16, fp32, fp8_e4m3, fp8_e4m3fn"; }

std::string_view to_string(Fn f) noexcept {
  for (const auto& i : kFns)
    if (i.fn == f) return i.name;  // first entry wins: gelu_tanh spells "gelu"
  return "?";
}

std::optional<Fn> fn_from_string(std::string_view s) noexcept {
  for (const auto& i : kFns)
    if (i.name == s) return i.fn;
  return std::nullopt;
}

int fn_arity(Fn f) noexcept {
  for (const auto& i : kFns)
    if (i.fn == f) return i.arity;
  return 0;
}

std::string_view to_string(ReduceOp r) noexcept {
  switch (r) {
    case ReduceOp::none: return "none";
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::mean: return "mean";
  }
  return "?";
}

std::string_view to_string(OpKind k) noexcept {
  switch (k) {
    case OpKind::contract: return "contract";
    case OpKind::map: return "map";
    case OpKind::reduce: return "reduce";
  }
  return "?";
}

bool is_plain(const Expr& e) noexcept {
  for (const auto& s : e.shifts)
    if (!s.plain()) return false;
  return true;
}
bool has_shifts(const Expr& e) noexcept {
  if (e.kind == Expr::Kind::access && !is_plain(e)) return true;
  for (const auto& a : e.args)
    if (has_shifts(a)) return true;
  return false;
}
bool access_uses(const Expr& e, std::string_view i) noexcept {
  if (e.kind != Expr::Kind::access) return false;
  for (std::size_t d = 0; d < e.indices.size(); ++d) {
    if (e.indices[d] == i) return true;
    if (d < e.shifts.size() && e.shifts[d].plus == i) return true;
  }
  return false;
}
std::string index_text(const Expr& e, std::size_t d) {
  std::string s;
  const IndexShift sh = d < e.shifts.size() ? e.shifts[d] : IndexShift{};
  if (sh.stride != 1) s += fmt::format("{}*", sh.stride);
  s += d < e.indices.size() ? e.indices[d] : std::string("?");
  if (!sh.plus.empty()) s += " + " + sh.plus;
  if (sh.offset > 0) s += fmt::format(" + {}", sh.offset);
  if (sh.offset < 0) s += fmt::format(" - {}", -sh.offset);
  return s;
}

DType Op::temp_dtype() const noexcept {
  if (reduce == ReduceOp::none && expr.kind == Expr::Kind::call && expr.fn == Fn::cast) return expr.dtype;
  return DType::fp32;
}

OpKind Op::kind() const noexcept {
  if (reduce == ReduceOp::sum && expr.kind == Expr::Kind::call && expr.fn == Fn::mul && expr.args.size() == 2 &&
      expr.args[0].kind == Expr::Kind::access && expr.args[1].kind == Expr::Kind::access && is_plain(expr.args[0]) &&
      is_plain(expr.args[1])) {
    // A product whose operands share every output index (a batch of dot products: a sum of
    // squares, a row-wise dot) has no free index for the PE array's rows or columns: one 1x1
    // matmul per batch element. It is a reduction (Vector engine work), not a contraction.
    const auto has = [](const Expr& a, const std::string& i) { return std::find(a.indices.begin(), a.indices.end(), i) != a.indices.end(); };
    for (const auto& i : out_indices)
      if (has(expr.args[0], i) != has(expr.args[1], i)) return OpKind::contract;
    if (out_indices.empty()) return OpKind::contract;  // one dot product: the PE array reduces its terms
    return OpKind::reduce;
  }
  if (reduce != ReduceOp::none) return OpKind::reduce;
  return OpKind::map;
}

std::vector<std::string> conv_taps(const Op& op) {
  const Expr& e = op.expr;
  if (op.reduce != ReduceOp::sum || e.kind != Expr::Kind::call || e.fn != Fn::mul || e.args.size() != 2 ||
      e.args[0].kind != Expr::Kind::access || e.args[1].kind != Expr::Kind::access || is_plain(e.args[0]) == is_plain(e.args[1]))
    return {};
  const Expr& w = is_plain(e.args[0]) ? e.args[0] : e.args[1];  // the plain operand
  const Expr& x = is_plain(e.args[0]) ? e.args[1] : e.args[0];  // the shifted one
  const auto has = [](const std::vector<std::string>& v, const std::string& i) { return std::find(v.begin(), v.end(), i) != v.end(); };
  const auto once = [](const std::vector<std::string>& v) { return std::set<std::string>(v.begin(), v.end()).size() == v.size(); };
  if (!once(w.indices) || !once(x.indices) || !once(op.reduce_indices)) return {};
  std::vector<std::string> taps, plus;
  int channels = 0;
  for (const auto& r : op.reduce_indices) {
    if (has(w.indices, r) && has(x.indices, r)) ++channels;
    else if (has(w.indices, r)) taps.push_back(r);
    else return {};
  }
  if (channels != 1 || taps.empty()) return {};
  for (std::size_t d = 0; d < x.indices.size(); ++d) {
    const IndexShift sh = d < x.shifts.size() ? x.shifts[d] : IndexShift{};
    if (sh.plain()) continue;
    // a shifted dim: an output index (scaled, offset) plus at most one tap
    if (!has(op.out_indices, x.indices[d]) || has(w.indices, x.indices[d])) return {};
    if (!sh.plus.empty()) {
      if (!has(taps, sh.plus) || has(plus, sh.plus)) return {};
      plus.push_back(sh.plus);
    }
  }
  if (plus.size() != taps.size()) return {};  // every tap shifts the other operand
  bool own = false;
  for (const auto& i : op.out_indices) {
    if (!has(w.indices, i) && !has(x.indices, i)) return {};
    own = own || has(w.indices, i) != has(x.indices, i);
  }
  if (!own) return {};
  return taps;
}

bool pe_product(const Op& op) { return op.kind() == OpKind::contract || !conv_taps(op).empty(); }

const Tensor* Kernel::tensor(std::string_view n) const noexcept {
  for (const auto& t : tensors)
    if (t.name == n) return &t;
  return nullptr;
}

const Dim* Kernel::dim(std::string_view n) const noexcept {
  for (const auto& d : dims)
    if (d.name == n) return &d;
  return nullptr;
}

std::int64_t Kernel::dim_size(std::string_view n) const {
  const Dim* d = dim(n);
  if (!d) throw Error(fmt::format("kernel {}: unknown dimension '{}'", name, n));
  return d->size;
}

std::vector<std::int64_t> Kernel::shape(const Tensor& t) const {
  std::vector<std::int64_t> s;
  s.reserve(t.dims.size());
  for (const auto& d : t.dims) s.push_back(dim_size(d));
  return s;
}

std::int64_t Kernel::elements(const Tensor& t) const {
  std::int64_t n = 1;
  for (const auto& d : t.dims) n *= dim_size(d);
  return n;
}

namespace {
void bind_indices(const Kernel& k, const Expr& e, std::vector<std::pair<std::string, std::int64_t>>& out) {
  if (e.kind == Expr::Kind::access) {
    const Tensor* t = k.tensor(e.tensor);
    if (!t) throw Error(fmt::format("kernel {}: unknown tensor '{}'", k.name, e.tensor));
    for (std::size_t i = 0; i < e.indices.size() && i < t->dims.size(); ++i) {
      if (i < e.shifts.size() && !e.shifts[i].plain()) continue;  // a shifted position binds no extent
      for (auto& [n, s] : out)
        if (n == e.indices[i] && s < 0) s = k.dim_size(t->dims[i]);
    }
  }
  for (const auto& a : e.args) bind_indices(k, a, out);
}
}  // namespace

std::vector<std::pair<std::string, std::int64_t>> Kernel::op_indices(std::size_t i) const {
  if (i >= ops.size()) throw Error(fmt::format("kernel {}: op {} out of range", name, i));
  const Op& op = ops[i];
  const Tensor* t = tensor(op.out);
  if (!t) throw Error(fmt::format("kernel {}: op {} writes unknown tensor '{}'", name, i, op.out));
  std::vector<std::pair<std::string, std::int64_t>> r;
  for (std::size_t j = 0; j < op.out_indices.size(); ++j)
    r.emplace_back(op.out_indices[j], j < t->dims.size() ? dim_size(t->dims[j]) : -1);
  for (const auto& ri : op.reduce_indices) r.emplace_back(ri, -1);
  bind_indices(*this, op.expr, r);
  for (const auto& [n, s] : r)
    if (s < 0) throw Error(fmt::format("kernel {}: op {}: index '{}' has no extent", name, i, n));
  return r;
}

}  // namespace kevo::ir
