// Private to the lowering: the program under construction and its dependency tracker.
// Each buffer keeps the regions recently accessed as boxes (rows x columns of its row-major
// layout); a new access depends on the overlapping boxes' writer (RAW) and, when it writes,
// on their readers and writer (WAR, WAW). A write that covers a box retires it, which keeps
// the per-buffer lists short; retired accesses stay ordered through the covering write.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kevo/lower/program.hpp"

namespace kevo::lower::detail {

struct Box {
  std::int64_t r0, r1, c0, c1;  // inclusive
  [[nodiscard]] bool overlaps(const Box& o) const noexcept { return r0 <= o.r1 && o.r0 <= r1 && c0 <= o.c1 && o.c0 <= c1; }
  [[nodiscard]] bool inside(const Box& o) const noexcept { return r0 >= o.r0 && r1 <= o.r1 && c0 >= o.c0 && c1 <= o.c1; }
  [[nodiscard]] bool operator==(const Box& o) const noexcept { return r0 == o.r0 && r1 == o.r1 && c0 == o.c0 && c1 == o.c1; }
};

class Builder {
 public:
  explicit Builder(TileProgram& p) : p_(p) {}

  int add_buffer(Buffer b) {
    p_.buffers.push_back(std::move(b));
    const Buffer& x = p_.buffers.back();
    width_.push_back(x.mem == Memory::hbm ? (x.shape.empty() ? 1 : std::max<std::int64_t>(1, x.shape.back())) : std::max<std::int64_t>(1, x.free_elems));
    recs_.emplace_back();
    return static_cast<int>(p_.buffers.size()) - 1;
  }
  // Buffers that nothing writes (kernel inputs) need no tracking.
  void set_read_only(int b) { ro_.resize(p_.buffers.size(), false), ro_[static_cast<std::size_t>(b)] = true; }

  std::uint32_t emit(const Instr& ins) {
    const auto id = static_cast<std::uint32_t>(p_.instrs.size());
    scratch_.clear();
    for (int s = 0; s < ins.nsrc; ++s) read(ins.src[static_cast<std::size_t>(s)], id);
    if (ins.accumulate) read(ins.dst, id);
    write(ins.dst, id);
    std::sort(scratch_.begin(), scratch_.end());
    scratch_.erase(std::unique(scratch_.begin(), scratch_.end()), scratch_.end());
    p_.deps.insert(p_.deps.end(), scratch_.begin(), scratch_.end());
    p_.dep_begin.push_back(static_cast<std::uint32_t>(p_.deps.size()));
    p_.instrs.push_back(ins);
    return id;
  }

  [[nodiscard]] Box box(const AccessPattern& ap) const {
    const std::int64_t W = width_[static_cast<std::size_t>(ap.buffer)];
    std::int64_t rows = 0, cols = 0;
    bool ok = true;
    std::int64_t span = 0;
    const auto dim = [&](std::int64_t stride, std::int64_t n) {
      if (n <= 1 || stride == 0) return;
      span += (n - 1) * stride;
      if (stride % W == 0) rows += (n - 1) * (stride / W);
      else if (stride < W) cols += (n - 1) * stride;
      else ok = false;
    };
    dim(ap.part_stride, ap.part_count);
    for (int i = 0; i < 3; ++i) dim(ap.free_stride[static_cast<std::size_t>(i)], ap.free_size[static_cast<std::size_t>(i)]);
    const std::int64_t r0 = ap.offset / W, c0 = ap.offset % W;
    if (ok && c0 + cols < W) return {r0, r0 + rows, c0, c0 + cols};
    return {r0, (ap.offset + span) / W, 0, W - 1};
  }

 private:
  struct Rec {
    Box b;
    std::int64_t writer;  // -1: none
    std::int32_t readers; // head of a list in pool_, -1: none
  };
  void read(const AccessPattern& ap, std::uint32_t id) {
    const auto bi = static_cast<std::size_t>(ap.buffer);
    if (bi < ro_.size() && ro_[bi]) return;
    const Box b = box(ap);
    auto& rs = recs_[bi];
    Rec* same = nullptr;
    for (auto& r : rs) {
      if (!r.b.overlaps(b)) continue;
      if (r.writer >= 0 && static_cast<std::uint32_t>(r.writer) != id) scratch_.push_back(static_cast<std::uint32_t>(r.writer));
      if (!same && r.b == b) same = &r;
    }
    if (!same) {
      rs.push_back({b, -1, -1});
      same = &rs.back();
    }
    pool_.push_back({id, same->readers});
    same->readers = static_cast<std::int32_t>(pool_.size()) - 1;
  }
  void write(const AccessPattern& ap, std::uint32_t id) {
    const auto bi = static_cast<std::size_t>(ap.buffer);
    const Box b = box(ap);
    auto& rs = recs_[bi];
    std::size_t keep = 0;
    for (std::size_t i = 0; i < rs.size(); ++i) {
      Rec& r = rs[i];
      if (r.b.overlaps(b)) {
        if (r.writer >= 0 && static_cast<std::uint32_t>(r.writer) != id) scratch_.push_back(static_cast<std::uint32_t>(r.writer));
        for (std::int32_t q = r.readers; q >= 0; q = pool_[static_cast<std::size_t>(q)].second)
          if (pool_[static_cast<std::size_t>(q)].first != id) scratch_.push_back(pool_[static_cast<std::size_t>(q)].first);
        if (r.b.inside(b)) continue;  // retired: ordered through this write from now on
      }
      rs[keep++] = r;
    }
    rs.resize(keep);
    rs.push_back({b, static_cast<std::int64_t>(id), -1});
  }

  TileProgram& p_;
  std::vector<std::int64_t> width_;
  std::vector<std::vector<Rec>> recs_;
  std::vector<bool> ro_;
  std::vector<std::pair<std::uint32_t, std::int32_t>> pool_;
  std::vector<std::uint32_t> scratch_;
};

}  // namespace kevo::lower::detail
