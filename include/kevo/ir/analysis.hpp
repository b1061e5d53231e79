// Analysis: FLOPs, minimum HBM traffic and arithmetic intensity — the inputs of every roofline
// figure kevo reports.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kevo/ir/kernel.hpp"

namespace kevo::ir {

struct Analysis {
  std::vector<std::int64_t> op_flops;  // per op (contract: 2 per multiply-add; map: 1 per fn call per element; reduce: 1 per element)
  std::int64_t flops = 0;              // total
  std::int64_t contraction_flops = 0;  // of contract ops (what the Tensor engine does)
  std::int64_t min_hbm_bytes = 0;      // each output written once + each input's elements some access reads, read once (docs/KIR.md)
  double intensity = 0;                // flops / min_hbm_bytes
  // Lower bounds on the non-contraction work any schedule does, for the roofline (docs/KIR.md,
  // "Analysis"): each operator or function counted once per point of its own domain (the indices
  // its operands use, so `rsqrt(var[r] + eps)` inside `Y[r, c] = ...` counts R, not R·C), plus one
  // per combined element of a reduction; operators on index values and constants alone, and casts,
  // count nothing. `activation_evals` is the part that only an activation can compute (exp, log,
  // tanh, gelu, silu, sigmoid: NKI's Scalar-engine function tables).
  std::int64_t elementwise_ops = 0;
  std::int64_t activation_evals = 0;
};
Analysis analyze(const Kernel& k);
// Whether only an activation (NKI's Scalar-engine function tables) computes `f`: exp, log, tanh,
// gelu_tanh, gelu_erf, silu, sigmoid. The Vector engine's ALU has the other operators.
[[nodiscard]] bool activation_only(Fn f) noexcept;

// An expression of index values that is affine in them: k + sum coef[index] * index, from index
// values, constants, +, -, negation and products with a constant; nullopt for anything else (an
// access, another function, a product of two indices). Masks use it (`j <= i`, `2*j > i + 3`).
struct AffineIndex {
  double k = 0;
  std::map<std::string, double> coef;
};
std::optional<AffineIndex> affine_index(const Expr& e);

}  // namespace kevo::ir
