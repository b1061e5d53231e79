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
  std::int64_t min_hbm_bytes = 0;      // each input read once + each output written once, at storage dtype
  double intensity = 0;                // flops / min_hbm_bytes
};
Analysis analyze(const Kernel& k);

// An expression of index values that is affine in them: k + sum coef[index] * index, from index
// values, constants, +, -, negation and products with a constant; nullopt for anything else (an
// access, another function, a product of two indices). Masks use it (`j <= i`, `2*j > i + 3`).
struct AffineIndex {
  double k = 0;
  std::map<std::string, double> coef;
};
std::optional<AffineIndex> affine_index(const Expr& e);

}  // namespace kevo::ir
