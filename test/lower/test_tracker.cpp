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
#include "kevo/target.hpp"

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

namespace {
using kevo::lower::AccessPattern;
using kevo::lower::Buffer;
using kevo::lower::Memory;
using kevo::lower::Opcode;
using kevo::lower::TileProgram;

// [128 partitions, 4 column blocks of 1024, a 128-column tile at `col` of each]: one of several
// tiles interleaved through the blocks, as a transfer of one tile of an interleaved block writes it.
AccessPattern interleaved(int buffer, std::int64_t col) {
  AccessPattern a;
  a.buffer = buffer;
  a.part_count = 128;
  a.part_stride = 4096;
  a.offset = col;
  a.free_stride = {0, 1024, 1};
  a.free_size = {1, 4, 128};
  return a;
}
// Sets lower::detail::grid_cell_limit for one scope and puts it back, also when an assertion
// throws (a limit left at 0 would run every later test in box mode).
struct CellLimit {
  std::size_t old = kevo::lower::detail::grid_cell_limit;
  explicit CellLimit(std::size_t n) { kevo::lower::detail::grid_cell_limit = n; }
  ~CellLimit() { kevo::lower::detail::grid_cell_limit = old; }
  CellLimit(const CellLimit&) = delete;
  CellLimit& operator=(const CellLimit&) = delete;
};
// The predecessors of instruction i.
std::set<std::uint32_t> preds(const TileProgram& p, std::uint32_t i) {
  return {p.deps.begin() + p.dep_begin[i], p.deps.begin() + p.dep_begin[i + 1]};
}
}  // namespace

TEST_CASE("an access stepping over column blocks depends only on what shares its elements, not its bounding box", "[lower]") {
  // Tile t of J interleaved tiles sits at columns b*1024 + t*128 ... +127 of every block b: the
  // box over all of them covers the other tiles' columns too, and a transfer of tile 1 waited for
  // every reader of tile 0 (a held prologue piece behind the compute of the piece before it).
  // One box per column step keeps them apart, in the grid and in the box mode alike.
  for (const std::size_t limit : {std::size_t{4096}, std::size_t{0}}) {
    const CellLimit cells(limit);
    INFO("grid cell limit " << limit);
    const auto t = kevo::target::load_target("trn2").value();
    TileProgram p;
    kevo::lower::detail::Builder b(p, t);
    Buffer h{"A", Memory::hbm, kevo::ir::DType::bf16, {128, 4096}, 1, 0, 1, -1};
    const int hb = b.add_buffer(h);
    const int sb = b.add_buffer(Buffer{"S", Memory::sbuf, kevo::ir::DType::bf16, {128, 4096}, 128, 4096, 1, -1});
    const int db = b.add_buffer(Buffer{"D", Memory::sbuf, kevo::ir::DType::bf16, {128, 4096}, 128, 4096, 1, -1});
    p.dep_begin.push_back(0);
    int reads = 0;
    const auto load = [&](std::int64_t col) {
      auto& in = b.open();
      in.op = Opcode::dma_copy;
      in.at.dma = true;
      in.at.queue = 1;
      in.dst = interleaved(sb, col);
      in.src[0] = interleaved(hb, col);
      in.nsrc = 1;
      return b.commit();
    };
    const auto read = [&](std::int64_t col, std::int64_t n) {  // a Vector-engine copy of columns [col, col + n) of S
      auto& in = b.open();
      in.op = Opcode::tensor_copy;
      in.at.engine = kevo::target::Engine::vector;
      AccessPattern s;
      s.buffer = sb;
      s.part_count = 128;
      s.part_stride = 4096;
      s.offset = col;
      s.free_size = {1, 1, static_cast<std::int32_t>(n)};
      in.src[0] = s;
      in.nsrc = 1;
      s.buffer = db;
      s.offset = 256 * static_cast<std::int64_t>(reads++);  // each read its own columns of D
      in.dst = s;
      return b.commit();
    };
    const auto t0 = load(0);
    const auto r0 = read(1024, 128);  // block 1 of tile 0
    const auto t1 = load(128);        // tile 1: shares no element with tile 0 or its reader
    CHECK(preds(p, t1).empty());
    const auto r01 = read(1024 + 64, 128);  // half of tile 0 and half of tile 1 in block 1
    CHECK(preds(p, r01) == std::set<std::uint32_t>{t0, t1});
    const auto t0again = load(0);  // overwrites tile 0: after its writer and both of its readers
    const auto pr = preds(p, t0again);
    CHECK(pr.count(r0) == 1);
    CHECK(pr.count(r01) == 1);
    CHECK(pr.count(t1) == 0);
  }
}

