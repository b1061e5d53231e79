// Internal pieces shared by the simulator's translation units (not installed).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "kevo/lower/program.hpp"
#include "kevo/runner/sim.hpp"

namespace kevo::runner::detail {

// Calibrated against measurements.md (docs/SIMULATOR.md lists the fit and each row's ratio).
inline constexpr double kCalibratedHbmEfficiency = 1.0;
inline constexpr double kCalibratedQueueEfficiency = 1.0;
inline constexpr double kCalibratedMatmulExtraCycles = 0.0;

// Bytes per partition of SBUF or PSUM buffers live over time: a step function (time, bytes)
// built from each buffer's first and last use in a simulated run.
struct Occupancy {
  lower::Memory mem = lower::Memory::sbuf;
  std::vector<std::pair<double, std::int64_t>> points;
  std::int64_t peak = 0;
};
std::vector<Occupancy> occupancy(const lower::TileProgram& p, const SimResult& r);

}  // namespace kevo::runner::detail
