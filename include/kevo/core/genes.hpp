// Typed genes and the search space they form. The evolution engine mutates genomes through
// these types alone (neighbour steps for ordinals, swaps for permutations, resets for
// categoricals, Gaussian steps for continuous genes) without knowing what a gene means; the
// schedule module gives them meaning.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kevo/core/rng.hpp"

namespace kevo {

enum class GeneKind : std::uint8_t { categorical, ordinal, permutation, boolean, continuous };
const char* to_string(GeneKind k) noexcept;

// One gene. Its value in a genome is an index into `labels` (categorical, ordinal, boolean),
// for a permutation `labels.size()` slots holding a permutation of 0..n-1, and for a continuous
// gene a position 0..kContinuousSteps in its interval [lo, hi] (linear, or geometric when
// log_scale): a fixed-point real with 2^24 steps, float32's resolution, so that genomes stay
// integers -- hashed, deduplicated, journaled and resumed exactly like the other kinds.
struct Gene {
  static constexpr std::int32_t kContinuousSteps = 1 << 24;

  std::string name;                 // unique within a space, e.g. "tile.m" or "nest0.order"
  GeneKind kind = GeneKind::categorical;
  std::vector<std::string> labels;  // printed form of each choice / each permuted item (continuous: none)
  std::vector<std::int64_t> values; // ordinal: the numeric value of each choice, ascending
  std::string group;                // crossover keeps genes of one group together
  double lo = 0, hi = 0;            // continuous: the interval
  bool log_scale = false;           // continuous: positions are spread geometrically (lo > 0)

  [[nodiscard]] std::size_t width() const noexcept { return kind == GeneKind::permutation ? labels.size() : 1; }
  // Distinct values of one slot (continuous: kContinuousSteps + 1 positions).
  [[nodiscard]] std::size_t choices() const noexcept {
    return kind == GeneKind::continuous ? static_cast<std::size_t>(kContinuousSteps) + 1 : labels.size();
  }
  // log10 of the number of distinct values (n! for a permutation).
  [[nodiscard]] double log10_cardinality() const noexcept;
  // Continuous: the real value of a position, and the position nearest a value (clamped).
  [[nodiscard]] double real(std::int32_t position) const noexcept;
  [[nodiscard]] std::int32_t position(double value) const noexcept;
  // The printed form of one slot's value (a label, or a continuous gene's real value).
  [[nodiscard]] std::string label(std::int32_t v) const;

  static Gene categorical(std::string name, std::vector<std::string> labels, std::string group = {});
  static Gene ordinal(std::string name, std::vector<std::int64_t> values, std::string group = {});
  static Gene permutation(std::string name, std::vector<std::string> items, std::string group = {});
  static Gene boolean(std::string name, std::string group = {});
  // A bounded real in [lo, hi] (lo < hi); log_scale spreads it geometrically (needs lo > 0),
  // for rates, temperatures and other quantities searched over orders of magnitude.
  static Gene continuous(std::string name, double lo, double hi, bool log_scale = false, std::string group = {});
};

// A genome: the concatenated slots of every gene of a space.
using Genome = std::vector<std::int32_t>;

// Canonical hash of a genome (stable across runs and machines).
std::uint64_t genome_hash(std::span<const std::int32_t> g) noexcept;

class Space;
// Identity of a search space: gene names, kinds, groups and domains (stable across runs and
// machines). Checkpoints resume, and MPI ranks cooperate, only on equal fingerprints.
std::uint64_t space_fingerprint(const Space& space);

class Space {
 public:
  Space() = default;
  // Adds a gene and returns its index. Throws kevo::Error on an empty domain or duplicate name.
  std::size_t add(Gene g);

  [[nodiscard]] std::size_t size() const noexcept { return genes_.size(); }
  [[nodiscard]] std::size_t width() const noexcept { return width_; }
  [[nodiscard]] const Gene& gene(std::size_t i) const { return genes_.at(i); }
  [[nodiscard]] const std::vector<Gene>& genes() const noexcept { return genes_; }
  [[nodiscard]] std::size_t offset(std::size_t i) const { return offsets_.at(i); }
  [[nodiscard]] std::optional<std::size_t> find(std::string_view name) const noexcept;
  // Distinct group names in first-appearance order.
  [[nodiscard]] std::vector<std::string> groups() const;

  // The slots of gene i inside genome g.
  [[nodiscard]] std::span<const std::int32_t> slots(const Genome& g, std::size_t i) const;
  [[nodiscard]] std::span<std::int32_t> slots(Genome& g, std::size_t i) const;
  // Value index of a single-slot gene.
  [[nodiscard]] std::int32_t at(const Genome& g, std::size_t i) const { return slots(g, i)[0]; }
  // The real value of continuous gene i in g (Gene::real of its position).
  [[nodiscard]] double real(const Genome& g, std::size_t i) const { return gene(i).real(at(g, i)); }

  // log10 of the number of genomes (exact product of the gene cardinalities).
  [[nodiscard]] double log10_cardinality() const noexcept;
  // Number of genomes when it fits in 63 bits.
  [[nodiscard]] std::optional<std::uint64_t> cardinality() const noexcept;

  // True when g has the right width and every slot is in its gene's domain.
  [[nodiscard]] bool contains(const Genome& g) const noexcept;
  // A uniformly random genome.
  [[nodiscard]] Genome random(Rng& rng) const;
  // The first genome (index 0 everywhere, identity permutations).
  [[nodiscard]] Genome first() const;
  // The index-th genome of a mixed-radix enumeration (index < cardinality()); for exhaustive search.
  [[nodiscard]] Genome nth(std::uint64_t index) const;

  // "name=label name=label ..." (debugging and logs; schedules have their own text form).
  [[nodiscard]] std::string describe(const Genome& g) const;

 private:
  std::vector<Gene> genes_;
  std::vector<std::size_t> offsets_;
  std::size_t width_ = 0;
};

}  // namespace kevo
