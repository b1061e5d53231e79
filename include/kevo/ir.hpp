// kevo::ir — the algorithm side of a kernel: the tensor-algebra IR, its .kir text format, a C++
// builder and a workload library, the reference evaluator (ground truth) and FLOP/byte analysis.
#pragma once
#include "kevo/ir/analysis.hpp"
#include "kevo/ir/builder.hpp"
#include "kevo/ir/dtype.hpp"
#include "kevo/ir/eval.hpp"
#include "kevo/ir/fn.hpp"
#include "kevo/ir/graph.hpp"
#include "kevo/ir/kernel.hpp"
#include "kevo/ir/random.hpp"
#include "kevo/ir/reshape.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/ir/workloads.hpp"
