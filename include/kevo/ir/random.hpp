// Random valid kernels for tests and fuzzers: chains of contractions, elementwise maps, row and
// column reductions, broadcasts, norms and softmaxes over random (divisible and non-divisible)
// shapes and dtypes, numerically sane for comparing a tiled low-precision implementation against
// the reference evaluator. Every kernel is built through KernelBuilder (canonical, checked) and
// is a pure function of (rng state, options). docs/KIR.md describes what it generates.
#pragma once
#include <cstdint>

#include "kevo/core/rng.hpp"
#include "kevo/ir/kernel.hpp"

namespace kevo::ir {

struct RandomKernelOptions {
  int min_statements = 2, max_statements = 6;
  std::int64_t max_extent = 160;                // largest dimension size drawn
  std::int64_t max_tensor_elements = 1 << 16;   // keep each tensor small enough to interpret fast
  std::int64_t max_contraction_depth = 512;     // product of a contraction's reduction extents
  int max_contracted_indices = 3;               // a contraction reduces over 1..this many indices (1..3)
  bool low_precision = true;                    // allow bf16/fp16/fp8_e4m3 inputs/outputs (else fp32 only)
  // chance that a new input's shape is a few short rows (2..4 each) beside one long last dim
  // (1,024 up to max_tensor_elements in all): kernels whose long index the schedule splits across
  // partitions. 0 draws exactly the kernels it always drew.
  double long_dims = 0;
};

// A random kernel that passes every check of the parser/builder (built through KernelBuilder,
// so it is canonical), deterministic in (rng state, options). Advances `rng`. Throws kevo::Error
// only for unusable options (min_statements < 1, max_statements < min_statements, max_extent < 2,
// max_tensor_elements < 4, max_contraction_depth < 2,
// max_contracted_indices outside 1..3).
Kernel random_kernel(Rng& rng, const RandomKernelOptions& opt = {});
// The same from a seed: random_kernel(Rng(seed), opt).
Kernel random_kernel(std::uint64_t seed, const RandomKernelOptions& opt = {});

}  // namespace kevo::ir
