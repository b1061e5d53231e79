// Structural checks of a lowered program: per-instruction tile limits and partition-start rules
// of the target, and dependency order (every predecessor earlier; acyclic, via Boost.Graph).
#pragma once
#include "kevo/lower/lower.hpp"
#include "kevo/lower/program.hpp"

namespace kevo::lower {

// The first violation, or nothing when the program is sound.
Expected<void, Invalid> check_program(const TileProgram& p, const target::Target& t);
// True when the dependency graph is acyclic and the stored order is a topological order
// (checked with Boost.Graph's topological_sort; meant for tests and debugging).
bool dependencies_form_dag(const TileProgram& p);

}  // namespace kevo::lower
