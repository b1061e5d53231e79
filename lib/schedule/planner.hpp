// Private to the schedule module and lib/nests/*/plan.cpp: what make_plan (plan.cpp) shares with
// each nest kind's planning (lib/nests/<kind>/plan.cpp): the genome's values (Ctx), buffers,
// rejections, the per-tile computation of map/reduce ops (build_tc), and one entry point pair per
// nest kind, declared from the kind list (lib/nests/kinds.hpp).
#pragma once
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kevo/schedule/detail/plan.hpp"
#include "nests/kinds.hpp"

namespace kevo::schedule::detail {

inline std::string kib(std::int64_t b) {
  if (b % 1024 == 0) return fmt::format("{} KiB", b / 1024);
  return fmt::format("{:.1f} KiB", static_cast<double>(b) / 1024.0);
}

struct Ctx {
  const ScheduleSpace& space;
  const SpaceImpl& s;
  const Space& sp;
  const Genome& g;
  [[nodiscard]] int val(int gene) const { return gene < 0 ? 0 : sp.at(g, static_cast<std::size_t>(gene)); }
  [[nodiscard]] std::int64_t num(int gene) const {
    return sp.gene(static_cast<std::size_t>(gene)).values[static_cast<std::size_t>(val(gene))];
  }
  [[nodiscard]] std::span<const std::int32_t> perm(int gene) const { return sp.slots(g, static_cast<std::size_t>(gene)); }
  // The engine op `op`'s engine gene names (vector, scalar, gpsimd); vector for an op without one.
  [[nodiscard]] target::Engine op_engine(int op) const {
    const int e = val(s.ops[static_cast<std::size_t>(op)].engine_gene);
    return e == 1 ? target::Engine::scalar : e == 2 ? target::Engine::gpsimd : target::Engine::vector;
  }
  // A DMA granularity gene's value, by its label (kDmaLabels)
  [[nodiscard]] DmaGran dma(int gene) const {
    const auto& l = sp.gene(static_cast<std::size_t>(gene)).labels[static_cast<std::size_t>(val(gene))];
    for (std::size_t i = 0; i < std::size(kDmaLabels); ++i)
      if (l == kDmaLabels[i]) return static_cast<DmaGran>(i);
    throw Error("kevo: unknown DMA granularity '" + l + "'");
  }
  // The value index of the largest ordinal value <= want (at least index 0).
  [[nodiscard]] int at_most(int gene, std::int64_t want) const {
    const auto& v = sp.gene(static_cast<std::size_t>(gene)).values;
    int best = 0;
    for (std::size_t i = 0; i < v.size(); ++i)
      if (v[i] <= want) best = static_cast<int>(i);
    return best;
  }
};

inline Unexpected<Invalid> reject(std::string code, std::string msg, int gene = -1, int value = -1) {
  return unexpected(Invalid{std::move(code), std::move(msg), gene, value});
}

inline int add_buf(NestPlan& n, BufSpec b) {
  n.buffers.push_back(std::move(b));
  return static_cast<int>(n.buffers.size()) - 1;
}

// Which tensors the ops outside a nest read, from SpaceImpl::readers: O(readers of the tensor)
// per question, where walking every other op's expression made planning quadratic in the ops.
class OutsideReads {
 public:
  OutsideReads(const SpaceImpl& s, const std::vector<int>& nest_ops) : s_(&s), nest_(nest_ops) {
    std::sort(nest_.begin(), nest_.end());
  }
  // Whether an op not in the nest reads `tensor`.
  [[nodiscard]] bool contains(std::string_view tensor) const {
    const auto it = s_->readers.find(tensor);
    if (it == s_->readers.end()) return false;
    for (int op : it->second)
      if (!std::binary_search(nest_.begin(), nest_.end(), op)) return true;
    return false;
  }

 private:
  const SpaceImpl* s_;
  std::vector<int> nest_;
};

// Builds the per-tile computation of `ops` on [P, F] tiles; `produced` maps tensors already
// held on chip (by name) to their buffer; returns a reason when an op cannot run in this nest.
std::optional<Invalid> build_tc(const Ctx& cx, NestPlan& n, TileCompute& tc, const std::vector<int>& ops, int P,
                               std::int64_t F, const std::string& pidx, const std::string& fidx, int nbufs,
                               std::vector<std::pair<std::string, int>>& produced,
                               const std::vector<std::vector<std::string>>& produced_idx,
                               const OutsideReads& outside_reads, const std::set<int>& no_body = {});


// Each nest kind's planning (lib/nests/<kind>/plan.cpp): plan_<kind> fills the nest's plan and
// buffers or says why the genome is invalid (`slot`: the nest's pattern slot, FlashSlot or OnlineSlot, -1 for other kinds);
// sbuf_fix_<kind> names the gene change most likely to shrink its SBUF use.
#define KEVO_PLAN_DECL(kind)                                                       \
  std::optional<Invalid> plan_##kind(const Ctx& cx, NestPlan& n, int slot);      \
  std::pair<int, int> sbuf_fix_##kind(const Ctx& cx, const NestPlan& n);
KEVO_NEST_KINDS(KEVO_PLAN_DECL)
#undef KEVO_PLAN_DECL

}  // namespace kevo::schedule::detail
