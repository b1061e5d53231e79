// Lowering: kernel + genome + target -> TileProgram, or a typed reason why the genome is invalid
// (invalid genomes are normal values; no runner ever sees them).
#pragma once
#include <string>

#include "kevo/core/expected.hpp"
#include "kevo/core/genes.hpp"
#include "kevo/core/invalid.hpp"
#include "kevo/lower/program.hpp"
#include "kevo/schedule/space.hpp"

namespace kevo::lower {

// Why a genome is invalid: kevo::Invalid (kevo/core/invalid.hpp), the planner's codes plus
// lowering's own (partition_start, too_large, ...).

Expected<TileProgram, Invalid> lower(const schedule::ScheduleSpace& space, const Genome& g);

// The same into an existing program, reusing its storage: `out` is overwritten (on failure it
// holds a partial program and must not be run). Returns the reason on failure, nothing on success.
// Lowering many genomes into one object avoids allocating and page-faulting tens of megabytes
// of instructions per genome, which is most of the cost of a large program's first lowering.
Expected<void, Invalid> lower_into(const schedule::ScheduleSpace& space, const Genome& g, TileProgram& out);

// The most instructions a lowered program may have (NKI unrolls every loop; past this a schedule
// is invalid, "too_large").
inline constexpr std::size_t kMaxInstructions = 400'000;

// How many instructions lowering `g` would emit, found by walking its loops without building,
// checking or tracking anything (a fraction of lowering's cost); stops counting past
// kMaxInstructions + 1. Plan rejections are returned as lowering would.
Expected<std::size_t, Invalid> count_instructions(const schedule::ScheduleSpace& space, const Genome& g);

}  // namespace kevo::lower
