// The Triton schedule space of a kernel on a GPU target: typed genes derived from the kernel's
// family and sizes and the target's limits, and the validity of a genome as a value (a typed
// reason such as "smem_overflow: 3 stages x (128x64 + 64x256) x 2 B = 147456 B > 232448 B").
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/core/expected.hpp"
#include "kevo/core/genes.hpp"
#include "kevo/core/invalid.hpp"
#include "kevo/gpu/kernel.hpp"
#include "kevo/gpu/target.hpp"

namespace kevo::gpu {

// Why a genome cannot run is a kevo::Invalid (kevo/core/invalid.hpp), the invalid-schedule type
// shared with the NeuronCore space: codes smem_overflow, register_overflow, split_k_indivisible, ...,
// a message with the figures.

// A decoded schedule: gene name -> numeric value (categoricals as their index) and label.
struct TritonSchedule {
  std::vector<std::pair<std::string, std::int64_t>> values;
  std::vector<std::pair<std::string, std::string>> labels;
  [[nodiscard]] std::int64_t get(std::string_view name, std::int64_t fallback = 0) const;
  [[nodiscard]] std::string label(std::string_view name, std::string_view fallback = {}) const;
};

// Row kernels' persistent grid: SMs x the programs of `warps` warps that fit by threads per SM.
std::int64_t persistent_row_programs(const GpuTarget& t, std::int64_t warps);

class TritonSpace {
 public:
  static TritonSpace derive(const GpuKernel& k, const GpuTarget& t);

  [[nodiscard]] const Space& space() const noexcept { return space_; }
  [[nodiscard]] const GpuKernel& kernel() const noexcept { return k_; }
  [[nodiscard]] const GpuTarget& target() const noexcept { return t_; }
  [[nodiscard]] TritonSchedule decode(const Genome& g) const;
  // Valid (an empty value) when the genome can run; else why not (never reaches a worker).
  [[nodiscard]] Expected<void, Invalid> check(const Genome& g) const;
  // "block_m=128 block_n=256 ..." and back (errors name the gene or label).
  [[nodiscard]] std::string text(const Genome& g) const;
  [[nodiscard]] Expected<Genome, std::string> parse(std::string_view text) const;
  // A known-good starting schedule (the shape of Triton's tutorial configurations for Hopper).
  [[nodiscard]] Genome default_genome() const;
  // A few hand-picked valid schedules for the first generation.
  [[nodiscard]] std::vector<Genome> seeds() const;
  // Moves an invalid genome to a valid one by shrinking stages, then blocks; false if it cannot.
  bool repair(Genome& g) const;

 private:
  [[nodiscard]] Expected<Genome, std::string> parse_from(Genome base, std::string_view text) const;
  GpuKernel k_;
  GpuTarget t_;
  Space space_;
};

}  // namespace kevo::gpu
