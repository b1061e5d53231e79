// Helpers shared by the built-in strategies, public so user strategies can use them too.
#pragma once
#include <cstddef>
#include <span>
#include <vector>

#include "kevo/core/rng.hpp"
#include "kevo/evo/operator.hpp"

namespace kevo::evo {

// Tournament selection: the best (evo::better) of `size` uniform draws from pop (not empty).
const Individual& tournament(std::span<const Individual> pop, std::size_t size, Rng& rng);

// Inserts ind into pop (kept sorted best first by evo::better) when pop has room or ind beats its
// worst member; pop never grows beyond capacity.
void keep_best(std::vector<Individual>& pop, Individual ind, std::size_t capacity);

// Sorts best first (evo::better).
void sort_best_first(std::vector<Individual>& pop);

}  // namespace kevo::evo
