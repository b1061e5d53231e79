// Private to the lowering: the issue order of a nest's instructions (VectorPlan::issue).
// Every engine and DMA queue of a NeuronCore runs its instructions in program order, and the
// emitted NKI kernel is straight-line code in kevo's order, so a step whose operands are ready
// still waits behind an earlier step's instruction that waits on another engine. Reordering a
// nest's instructions by a schedule estimated with per-instruction costs from the target lets a
// later step's work run in those waits.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "kevo/lower/program.hpp"
#include "kevo/schedule/detail/plan.hpp"
#include "kevo/target/target.hpp"

namespace kevo::lower::detail {

// A range [first, end) of a program's instructions (one nest's) and how to order it: `ready` (by
// their earliest start when each starts as soon as its predecessors end) or `list` (a list
// schedule: each engine and each DMA queue runs one instruction at a time, and the next placed is
// the one that can start first on its own). Ties keep program order.
struct IssueRange {
  std::size_t first = 0, end = 0;
  schedule::IssueOrder order = schedule::IssueOrder::ready;
};

// Reorders each range (disjoint, ascending) and renumbers every dependency edge. Both orders are
// topological (an instruction comes after its predecessors), so the program reads and writes as
// before.
void reorder_issue(TileProgram& p, const std::vector<IssueRange>& ranges, const target::Target& t);

}  // namespace kevo::lower::detail
