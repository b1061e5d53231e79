// The reference evaluator: the ground truth every correctness check uses. Evaluates any kernel
// on the CPU (Eigen), fp32 arithmetic (fp64 option), rounding each tensor to its storage dtype.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "kevo/ir/kernel.hpp"

namespace kevo::ir {

// Round-to-nearest-even to a storage dtype, returned as float (fp32 is the identity).
float round_to(DType t, float x) noexcept;

// Fresh random non-degenerate inputs (one vector per Kernel::tensors entry; empty for
// non-inputs), already rounded to each input's dtype. Deterministic in `seed`.
std::vector<std::vector<float>> random_inputs(const Kernel& k, std::uint64_t seed);

struct EvalOptions {
  bool fp64 = false;  // accumulate in double (a tighter oracle)
};
// Values of every tensor (indexed like Kernel::tensors; inputs copied through).
// `tensors` holds at least the inputs at their indices.
std::vector<std::vector<float>> evaluate(const Kernel& k, std::span<const std::vector<float>> tensors,
                                         EvalOptions opt = {});

}  // namespace kevo::ir
