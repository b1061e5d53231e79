// Schedules carried between shapes and targets (include/kevo/records/transfer.hpp).
#include "kevo/records/transfer.hpp"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>

#include "kevo/core/error.hpp"
#include "kevo/schedule/detail/plan.hpp"
#include "kevo/schedule/detail/structure.hpp"
#include "kevo/verify/differential.hpp"

namespace kevo::records {

namespace {

std::int64_t num(const Space& sp, const Genome& g, int gene) {
  return sp.gene(static_cast<std::size_t>(gene)).values[static_cast<std::size_t>(sp.at(g, static_cast<std::size_t>(gene)))];
}

// The smallest choice of ordinal `gene` that is >= want (the largest choice when none is).
std::int32_t at_least(const Space& sp, int gene, std::int64_t want) {
  const auto& v = sp.gene(static_cast<std::size_t>(gene)).values;
  for (std::size_t i = 0; i < v.size(); ++i)
    if (v[i] >= want) return static_cast<std::int32_t>(i);
  return static_cast<std::int32_t>(v.size()) - 1;
}

bool same_genes(const Space& a, const Space& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a.gene(i).name != b.gene(i).name || a.gene(i).labels != b.gene(i).labels) return false;
  return true;
}

// Step 2: blocks that covered their whole dimension at the old shape cover it at the new one.
void keep_whole_blocks(const schedule::ScheduleSpace& from, const Genome& src, const schedule::ScheduleSpace& to,
                       Genome& g) {
  const auto& fa = from.impl();
  const auto& ta = to.impl();
  if (fa.contracts.size() != ta.contracts.size()) return;
  for (std::size_t ci = 0; ci < ta.contracts.size(); ++ci) {
    const auto& cs = fa.contracts[ci];
    const auto& ct = ta.contracts[ci];
    if (cs.op != ct.op || cs.idx != ct.idx) continue;
    for (int cl : ct.cls_list) {
      const auto u = static_cast<std::size_t>(cl);
      if (cs.tile[cl] < 0 || cs.block[cl] < 0 || ct.tile[cl] < 0 || ct.block[cl] < 0) continue;
      const std::int64_t tile_s = std::min(num(fa.space, src, cs.tile[cl]), cs.ext[u]);
      const std::int64_t ntiles_s = (cs.ext[u] + tile_s - 1) / tile_s;
      // One tile at the old shape says nothing about what the block meant.
      if (ntiles_s <= 1 || num(fa.space, src, cs.block[cl]) < ntiles_s) continue;
      const std::int64_t tile_t = std::min(num(ta.space, g, ct.tile[cl]), ct.ext[u]);
      const std::int64_t ntiles_t = (ct.ext[u] + tile_t - 1) / tile_t;
      if (num(ta.space, g, ct.block[cl]) < ntiles_t)
        ta.space.slots(g, static_cast<std::size_t>(ct.block[cl]))[0] = at_least(ta.space, ct.block[cl], ntiles_t);
    }
  }
}

bool lowers(const schedule::ScheduleSpace& s, const Genome& g) { return s.genes().contains(g) && make_plan(s, g).has_value(); }

}  // namespace

std::size_t trim_idle_buffers(const schedule::ScheduleSpace& space, Genome& g) {
  if (!space.genes().contains(g)) return 0;
  // The plan as it would be with room to spare: the loops and levels do not depend on SBUF's size.
  target::Target roomy = space.target();
  roomy.sbuf_bytes_per_partition = std::numeric_limits<std::int32_t>::max();
  const auto rs = schedule::ScheduleSpace::try_derive(space.kernel(), roomy);
  if (!rs) return 0;
  if (!same_genes(rs->genes(), space.genes())) return 0;
  const auto plan = make_plan(*rs, g);
  if (!plan) return 0;
  const auto& impl = rs->impl();
  const Space& sp = space.genes();
  std::size_t changed = 0;
  for (const auto& n : plan->nests) {
    if (n.kind != schedule::NestKind::contract) continue;
    const auto& c = n.c;
    const auto& slot = impl.contracts[static_cast<std::size_t>(c.slot)];
    // Fills of a buffer placed at loop position `level` (-1: the root): one per iteration of the
    // batch loops and of every loop up to and including `level` (the longest block's tile count
    // for a tile loop, so never fewer than the real count).
    auto fills = [&](int level) {
      std::int64_t f = 1;
      const auto& os = impl.ops[static_cast<std::size_t>(n.root_op)];
      for (const auto& x : slot.outer) f *= std::max<std::int64_t>(1, os.extent(x, 1));
      for (int p = 0; p <= level && p < static_cast<int>(c.loops.size()); ++p) {
        const auto& l = c.loops[static_cast<std::size_t>(p)];
        const auto u = static_cast<std::size_t>(l.cls);
        f *= l.block ? c.nblocks[u] : c.bf[u];
      }
      return f;
    };
    auto trim = [&](int gene, std::int64_t f) {
      if (gene < 0) return;
      const std::int64_t have = num(sp, g, gene);
      if (have <= f) return;
      const std::int32_t v = at_least(sp, gene, f);
      if (sp.gene(static_cast<std::size_t>(gene)).values[static_cast<std::size_t>(v)] >= have) return;
      sp.slots(g, static_cast<std::size_t>(gene))[0] = v;
      ++changed;
    };
    for (int q = 0; q < 2; ++q) trim(slot.load_bufs[q], fills(c.load_level[static_cast<std::size_t>(q)]));
    trim(slot.store_bufs, fills(c.store_level));
  }
  return changed;
}

std::optional<Genome> fit_schedule(const schedule::ScheduleSpace& space, Genome g, Rng& rng) {
  if (!space.genes().contains(g)) return std::nullopt;
  if (lowers(space, g)) return g;
  Genome t = g;
  if (trim_idle_buffers(space, t) && lowers(space, t)) return t;
  if (space.repair(g, rng) && space.genes().contains(g)) return g;
  return std::nullopt;
}

std::optional<Genome> transfer_schedule(const schedule::ScheduleSpace& from, const Genome& g,
                                        const schedule::ScheduleSpace& to, Rng& rng) {
  if (!from.genes().contains(g)) return std::nullopt;
  const Genome literal = verify::transfer_genome(from, g, to);
  Genome whole = literal;
  keep_whole_blocks(from, g, to, whole);
  for (const Genome* cand : std::initializer_list<const Genome*>{&whole, &literal}) {
    if (lowers(to, *cand)) return *cand;
    Genome t = *cand;
    if (trim_idle_buffers(to, t) && lowers(to, t)) return t;
  }
  if (to.repair(whole, rng) && to.genes().contains(whole)) return whole;
  return std::nullopt;
}

}  // namespace kevo::records
