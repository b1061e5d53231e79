// The built-in search strategies, plug-ins of the evo::Strategy concept (kevo/evo/strategy.hpp)
// like any user strategy: Genetic (ga, islands, map_elites), SteadyState, RandomSearch, Exhaustive,
// Surrogate (a Gaussian-process cost model screening bred candidates).
// builtin_strategy() builds the one a Config names; Engine does so unless set_strategy() is called.
#pragma once
#include "kevo/evo/engine.hpp"
#include "kevo/evo/strategies/common.hpp"
#include "kevo/evo/strategies/genetic.hpp"
#include "kevo/evo/strategies/sampling.hpp"
#include "kevo/evo/strategies/steady_state.hpp"
#include "kevo/evo/strategies/surrogate.hpp"
#include "kevo/evo/strategy.hpp"

namespace kevo::evo {

// The built-in strategy named by config.algorithm, with the config's population, elites,
// tournament and island settings.
Strategy builtin_strategy(const Config& config);

}  // namespace kevo::evo
