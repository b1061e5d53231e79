// Private to the lowering: the program under construction and its dependency tracker.
// Every access is a box (rows x columns of its buffer's row-major layout). A buffer starts in
// grid mode: the boundaries of the boxes accessed so far cut it into cells, and each cell keeps
// its last writer and the readers since; an access depends on the cells it covers — their writer
// (RAW) and, when it writes, their readers and writer (WAR, WAW) — and a write resets them. Tiled
// programs touch each buffer at a few aligned tile boundaries, so the grid stays small and an
// access costs four table lookups (Axis) and one visit per covered cell. A buffer whose grid would
// outgrow grid_cell_limit goes over to box mode: it keeps the regions recently accessed as boxes, a
// write that covers a box retires it (retired accesses stay ordered through the covering write),
// and an access scans the live boxes it may overlap.
#pragma once
#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "instr_check.hpp"
#include "kevo/lower/program.hpp"

namespace kevo::lower::detail {

struct Box {
  // inclusive; 32-bit since every buffer holds fewer than 2^31 elements (add_buffer checks), which
  // halves what the scans below read
  std::int32_t r0, r1, c0, c1;
  static Box of(std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1) noexcept {
    return {static_cast<std::int32_t>(r0), static_cast<std::int32_t>(r1), static_cast<std::int32_t>(c0),
            static_cast<std::int32_t>(c1)};
  }
  [[nodiscard]] bool overlaps(const Box& o) const noexcept { return r0 <= o.r1 && o.r0 <= r1 && c0 <= o.c1 && o.c0 <= c1; }
  [[nodiscard]] bool inside(const Box& o) const noexcept { return r0 >= o.r0 && r1 <= o.r1 && c0 >= o.c0 && c1 <= o.c1; }
  [[nodiscard]] bool operator==(const Box& o) const noexcept { return r0 == o.r0 && r1 == o.r1 && c0 == o.c0 && c1 == o.c1; }
  // Removes the part a covering write `w` overwrites when what remains is still a box (a write
  // spanning all our columns and one end of our rows, or the converse) — e.g. a DMA split over
  // queues by partitions retires its predecessors piece by piece. True when something was cut.
  bool cut_by(const Box& w) noexcept {
    if (w.c0 <= c0 && w.c1 >= c1) {
      if (w.r0 <= r0 && w.r1 >= r0 && w.r1 < r1) return r0 = w.r1 + 1, true;
      if (w.r1 >= r1 && w.r0 <= r1 && w.r0 > r0) return r1 = w.r0 - 1, true;
    }
    if (w.r0 <= r0 && w.r1 >= r1) {
      if (w.c0 <= c0 && w.c1 >= c0 && w.c1 < c1) return c0 = w.c1 + 1, true;
      if (w.c1 >= c1 && w.c0 <= c1 && w.c0 > c0) return c1 = w.c0 - 1, true;
    }
    return false;
  }
};

// Division by a buffer's row width, which boxes() does for every access: a shift for powers of two,
// else a multiply by a precomputed reciprocal (exact for dividends below 2^32: Lemire, Kaser and
// Kurz, "Faster remainder by direct computation", 2019), else the hardware divide.
struct Divider {
  __extension__ using u128 = unsigned __int128;
  std::int64_t d = 1;
  std::uint64_t magic = 0;  // ceil(2^64 / d) when d is not a power of two
  int shift = 0;            // log2(d) when it is; -1 otherwise
  explicit Divider(std::int64_t divisor) : d(divisor) {
    const auto u = static_cast<std::uint64_t>(d);
    if ((u & (u - 1)) == 0) {
      shift = std::countr_zero(u);
    } else {
      shift = -1;
      if (u <= 0xffffffffu) magic = ~std::uint64_t{0} / u + 1;
    }
  }
  [[nodiscard]] std::int64_t div(std::int64_t x) const noexcept {  // x >= 0
    if (shift >= 0) return x >> shift;
    if (magic != 0 && static_cast<std::uint64_t>(x) <= 0xffffffffu)
      return static_cast<std::int64_t>((static_cast<u128>(magic) * static_cast<std::uint64_t>(x)) >> 64);
    return x / d;
  }
};

// One axis of a buffer's grid: the sorted cuts 0 = c_0 < c_1 < ... < c_n = extent, band i being
// [c_i, c_i+1). Every cut but the extent is a multiple of 2^shift (the largest such power of
// two), so whether x is a cut, and which, is found through a table indexed by x >> shift — a tiled
// program cuts its buffers at tile multiples, which keeps the table small — or, when the table
// would be large, by binary search.
struct Axis {
  static constexpr std::size_t kAbsent = ~std::size_t{0};
  static constexpr std::size_t kMaxTable = 4096;
  static constexpr std::uint32_t kNotCut = 0x80000000u;
  std::vector<std::int32_t> cuts;
  // table[k]: the index of the cut at k << shift, or kNotCut when that is inside a band (empty:
  // binary search)
  std::vector<std::uint32_t> table;
  int shift = 30;
  std::int32_t ext = -1;    // the extent (-1 before reset(), which no coordinate is at or below)
  std::size_t last = 0;     // its index, cuts.size() - 1

