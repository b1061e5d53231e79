#include <catch2/catch.hpp>

#include "kevo/evo.hpp"
#include "problems.hpp"

using namespace kevo;

namespace {
// An operator whose proposals arrive by timing (as the LLM operator's do).
struct AsyncOp {
  std::string name() const { return "async"; }
  std::size_t arity() const { return 1; }
  std::vector<Genome> propose(const evo::OperatorContext& ctx) { return {ctx.parents[0].genome}; }
  bool asynchronous() const { return true; }
};
}  // namespace

TEST_CASE("an asynchronous operator turns determinism off and says why", "[evo]") {
  evo::Config c;
  c.seed = 1;
  c.population = 8;
  c.budget.max_evaluations = 40;
  evo::Engine e(evotest::Rastrigin{}, c);
  REQUIRE(e.deterministic());
  e.add_operator(AsyncOp{});
  CHECK_FALSE(e.deterministic());
  const auto r = e.run();
  CHECK_FALSE(r.deterministic);
  CHECK_THAT(r.determinism_note, Catch::Contains("asynchronous"));
}
