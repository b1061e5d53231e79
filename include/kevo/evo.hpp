// kevo::evo — the evolution engine: problems and operators as plug-ins (type-erased values),
// built-in domain-aware operators, the MAP-Elites archive, and the Engine that runs GA, islands,
// MAP-Elites, steady-state, random and exhaustive searches with checkpoints. It knows genomes
// and fitness, never kernels.
#pragma once
#include "kevo/evo/archive.hpp"
#include "kevo/evo/engine.hpp"
#include "kevo/evo/operator.hpp"
#include "kevo/evo/operators.hpp"
#include "kevo/evo/problem.hpp"