  void reset(std::int32_t extent) {
    cuts = {0, extent};
    shift = 30;
    retable();
  }
  [[nodiscard]] std::int32_t extent() const noexcept { return ext; }
  [[nodiscard]] std::size_t bands() const noexcept { return last; }
  [[nodiscard]] std::int32_t cut(std::size_t i) const noexcept { return cuts[i]; }
  // The index of the cut at x (0 <= x <= extent), or kAbsent.
  [[nodiscard]] [[gnu::always_inline]] std::size_t at(std::int32_t x) const noexcept {
    if (x == ext) return last;
    if (!table.empty()) {
      if ((x & ((std::int32_t{1} << shift) - 1)) != 0) return kAbsent;
      const std::uint32_t i = table[static_cast<std::size_t>(x >> shift)];
      return (i & kNotCut) != 0 ? kAbsent : i;
    }
    const auto it = std::lower_bound(cuts.begin(), cuts.end(), x);
    return *it == x ? static_cast<std::size_t>(it - cuts.begin()) : kAbsent;
  }
  // Adds x (0 < x < extent, not yet a cut); returns its index.
  std::size_t insert(std::int32_t x) {
    const auto it = std::upper_bound(cuts.begin(), cuts.end(), x);
    const auto i = static_cast<std::size_t>(it - cuts.begin());
    cuts.insert(it, x);
    if (const int s = std::countr_zero(static_cast<std::uint32_t>(x)); s < shift || table.empty()) {
      shift = std::min(shift, s);
      retable();
    } else {  // same table: x's entry, and the cuts after it move up one index
      last = cuts.size() - 1;
      for (std::size_t j = i; j < last; ++j) table[static_cast<std::size_t>(cuts[j]) >> shift] = static_cast<std::uint32_t>(j);
    }
    return i;
  }
  void retable() {
    ext = cuts.back();
    last = cuts.size() - 1;
    table.clear();
    const std::size_t n = (static_cast<std::size_t>(ext) >> shift) + 1;
    if (n > kMaxTable) return;
    table.assign(n, kNotCut);
    for (std::size_t i = 0; i < last; ++i) table[static_cast<std::size_t>(cuts[i]) >> shift] = static_cast<std::uint32_t>(i);
  }
};

// The dependency tracker's box mode (Builder): long record lists (a large output written tile by
// tile keeps one writer record per tile) are searched through a 2-D grid of buckets over the
// buffer, each bucket about one typical box in size, so that finding what a box overlaps does not scan them all — whether the boxes are
// separated by rows (tiles of an HBM tensor), by columns (tiles of an on-chip buffer, which span
// all its partitions) or both (tall, narrow tiles of a tensor laid out with its last index on
// partitions). A record spanning more than kWide buckets is kept on a list that every search
// includes, so adding one costs at most kWide pushes. Valid while records are only appended;
// rebuilt on demand after a write retires or cuts some.
struct RowIndex {
  static constexpr std::int64_t kBuckets = 4096;  // at most
  static constexpr std::int64_t kWide = 16;
  std::int64_t ph = 1, pw = 1;  // rows, columns per bucket
  std::int64_t nbr = 1, nbc = 1;  // buckets down, across
  std::vector<std::vector<std::uint32_t>> buckets;  // row-major: positions of the records touching each
  std::vector<std::uint32_t> wide;                  // positions of the records spanning more than kWide
  bool valid = false;
  bool useful = false;  // boxes are small against the buffer: buckets separate them

