// Lowering: a plan (schedule/detail/plan.hpp) becomes an unrolled tile program. The entry
// points; the Lowerer (lowerer.hpp) walks the nests, each nest kind in its folder (lib/nests/).
#include "kevo/lower/lower.hpp"

#include <fmt/format.h>

#include "builder.hpp"
#include "kevo/schedule/detail/plan.hpp"
#include "lowerer.hpp"

namespace kevo::lower {

using detail::Lowerer;

Expected<void, Invalid> lower_into(const schedule::ScheduleSpace& space, const Genome& g, TileProgram& p) {
  // Start from an empty program but keep the vectors' capacity: a caller that lowers many genomes
  // into one program object allocates (and page-faults) its instruction storage once.
  p.buffers.clear();
  p.instrs.clear();
  p.dep_begin.clear();
  p.deps.clear();
  p.dep_kind.clear();
  p.group_names.clear();
  p.stats = {};
  auto plan = schedule::make_plan(space, g);
  if (!plan) return unexpected(std::move(plan.error()));
  p.kernel_name = space.kernel().name;
  p.target_name = space.target().name;
  p.schedule_text = space.print(g);
  try {
    // A program that may outgrow the instruction limit is counted first, without checks or
    // dependency tracking: a too-large schedule is then rejected at a fraction of the cost.
    const std::size_t mm = Lowerer::matmuls(*plan);
    if (mm >= detail::Builder::kMaxInstructions) throw detail::Builder::TooLarge{false};
    std::size_t exact = 0;
    if (4 * mm > detail::Builder::kMaxInstructions) {
      TileProgram scratch;
      exact = Lowerer(space, *plan, scratch).count();
    }
    Lowerer lw(space, *plan, p);
    lw.run(exact);
  } catch (const detail::Builder::TooLarge& t) {
    // NKI unrolls every loop: such a program is not a usable kernel
    if (t.readers)
      return unexpected(Invalid{"too_large", fmt::format("the program exceeds {} reader records after {} instructions (many small "
                                                         "reads of large regions; use larger tiles or coarser DMA)",
                                                         detail::Builder::kMaxReaderRecords, p.instrs.size())});
    if (t.edges)
      return unexpected(Invalid{"too_large", fmt::format("the program exceeds {} dependency edges after {} instructions (many small "
                                                         "transfers each waiting on many readers; use larger tiles or coarser DMA)",
                                                         detail::Builder::kMaxDependencies, p.instrs.size())});
    return unexpected(Invalid{"too_large", fmt::format("the program exceeds {} instructions (every loop is unrolled; use larger tiles "
                                                       "or coarser DMA)",
                                                       detail::Builder::kMaxInstructions)});
  } catch (detail::Builder::Rejected& r) {
    // every instruction is checked against the target's rules as it is emitted (check_instr)
    return unexpected(std::move(r.why));
  }
  // (the stats' SBUF and PSUM figures are the nests live at once: Lowerer::walk_nests)
  p.stats.instructions = p.instrs.size();
  return {};
}

Expected<std::size_t, Invalid> count_instructions(const schedule::ScheduleSpace& space, const Genome& g) {
  auto plan = schedule::make_plan(space, g);
  if (!plan) return unexpected(std::move(plan.error()));
  const std::size_t mm = Lowerer::matmuls(*plan);
  if (mm > kMaxInstructions) return kMaxInstructions + 1;
  TileProgram scratch;
  try {
    return Lowerer(space, *plan, scratch).count();
  } catch (const detail::Builder::TooLarge&) {
    return kMaxInstructions + 1;
  } catch (detail::Builder::Rejected& r) {  // a rule check_instr or add_buffer applies while counting
    return unexpected(std::move(r.why));
  }
}

Expected<TileProgram, Invalid> lower(const schedule::ScheduleSpace& space, const Genome& g) {
  TileProgram p;
  if (auto done = lower_into(space, g, p); !done) return unexpected(std::move(done.error()));
  return p;
}

}  // namespace kevo::lower
