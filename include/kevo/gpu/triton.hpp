// The Triton emitter: one schedule -> one readable Python module holding the @triton.jit kernel(s)
// and `launch(inputs, outputs)`, which calls them with the schedule's grid, num_warps and
// num_stages. Deterministic: the same kernel and schedule give the same text.
#pragma once
#include <string>

#include "kevo/gpu/kernel.hpp"
#include "kevo/gpu/space.hpp"
#include "kevo/gpu/target.hpp"

namespace kevo::gpu {

// The module's contract (what the worker relies on, docs/GPU.md):
//   INPUTS / OUTPUTS: tuples of tensor names in kernel order;
//   launch(**tensors): runs the kernel on CUDA tensors (inputs and preallocated outputs by name).
std::string emit_triton(const GpuKernel& k, const TritonSchedule& s, const GpuTarget& t);

}  // namespace kevo::gpu
