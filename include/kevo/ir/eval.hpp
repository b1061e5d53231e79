// The reference evaluator: the ground truth every correctness check uses. Evaluates any kernel
// on the CPU (Eigen), fp32 arithmetic (fp64 option), rounding each tensor to its storage dtype.
#pragma once
#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "kevo/ir/kernel.hpp"

namespace kevo::ir {

// Round-to-nearest-even to a storage dtype, returned as float (fp32 is the identity).
float round_to(DType t, float x) noexcept;
// A dtype's unit roundoff: the largest relative error of rounding to it, half its ulp at 1
// (fp32 2^-24, bf16 2^-8, fp16 2^-11, both fp8s 2^-4).
constexpr double unit_roundoff(DType t) noexcept {
  switch (t) {
    case DType::fp32: return 0x1p-24;
    case DType::bf16: return 0x1p-8;
    case DType::fp16: return 0x1p-11;
    case DType::fp8_e4m3:
    case DType::fp8_e4m3fn: return 0x1p-4;
  }
  return 0x1p-24;
}

// Fresh random non-degenerate inputs (one vector per Kernel::tensors entry; empty for
// non-inputs), already rounded to each input's dtype. Deterministic in `seed`. `cancel`, set from
// another thread, stops it early with kevo::Error ("random_inputs: cancelled"): two 4096^2 inputs
// take about a second.
std::vector<std::vector<float>> random_inputs(const Kernel& k, std::uint64_t seed, const std::atomic<bool>* cancel = nullptr);

struct EvalOptions {
  bool fp64 = false;  // accumulate in double (a tighter oracle)
  // Set from another thread to stop the evaluation early: evaluate() then throws kevo::Error
  // ("evaluate: cancelled"). Checked between statements, every few rows, every 256 rows of a
  // contraction's gathers, products and write-back, and every 2^18 input values copied
  // (kevo.Kernel.reference's Ctrl-C: an 8192^3 reference ran to its end).
  const std::atomic<bool>* cancel = nullptr;
};
// Values of every tensor (indexed like Kernel::tensors; inputs copied through).
// `tensors` holds at least the inputs at their indices.
std::vector<std::vector<float>> evaluate(const Kernel& k, std::span<const std::vector<float>> tensors,
                                         EvalOptions opt = {});

// The fp64 values (as evaluate with fp64) and, per element, an estimate of how far a program
// computing the same algebra in fp32 arithmetic may land from them: rounding errors propagated
// forward through every operation (first order; a function's through its values at x ± the
// error), the errors of a sum's L terms added as independent errors (root of the sum of
// squares) plus 2^-24 * sqrt(L) * sum|term| for fp32 accumulation in any order (probabilistic
// rounding error analysis: Higham and Mary, SIAM J. Sci. Comput. 41(5), 2019), a contraction's
// likewise with sqrt(A^2 err(B)^2 + err(A)^2 B^2) + 2^-24 * sqrt(K) * |A||B|.
// Large where the algebra cancels ((x + 1e4) - 1e4, E[x^2] - E[x]^2), negligible where it does
// not: what verification must allow any schedule, since none can do better in fp32.
struct ValuesWithError {
  std::vector<std::vector<float>> values;
  std::vector<std::vector<float>> error;  // same shape; inputs 0
};
// `cancel`, set from another thread, stops it early as it stops evaluate (EvalOptions::cancel).
ValuesWithError evaluate_with_error(const Kernel& k, std::span<const std::vector<float>> tensors,
                                    const std::atomic<bool>* cancel = nullptr);

}  // namespace kevo::ir