  // Builds the index when stale; true when searching through it beats a linear scan (not when
  // the boxes span most of the buffer both ways).
  template <class Rec>
  bool usable(const std::vector<Rec>& recs, std::int64_t rows, std::int64_t cols) {
    if (!valid) build(recs, rows, cols);
    return useful;
  }
  template <class Rec>
  void build(const std::vector<Rec>& recs, std::int64_t rows, std::int64_t cols) {
    std::int64_t h = 0, w = 0;  // about one bucket per typical box: each record lands in a few
    for (const auto& x : recs) h += x.b.r1 - x.b.r0 + 1, w += x.b.c1 - x.b.c0 + 1;
    const auto n = static_cast<std::int64_t>(std::max<std::size_t>(1, recs.size()));
    nbr = std::max<std::int64_t>(1, rows / std::max<std::int64_t>(1, h / n));
    nbc = std::max<std::int64_t>(1, cols / std::max<std::int64_t>(1, w / n));
    while (nbr * nbc > kBuckets) (nbr >= nbc ? nbr : nbc) = (nbr >= nbc ? nbr : nbc) / 2;
    valid = true;
    useful = nbr * nbc >= 8;
    if (!useful) return;  // stays valid: records appended meanwhile need no buckets
    ph = (rows + nbr - 1) / nbr;
    pw = (cols + nbc - 1) / nbc;
    buckets.resize(static_cast<std::size_t>(nbr * nbc));
    for (auto& v : buckets) v.clear();
    wide.clear();
    stamp.assign(recs.size(), 0);
    epoch = 0;
    for (std::uint32_t i = 0; i < recs.size(); ++i) add(i, recs[i].b);
  }
  struct Range {
    std::int64_t r0, r1, c0, c1;  // inclusive bucket rows and columns
  };
  [[nodiscard]] Range range(const Box& x) const noexcept {
    return {std::clamp<std::int64_t>(x.r0 / ph, 0, nbr - 1), std::clamp<std::int64_t>(x.r1 / ph, 0, nbr - 1),
            std::clamp<std::int64_t>(x.c0 / pw, 0, nbc - 1), std::clamp<std::int64_t>(x.c1 / pw, 0, nbc - 1)};
  }
  void add(std::uint32_t i, const Box& x) {
    if (!useful) return;
    if (stamp.size() <= i) stamp.resize(i + 1, 0);
    const Range g = range(x);
    if ((g.r1 - g.r0 + 1) * (g.c1 - g.c0 + 1) > kWide) {
      wide.push_back(i);
      return;
    }
    for (std::int64_t r = g.r0; r <= g.r1; ++r)
      for (std::int64_t c = g.c0; c <= g.c1; ++c) buckets[static_cast<std::size_t>(r * nbc + c)].push_back(i);
  }
  // Positions of the records that may overlap `q` (a superset), each once.
  void candidates(const Box& q, std::vector<std::uint32_t>& out) {
    out.assign(wide.begin(), wide.end());
    const Range g = range(q);
    if (g.r0 == g.r1 && g.c0 == g.c1) {  // one bucket: no record is in it twice, nor also wide
      const auto& v = buckets[static_cast<std::size_t>(g.r0 * nbc + g.c0)];
      out.insert(out.end(), v.begin(), v.end());
      return;
    }
    if (++epoch == 0) std::fill(stamp.begin(), stamp.end(), 0), epoch = 1;
    for (std::int64_t r = g.r0; r <= g.r1; ++r)
      for (std::int64_t c = g.c0; c <= g.c1; ++c)
        for (auto i : buckets[static_cast<std::size_t>(r * nbc + c)])
          if (stamp[i] != epoch) stamp[i] = epoch, out.push_back(i);
  }
  std::vector<std::uint32_t> stamp;  // per record: the last candidates() call that returned it
  std::uint32_t epoch = 0;
};

// Cells a buffer's grid may have before its tracking goes over to box records. A variable only so
// white-box tests can force box mode (test/lower); nothing else changes it.
inline std::size_t grid_cell_limit = 4096;
// Bands along one axis likewise: cutting a band costs up to a copy of every cell, so the most
// that refinement can cost a buffer is about 2 * kMaxBands * grid_cell_limit cell copies (both
// axes cut to the limit).
inline constexpr std::size_t kMaxBands = 512;

class Builder {
 public:
  Builder(TileProgram& p, const target::Target& t) : p_(p), t_(t) {}
  Builder(const Builder&) = delete;
  Builder& operator=(const Builder&) = delete;

  int add_buffer(Buffer b) {
    if (b.elements() > std::numeric_limits<std::int32_t>::max())  // AccessPattern strides are 32-bit
      throw Rejected{{"too_large", fmt::format("buffer {} holds {} elements; kevo's access patterns address at most 2^31-1", b.name,
                                               b.elements())}};
    p_.buffers.push_back(std::move(b));
    const Buffer& x = p_.buffers.back();
    facts_.push_back(BufFacts::of(x));
    width_.emplace_back(x.mem == Memory::hbm ? (x.shape.empty() ? 1 : std::max<std::int64_t>(1, x.shape.back()))
                                             : std::max<std::int64_t>(1, x.free_elems));
    recs_.emplace_back();
    recs_.back().rows = std::max<std::int64_t>(1, x.elements() / width_.back().d);
    recs_.back().cols = width_.back().d;
    return static_cast<int>(p_.buffers.size()) - 1;
  }
  // A nest starts. With `barrier`, every instruction of it with no predecessor in the nest waits
  // for every earlier instruction: through a fence edge (kDepFence) to the last instruction of
  // each engine and DMA queue, which waits for that queue's earlier instructions too. Its buffers
  // reuse on-chip memory the earlier nests' still hold (Lowerer::walk_nests).
  void begin_nest(bool barrier) {
    nest_first_ = static_cast<std::uint32_t>(p_.instrs.size());
    barrier_.clear();
    if (!barrier) return;
    for (const auto last : last_on_)
      if (last != kNone) barrier_.push_back(last);
    std::sort(barrier_.begin(), barrier_.end());
    barrier_.erase(std::unique(barrier_.begin(), barrier_.end()), barrier_.end());
  }
  // Buffers that nothing writes (kernel inputs) need no tracking.
  void set_read_only(int b) { ro_.resize(p_.buffers.size(), false), ro_[static_cast<std::size_t>(b)] = true; }

  // Thrown by open()/commit() when a program outgrows kMaxInstructions; lower() turns it into
  // Invalid{"too_large"} (NKI unrolls every loop, so such a schedule is not a usable kernel).
  struct TooLarge {
    bool edges = false;    // the dependency edges, not the instructions, outgrew their limit
    bool readers = false;  // ... or rather the reader records they are found from
  };
  // Thrown by commit() at the first instruction that breaks a rule of the target (check_instr);
  // lower() returns the reason as its value.
  struct Rejected {
    Invalid why;
  };
  static constexpr std::size_t kMaxInstructions = lower::kMaxInstructions;
  // Schedules whose many small, partially overlapping transfers make every write depend on long
  // reader lists can reach hundreds of millions of edges; they are rejected the same way.
  static constexpr std::size_t kMaxDependencies = 8'000'000;
  static constexpr std::size_t kMaxReaderRecords = 4 * kMaxDependencies;

