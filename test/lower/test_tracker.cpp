// White-box test of the dependency tracker's grid axes (lib/lower/builder.hpp): an axis maps a
// coordinate to the cut it is, through a table while the cuts share a large power-of-two factor,
// else by binary search. A wrong answer would hand an access the wrong cells, and its
// dependencies would silently go missing (the brute-force tests in test_lower.cpp would catch
// that only for the shapes they lower).
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <set>

#include "../../lib/lower/builder.hpp"

using kevo::lower::detail::Axis;

namespace {
// Every coordinate of a small axis, and around each cut and random points of a large one.
void agrees(const Axis& ax, const std::set<std::int32_t>& cuts, std::int32_t extent, std::mt19937& rng) {
  const auto expect = [&](std::int32_t x) {
    const auto it = cuts.find(x);
    return it == cuts.end() ? Axis::kAbsent : static_cast<std::size_t>(std::distance(cuts.begin(), it));
  };
  std::vector<std::int32_t> xs;
  if (extent <= 5000) {
    for (std::int32_t x = 0; x <= extent; ++x) xs.push_back(x);
  } else {
    for (auto c : cuts)
      for (std::int32_t d = -2; d <= 2; ++d)
        if (c + d >= 0 && c + d <= extent) xs.push_back(c + d);
    std::uniform_int_distribution<std::int32_t> any(0, extent);
    for (int i = 0; i < 200; ++i) xs.push_back(any(rng));
  }
  for (auto x : xs) {
    INFO("x = " << x << ", extent " << extent << ", " << cuts.size() << " cuts, table " << ax.table.size());
    REQUIRE(ax.at(x) == expect(x));
  }
  REQUIRE(ax.bands() + 1 == cuts.size());
  for (std::size_t i = 0; i < cuts.size(); ++i) REQUIRE(ax.cut(i) == *std::next(cuts.begin(), static_cast<std::ptrdiff_t>(i)));
}
}  // namespace

TEST_CASE("a grid axis finds every cut, and only cuts, through its table or by binary search", "[lower]") {
  std::mt19937 rng(11);
  struct Case {
    std::int32_t extent;
    std::int32_t step;  // cuts are random multiples of it
  };
  // tiles of 128 and 512 columns, an extent tiles do not divide (50257), odd steps that leave
  // only a small power of two (96 = 32*3, 3), a buffer so large that its table would exceed
  // kMaxTable (binary search), and 1-wide axes
  for (const Case c : {Case{4096, 128}, Case{50257, 512}, Case{8192, 96}, Case{3000, 3}, Case{4096 * 8192, 128},
                       Case{(1 << 30) + 7, 1 << 20}, Case{1, 1}, Case{2, 1}, Case{777, 1}}) {
    Axis ax;
    ax.reset(c.extent);
    std::set<std::int32_t> cuts{0, c.extent};
    agrees(ax, cuts, c.extent, rng);
    const std::int32_t most = (c.extent - 1) / c.step;
    std::uniform_int_distribution<std::int32_t> pick(1, std::max(1, most));
    for (int i = 0; i < 40 && most >= 1; ++i) {
      const std::int32_t x = pick(rng) * c.step;
      if (x <= 0 || x >= c.extent || cuts.count(x)) continue;
      const std::size_t at = ax.insert(x);
      cuts.insert(x);
      REQUIRE(at == static_cast<std::size_t>(std::distance(cuts.begin(), cuts.find(x))));
      if (i % 8 == 0) agrees(ax, cuts, c.extent, rng);
    }
    agrees(ax, cuts, c.extent, rng);
    // the table is kept while it is small, and dropped for binary search when it would not be
    const bool small = (static_cast<std::size_t>(c.extent) >> ax.shift) + 1 <= Axis::kMaxTable;
    CHECK(ax.table.empty() == !small);
  }
}

namespace {
struct Rec {
  kevo::lower::detail::Box b;
};
kevo::lower::detail::Box random_box(std::mt19937& rng, std::int32_t rows, std::int32_t cols, std::int32_t h, std::int32_t w) {
  std::uniform_int_distribution<std::int32_t> r(0, rows - 1), c(0, cols - 1), hh(1, h), ww(1, w);
  const std::int32_t r0 = r(rng), c0 = c(rng);
  return {r0, std::min(rows - 1, r0 + hh(rng) - 1), c0, std::min(cols - 1, c0 + ww(rng) - 1)};
}
}  // namespace

TEST_CASE("the box index returns every record a box may overlap, wide ones and late additions included", "[lower]") {
  using kevo::lower::detail::RowIndex;
  std::mt19937 rng(5);
  struct Case {
    std::int32_t rows, cols, h, w;  // buffer, typical record size
  };
  // row tiles of an HBM tensor, column tiles of an on-chip buffer, tall narrow tiles, and sizes
  // that make many records span more than kWide buckets
  for (const Case k : {Case{8192, 1024, 128, 1024}, Case{128, 16384, 128, 512}, Case{8192, 1024, 1, 32}, Case{4096, 4096, 64, 64}}) {
    std::vector<Rec> recs;
    for (int i = 0; i < 400; ++i) recs.push_back({random_box(rng, k.rows, k.cols, k.h, k.w)});
    RowIndex ix;
    REQUIRE(ix.usable(recs, k.rows, k.cols));
    // appended after the build: small ones, and a few spanning the whole buffer
    for (int i = 0; i < 100; ++i) {
      recs.push_back({i % 10 == 0 ? kevo::lower::detail::Box{0, k.rows - 1, 0, k.cols - 1} : random_box(rng, k.rows, k.cols, k.h, k.w)});
      ix.add(static_cast<std::uint32_t>(recs.size() - 1), recs.back().b);
    }
    CHECK(!ix.wide.empty());
    std::vector<std::uint32_t> got;
    for (int q = 0; q < 300; ++q) {
      const auto box = random_box(rng, k.rows, k.cols, q % 3 == 0 ? k.rows : k.h, q % 3 == 0 ? k.cols : k.w);
      ix.candidates(box, got);
      std::set<std::uint32_t> have(got.begin(), got.end());
      CHECK(have.size() == got.size());  // each once
      for (std::uint32_t i = 0; i < recs.size(); ++i)
        if (recs[i].b.overlaps(box)) {
          INFO("record " << i << " overlaps the query but was not returned");
          REQUIRE(have.count(i) == 1);
        }
    }
  }
}
