// Private to the lowering: the per-instruction structural rules of a target (tile limits,
// partition-start alignment, engine access to PSUM), written once and used both while a program
// is built (Builder::emit, so a bad schedule stops at its first bad instruction) and by
// check_program over a finished program.
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <vector>

#include "kevo/lower/lower.hpp"
#include "kevo/lower/program.hpp"

namespace kevo::lower::detail {

// What the rules need of a buffer, kept flat so the check touches no strings.
struct BufFacts {
  Memory mem = Memory::hbm;
  int partitions = 1;
  std::int64_t free_elems = 1;
  std::int64_t slot_elems = 1;  // partitions * free_elems
  static BufFacts of(const Buffer& b) noexcept {
    BufFacts f;
    f.mem = b.mem;
    f.partitions = b.partitions;
    f.free_elems = std::max<std::int64_t>(1, b.free_elems);
    f.slot_elems = std::max<std::int64_t>(1, static_cast<std::int64_t>(b.partitions) * b.free_elems);
    return f;
  }
};

// The first rule instruction `i` (opcode `in.op`) breaks, or an Invalid with an empty code.
// `names` gives buffer names for messages (only read on failure).
inline Invalid check_instr(const Instr& in, std::size_t i, const std::vector<BufFacts>& facts, const std::vector<Buffer>& names,
                           const target::Target& t) {
  const auto where = [&] { return fmt::format("instruction {} ({})", i, to_string(in.op)); };
  const bool compute = !in.at.dma;
  const auto check_ap = [&](const AccessPattern& a) -> Invalid {
    if (a.buffer < 0 || static_cast<std::size_t>(a.buffer) >= facts.size()) return {"internal", fmt::format("{} names no buffer", where())};
    const BufFacts& b = facts[static_cast<std::size_t>(a.buffer)];
    if (b.mem == Memory::hbm) return {};
    if (a.part_count > t.pmax)
      return {"tile_limit", fmt::format("{} spans {} partitions, {} allows {}", where(), a.part_count, t.name, t.pmax)};
    std::int64_t start = a.offset;  // the partition the access starts at, dividing only when needed
    if (start >= b.slot_elems) start %= b.slot_elems;
    start = start < b.free_elems ? 0 : start / b.free_elems;
    const int n = a.part_count;
    if (compute) {
      const bool ok = n > 64 ? start == 0 : n > 32 ? (start == 0 || start == 64) : start % 32 == 0;
      if (!ok) return {"partition_start", fmt::format("{} starts {} partitions at partition {}", where(), n, start)};
    }
    if (start + n > b.partitions)
      return {"internal", fmt::format("{} runs past the {} partitions of {}", where(), b.partitions,
                                      names[static_cast<std::size_t>(a.buffer)].name)};
    if (compute) {
      const std::int64_t lim = b.mem == Memory::psum ? t.psum_free_max_elems : t.sbuf_free_max_elems;
      if (a.free_elems() > lim)
        return {"tile_limit",
                fmt::format("{} reads {} free elements from {}, {} allows {}", where(), a.free_elems(), to_string(b.mem), t.name, lim)};
      if (b.mem == Memory::psum && in.at.engine == target::Engine::gpsimd)
        return {"unsupported", fmt::format("{} on GpSimd cannot access PSUM", where())};
    }
    return {};
  };
  if (auto r = check_ap(in.dst); !r.code.empty()) return r;
  for (int s = 0; s < in.nsrc; ++s)
    if (auto r = check_ap(in.src[static_cast<std::size_t>(s)]); !r.code.empty()) return r;
  if (in.op == Opcode::nc_matmul) {
    if (in.src[0].free_elems() > t.stationary_fmax)
      return {"tile_limit", fmt::format("{}: stationary free size {} exceeds {}", where(), in.src[0].free_elems(), t.stationary_fmax)};
    if (in.src[1].free_elems() > t.moving_fmax)
      return {"tile_limit", fmt::format("{}: moving free size {} exceeds {}", where(), in.src[1].free_elems(), t.moving_fmax)};
  }
  return {};
}

}  // namespace kevo::lower::detail
