// The issue order of a nest's instructions: see issue.hpp.
#include "issue.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace kevo::lower::detail {

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

void reorder_by_ready(TileProgram& p, const std::vector<std::pair<std::size_t, std::size_t>>& ranges,
                      const target::Target& t) {
  const std::size_t n = p.instrs.size();
  std::vector<std::uint32_t> order(n);  // order[new position] = old index
  std::iota(order.begin(), order.end(), 0u);
  bool moved = false;
  std::vector<double> start, end;
  for (const auto& range : ranges) {
    const std::size_t b = range.first, e = range.second;  // (a lambda below captures b: no structured binding)
    if (e > n || b >= e) continue;
    start.assign(e - b, 0.0);
    end.assign(e - b, 0.0);
    for (std::size_t i = b; i < e; ++i) {
      double s = 0;
      for (const auto d : p.preds(i))
        if (d >= b) s = std::max(s, end[d - b]);  // edges into earlier nests: already done
      start[i - b] = s;
      end[i - b] = s + issue_cost_ns(p, p.instrs[i], t);
    }
    std::stable_sort(order.begin() + static_cast<std::ptrdiff_t>(b), order.begin() + static_cast<std::ptrdiff_t>(e),
                     [&](std::uint32_t x, std::uint32_t y) { return start[x - b] < start[y - b]; });
    for (std::size_t i = b; i < e && !moved; ++i) moved = order[i] != i;
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
  war.reserve(p.dep_war.size());
  std::vector<std::pair<std::uint32_t, std::uint8_t>> row;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t o = order[i];
    instrs.push_back(p.instrs[o]);
    row.clear();
    for (std::uint32_t k = p.dep_begin[o]; k < p.dep_begin[o + 1]; ++k) {
      const std::uint32_t d = pos[p.deps[k]];
      // every cost is positive, so a successor starts after its predecessor ends
      if (d >= i) throw std::logic_error("lower: reordering by readiness broke a dependency");
      row.emplace_back(d, p.dep_war.empty() ? 0 : p.dep_war[k]);
    }
    std::sort(row.begin(), row.end());  // ascending, as the builder writes them
    for (const auto& [d, w] : row) {
      deps.push_back(d);
      if (!p.dep_war.empty()) war.push_back(w);
    }
    dep_begin.push_back(static_cast<std::uint32_t>(deps.size()));
  }
  p.instrs = std::move(instrs);
  p.dep_begin = std::move(dep_begin);
  p.deps = std::move(deps);
  p.dep_war = std::move(war);
}

}  // namespace kevo::lower::detail
