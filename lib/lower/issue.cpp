// The issue order of a nest's instructions: see issue.hpp.
#include "issue.hpp"

#include <algorithm>
#include <numeric>
#include <queue>
#include <stdexcept>

namespace kevo::lower::detail {
namespace {

// An estimate of an instruction's duration in ns on `t`, for the order only (the simulator
// measures): a DMA alone on HBM, a compute instruction at its engine's datasheet rate.
double issue_cost_ns(const TileProgram& p, const Instr& in, const target::Target& t) {
  const auto& dbuf = p.buffers[static_cast<std::size_t>(in.dst.buffer)];
  if (in.at.dma) {
    // alone on HBM: an optimistic figure, which is what an earliest start needs
    const double bytes = static_cast<double>(in.dst.elems()) * static_cast<double>(ir::dtype_bytes(dbuf.dtype));
    return t.dma_fixed_ns + bytes / std::max(1e-9, t.hbm_bytes_per_ns);
  }
  const auto& es = t.engine(in.at.engine);
  std::int64_t elems = in.dst.free_elems();
  bool all16 = ir::dtype_bytes(dbuf.dtype) == 2;
  for (std::size_t s = 0; s < in.nsrc && s < in.src.size(); ++s) {
    if (!in.src[s].valid()) continue;
    elems = std::max(elems, in.src[s].free_elems());
    all16 = all16 && ir::dtype_bytes(p.buffers[static_cast<std::size_t>(in.src[s].buffer)].dtype) == 2;
  }
  double cycles = 0;
  if (in.at.engine == target::Engine::tensor) {
    cycles = std::max<double>(t.matmul_min_cycles, static_cast<double>(in.nsrc >= 2 ? in.src[1].free_elems() : elems));
  } else {
    const double rate = std::max(1e-9, all16 ? es.elems_per_cycle_16bit : es.elems_per_cycle_32bit);
    cycles = static_cast<double>(elems) / rate;
    if (in.op == Opcode::tensor_tensor && !all16) cycles *= 2;
    cycles = std::max(cycles, es.min_ii_cycles);
  }
  return std::max(1.0, (cycles + es.fixed_overhead_cycles) / std::max(1e-9, es.clock_ghz));
}

// `ready`: the range's instructions sorted by their earliest start when each starts as soon as its
// predecessors end, whatever else runs (ties: program order). A successor starts after its
// predecessor ends, every cost being positive, so the order is topological.
void order_ready(const TileProgram& p, std::size_t b, std::size_t e, const target::Target& t, std::vector<std::uint32_t>& order) {
  std::vector<double> start(e - b, 0.0), end(e - b, 0.0);
  for (std::size_t i = b; i < e; ++i) {
    double s = 0;
    for (const auto d : p.preds(i))
      if (d >= b) s = std::max(s, end[d - b]);  // edges into earlier nests: already done
    start[i - b] = s;
    end[i - b] = s + issue_cost_ns(p, p.instrs[i], t);
  }
  std::stable_sort(order.begin() + static_cast<std::ptrdiff_t>(b), order.begin() + static_cast<std::ptrdiff_t>(e),
                   [&](std::uint32_t x, std::uint32_t y) { return start[x - b] < start[y - b]; });
}

// `list`: a list schedule of the range. Every engine and every DMA queue runs one instruction at a
// time, in the order this picks; the next pick is the instruction, among those whose predecessors
// are placed, that can start first on its engine or queue (ties: program order). Placed only after
// its predecessors, so the order is topological.
void order_list(const TileProgram& p, std::size_t b, std::size_t e, const target::Target& t, std::vector<std::uint32_t>& order) {
  const int nq = std::max(1, t.dma_lanes());
  const auto resource = [&](const Instr& in) {
    return static_cast<std::size_t>(in.at.dma ? target::kNumEngines + static_cast<int>(in.at.queue) % nq
                                              : static_cast<int>(in.at.engine));
  };
  using Ready = std::pair<double, std::uint32_t>;  // (ready time, index in the range)
  std::vector<std::priority_queue<Ready, std::vector<Ready>, std::greater<>>> queue(
      static_cast<std::size_t>(target::kNumEngines + nq));
  std::vector<double> free_at(queue.size(), 0.0);
  const std::size_t m = e - b;
  std::vector<double> ready(m, 0.0);
  std::vector<std::uint32_t> waiting(m, 0), succ_begin(m + 1, 0);
  for (std::size_t i = b; i < e; ++i)  // edges into earlier nests: already done
    for (const auto d : p.preds(i))
      if (d >= b) ++waiting[i - b], ++succ_begin[d - b + 1];
  for (std::size_t i = 0; i < m; ++i) succ_begin[i + 1] += succ_begin[i];
  std::vector<std::uint32_t> succ(succ_begin[m]), fill(succ_begin.begin(), succ_begin.end() - 1);
  for (std::size_t i = b; i < e; ++i)
    for (const auto d : p.preds(i))
      if (d >= b) succ[fill[d - b]++] = static_cast<std::uint32_t>(i - b);
  for (std::size_t i = 0; i < m; ++i)
    if (waiting[i] == 0) queue[resource(p.instrs[b + i])].emplace(0.0, static_cast<std::uint32_t>(i));
  for (std::size_t placed = 0; placed < m; ++placed) {
    std::size_t best = queue.size();
    double best_start = 0;
    std::uint32_t best_i = 0;
    for (std::size_t r = 0; r < queue.size(); ++r) {
      if (queue[r].empty()) continue;
      const auto [rt, i] = queue[r].top();
      const double st = std::max(rt, free_at[r]);
      if (best == queue.size() || st < best_start || (st == best_start && i < best_i)) best = r, best_start = st, best_i = i;
    }
    if (best == queue.size()) throw std::logic_error("lower: a dependency cycle in a nest's instructions");
    queue[best].pop();
    const double end = best_start + issue_cost_ns(p, p.instrs[b + best_i], t);
    free_at[best] = end;
    order[b + placed] = static_cast<std::uint32_t>(b + best_i);
    for (std::uint32_t k = succ_begin[best_i]; k < succ_begin[best_i + 1]; ++k) {
      const std::uint32_t s = succ[k];
      ready[s] = std::max(ready[s], end);
      if (--waiting[s] == 0) queue[resource(p.instrs[b + s])].emplace(ready[s], s);
    }
  }
}

}  // namespace

void reorder_issue(TileProgram& p, const std::vector<IssueRange>& ranges, const target::Target& t) {
  const std::size_t n = p.instrs.size();
  std::vector<std::uint32_t> order(n);  // order[new position] = old index
  std::iota(order.begin(), order.end(), 0u);
  bool moved = false;
  for (const auto& r : ranges) {
    if (r.end > n || r.first >= r.end) continue;
    if (r.order == schedule::IssueOrder::list) order_list(p, r.first, r.end, t, order);
    else if (r.order == schedule::IssueOrder::ready) order_ready(p, r.first, r.end, t, order);
    for (std::size_t i = r.first; i < r.end && !moved; ++i) moved = order[i] != i;
  }
  if (!moved) return;
  std::vector<std::uint32_t> pos(n);  // pos[old index] = new position
  for (std::size_t i = 0; i < n; ++i) pos[order[i]] = static_cast<std::uint32_t>(i);
  std::vector<Instr> instrs;
  instrs.reserve(n);
  std::vector<std::uint32_t> dep_begin{0}, deps;
  std::vector<std::uint8_t> war;
  dep_begin.reserve(n + 1);
  deps.reserve(p.deps.size());
  war.reserve(p.dep_kind.size());
  std::vector<std::pair<std::uint32_t, std::uint8_t>> row;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t o = order[i];
    instrs.push_back(p.instrs[o]);
    row.clear();
    for (std::uint32_t k = p.dep_begin[o]; k < p.dep_begin[o + 1]; ++k) {
      const std::uint32_t d = pos[p.deps[k]];
      // both orders are topological (above)
      if (d >= i) throw std::logic_error("lower: reordering by readiness broke a dependency");
      row.emplace_back(d, p.dep_kind.empty() ? 0 : p.dep_kind[k]);
    }
    std::sort(row.begin(), row.end());  // ascending, as the builder writes them
    for (const auto& [d, w] : row) {
      deps.push_back(d);
      if (!p.dep_kind.empty()) war.push_back(w);
    }
    dep_begin.push_back(static_cast<std::uint32_t>(deps.size()));
  }
  p.instrs = std::move(instrs);
  p.dep_begin = std::move(dep_begin);
  p.deps = std::move(deps);
  p.dep_kind = std::move(war);
}

}  // namespace kevo::lower::detail
