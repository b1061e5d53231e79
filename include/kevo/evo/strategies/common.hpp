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

// Genes in which a and b differ (a permutation gene counts once, however many items moved).
std::size_t gene_distance(const Space& space, const Genome& a, const Genome& b);

// Clearing (Petrowski, "A clearing procedure as a niching method for genetic algorithms", ICEC
// 1996), with one winner per niche: the candidates best first, each admitted when it differs in at
// least `radius` genes from every one admitted before it; then the cleared ones, best first, while
// room is left. Returns at most `capacity` individuals, best first.
std::vector<Individual> clear_niches(const Space& space, std::vector<Individual> candidates, std::size_t radius,
                                     std::size_t capacity);

// The radius Genetic uses for niche_radius r: min(r, ceil(movable genes / 4)), so a small genome
// is not cleared down to one niche.
std::size_t niche_radius_for(const Space& space, std::size_t radius);

}  // namespace kevo::evo
