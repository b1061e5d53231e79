// Built-in, domain-aware variation operators. They change genomes through gene kinds alone:
// neighbour steps for ordinals (tile sizes, block factors), swap/insert for permutations (loop
// orders), resets for categoricals and booleans; crossover keeps gene groups whole. Every
// proposal they make lies inside the space (Space::contains).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "kevo/evo/operator.hpp"

namespace kevo::evo {

// Mutates one parent in place of a few genes. Each gene mutates with probability `rate`
// (0: 1 / number of genes); at least one gene always changes.
//   ordinal: a step of +-1 (p 0.75) or +-2 (p 0.25), reflected at the ends of the domain;
//   permutation: swap two items (p 0.5) or move one item to another position (insert);
//   categorical: a different value drawn uniformly; boolean: flipped;
//   continuous: a Gaussian step, its scale drawn log-uniformly in [0.001, 0.1] of the interval
//   (of its logarithm when log-scaled), reflected at the ends.
struct Mutate {
  double rate = 0.0;
  [[nodiscard]] std::string name() const { return "mutate"; }
  [[nodiscard]] std::size_t arity() const { return 1; }
  std::vector<Genome> propose(const OperatorContext& ctx) const;
};

// Large jumps: redraws `rate`-many genes uniformly (ordinals anywhere in their domain,
// permutations reshuffled); at least one gene is redrawn to a different value.
struct Reset {
  double rate = 0.0;
  [[nodiscard]] std::string name() const { return "reset"; }
  [[nodiscard]] std::size_t arity() const { return 1; }
  std::vector<Genome> propose(const OperatorContext& ctx) const;
};

// Uniform crossover over gene groups: each group (Gene::group; an ungrouped gene is its own
// group) comes whole from one parent, so co-adapted genes such as the tiles of one loop nest
// stay together; a continuous gene is blended (BLX-0.25: uniform in the parents' interval
// widened by a quarter of its length each side). When the child equals a parent it is mutated
// once so that it is new.
struct GroupCrossover {
  double mutation_rate = 0.0;  // rate of the Mutate applied when the child copies a parent
  bool mutate_copies = true;   // false: a child equal to a parent is returned as is (a duplicate)
  [[nodiscard]] std::string name() const { return "crossover"; }
  [[nodiscard]] std::size_t arity() const { return 2; }
  std::vector<Genome> propose(const OperatorContext& ctx) const;
};

// Crossover for order problems (not among the engine's defaults; add it with Engine::add_operator):
// each permutation gene by order crossover (OX1: a random slice from the first parent, the
// remaining items in the second parent's order, so relative order is inherited), continuous genes
// blended as GroupCrossover does, every other gene from either parent with probability 1/2.
struct OrderCrossover {
  double mutation_rate = 0.0;
  bool mutate_copies = true;
  [[nodiscard]] std::string name() const { return "order_crossover"; }
  [[nodiscard]] std::size_t arity() const { return 2; }
  std::vector<Genome> propose(const OperatorContext& ctx) const;
};

// Applies one Mutate step to g in place (helper for user operators). Returns g changed.
void mutate_genome(const Space& space, Genome& g, double rate, Rng& rng);
// Redraws genes of g in place as Reset does.
void reset_genome(const Space& space, Genome& g, double rate, Rng& rng);

}  // namespace kevo::evo
