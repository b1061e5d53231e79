// gpu: kevo on a GPU through Triton. A GPU target as data (targets/gpu/*.json), the structural
// classification of a kernel into what Triton is emitted for (contraction with an epilogue, row
// kernel, attention), the typed schedule space derived from kernel and target (block sizes,
// warps, pipeline stages, launch-order grouping, split-K, persistent programs, epilogue fusion)
// with validity as values, the Triton emitter, and TritonProblem: an evo::Problem measured by a
// GPU worker over the worker protocol (docs/GPU.md, docs/PROTOCOL.md).
#pragma once
#include "kevo/gpu/kernel.hpp"
#include "kevo/gpu/problem.hpp"
#include "kevo/gpu/space.hpp"
#include "kevo/gpu/target.hpp"
#include "kevo/gpu/triton.hpp"
