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

namespace {
Space continuous_space() {
  Space s;
  s.add(Gene::continuous("x", -5.0, 5.0, false, "xy"));
  s.add(Gene::continuous("y", -5.0, 5.0, false, "xy"));
  s.add(Gene::continuous("rate", 1e-4, 1.0, true));
  s.add(Gene::permutation("order", {"a", "b", "c", "d", "e", "f"}));
  s.add(Gene::ordinal("n", {1, 2, 4, 8}));
  return s;
}
}  // namespace

TEST_CASE("operators keep genomes with continuous and permutation genes inside the space", "[evo][operators][continuous]") {
  evotest::SpaceOnly p{continuous_space()};
  Problem prob(p);
  const auto& sp = prob.space();
  const int n = evotest::asan() ? 2000 : 20000;
  for (const Operator& op : {Operator(Mutate{}), Operator(Reset{}), Operator(GroupCrossover{}), Operator(OrderCrossover{}),
                             Operator(Mutate{0.9})}) {
    Rng rng(17, 1);
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
    CHECK(changed == n);
  }
}

TEST_CASE("mutate takes Gaussian steps of 0.001 to 0.1 of a continuous gene's interval, reflected at its ends", "[evo][operators][continuous]") {
  evotest::SpaceOnly p;
  p.sp.add(Gene::continuous("x", 0.0, 1.0));
  Problem prob(p);
  Rng rng(9);
  std::vector<double> d;
  for (int i = 0; i < 4000; ++i) {
    std::vector<Individual> parents(1);
    parents[0].genome = {Gene::kContinuousSteps / 2};  // the middle: no reflection within 5 sigma
    Rng r = rng.fork(static_cast<std::uint64_t>(i));
    const auto out = apply_op(Operator(Mutate{}), prob, parents, r);
    d.push_back(std::abs(p.sp.real(out[0], 0) - 0.5));
  }
  std::sort(d.begin(), d.end());
  // |N(0, s)| with s log-uniform in [0.001, 0.1] (quantiles of that mixture, by sampling 400,000
  // draws: 10% 0.00059, median 0.0055, 90% 0.049): fine and coarse steps alike, which no single
  // scale gives (|N(0, s)|'s 90% quantile is 2.4 times its median, here ~9).
  CHECK(d[d.size() / 10] < 0.001);      // fine tuning
  CHECK(d[d.size() * 9 / 10] > 0.04);   // coarse moves
  CHECK(d[d.size() / 2] == Approx(0.0055).epsilon(0.15));
  CHECK(d.back() < 0.6);                // within 6 sigma of the largest scale
  // At an end the step comes back inside (and moves).
  for (int i = 0; i < 500; ++i) {
    std::vector<Individual> parents(1);
    parents[0].genome = {Gene::kContinuousSteps};
    Rng r = rng.fork(100000 + static_cast<std::uint64_t>(i));
    const auto out = apply_op(Operator(Mutate{}), prob, parents, r);
    REQUIRE(out[0][0] < Gene::kContinuousSteps);
    REQUIRE(out[0][0] >= 0);
  }
}

TEST_CASE("crossover blends continuous genes within the parents' widened interval", "[evo][operators][continuous]") {
  evotest::SpaceOnly p;
  p.sp.add(Gene::continuous("x", 0.0, 1.0));
  Problem prob(p);
  Rng rng(4);
  double lo = 1, hi = 0, sum = 0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    std::vector<Individual> parents(2);
    parents[0].genome = {p.sp.gene(0).position(0.4)};
    parents[1].genome = {p.sp.gene(0).position(0.6)};
    Rng r = rng.fork(static_cast<std::uint64_t>(i));
    const auto out = apply_op(Operator(GroupCrossover{0.0, false}), prob, parents, r);
    const double x = p.sp.real(out[0], 0);
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    sum += x;
  }
  CHECK(lo >= 0.35 - 1e-6);  // BLX-0.25: [0.4 - 0.05, 0.6 + 0.05]
  CHECK(hi <= 0.65 + 1e-6);
  CHECK(lo < 0.36);
  CHECK(hi > 0.64);
  CHECK(sum / n == Approx(0.5).epsilon(0.01));
}

TEST_CASE("order crossover keeps a slice of the first parent and the second parent's relative order", "[evo][operators][continuous]") {
  evotest::SpaceOnly p;
  p.sp.add(Gene::permutation("order", {"a", "b", "c", "d", "e", "f", "g", "h"}));
  Problem prob(p);
  Rng rng(21);
  for (int i = 0; i < 2000; ++i) {
    std::vector<Individual> parents(2);
    parents[0].genome = prob.space().random(rng);
    parents[1].genome = prob.space().random(rng);
    Rng r = rng.fork(static_cast<std::uint64_t>(i));
    const auto child = apply_op(Operator(OrderCrossover{0.0, false}), prob, parents, r)[0];
    REQUIRE(prob.space().contains(child));
    // OX1 by its definition: for some slice [lo, hi), the child holds a's items there, and the
    // other positions, from hi on cyclically, hold b's remaining items in b's order from b[hi].
    const auto& a = parents[0].genome;
    const auto& b = parents[1].genome;
    bool some = false;
    for (std::size_t lo = 0; lo < 8 && !some; ++lo)
      for (std::size_t hi = lo + 1; hi <= 8 && !some; ++hi) {
        Genome ox(8, -1);
        std::vector<char> in(8, 0);
        for (std::size_t k = lo; k < hi; ++k) {
          ox[k] = a[k];
          in[static_cast<std::size_t>(a[k])] = 1;
        }
        std::size_t out = hi % 8;
        for (std::size_t k = 0; k < 8; ++k) {
          const auto v = b[(hi + k) % 8];
          if (in[static_cast<std::size_t>(v)]) continue;
          ox[out] = v;
          out = (out + 1) % 8;
        }
        some = ox == child;
      }
    REQUIRE(some);
  }
}