namespace {
// Output tile t of a block of J = 8 tiles under `rows interleave_out`: partition p holds row
// p*8 + t of an HBM tensor [1024, 256], so its rows lie 8 apart and its bounding box spans
// rows t ... t + 1016, every other tile's rows included.
AccessPattern every_8th_row(int buffer, std::int64_t t) {
  AccessPattern a;
  a.buffer = buffer;
  a.part_count = 128;
  a.part_stride = 8 * 256;
  a.offset = t * 256;
  a.free_size = {1, 1, 256};
  return a;
}
}  // namespace

TEST_CASE("a store whose partitions hold every J-th row depends only on the rows it shares", "[lower]") {
  // Until 2026-12-07 the tracker split such an access by rows only up to 16 steps, and bounded the
  // 128 of an interleave_out output tile as one box: the stores of a block's J tiles, which share no
  // element, waited for one another (write after write), in the grid and in the box mode alike.
  for (const std::size_t limit : {std::size_t{4096}, std::size_t{16}, std::size_t{0}}) {
    const CellLimit cells(limit);
    INFO("grid cell limit " << limit);
    const auto t = kevo::target::load_target("trn2").value();
    TileProgram p;
    kevo::lower::detail::Builder b(p, t);
    const int cb = b.add_buffer(Buffer{"C", Memory::hbm, kevo::ir::DType::bf16, {1024, 256}, 1, 0, 1, -1});
    const int sb = b.add_buffer(Buffer{"S", Memory::sbuf, kevo::ir::DType::bf16, {128, 256}, 128, 256, 1, -1});
    const int db = b.add_buffer(Buffer{"D", Memory::sbuf, kevo::ir::DType::bf16, {128, 1024}, 128, 1024, 1, -1});
    int loads = 0;
    p.dep_begin.push_back(0);
    AccessPattern tile;
    tile.buffer = sb;
    tile.part_count = 128;
    tile.part_stride = 256;
    tile.free_size = {1, 1, 256};
    const auto store = [&](std::int64_t t_) {
      auto& in = b.open();
      in.op = Opcode::dma_copy;
      in.at.dma = true;
      in.at.queue = static_cast<int>(t_ % 16);
      in.dst = every_8th_row(cb, t_);
      in.src[0] = tile;
      in.nsrc = 1;
      return b.commit();
    };
    const auto load_rows = [&](std::int64_t r0, std::int64_t n) {  // rows [r0, r0 + n) of C into columns of D of their own
      auto& in = b.open();
      in.op = Opcode::dma_copy;
      in.at.dma = true;
      in.at.queue = 0;
      AccessPattern src;
      src.buffer = cb;
      src.part_count = static_cast<std::int32_t>(n);
      src.part_stride = 256;
      src.offset = r0 * 256;
      src.free_size = {1, 1, 256};
      in.src[0] = src;
      in.nsrc = 1;
      AccessPattern dst = tile;
      dst.buffer = db;
      dst.part_count = static_cast<std::int32_t>(n);
      dst.part_stride = 1024;
      dst.offset = 256 * loads++;
      in.dst = dst;
      return b.commit();
    };
    std::vector<std::uint32_t> st;
    for (std::int64_t i = 0; i < 8; ++i) {
      st.push_back(store(i));
      // the source tile S is read by every store and written by none: no store waits for another
      INFO("store of tile " << i);
      CHECK(preds(p, st.back()).empty());
    }
    // rows 6 ... 9 are tiles 6, 7 (partition 0) and 0, 1 (partition 1): after those four stores only
    const auto l = load_rows(6, 4);
    CHECK(preds(p, l) == std::set<std::uint32_t>{st[6], st[7], st[0], st[1]});
    const auto l2 = load_rows(1000, 3);  // rows 1000 ... 1002: tiles 0, 1, 2 of partition 125
    CHECK(preds(p, l2) == std::set<std::uint32_t>{st[0], st[1], st[2]});
    // tile 3 stored again: after its own first store (write after write), and neither load, which
    // read no row of it
    const auto again = store(3);
    CHECK(preds(p, again) == std::set<std::uint32_t>{st[3]});
    // a store over rows 0 ... 15 (the first two partitions of every tile): after every store, and
    // after the load of rows 6 ... 9 (write after read)
    auto& in = b.open();
    in.op = Opcode::dma_copy;
    in.at.dma = true;
    in.at.queue = 0;
    AccessPattern whole;
    whole.buffer = cb;
    whole.part_count = 16;
    whole.part_stride = 256;
    whole.free_size = {1, 1, 256};
    in.dst = whole;
    AccessPattern from = tile;
    from.part_count = 16;
    in.src[0] = from;
    in.nsrc = 1;
    const auto over = b.commit();
    CHECK(preds(p, over) == std::set<std::uint32_t>{st[0], st[1], st[2], again, st[4], st[5], st[6], st[7], l});
  }
}
