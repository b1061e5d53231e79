#include <catch2/catch.hpp>

#include <cstdlib>

#include "problems.hpp"

using namespace kevo;
using namespace kevo::evo;

namespace {

std::vector<Genome> apply_op(const Operator& op_in, const Problem& prob, const std::vector<Individual>& parents, Rng& rng) {
  Operator op = op_in;
  OperatorContext ctx{prob, parents, {}, 0, 0, rng};
  return op.propose(ctx);
}

}  // namespace

TEST_CASE("built-in operators keep genomes inside the space over many random applications", "[evo][operators]") {
  evotest::SpaceOnly p{evotest::mixed_space()};
  Problem prob(p);
  const auto& sp = prob.space();
  const int n = evotest::asan() ? 2000 : 20000;
  for (const Operator& op : {Operator(Mutate{}), Operator(Reset{}), Operator(GroupCrossover{}), Operator(Mutate{0.9}),
                             Operator(Reset{0.5})}) {
    Rng rng(11, 3);
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      std::vector<Individual> parents(2);
      parents[0].genome = sp.random(rng);
      parents[1].genome = sp.random(rng);
      Rng r = rng.fork(static_cast<std::uint64_t>(i));
      auto out = apply_op(op, prob, parents, r);
      REQUIRE(out.size() == 1);
      REQUIRE(sp.contains(out[0]));
      changed += out[0] != parents[0].genome ? 1 : 0;
    }
    INFO(op.name());
    CHECK(changed == n);  // every proposal differs from its (first) parent
  }
}

TEST_CASE("mutate moves an ordinal gene by a neighbour step of one or two", "[evo][operators]") {
  evotest::SpaceOnly p;
  p.sp.add(Gene::ordinal("t", {1, 2, 4, 8, 16, 32, 64, 128, 256}));
  Problem prob(p);
  Rng rng(5);
  int ones = 0, twos = 0;
  for (int i = 0; i < 4000; ++i) {
    std::vector<Individual> parents(1);
    parents[0].genome = prob.space().random(rng);
    Rng r = rng.fork(static_cast<std::uint64_t>(i));
    const auto out = apply_op(Operator(Mutate{}), prob, parents, r);
    const int d = std::abs(out[0][0] - parents[0].genome[0]);
    REQUIRE((d == 1 || d == 2));
    (d == 1 ? ones : twos)++;
  }
  CHECK(ones > 2 * twos);
  CHECK(twos > 0);
}

TEST_CASE("mutate changes a permutation by one swap or one insertion", "[evo][operators]") {
  evotest::SpaceOnly p;
  p.sp.add(Gene::permutation("order", {"a", "b", "c", "d", "e", "f", "g"}));
  p.sp.add(Gene::ordinal("pad", {0}));
  Problem prob(p);
  Rng rng(9);
  for (int i = 0; i < 3000; ++i) {
    std::vector<Individual> parents(1);
    parents[0].genome = prob.space().random(rng);
    Rng r = rng.fork(static_cast<std::uint64_t>(i));
    const auto out = apply_op(Operator(Mutate{}), prob, parents, r);
    REQUIRE(prob.space().contains(out[0]));
    // A swap or an insertion leaves the items outside one contiguous window in place.
    std::size_t lo = 0, hi = 7;
    while (lo < 7 && out[0][lo] == parents[0].genome[lo]) ++lo;
    while (hi > 0 && out[0][hi - 1] == parents[0].genome[hi - 1]) --hi;
    REQUIRE(lo < hi);
    std::vector<int> a(parents[0].genome.begin() + static_cast<long>(lo), parents[0].genome.begin() + static_cast<long>(hi));
    std::vector<int> b(out[0].begin() + static_cast<long>(lo), out[0].begin() + static_cast<long>(hi));
    const bool swap = a.front() == b.back() && a.back() == b.front() &&
                      std::equal(a.begin() + 1, a.end() - 1, b.begin() + 1);
    const bool rot_left = std::equal(a.begin() + 1, a.end(), b.begin()) && a.front() == b.back();
    const bool rot_right = std::equal(b.begin() + 1, b.end(), a.begin()) && b.front() == a.back();
    REQUIRE((swap || rot_left || rot_right));
  }
}

TEST_CASE("group crossover takes every gene group whole from one parent", "[evo][operators]") {
  evotest::SpaceOnly p{evotest::mixed_space()};
  Problem prob(p);
  const auto& sp = prob.space();
  Rng rng(21);
  int mixed = 0;
  for (int i = 0; i < 3000; ++i) {
    std::vector<Individual> parents(2);
    parents[0].genome = sp.first();
    parents[1].genome = sp.nth(*sp.cardinality() - 1);  // differs from first() in every gene but "one"
    Rng r = rng.fork(static_cast<std::uint64_t>(i));
    const auto out = apply_op(Operator(GroupCrossover{0.0, false}), prob, parents, r);
    REQUIRE(sp.contains(out[0]));
    auto from = [&](std::size_t gi) {
      const auto c = sp.slots(out[0], gi);
      const auto a = sp.slots(parents[0].genome, gi);
      return std::equal(c.begin(), c.end(), a.begin()) ? 0 : 1;
    };
    bool child_is_pure_crossover = true;
    for (std::size_t gi = 0; gi < sp.size(); ++gi) {
      const auto c = sp.slots(out[0], gi);
      const auto a = sp.slots(parents[0].genome, gi);
      const auto b = sp.slots(parents[1].genome, gi);
      if (!std::equal(c.begin(), c.end(), a.begin()) && !std::equal(c.begin(), c.end(), b.begin()))
        child_is_pure_crossover = false;
    }
    REQUIRE(child_is_pure_crossover);

    CHECK(from(0) == from(1));  // group "tile"
    CHECK(from(3) == from(4));  // group "nest"
    mixed += from(0) != from(3) ? 1 : 0;
  }
  CHECK(mixed > 500);  // groups are drawn independently
}