  // Room for about `instructions` instructions' reads (growth would copy the reader lists).
  void reserve(std::size_t instructions) { pool_.reserve(2 * instructions); }

  // Counting mode: commit() only counts, to find cheaply whether a program outgrows
  // kMaxInstructions before paying for checks and dependency tracking.
  void count_only() noexcept { count_only_ = true; }
  [[nodiscard]] std::size_t counted() const noexcept { return counted_; }

  // The next instruction, value-initialised in place at the program's end (a scratch record
  // while counting): the caller fills it and commit()s it, with nothing opened in between.
  // Building in place saves copying a few hundred bytes per instruction.
  Instr& open() {
    if (open_) throw std::logic_error("lower: an instruction was opened while another was still open");
    open_ = true;
    if (count_only_) return scratch_instr_ = Instr{};
    if (p_.instrs.size() >= kMaxInstructions) throw TooLarge{false};
    return p_.instrs.emplace_back();
  }
  static void sort_small(std::vector<std::uint32_t>& v) {
    const std::size_t n = v.size();
    std::uint32_t* a = v.data();
    if (n <= 16) {  // usually a handful: insertion sort beats introsort's setup
      for (std::size_t i = 1; i < n; ++i) {
        const std::uint32_t x = a[i];
        std::size_t j = i;
        for (; j > 0 && a[j - 1] > x; --j) a[j] = a[j - 1];
        a[j] = x;
      }
    } else {
      std::sort(a, a + n);
    }
  }
  // Checks the opened instruction against the target's rules and adds its dependency edges.
  std::uint32_t commit() {
    if (!open_) throw std::logic_error("lower: commit without an open instruction");
    open_ = false;
    if (count_only_) {
      if (++counted_ > kMaxInstructions) throw TooLarge{false};
      return static_cast<std::uint32_t>(counted_ - 1);
    }
    const auto id = static_cast<std::uint32_t>(p_.instrs.size() - 1);
    const Instr& ins = p_.instrs.back();
    if (const Finding f = find_broken(ins, facts_, t_); f.what != Broken::none) {
      Rejected r{describe(f, ins, id, facts_, p_.buffers, t_)};
      p_.instrs.pop_back();
      throw r;
    }
    scratch_.clear();
    war_.clear();
    for (int s = 0; s < ins.nsrc; ++s) read(ins.src[static_cast<std::size_t>(s)], id);
    // An accumulating instruction also reads its destination; that RAW edge is the WAW edge the
    // write adds anyway, so the read is not tracked separately.
    write(ins.dst, id);
    if (ins.writes_reduce_res()) write(ins.reduce_res(), id);
    // scratch_ holds the predecessors that wrote what this instruction touches (RAW, WAW), war_
    // those that only read what it writes (WAR); an edge is a write-after-read when its
    // predecessor is in war_ alone.
    bool fence = false;  // this instruction's edges to barrier_ are fences (kDepFence)
    if (!barrier_.empty()) {
      // a root of the nest (no predecessor in it) waits on the barrier, for the predecessors' ends
      // (edges that wait as a data edge does: the space they free is written next)
      bool root = true;
      for (const auto v : scratch_) root = root && v < nest_first_;
      for (const auto v : war_) root = root && v < nest_first_;
      if (root) scratch_.insert(scratch_.end(), barrier_.begin(), barrier_.end());
      fence = root;
    }
    {
      const std::size_t key = ins.at.dma ? static_cast<std::size_t>(target::kNumEngines) + ins.at.queue
                                         : static_cast<std::size_t>(ins.at.engine);
      if (key >= last_on_.size()) last_on_.resize(key + 1, kNone);
      last_on_[key] = id;
    }
    sort_small(scratch_);
    sort_small(war_);
    std::size_t i = 0, j = 0;
    const std::size_t n = scratch_.size(), m = war_.size();
    while (i < n || j < m) {  // merge; each predecessor once (every copy of it is consumed here)
      const std::uint32_t v = j == m || (i < n && scratch_[i] <= war_[j]) ? scratch_[i] : war_[j];
      bool data = false;
      while (i < n && scratch_[i] == v) ++i, data = true;
      while (j < m && war_[j] == v) ++j;
      p_.deps.push_back(v);
      p_.dep_kind.push_back(fence && std::binary_search(barrier_.begin(), barrier_.end(), v) ? kDepFence
                            : data                                                           ? kDepData
                                                                                             : kDepWar);
    }
    if (p_.deps.size() > kMaxDependencies) throw TooLarge{true};
    // Reader records (one per read of a grid cell or box) are addressed by 32-bit heads; their
    // count is bounded far below that, like the edges they turn into.
    if (pool_.size() > kMaxReaderRecords) throw TooLarge{true, true};
    p_.dep_begin.push_back(static_cast<std::uint32_t>(p_.deps.size()));
    p_.stats.dma_instructions += ins.at.dma ? 1 : 0;
    return id;
  }
  // The boxes covering what `ap` touches (a superset), into out[0..n); returns n. Usually one. A
  // dimension that steps over whole rows with gaps between its steps (a tensor read with its last
  // index on partitions and another, far-strided index along the free axis; an output tile whose
  // partitions hold every J-th row, `rows interleave_out`) gives one box per step, up to
  // kSplitRows of them (a partition dimension's whole extent), instead of one box over every row
  // in between: that bounding box would overlap every other tile's and order them all. A step
  // within a row that leaves columns out splits up to kSplit ways.
  static constexpr int kSplit = 16;
  static constexpr int kSplitRows = 128;
  [[gnu::always_inline]] int boxes(const AccessPattern& ap, Box* out) const {
    const Divider& D = width_[static_cast<std::size_t>(ap.buffer)];
    const std::int64_t W = D.d;
    std::int64_t rows = 0, cols = 0;
    bool ok = true;
    std::int64_t span = 0;
    std::int64_t gap = 0, gap_n = 1;  // the stepped dimension split off: its step in rows, its count
    std::int64_t cstep = 0, cstep_n = 1;  // the widest step within a row, a candidate to split on
    const auto dim = [&](std::int64_t stride, std::int64_t n) {
      if (n <= 1 || stride == 0) return;
      span += (n - 1) * stride;
      if (stride == W) rows += n - 1;  // the common cases first, without a division
      else if (stride < W) {
        cols += (n - 1) * stride;
        if (n <= kSplit && stride > cstep) cstep = stride, cstep_n = n;
      } else if (stride % W != 0) ok = false;
      else if (n <= kSplitRows && stride / W > gap) {  // split on the widest step; fold a narrower one into rows
        rows += (gap_n - 1) * gap;
        gap = stride / W, gap_n = n;
      } else {
        rows += (n - 1) * (stride / W);
      }
    };
    dim(ap.part_stride, ap.part_count);
    for (int i = 0; i < 3; ++i) dim(ap.free_stride[static_cast<std::size_t>(i)], ap.free_size[static_cast<std::size_t>(i)]);
    const std::int64_t r0 = D.div(ap.offset), c0 = ap.offset - r0 * W;
    if (!ok || c0 + cols >= W) {
      out[0] = Box::of(r0, D.div(ap.offset + span), 0, W - 1);
      return 1;
    }
    if (rows + 1 >= gap) {  // no split dimension, or its steps leave no rows out
      // A step within a row that leaves columns out (the tile of one of J interleaved tiles, read
      // from each of J column blocks) gives one box per step: their bounding box would overlap
      // the other tiles' columns and order accesses that share no element.
      const std::int64_t inner = cols - (cstep_n - 1) * cstep;  // the columns of one step, less one
      if (cstep > inner + 1) {
        const std::int64_t r1 = r0 + rows + (gap_n - 1) * gap;
        for (std::int64_t i = 0; i < cstep_n; ++i) out[i] = Box::of(r0, r1, c0 + i * cstep, c0 + i * cstep + inner);
        return static_cast<int>(cstep_n);
      }
      out[0] = Box::of(r0, r0 + rows + (gap_n - 1) * gap, c0, c0 + cols);
      return 1;
    }
    for (std::int64_t i = 0; i < gap_n; ++i) out[i] = Box::of(r0 + i * gap, r0 + i * gap + rows, c0, c0 + cols);
    return static_cast<int>(gap_n);
  }

