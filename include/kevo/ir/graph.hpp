// The op DAG of a kernel as plain index lists (built with Boost.Graph inside lib/ir): which ops
// produce what an op reads, and which ops read what an op writes. Lowering and scheduling use it.
#pragma once
#include <cstddef>
#include <vector>

#include "kevo/ir/kernel.hpp"

namespace kevo::ir {

struct OpGraph {
  std::vector<std::vector<std::size_t>> producers;  // per op: ops whose outputs it reads (sorted, unique)
  std::vector<std::vector<std::size_t>> consumers;  // per op: ops that read its output (sorted, unique)
  std::vector<std::size_t> topo_order;              // a topological order (program order for valid kernels)
};
OpGraph op_graph(const Kernel& k);

// Indices of ops whose results never reach a kernel output (a valid kernel has none).
std::vector<std::size_t> unused_ops(const Kernel& k);

}  // namespace kevo::ir
