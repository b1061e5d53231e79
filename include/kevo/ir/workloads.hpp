// The workload library: parameterised kernels addressable by a string such as
// "matmul:M=2048,N=2048,K=2048,dtype=bf16" or "attention:B=1,H=8,S=2048,D=128,causal=1".
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "kevo/core/expected.hpp"
#include "kevo/ir/kernel.hpp"

namespace kevo::ir {

struct WorkloadInfo {
  std::string name;        // "matmul"
  std::string parameters;  // "M, N, K, dtype=bf16, layout=nn|tn|nt"
  std::string example;     // "matmul:M=2048,N=2048,K=2048,dtype=bf16"
  std::string summary;
};
std::vector<WorkloadInfo> workloads();
// Builds a workload from "name:key=value,...". Errors say which key or value is wrong and what is allowed.
Expected<Kernel, std::string> workload(std::string_view spec);

}  // namespace kevo::ir