 private:
  // Writers and readers are kept apart: a read scans only the writers (RAW) and finds its
  // reader record by exact box through a hash index; only writes scan the readers (WAR).
  struct WRec {
    Box b;
    std::uint32_t writer;
  };
  struct RRec {
    Box b;
    std::int32_t readers;  // head of a list in pool_
  };
  struct Cell {
    std::uint32_t writer;  // kNone: none since the lowering began
    std::int32_t readers;  // head of a list in pool_ (readers since that write); -1: none
  };
  static constexpr std::size_t kIndexAbove = 32;  // records before a list is searched through a RowIndex

  // Reader records of a buffer, found by exact box: a linear scan while there are few, then an
  // open-addressing table of positions in r (0 = empty, else position + 1), rebuilt on demand
  // whenever a write retires or cuts records.
  struct PerBuffer {
    std::vector<WRec> w;
    std::vector<RRec> r;
    std::vector<std::uint32_t> index;
    std::size_t indexed = 0;  // records of r in the index
    bool valid = false;       // the index holds exactly the records of r
    std::int64_t rows = 1;    // rows of the buffer's layout (boxes' row coordinates are below it)
    std::int64_t cols = 1;    // its row width
    RowIndex wrows, rrows;    // over w and r, once they are long
    std::size_t dead_w = 0, dead_r = 0;  // retired records not yet erased (erased in bulk, so positions stay put)
    // The record the last write appended, while nothing has read the buffer since: a write of the
    // same box (a PSUM accumulation chain) then depends on that writer alone — everything else it
    // would find overlapping was found by that write and is ordered before it.
    std::uint32_t last_w = kNone;
    // Grid mode (until `grid` is false): the row bands times the column bands, cells row-major.
    // Empty until the first access.
    bool grid = true;
    Axis ra, ca;
    std::vector<Cell> cells;

