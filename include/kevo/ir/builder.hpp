// The C++ builder for kernels: the same kernels as .kir text, written as code. Expressions
// compose with ordinary operators (A(m, k) * B(k, n), exp(x - mx), select(j <= i, s, -inf)).
// build() runs the same checks as the parser and returns the canonical kernel.
#pragma once
#include <initializer_list>
#include <string>
#include <vector>

#include "kevo/core/error.hpp"
#include "kevo/core/expected.hpp"
#include "kevo/ir/kernel.hpp"

namespace kevo::ir {

// Expression constructors.
Expr access(std::string tensor, std::vector<std::string> indices);
// A shifted access (convolutions, stencils): position d is shifts[d].stride * indices[d] +
// shifts[d].plus + shifts[d].offset, zero outside the tensor; only inputs may be read so.
Expr access(std::string tensor, std::vector<std::string> indices, std::vector<IndexShift> shifts);
Expr constant(double v);
Expr index_value(std::string index);                    // the value of a loop index (for masks)
Expr call(Fn fn, std::vector<Expr> args);
Expr cast(DType to, Expr x);
Expr select(Expr cond, Expr a, Expr b);
Expr unary(Fn fn, Expr x);                               // exp, tanh, gelu_tanh, ...

Expr operator+(Expr a, Expr b);
Expr operator-(Expr a, Expr b);
Expr operator*(Expr a, Expr b);
Expr operator/(Expr a, Expr b);
Expr operator-(Expr a);  // a negative constant for constants, else neg(a)
Expr operator+(Expr a, double b);
Expr operator-(Expr a, double b);
Expr operator*(Expr a, double b);
Expr operator/(Expr a, double b);
Expr operator+(double a, Expr b);
Expr operator-(double a, Expr b);
Expr operator*(double a, Expr b);
Expr operator/(double a, Expr b);
// Comparisons (1 / 0), meant for select().
Expr lt(Expr a, Expr b);
Expr le(Expr a, Expr b);
Expr gt(Expr a, Expr b);
Expr ge(Expr a, Expr b);

class KernelBuilder {
 public:
  explicit KernelBuilder(std::string name);

  KernelBuilder& dim(std::string name, std::int64_t size);
  KernelBuilder& input(std::string name, DType dtype, std::vector<std::string> dims);
  KernelBuilder& output(std::string name, DType dtype, std::vector<std::string> dims);
  // out[out_indices] = expr
  KernelBuilder& map(std::string out, std::vector<std::string> out_indices, Expr expr);
  // out[out_indices] = op(reduce_indices) expr
  KernelBuilder& reduce(ReduceOp op, std::string out, std::vector<std::string> out_indices,
                        std::vector<std::string> reduce_indices, Expr expr);
  // out[out_indices] = sum(reduce_indices) a * b
  KernelBuilder& contract(std::string out, std::vector<std::string> out_indices,
                          std::vector<std::string> reduce_indices, Expr a, Expr b);

  // Checked, canonical kernel (temps inferred as fp32 from their writes).
  [[nodiscard]] Expected<Kernel, Diagnostic> build() const;
  // build() or throw kevo::Error with the diagnostic (for kernels that are correct by construction).
  [[nodiscard]] Kernel build_or_throw() const;

 private:
  Kernel k_;
};

}  // namespace kevo::ir
