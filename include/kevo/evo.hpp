// kevo::evo — the evolution engine: problems, operators and search strategies as plug-ins
// (type-erased values), built-in domain-aware operators, the MAP-Elites archive, the built-in
// strategies (GA, islands, MAP-Elites, steady-state, random, exhaustive), and the Engine that runs
// any strategy with parallel evaluation, an operator bandit and checkpoints. It knows genomes and
// fitness, never kernels.
#pragma once
#include "kevo/evo/archive.hpp"
#include "kevo/evo/engine.hpp"
#include "kevo/evo/operator.hpp"
#include "kevo/evo/operators.hpp"
#include "kevo/evo/problem.hpp"
#include "kevo/evo/strategies.hpp"
#include "kevo/evo/strategy.hpp"