    [[nodiscard]] std::uint32_t find(const Box& b) const noexcept {
      const std::size_t mask = index.size() - 1;
      for (std::size_t h = hash_box(b) & mask;; h = (h + 1) & mask) {
        const std::uint32_t e = index[h];
        if (e == 0) return kNone;
        if (r[e - 1].b == b && r[e - 1].readers != kDead) return e - 1;
      }
    }
    void put(std::uint32_t pos) {  // r[pos] was just appended to an indexed r
      if (2 * (indexed + 1) > index.size()) {
        rebuild(std::max<std::size_t>(64, 4 * r.size()));
        return;
      }
      const std::size_t mask = index.size() - 1;
      std::size_t h = hash_box(r[pos].b) & mask;
      while (index[h] != 0) h = (h + 1) & mask;
      index[h] = pos + 1;
      ++indexed;
    }
    void rebuild(std::size_t want) {
      std::size_t cap = 64;
      while (cap < want) cap *= 2;
      index.assign(cap, 0);
      indexed = 0;
      const std::size_t mask = cap - 1;
      for (std::uint32_t i = 0; i < r.size(); ++i) {
        std::size_t h = hash_box(r[i].b) & mask;
        while (index[h] != 0) h = (h + 1) & mask;
        index[h] = i + 1;
        ++indexed;
      }
      valid = true;
    }
  };
  static constexpr std::uint32_t kNone = 0xffffffffu;
  static constexpr std::int32_t kDead = -2;  // a retired reader record (a retired writer record has writer kNone)
  static constexpr std::size_t kLinear = 4;
  static std::uint64_t hash_box(const Box& b) noexcept {
    const std::uint64_t rows = (std::uint64_t{static_cast<std::uint32_t>(b.r0)} << 32) | static_cast<std::uint32_t>(b.r1);
    const std::uint64_t cols = (std::uint64_t{static_cast<std::uint32_t>(b.c0)} << 32) | static_cast<std::uint32_t>(b.c1);
    const std::uint64_t h = rows * 0x9e3779b97f4a7c15ULL ^ (cols + 0x632be59bd9b4e019ULL) * 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 29);
  }
  // The cells box `b` covers, as inclusive band ranges in span_, after cutting the grid at its
  // edges. False when the grid would outgrow grid_cell_limit (or `b` leaves the buffer): the
  // buffer has then gone over to box records, which the caller uses instead.
  struct Span {
    std::size_t i0, i1, j0, j1;
  };
  [[gnu::always_inline]] bool grid_span(PerBuffer& pb, const Box& b) {
    // (before the first access the extents are -1, so that access takes the slow path)
    if (b.r0 < 0 || b.c0 < 0 || b.r1 >= pb.ra.extent() || b.c1 >= pb.ca.extent()) [[unlikely]]
      return grid_refine(pb, b);
    const std::size_t i0 = pb.ra.at(b.r0), i1 = pb.ra.at(b.r1 + 1), j0 = pb.ca.at(b.c0), j1 = pb.ca.at(b.c1 + 1);
    if ((i0 | i1 | j0 | j1) == Axis::kAbsent) [[unlikely]]  // some edge is not a cut yet
      return grid_refine(pb, b);
    span_ = {i0, i1 - 1, j0, j1 - 1};
    return true;
  }
  // grid_span's slow path: the buffer's first access, or one that cuts the grid.
  [[gnu::noinline]] bool grid_refine(PerBuffer& pb, const Box& b) {
    if (pb.cells.empty()) {
      pb.ra.reset(static_cast<std::int32_t>(pb.rows));
      pb.ca.reset(static_cast<std::int32_t>(pb.cols));
      pb.cells.assign(1, Cell{kNone, -1});
    }
    if (b.r0 < 0 || b.c0 < 0 || b.r1 >= pb.ra.extent() || b.c1 >= pb.ca.extent()) return to_boxes(pb);
    std::size_t i0, i1, j0, j1;
    if ((i0 = cut(pb, true, b.r0)) == Axis::kAbsent || (i1 = cut(pb, true, b.r1 + 1)) == Axis::kAbsent ||
        (j0 = cut(pb, false, b.c0)) == Axis::kAbsent || (j1 = cut(pb, false, b.c1 + 1)) == Axis::kAbsent)
      return to_boxes(pb);
    span_ = {i0, i1 - 1, j0, j1 - 1};
    return true;
  }
  // The index of the cut at `x` along rows (or columns), adding it when it is not one yet: the
  // band holding x splits in two whose cells start as copies of its own (a reader list may then
  // be shared; lists are only ever prepended to, so sharing is safe). kAbsent when the grid would
  // outgrow grid_cell_limit.
  [[gnu::noinline]] std::size_t cut(PerBuffer& pb, bool rows, std::int32_t x) {
    Axis& ax = rows ? pb.ra : pb.ca;
    if (const std::size_t i = ax.at(x); i != Axis::kAbsent) return i;
    const std::size_t nr = pb.ra.bands(), nc = pb.ca.bands();
    if ((rows ? (nr + 1) * nc : nr * (nc + 1)) > grid_cell_limit || ax.bands() >= kMaxBands) return Axis::kAbsent;
    const std::size_t at = ax.insert(x);
    auto& cells = pb.cells;
    if (rows) {  // band at-1 splits into at-1 and at: shift the bands from `at` down, copy at-1 into at
      cells.resize((nr + 1) * nc);
      std::move_backward(cells.begin() + static_cast<std::ptrdiff_t>(at * nc), cells.begin() + static_cast<std::ptrdiff_t>(nr * nc),
                         cells.end());
      std::copy_n(cells.begin() + static_cast<std::ptrdiff_t>((at - 1) * nc), nc, cells.begin() + static_cast<std::ptrdiff_t>(at * nc));
    } else {  // widen every row by one cell, from the back (each row's new place starts at or after its old one)
      cells.resize(nr * (nc + 1));
      for (std::size_t r = nr; r-- > 0;) {
        Cell* src = cells.data() + r * nc;
        Cell* dst = cells.data() + r * (nc + 1);
        for (std::size_t k = nc; k-- > at;) dst[k + 1] = src[k];
        dst[at] = src[at - 1];
        if (r > 0)  // row 0 stays where it is
          for (std::size_t k = at; k-- > 0;) dst[k] = src[k];
      }
    }
    return at;
  }
  // Leaves grid mode: every cell with a writer or readers becomes a box record.
  [[gnu::noinline]] bool to_boxes(PerBuffer& pb) {
    const std::size_t nr = pb.ra.bands(), nc = pb.ca.bands();
    for (std::size_t i = 0; i < nr; ++i)
      for (std::size_t j = 0; j < nc; ++j) {
        const Cell& c = pb.cells[i * nc + j];
        const Box x{pb.ra.cut(i), pb.ra.cut(i + 1) - 1, pb.ca.cut(j), pb.ca.cut(j + 1) - 1};
        if (c.writer != kNone) pb.w.push_back({x, c.writer});
        if (c.readers >= 0) pb.r.push_back({x, c.readers});
      }
    pb.grid = false;
    pb.ra = {}, pb.ca = {}, pb.cells = {};
    pb.valid = pb.wrows.valid = pb.rrows.valid = false;
    pb.last_w = kNone;
    return false;
  }
  // Visits the cells of span_ (grid_span's), adding each one's writer as a predecessor of `id`
  // (once per run of equal writers) before `f` sees the cell.
  template <class F>
  [[gnu::always_inline]] void each_cell(PerBuffer& pb, std::uint32_t id, F&& f) {
    const std::size_t nc = pb.ca.bands();
    std::uint32_t last = kNone;
    for (std::size_t i = span_.i0; i <= span_.i1; ++i)
      for (std::size_t j = span_.j0; j <= span_.j1; ++j) {
        Cell& c = pb.cells[i * nc + j];
        if (c.writer != kNone && c.writer != last && c.writer != id) scratch_.push_back(last = c.writer);
        f(c);
      }
  }
  void read(const AccessPattern& ap, std::uint32_t id) {
    const auto bi = static_cast<std::size_t>(ap.buffer);
    if (bi < ro_.size() && ro_[bi]) return;
    if (const int n = boxes(ap, bx_); n == 1) [[likely]]
      read(recs_[bi], bx_[0], id);
    else
      for (int i = 0; i < n; ++i) read(recs_[bi], bx_[i], id);
  }
  void read(PerBuffer& pb, const Box& b, std::uint32_t id) {
    if (pb.grid && grid_span(pb, b)) {
      each_cell(pb, id, [&](Cell& c) {  // RAW on the writer; join the readers
        pool_.push_back({id, c.readers});
        c.readers = static_cast<std::int32_t>(pool_.size()) - 1;
      });
      return;
    }
    pb.last_w = kNone;
    // RAW: every live writer record overlapping b
    if (pb.w.size() > kIndexAbove && pb.wrows.usable(pb.w, pb.rows, pb.cols)) {
      pb.wrows.candidates(b, cand_);
      for (auto i : cand_)
        if (pb.w[i].writer != kNone && pb.w[i].b.overlaps(b) && pb.w[i].writer != id) scratch_.push_back(pb.w[i].writer);
    } else {
      for (const auto& w : pb.w)
        if (w.writer != kNone && w.b.overlaps(b) && w.writer != id) scratch_.push_back(w.writer);
    }
    // this reader joins the record of exactly its box (found linearly while few, else hashed)
    std::uint32_t at = kNone;
    if (pb.r.size() <= kLinear) {
      for (std::size_t i = pb.r.size(); i-- > 0;)
        if (pb.r[i].b == b && pb.r[i].readers != kDead) {
          at = static_cast<std::uint32_t>(i);
          break;
        }
    } else {
      if (!pb.valid) pb.rebuild(4 * pb.r.size());
      at = pb.find(b);
    }
    if (at == kNone) {
      at = static_cast<std::uint32_t>(pb.r.size());
      pb.r.push_back({b, -1});
      if (pb.valid) pb.put(at);
      if (pb.rrows.valid) pb.rrows.add(at, b);
    }
    pool_.push_back({id, pb.r[at].readers});
    pb.r[at].readers = static_cast<std::int32_t>(pool_.size()) - 1;
  }
  void write(const AccessPattern& ap, std::uint32_t id) {
    auto& pb = recs_[static_cast<std::size_t>(ap.buffer)];
    if (const int n = boxes(ap, bx_); n == 1) [[likely]]
      write(pb, bx_[0], id);
    else
      for (int i = 0; i < n; ++i) write(pb, bx_[i], id);
  }
  void write(PerBuffer& pb, const Box& b, std::uint32_t id) {
    if (pb.grid && grid_span(pb, b)) {
      // WAW on the writer, WAR on the readers; then this write is all. Neighbours split from one
      // cell share its list until read again: a list just walked is not walked twice. (A read of
      // C cells leaves a record in each, so a write over them walks C records per such read.)
      std::int32_t walked = -1;
      each_cell(pb, id, [&](Cell& c) {
        if (c.readers != walked)
          for (std::int32_t q = walked = c.readers; q >= 0; q = pool_[static_cast<std::size_t>(q)].second)
            if (pool_[static_cast<std::size_t>(q)].first != id) war_.push_back(pool_[static_cast<std::size_t>(q)].first);
        c = {id, -1};
      });
      return;
    }
    if (pb.last_w != kNone && pb.w[pb.last_w].b == b) {
      WRec& prev = pb.w[pb.last_w];
      if (prev.writer != id) scratch_.push_back(prev.writer);
      prev.writer = id;  // the same box: the record is reused (its row buckets stay right)
      return;
    }
    // Writers: each live overlapping one is a WAW predecessor; those inside b are retired
    // (ordered through this write from now on), the others lose the part b overwrites where
    // the rest is still a box (a smaller box stays in its row buckets: they remain a superset).
    const auto on_writer = [&](WRec& w) {
      if (w.writer == kNone || !w.b.overlaps(b)) return;
      if (w.writer != id) scratch_.push_back(w.writer);
      if (w.b.inside(b)) {
        w.writer = kNone;
        ++pb.dead_w;
      } else {
        w.b.cut_by(b);
      }
    };
    if (pb.w.size() > kIndexAbove && pb.wrows.usable(pb.w, pb.rows, pb.cols)) {
      pb.wrows.candidates(b, cand_);
      for (auto i : cand_) on_writer(pb.w[i]);
    } else {
      for (auto& w : pb.w) on_writer(w);
    }
    // Readers: every reader of a live overlapping box is a WAR predecessor; boxes are retired or
    // cut the same way.
    bool cut = false;
    const auto on_reader = [&](RRec& r) {
      if (r.readers == kDead || !r.b.overlaps(b)) return;
      for (std::int32_t q = r.readers; q >= 0; q = pool_[static_cast<std::size_t>(q)].second)
        if (pool_[static_cast<std::size_t>(q)].first != id) war_.push_back(pool_[static_cast<std::size_t>(q)].first);
      if (r.b.inside(b)) {
        r.readers = kDead;
        ++pb.dead_r;
      } else {
        cut |= r.b.cut_by(b);
      }
    };
    if (pb.r.size() > kIndexAbove && pb.rrows.usable(pb.r, pb.rows, pb.cols)) {
      pb.rrows.candidates(b, cand_);
      for (auto i : cand_) on_reader(pb.r[i]);
    } else {
      for (auto& r : pb.r) on_reader(r);
    }
    if (cut) pb.valid = false;  // a box changed: the exact-box table is rebuilt by the next hashed lookup
    // Retired records are erased in bulk once they are half of a list (amortised O(1) per write;
    // erasing moves positions, so the indexes over that list are rebuilt on demand).
    if (pb.dead_w > 0 && (pb.w.size() <= kIndexAbove || 2 * pb.dead_w > pb.w.size())) {
      std::erase_if(pb.w, [](const WRec& w) { return w.writer == kNone; });
      pb.dead_w = 0;
      pb.wrows.valid = false;
    }
    if (pb.dead_r > 0 && (pb.r.size() <= kIndexAbove || 2 * pb.dead_r > pb.r.size())) {
      std::erase_if(pb.r, [](const RRec& r) { return r.readers == kDead; });
      pb.dead_r = 0;
      pb.valid = false;
      pb.rrows.valid = false;
    }
    pb.w.push_back({b, id});
    pb.last_w = static_cast<std::uint32_t>(pb.w.size() - 1);
    if (pb.wrows.valid) pb.wrows.add(pb.last_w, b);
  }

  TileProgram& p_;
  const target::Target& t_;
  bool count_only_ = false;
  bool open_ = false;  // open() was called and commit() not yet
  std::uint32_t nest_first_ = 0;          // the first instruction of the nest being lowered
  std::vector<std::uint32_t> barrier_;    // begin_nest(true): what its roots wait for
  std::vector<std::uint32_t> last_on_;    // per engine, then per DMA queue: its last instruction
  std::size_t counted_ = 0;
  std::vector<BufFacts> facts_;
  std::vector<Divider> width_;
  std::vector<PerBuffer> recs_;
  std::vector<bool> ro_;
  std::vector<std::pair<std::uint32_t, std::int32_t>> pool_;
  std::vector<std::uint32_t> scratch_;
  std::vector<std::uint32_t> war_;  // commit(): predecessors that only read what the instruction writes
  std::vector<std::uint32_t> cand_;
  Span span_{};
  Box bx_[kSplitRows];  // the boxes of the access being tracked
  Instr scratch_instr_;  // what open() hands out while counting
};

}  // namespace kevo::lower::detail
