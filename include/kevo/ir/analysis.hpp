// Analysis: FLOPs, minimum HBM traffic and arithmetic intensity — the inputs of every roofline
// figure kevo reports.
#pragma once
#include <cstdint>
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

}  // namespace kevo::ir
