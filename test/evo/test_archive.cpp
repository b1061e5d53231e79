#include <catch2/catch.hpp>

#include <map>

#include "problems.hpp"

using namespace kevo;
using namespace kevo::evo;

namespace {
Individual ind(std::uint64_t id, double f, std::vector<double> d) {
  Individual i;
  i.id = id;
  i.genome = {static_cast<std::int32_t>(id)};
  i.eval.fitness = {f};
  i.eval.descriptors = std::move(d);
  return i;
}
}  // namespace

TEST_CASE("archive keeps the better individual of a cell and ignores worse and tied later ones", "[evo][archive]") {
  Archive a(ArchiveConfig{{4}, {{0.0, 4.0}, {0.0, 4.0}}});
  CHECK(a.capacity() == 16);
  CHECK(a.insert(ind(0, 5.0, {0.5, 0.5})));
  CHECK_FALSE(a.insert(ind(1, 6.0, {0.6, 0.7})));  // same cell, worse
  CHECK_FALSE(a.insert(ind(2, 5.0, {0.2, 0.1})));  // same cell, tie: earlier stays
  CHECK(a.insert(ind(3, 4.0, {0.9, 0.9})));        // same cell, better
  CHECK(a.insert(ind(4, 9.0, {3.5, 0.5})));        // another cell
  CHECK(a.insert(ind(5, 9.0, {100.0, 3.9})));     // clamped into an edge cell
  REQUIRE(a.size() == 3);
  CHECK(a.cells()[0].second.id == 3);
  CHECK(*a.cell_of(std::vector<double>{100.0, -3.0}) == 12);
  CHECK(*a.cell_of(std::vector<double>{100.0, 3.9}) == 15);
}

TEST_CASE("archive ignores invalid individuals and those without descriptors", "[evo][archive]") {
  Archive a(ArchiveConfig{{3}, {{0.0, 1.0}}});
  auto bad = ind(0, 1.0, {0.5});
  bad.eval.status = Status::invalid;
  CHECK_FALSE(a.insert(bad));
  CHECK_FALSE(a.insert(ind(1, 1.0, {})));
  CHECK_FALSE(a.insert(ind(2, 1.0, {0.1, 0.2})));  // wrong dimension
  CHECK(a.empty());
}

TEST_CASE("adaptive archive calibrates its ranges from the first individuals", "[evo][archive]") {
  Archive a(ArchiveConfig{{5}, {}});
  CHECK_FALSE(a.insert(ind(0, 1.0, {0.0})));
  CHECK_FALSE(a.insert(ind(1, 2.0, {10.0})));
  CHECK_FALSE(a.calibrated());
  a.calibrate();
  REQUIRE(a.calibrated());
  CHECK(a.ranges()[0].first == Approx(-1.0));
  CHECK(a.ranges()[0].second == Approx(11.0));
  CHECK(a.size() == 2);
}

TEST_CASE("MAP-Elites run keeps one elite per cell, each the best ever seen for its cell", "[evo][archive]") {
  evotest::Rastrigin p(4);
  auto cfg = evotest::small_config(Algorithm::map_elites, 3, evotest::asan() ? 400 : 2000);
  cfg.archive.bins = {8};
  Engine e(p, cfg);
  std::vector<Individual> seen;
  e.add_observer(Observer{[&](const Individual& i) { seen.push_back(i); }, {}, {}});
  const auto r = e.run();
  REQUIRE(r.evaluations == seen.size());
  REQUIRE_FALSE(r.archive.empty());
  // Recompute the archive from the full history with the run's (calibrated) grid.
  Archive grid(ArchiveConfig{{8}, {}});
  for (std::size_t i = 0; i < 24; ++i) grid.insert(seen[i]);
  grid.calibrate();
  std::map<std::uint64_t, Individual> best;
  for (const auto& i : seen) {
    auto c = grid.cell_of(i.eval.descriptors);
    if (!i.eval.ok() || !c) continue;
    auto it = best.find(*c);
    if (it == best.end() || better(i, it->second)) best[*c] = i;
  }
  REQUIRE(best.size() == r.archive.size());
  std::size_t k = 0;
  for (const auto& [cell, b] : best) {
    CHECK(r.archive_cells[k] == cell);
    CHECK(r.archive[k].id == b.id);
    ++k;
  }
  CHECK(r.archive.size() > 20);  // the grid is actually being filled
}
