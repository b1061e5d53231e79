// The schedule space of a kernel on a target, derived automatically from the kernel's ops and the
// target's limits (never hand-written per workload): typed genes for tiles, blocks, loop orders,
// layouts, load levels, buffer counts, accumulation place, fusion, engines and DMA granularity,
// plus the schedule text form (print/parse) that people and LLMs write. Grammar: docs/SCHEDULE.md.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "kevo/core/error.hpp"
#include "kevo/core/expected.hpp"
#include "kevo/core/genes.hpp"
#include "kevo/core/rng.hpp"
#include "kevo/ir/kernel.hpp"
#include "kevo/target/target.hpp"

namespace kevo::schedule {

struct SpaceImpl;  // the derived structure (fused groups, gene roles); defined in the schedule module

class ScheduleSpace {
 public:
  // Derives the space. Throws kevo::Error only for kernels the lowering cannot handle at all.
  static ScheduleSpace derive(const ir::Kernel& k, const target::Target& t);
  // As derive(k, t); with every_orientation, `stationary X out=pe_transpose` is offered wherever
  // X's free index is the output's last, not only where that orientation wastes fewer stationary
  // rows (verification at a reduced shape, whose extents no longer show the waste, needs the
  // value the full-size schedule has).
  static ScheduleSpace derive(const ir::Kernel& k, const target::Target& t, bool every_orientation);

  [[nodiscard]] const Space& genes() const noexcept;
  [[nodiscard]] const ir::Kernel& kernel() const noexcept;
  [[nodiscard]] const target::Target& target() const noexcept;

  // Human/LLM-readable text; parse(print(g)) == g.
  [[nodiscard]] std::string print(const Genome& g) const;
  // Located errors name the bad token and say what is allowed. Genes the text leaves out take
  // their default values.
  [[nodiscard]] Expected<Genome, Diagnostic> parse(std::string_view text, std::string file = "<schedule>") const;
  // A reasonable valid starting genome (the "default schedule").
  [[nodiscard]] Genome default_genome() const;
  // Cheap fixes that make a genome more likely valid (e.g. clamp tiles to limits); false when it cannot.
  bool repair(Genome& g, Rng& rng) const;
  // Share of `samples` random genomes that lower successfully (the space's sampled validity).
  [[nodiscard]] double sampled_validity(std::size_t samples, std::uint64_t seed) const;

  [[nodiscard]] const SpaceImpl& impl() const noexcept { return *impl_; }

 private:
  std::shared_ptr<const SpaceImpl> impl_;
};

}  // namespace kevo::schedule
