#include "kevo/ir/builder.hpp"

#include <algorithm>

#include "kevo/ir/text.hpp"

namespace kevo::ir {

Expr access(std::string tensor, std::vector<std::string> indices) {
  Expr e;
  e.kind = Expr::Kind::access;
  e.tensor = std::move(tensor);
  e.indices = std::move(indices);
  return e;
}
Expr access(std::string tensor, std::vector<std::string> indices, std::vector<IndexShift> shifts) {
  Expr e = access(std::move(tensor), std::move(indices));
  bool plain = true;
  for (const auto& sh : shifts) plain = plain && sh.plain();
  if (!plain) e.shifts = std::move(shifts);
  return e;
}
Expr constant(double v) {
  Expr e;
  e.kind = Expr::Kind::constant;
  e.value = v;
  return e;
}
Expr index_value(std::string index) {
  Expr e;
  e.kind = Expr::Kind::index;
  e.index = std::move(index);
  return e;
}
Expr call(Fn fn, std::vector<Expr> args) {
  Expr e;
  e.kind = Expr::Kind::call;
  e.fn = fn;
  e.args = std::move(args);
  return e;
}
Expr cast(DType to, Expr x) {
  Expr e = call(Fn::cast, {std::move(x)});
  e.dtype = to;
  return e;
}
Expr select(Expr cond, Expr a, Expr b) { return call(Fn::select, {std::move(cond), std::move(a), std::move(b)}); }
Expr unary(Fn fn, Expr x) { return call(fn, {std::move(x)}); }

Expr operator+(Expr a, Expr b) { return call(Fn::add, {std::move(a), std::move(b)}); }
Expr operator-(Expr a, Expr b) { return call(Fn::sub, {std::move(a), std::move(b)}); }
Expr operator*(Expr a, Expr b) { return call(Fn::mul, {std::move(a), std::move(b)}); }
Expr operator/(Expr a, Expr b) { return call(Fn::div, {std::move(a), std::move(b)}); }
Expr operator-(Expr a) {
  if (a.kind == Expr::Kind::constant) {
    a.value = -a.value;
    return a;
  }
  return call(Fn::neg, {std::move(a)});
}
Expr operator+(Expr a, double b) { return std::move(a) + constant(b); }
Expr operator-(Expr a, double b) { return std::move(a) - constant(b); }
Expr operator*(Expr a, double b) { return std::move(a) * constant(b); }
Expr operator/(Expr a, double b) { return std::move(a) / constant(b); }
Expr operator+(double a, Expr b) { return constant(a) + std::move(b); }
Expr operator-(double a, Expr b) { return constant(a) - std::move(b); }
Expr operator*(double a, Expr b) { return constant(a) * std::move(b); }
Expr operator/(double a, Expr b) { return constant(a) / std::move(b); }
Expr lt(Expr a, Expr b) { return call(Fn::lt, {std::move(a), std::move(b)}); }
Expr le(Expr a, Expr b) { return call(Fn::le, {std::move(a), std::move(b)}); }
Expr gt(Expr a, Expr b) { return call(Fn::gt, {std::move(a), std::move(b)}); }
Expr ge(Expr a, Expr b) { return call(Fn::ge, {std::move(a), std::move(b)}); }

KernelBuilder::KernelBuilder(std::string name) { k_.name = std::move(name); }

KernelBuilder& KernelBuilder::dim(std::string name, std::int64_t size) {
  k_.dims.push_back({std::move(name), size});
  return *this;
}
KernelBuilder& KernelBuilder::input(std::string name, DType dtype, std::vector<std::string> dims) {
  k_.tensors.push_back({std::move(name), dtype, std::move(dims), Role::input});
  return *this;
}
KernelBuilder& KernelBuilder::output(std::string name, DType dtype, std::vector<std::string> dims) {
  k_.tensors.push_back({std::move(name), dtype, std::move(dims), Role::output});
  return *this;
}
KernelBuilder& KernelBuilder::map(std::string out, std::vector<std::string> out_indices, Expr expr) {
  k_.ops.push_back({std::move(out), std::move(out_indices), ReduceOp::none, {}, std::move(expr)});
  return *this;
}
KernelBuilder& KernelBuilder::reduce(ReduceOp op, std::string out, std::vector<std::string> out_indices,
                                     std::vector<std::string> reduce_indices, Expr expr) {
  k_.ops.push_back({std::move(out), std::move(out_indices), op, std::move(reduce_indices), std::move(expr)});
  return *this;
}
KernelBuilder& KernelBuilder::contract(std::string out, std::vector<std::string> out_indices,
                                       std::vector<std::string> reduce_indices, Expr a, Expr b) {
  return reduce(ReduceOp::sum, std::move(out), std::move(out_indices), std::move(reduce_indices),
                std::move(a) * std::move(b));
}

Expected<Kernel, Diagnostic> KernelBuilder::build() const {
  // inputs before outputs whatever order they were added in (the canonical signature order)
  Kernel k = k_;
  std::stable_partition(k.tensors.begin(), k.tensors.end(), [](const Tensor& t) { return t.role == Role::input; });
  return validate(std::move(k));
}

Kernel KernelBuilder::build_or_throw() const {
  auto r = build();
  if (!r) throw Error(r.error().str());
  return std::move(r).value();
}

}  // namespace kevo::ir
