// The asynchronous built-in: evaluations run as threads free up and each result joins the
// population (when it beats the worst) as soon as it arrives. Not reproducible (completion order).
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/evo/strategy.hpp"

namespace kevo::evo {

struct SteadyState {
  std::size_t pop_size = 32;
  std::size_t tournament = 3;

  std::uint64_t cursor = 0;        // state: refills so far (names each refill's random stream)
  std::vector<Individual> pop;     // state: the best `population` individuals, best first

  [[nodiscard]] std::string name() const { return "steady_state"; }
  [[nodiscard]] bool asynchronous() const { return true; }
  void ask(std::size_t n, AskContext& ctx);
  void tell(std::span<Evaluated> results);
  [[nodiscard]] std::string save() const;
  void load(std::string_view bytes, std::span<const Individual> history);
  [[nodiscard]] const std::vector<Individual>& population() const { return pop; }
};

}  // namespace kevo::evo
