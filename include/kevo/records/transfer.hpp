// Carrying a recorded schedule to another shape (or another target) of the same kernel, keeping
// what the schedule means rather than only its literal gene values. docs/RECORDS.md#warm-starts.
#pragma once
#include <optional>

#include "kevo/core/genes.hpp"
#include "kevo/core/rng.hpp"
#include "kevo/schedule/space.hpp"

namespace kevo::records {

// A genome of `from` (the same kernel structure at another shape) as a genome of `to`, valid
// there, or nullopt when no fix makes it valid. In order, keeping as much of the schedule as
// lowers at the new shape:
//  1. gene by gene through names and labels (verify::transfer_genome);
//  2. a contraction block that covered its whole dimension at the old shape (e.g. `block k=16`
//     with K = 16 tiles) covers it at the new one too (the smallest block >= the new tile count),
//     so the loop structure stays as it was instead of gaining a ragged block loop; other blocks
//     keep their tile count (their per-block footprint);
//  3. when that overflows SBUF, rotating buffers deeper than the number of times they are filled
//     (a load or store at the root is filled once) are cut to what is used: the same program,
//     less memory (at the old shape such idle slots cost nothing, so searches leave them);
//  4. the literal transfer of step 1 (blocks as recorded), with the same trimming;
//  5. the space's repair (ScheduleSpace::repair) of step 2's genome.
std::optional<Genome> transfer_schedule(const schedule::ScheduleSpace& from, const Genome& g,
                                        const schedule::ScheduleSpace& to, Rng& rng);

// A genome of `space` made valid with the least change: unchanged when it lowers; else, on an
// SBUF overflow, idle buffer slots trimmed (step 3 above); else the space's repair. nullopt when
// nothing makes it valid. Used for schedules recorded on other targets.
std::optional<Genome> fit_schedule(const schedule::ScheduleSpace& space, Genome g, Rng& rng);

// Step 3 alone: every contraction's load and store buffer count cut to the smallest choice that
// still holds every fill (fills = iterations of the loops around the load or store). Returns
// the number of genes changed. The lowered program is the same; only SBUF use shrinks.
std::size_t trim_idle_buffers(const schedule::ScheduleSpace& space, Genome& g);

}  // namespace kevo::records
