// Trusting the winner: a schedule is named best only once its program has been checked against
// the reference evaluator. verify_schedule checks one schedule (the whole program through the
// tile-program interpreter when that is cheap, else the same schedule structure at a reduced
// shape, else the runner's own output check when the runner makes one); first_verified walks
// candidates best first and returns the first that verifies, with the reasons of the faster
// ones it rejected. See docs/VERIFY.md ("Verifying winners").
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kevo/core/expected.hpp"
#include "kevo/core/genes.hpp"
#include "kevo/ir/kernel.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/search/kernel_problem.hpp"

namespace kevo::search {

struct Verification {
  bool ok = false;
  // "interpreter" (the whole program, program and adversarial order), "reduced_shape" (the same
  // schedule structure on a smaller kernel, interpreted), "runner" (the runner compared the
  // outputs itself and reported ok), or "none" (nothing could check it: `message` says why).
  std::string method = "none";
  std::string shape;    // the kernel shape that was checked, e.g. "R=256,C=1024" (empty for runner/none)
  std::string detail;   // e.g. "R=256,C=1024 (from R=2048,C=4096), 1 trial(s), 2 orders"
  std::string message;  // first mismatch, or why the schedule could not be verified
  // false when the schedule could not be checked at all (did not lower, no reduced shape, too
  // large): not verified, but not shown wrong either.
  bool conclusive = false;
};

struct VerifyOptions {
  std::uint64_t seed = 0x5eed;
  int trials = 1;  // input sets per check (each run in program and adversarial order)
  // Above either bound the whole program is not interpreted; the reduced shape is used instead.
  std::int64_t max_interpret_flops = 10'000'000'000LL;
  std::size_t max_interpret_instructions = 200'000;
  // Above this many bytes of kernel tensors (every tensor, temps included, at 4 bytes an element:
  // the reference and the interpreter each hold them all, about 3x this at the peak) the reduced
  // shape is used too: a 200-op chain of 1024 x 2048 fp32 tensors (1.6 GB) peaked at 5 GB, and
  // a longer one would not fit in memory.
  std::int64_t max_interpret_bytes = std::int64_t{1} << 30;
  // A reduced shape whose program is still above these is not interpreted either. 64 GFLOP: the
  // NKI tutorial's optimized 4096x8192x8192 schedule (examples/schedules) reduces to 34 GFLOP
  // (blocks of 2048 rows keep M whole) and verifies in about 6 s; at 20 GFLOP it was unverifiable.
  std::int64_t max_reduced_flops = 64'000'000'000LL;
  std::int64_t max_reduced_bytes = std::int64_t{2} << 30;
  // Ask for the reduced shape even when the whole program is cheap (tests).
  bool force_reduced = false;
};

// The same kernel at a reduced shape, with the genome mapped into the reduced schedule space.
struct ReducedShape {
  ir::Kernel kernel;
  schedule::ScheduleSpace space;  // derived from `kernel` on the original space's target
  Genome genome;
  std::string detail;  // "R=256,C=1024 (from R=2048,C=4096)"
};

// Shrinks every kernel dimension to `blocks` of its unit (the least common multiple of the tile x
// block sizes the schedule uses along it) plus the original remainder (so edge tiles still
// occur), never below min(size, 128) where the dimension is tiled; a tile or block that covered
// the whole extent covers the whole reduced extent. The genome is mapped gene by gene (the same
// names and labels; equivalent to printing the schedule and parsing it in the reduced space) and
// must give a plan with the same nests, ops and buffers. Errors say why the mapping failed.
Expected<ReducedShape, std::string> reduce_shape(const schedule::ScheduleSpace& space, const Genome& g, int blocks = 2);

// Checks one schedule of `problem` against ir's reference evaluator (never throws).
Verification verify_schedule(const KernelProblem& problem, const Genome& g, const VerifyOptions& opt = {});

struct VerifiedBest {
  std::optional<std::size_t> index;  // into the candidates; empty when none verified
  Verification verification;         // of the chosen one (or of the last checked when none)
  std::vector<std::pair<std::size_t, Verification>> rejected;  // candidates checked before it that failed
  std::size_t checked = 0;
};

using Verifier = std::function<Verification(std::size_t index, const Genome& g)>;
// Called before candidate `i` (0-based) of `n` is checked.
using VerifyProgress = std::function<void(std::size_t i, std::size_t n)>;

// Checks candidates in the given order (best first) with `verify`, at most `max_checks` of them,
// and returns the first that verifies.
VerifiedBest first_verified(std::span<const Genome> best_first, std::size_t max_checks, const Verifier& verify,
                            const VerifyProgress& progress = {});
// The same with verify_schedule.
VerifiedBest first_verified(const KernelProblem& problem, std::span<const Genome> best_first, std::size_t max_checks,
                            const VerifyOptions& opt = {}, const VerifyProgress& progress = {});

}  // namespace kevo::search
