// Differential testing of the lowering: a (kernel, genome, target) case is lowered and the program,
// interpreted in program order and in an adversarial topological order, must equal ir's reference
// evaluator within the dtype's tolerance -- or the genome must be rejected with a typed reason.
// Anything else (a wrong value, an unwritten element, a crash of the lowering) is a disagreement.
// A disagreeing case shrinks to a minimal kernel + schedule that still disagrees, which is what a
// regression test keeps (test/verify/regressions/, docs/VERIFY.md).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/core/genes.hpp"
#include "kevo/ir/kernel.hpp"
#include "kevo/ir/random.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/target/target.hpp"

namespace kevo::verify {

enum class DiffVerdict : std::uint8_t {
  agree,        // lowered, and both orders match the reference
  rejected,     // the genome is invalid with a typed reason (never reaches a runner)
  disagree,     // lowered, and a result differs from the reference (or the oracle threw)
  underivable,  // the kernel has no schedule space on this target (ScheduleSpace::derive threw)
};
std::string_view to_string(DiffVerdict) noexcept;

struct DiffResult {
  DiffVerdict verdict = DiffVerdict::agree;
  std::string reason;  // rejection "code: message", first mismatch, or derive error
  std::size_t instructions = 0;
  // For a disagreement, how it failed: "lowering_threw", "oracle_threw", or the oracle's
  // CheckFailure and the order it first showed in ("mismatch@program", "non_finite@adversarial",
  // "error"). A wrong value, a NaN and a missing dependency edge are different bugs.
  std::string failure;
};

// Lowers `g` in `space` and checks the program against the reference on `trials` input sets.
DiffResult differential(const schedule::ScheduleSpace& space, const Genome& g, std::uint64_t seed, int trials = 1);

// A case as text: what a regression file holds.
struct DiffCase {
  ir::Kernel kernel;
  std::string target;    // target name (trn1, trn2, trn3, host) or a file
  std::string schedule;  // schedule text in the kernel's space
};

// Copies the values of `from` (a genome of space `a`) into a genome of space `b`, gene by gene
// through gene names and value labels; genes missing from `a`, or whose label `b` does not
// offer, keep b's default. Permutations are copied when their items match.
Genome transfer_genome(const schedule::ScheduleSpace& a, const Genome& from, const schedule::ScheduleSpace& b);

struct ShrinkStats {
  int attempts = 0, accepted = 0;
};

// Shrinks a failing case while `fails` holds: genes back to the default schedule's values,
// statements removed (an output nothing reads, with what only it needed), dimensions made
// smaller. Returns the smallest case found (the input itself when nothing smaller fails).
// `fails` must be deterministic; `max_attempts` bounds the work.
DiffCase shrink(DiffCase c, const target::Target& target, const std::function<bool(const DiffCase&)>& fails,
                int max_attempts = 2000, ShrinkStats* stats = nullptr);

// The predicate shrink() uses for lowering disagreements: the case derives, its schedule parses
// in the kernel's space, and differential() says disagree.
bool disagrees(const DiffCase& c, const target::Target& target, std::uint64_t seed);
// As disagrees, and failing the same way (DiffResult::failure): the predicate a campaign shrinks
// with, so that a shrunk case keeps the bug it was found with. Without it a shrink that turns a
// temp into a free input can make the reference itself non-finite (a variance that becomes a
// negative input under rsqrt), a different failure from the original's wrong value.
bool disagrees_as(const DiffCase& c, const target::Target& target, std::uint64_t seed, std::string_view failure);

// The text of a regression file: a header of '#' lines (target, what failed) and the kernel and
// schedule, separated by a line "---"; and its parser (throws kevo::Error with the file's name).
std::string regression_text(const DiffCase& c, const std::string& note);
DiffCase parse_regression(const std::string& text, const std::string& file);

// A campaign of random (kernel, genome) pairs: case i draws a kernel (ir::random_kernel), a target
// and random genomes (repaired by the space, and raw) from Rng(seed, i), so any
// case reruns alone from (seed, i). Disagreements are shrunk and returned as regression cases.
struct CampaignOptions {
  std::uint64_t seed = 1;
  std::uint64_t first = 0, count = 100;  // cases [first, first + count)
  int genomes_per_kernel = 3;            // random genomes repaired by the space
  int raw_genomes = 1;                   // random genomes as drawn (most are rejected; the rest must agree)
  std::vector<target::Target> targets;   // drawn per case; empty: trn1, trn2, trn3
  ir::RandomKernelOptions kernel{};
  bool stop_at_first = false;            // stop at the first disagreement
  int shrink_attempts = 400;             // 0: keep disagreements unshrunk
  // A genome whose program would exceed this many instructions (lower::count_instructions) is
  // skipped, not interpreted (CampaignStats::large): a budget for runs of fixed duration. 0: the
  // lowering's own limit only (such programs are then rejected `too_large`).
  std::size_t max_instructions = 0;
};

struct CampaignFailure {
  std::uint64_t index = 0;  // the case (seed, index) that found it
  DiffCase original, shrunk;
  std::string reason;       // of the original
  std::string failure;      // of the original (DiffResult::failure); the shrunk case fails the same way
  std::uint64_t input_seed = 0;  // differential()'s seed that showed it (the shrink's too)
};

struct CampaignStats {
  std::uint64_t cases = 0, pairs = 0, agree = 0, rejected = 0, disagree = 0, underivable = 0;
  std::uint64_t instructions = 0;
  std::uint64_t large = 0;  // genomes skipped over CampaignOptions::max_instructions (not in pairs)
  std::map<std::string, std::uint64_t> reject_codes;   // rejected pairs by code
  std::map<std::string, std::uint64_t> underivable_why;  // "code: message" of try_derive's Unsupported (no op names)
  std::vector<CampaignFailure> failures;
  void merge(const CampaignStats& o);
  [[nodiscard]] std::string summary() const;  // one line
};

CampaignStats run_campaign(const CampaignOptions& opt);

}  // namespace kevo::verify
