// Internal pieces shared by the simulator's translation units (not installed).
#pragma once
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "kevo/lower/program.hpp"
#include "kevo/runner/sim.hpp"

namespace kevo::runner::detail {

// Part of SimRunner{}'s identity (cache keys): bump it whenever the model's physics changes. The
// parameters themselves come from the target, whose hash is part of every cache key already.
inline constexpr int kModelVersion = 10;

// Bytes per partition of SBUF or PSUM buffers live over time: a step function (time, bytes)
// built from each buffer's first and last use in a simulated run.
struct Occupancy {
  lower::Memory mem = lower::Memory::sbuf;
  std::vector<std::pair<double, std::int64_t>> points;
  std::int64_t peak = 0;
};
std::vector<Occupancy> occupancy(const lower::TileProgram& p, const SimResult& r);
// The same from each buffer's first start and last completion time (+-inf for unused buffers).
std::vector<Occupancy> occupancy(const lower::TileProgram& p, std::span<const double> first, std::span<const double> last);

}  // namespace kevo::runner::detail
