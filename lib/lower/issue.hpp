// Private to the lowering: the issue order of a nest's instructions (VectorPlan::issue_ready).
// Every engine and DMA queue of a NeuronCore runs its instructions in program order, and the
// emitted NKI kernel is straight-line code in kevo's order, so a step whose operands are ready
// still waits behind an earlier step's instruction that waits on another engine. Reordering the
// instructions of a range by their estimated earliest start (a dependency-only schedule with
// per-instruction cost estimates from the target) lets a later step's work run in those waits.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "kevo/lower/program.hpp"
#include "kevo/target/target.hpp"

namespace kevo::lower::detail {

// An estimate of an instruction's duration in ns on `t` (for ordering only: the simulator
// measures).
double issue_cost_ns(const TileProgram& p, const Instr& in, const target::Target& t);

// Reorders the instructions of each range [first, second) (disjoint, ascending) by their earliest
// start when every instruction starts as soon as its predecessors end (ties keep program order),
// and renumbers every dependency edge. The new order is topological (a successor starts after its
// predecessor ends, every cost being positive), so every program reads and writes as before.
void reorder_by_ready(TileProgram& p, const std::vector<std::pair<std::size_t, std::size_t>>& ranges,
                      const target::Target& t);

}  // namespace kevo::lower::detail
