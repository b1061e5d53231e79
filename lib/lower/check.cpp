#include "kevo/lower/check.hpp"

#include <fmt/format.h>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/topological_sort.hpp>
#include <iterator>

namespace kevo::lower {

namespace {

std::string where(const TileProgram& p, std::size_t i) {
  return fmt::format("instruction {} ({})", i, to_string(p.instrs[i].op));
}

}  // namespace

Invalid check_program(const TileProgram& p, const target::Target& t) {
  if (p.dep_begin.size() != p.instrs.size() + 1) return {"internal", "dependency index does not match the instructions"};
  for (std::size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& in = p.instrs[i];
    for (auto d : p.preds(i))
      if (d >= i) return {"internal", fmt::format("{} depends on a later instruction {}", where(p, i), d)};
    const auto check_ap = [&](const AccessPattern& a, bool compute) -> Invalid {
      if (a.buffer < 0 || static_cast<std::size_t>(a.buffer) >= p.buffers.size())
        return {"internal", fmt::format("{} names no buffer", where(p, i))};
      const Buffer& b = p.buffers[static_cast<std::size_t>(a.buffer)];
      if (b.mem == Memory::hbm) return {};
      if (a.part_count > t.pmax)
        return {"tile_limit", fmt::format("{} spans {} partitions, {} allows {}", where(p, i), a.part_count, t.name, t.pmax)};
      const std::int64_t slot_elems = static_cast<std::int64_t>(b.partitions) * b.free_elems;
      const std::int64_t start = (a.offset % slot_elems) / b.free_elems;
      const int n = a.part_count;
      const bool ok = n > 64 ? start == 0 : n > 32 ? (start == 0 || start == 64) : start % 32 == 0;
      if (compute && !ok)
        return {"partition_start", fmt::format("{} starts {} partitions at partition {}", where(p, i), n, start)};
      if (start + n > b.partitions)
        return {"internal", fmt::format("{} runs past the {} partitions of {}", where(p, i), b.partitions, b.name)};
      if (compute) {
        const std::int64_t lim = b.mem == Memory::psum ? t.psum_free_max_elems : t.sbuf_free_max_elems;
        if (a.free_elems() > lim)
          return {"tile_limit", fmt::format("{} reads {} free elements from {}, {} allows {}", where(p, i), a.free_elems(),
                                            to_string(b.mem), t.name, lim)};
        if (b.mem == Memory::psum && !in.at.dma && in.at.engine == target::Engine::gpsimd)
          return {"unsupported", fmt::format("{} on GpSimd cannot access PSUM", where(p, i))};
      }
      return {};
    };
    const bool compute = !in.at.dma;
    if (auto r = check_ap(in.dst, compute); !r.code.empty()) return r;
    for (int s = 0; s < in.nsrc; ++s)
      if (auto r = check_ap(in.src[static_cast<std::size_t>(s)], compute); !r.code.empty()) return r;
    if (in.op == Opcode::nc_matmul) {
      if (in.src[0].free_elems() > t.stationary_fmax)
        return {"tile_limit", fmt::format("{}: stationary free size {} exceeds {}", where(p, i), in.src[0].free_elems(), t.stationary_fmax)};
      if (in.src[1].free_elems() > t.moving_fmax)
        return {"tile_limit", fmt::format("{}: moving free size {} exceeds {}", where(p, i), in.src[1].free_elems(), t.moving_fmax)};
    }
  }
  return {};
}

bool dependencies_form_dag(const TileProgram& p) {
  using G = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
  G g(p.instrs.size());
  for (std::size_t i = 0; i < p.instrs.size(); ++i)
    for (auto d : p.preds(i)) boost::add_edge(d, i, g);
  std::vector<std::size_t> order;
  order.reserve(p.instrs.size());
  try {
    boost::topological_sort(g, std::back_inserter(order));
  } catch (const boost::not_a_dag&) {
    return false;
  }
  for (std::size_t i = 0; i < p.instrs.size(); ++i)
    for (auto d : p.preds(i))
      if (d >= i) return false;
  return true;
}

}  // namespace kevo::lower
