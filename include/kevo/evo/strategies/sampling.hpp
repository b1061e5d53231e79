// The baselines: uniform random sampling and exhaustive enumeration (Space::nth). Neither uses
// operators; both keep the best `population` individuals seen for Result::elites.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/evo/strategy.hpp"

namespace kevo::evo {

struct RandomSearch {
  std::size_t pop_size = 32;     // batch size
  std::uint64_t cursor = 0;        // state: genomes drawn so far (names each draw's stream)
  std::vector<Individual> pop;     // state: the best seen, best first

  [[nodiscard]] std::string name() const { return "random"; }
  [[nodiscard]] bool uses_operators() const { return false; }
  void ask(std::size_t n, AskContext& ctx);
  void tell(std::span<Evaluated> results);
  [[nodiscard]] std::string save() const;
  void load(std::string_view bytes, std::span<const Individual> history);
  [[nodiscard]] const std::vector<Individual>& population() const { return pop; }
};

struct Exhaustive {
  std::size_t pop_size = 32;     // batch size max(population, 64); also the number of leaders kept
  std::uint64_t cursor = 0;        // state: next Space::nth index
  std::vector<Individual> pop;     // state: the best seen, best first

  [[nodiscard]] std::string name() const { return "exhaustive"; }
  [[nodiscard]] bool uses_operators() const { return false; }
  void ask(std::size_t n, AskContext& ctx);
  void tell(std::span<Evaluated> results);
  [[nodiscard]] std::string save() const;
  void load(std::string_view bytes, std::span<const Individual> history);
  [[nodiscard]] const std::vector<Individual>& population() const { return pop; }
};

}  // namespace kevo::evo
