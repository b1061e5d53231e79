// The schedule space of a kernel on a target, derived automatically from the kernel's ops and the
// target's limits (never hand-written per workload): typed genes for tiles, blocks, loop orders,
// layouts, load levels, buffer counts, accumulation place, fusion, engines and DMA granularity,
// plus the schedule text form (print/parse) that people and LLMs write. Grammar: docs/SCHEDULE.md.
#pragma once
#include <functional>
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

// Why a kernel has no schedule space: a kernel the lowering cannot handle at all (an expected,
// user-caused outcome, returned by ScheduleSpace::try_derive as a value).
struct Unsupported {
  enum class Why {
    no_ops,                      // the kernel has no ops
    contraction_operands,        // a contraction whose body is not the product of two tensor accesses
    contraction_indices,         // a contraction over more than one index (e.g. sum over k and l)
    contraction_index_unshared,  // the contracted index is missing from one operand
    no_layout,                   // an elementwise/reduce op with no loop index to put on partitions
    dtype,                       // a tensor or cast in a dtype the target does not store (target::Target::dtypes)
  };
  Why why = Why::no_ops;
  std::string kernel;   // the kernel's name
  std::string op;       // the op's output tensor, or empty when the whole kernel is meant
  std::string message;  // one line, e.g. "a contraction over 2 indices is not supported (one contracted index)"
  [[nodiscard]] std::string_view code() const noexcept;  // "contraction_indices", ... (the enumerator's name)
  [[nodiscard]] std::string str() const;                 // "kernel 'k', op 'C': a contraction over 2 indices ..."
};

// What a derived space offers beyond the searched default. The default space is what a search
// explores; every structure kevo can lower, verify and cost is in the full one, and a schedule
// text parses in a space only when that space offers every value it names.
struct DeriveOptions {
  // `stationary X out=pe_transpose` wherever X's free index is the output's last, not only where
  // that orientation wastes fewer stationary rows (verification at a reduced shape, whose extents
  // no longer show the waste, needs the value the full-size schedule has).
  bool every_orientation = false;
  // Structures of hand kernels that no search shape needs and that cost the default job when
  // searched (docs/SCHEDULE.md, "the full space"): loads in pairs of tiles (`dma=pair`, the
  // autocomp GEMM chain's lhsT in pairs of m tiles), one 3-D dma_transpose for all full k
  // tiles of a load footprint (`transpose T=dma_transpose_region`), and the output's rows in
  // interleaved partition order (`rows interleave_out`, `rows interleave_all`).
  bool every_structure = false;
  // Reshape a long index whose op has no other index as long as the partition count (a 1-D map
  // or sum) into outer x inner parts, so that it can lie down the partitions (docs/SCHEDULE.md,
  // "Long indices split across partitions"). Off: the kernel is scheduled as written (a space
  // derived from a kernel that is already a split view, as verification at a reduced shape does).
  bool split_long_indices = true;
  // Both: the space hand-written schedules are read in (kevo eval/emit/search --space full,
  // kevo calibrate's rows).
  static constexpr DeriveOptions full() noexcept { return {true, true}; }
};

class ScheduleSpace {
 public:
  // Derives the space, or says why the kernel cannot be scheduled.
  static Expected<ScheduleSpace, Unsupported> try_derive(const ir::Kernel& k, const target::Target& t, DeriveOptions opt = {});
  // Throwing conveniences for kernels known to be supported (the workload library, tests,
  // kernels that try_derive already accepted): as try_derive, but an unsupported kernel throws
  // kevo::Error with Unsupported::str(). Front ends (CLI, C API, Python) call try_derive.
  static ScheduleSpace derive(const ir::Kernel& k, const target::Target& t, DeriveOptions opt = {});
  // The options this space was derived with.
  [[nodiscard]] DeriveOptions options() const noexcept;

  [[nodiscard]] const Space& genes() const noexcept;
  // The user's kernel, as derived from.
  [[nodiscard]] const ir::Kernel& kernel() const noexcept;
  // The kernel the schedule is written over and lowered from: kernel() with its long indices
  // split (DeriveOptions::split_long_indices), else kernel() itself. Same tensors in the same
  // order, each with the same elements in the same HBM order: a program lowered from it reads
  // and writes kernel()'s tensors.
  [[nodiscard]] const ir::Kernel& scheduled_kernel() const noexcept;
  // One line per split, e.g. "i = 8192*i_o + i_i (N = N_o x N_i; 128 x 8192)"; empty when none.
  [[nodiscard]] const std::vector<std::string>& splits() const noexcept;
  [[nodiscard]] const target::Target& target() const noexcept;

  // Human/LLM-readable text; parse(print(g)) == g.
  [[nodiscard]] std::string print(const Genome& g) const;
  // Located errors name the bad token and say what is allowed. Genes the text leaves out take
  // their default values.
  [[nodiscard]] Expected<Genome, Diagnostic> parse(std::string_view text, std::string file = "<schedule>") const;
  // A reasonable valid starting genome (the "default schedule").
  [[nodiscard]] Genome default_genome() const;
  // A few schedules written by rules from the kernel's structure, the way a hand tuner starts
  // (a contraction: 128x512 tiles in blocks, loads hoisted to the block, the stationary operand
  // transposed a block at a time, the first loads over every DMA queue, evictions alternating):
  // valid, distinct from the default, and none when no rule applies. The kernel search offers
  // them halfway through its budget (search::SearchOptions::late_expert_seeds).
  [[nodiscard]] const std::vector<Genome>& expert_genomes() const noexcept;
  // Cheap fixes that make a genome more likely valid (e.g. clamp tiles to limits); false when it cannot.
  bool repair(Genome& g, Rng& rng) const;
  // Share of `samples` random genomes that lower successfully (the space's sampled validity).
  [[nodiscard]] double sampled_validity(std::size_t samples, std::uint64_t seed) const;
  // The same, stopping after `max_seconds` of wall time (a kernel of hundreds of ops lowers in tens
  // of milliseconds per genome): the share of the genomes sampled, and how many that was (the first
  // ones of the full sample: the same genomes, fewer of them).
  struct Validity {
    double share = 0;
    std::size_t samples = 0;
  };
  [[nodiscard]] Validity sampled_validity(std::size_t samples, std::uint64_t seed, double max_seconds) const;
  // The same, asking `stop` after every 256 genomes whether to end there (a front end's Ctrl-C);
  // an empty `stop` is never asked.
  [[nodiscard]] Validity sampled_validity(std::size_t samples, std::uint64_t seed, double max_seconds,
                                          const std::function<bool()>& stop) const;

  [[nodiscard]] const SpaceImpl& impl() const noexcept { return *impl_; }

 private:
  std::shared_ptr<const SpaceImpl> impl_;
};

}  // namespace kevo::schedule
