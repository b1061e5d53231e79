// Islands over ranks: every rank runs its own engine (its own seed, derived from the run's seed and
// the rank; its own checkpoint directory) with the strategy wrapped by rank_islands(); every
// `interval` generations each rank sends the best `migrants` of its population to the next rank of
// a ring and takes in the previous rank's (the receiving strategy absorb()s them, as records
// evaluated elsewhere). Exchanges are synchronous at fixed generations, so the run is deterministic
// for a seed and a rank count. The wrapper saves no state of its own: a resumed rank replays its
// whole journal (taking every recorded result) and the ranks meet again at the same exchanges, so
// kill + resume gives the uninterrupted result. Resume needs the same rank count.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kevo/evo/engine.hpp"
#include "kevo/evo/strategy.hpp"
#include "kevo/mpi/session.hpp"

namespace kevo::mpi {

struct IslandOptions {
  int interval = 5;         // generations between exchanges (0: never)
  std::size_t migrants = 0; // individuals sent per exchange (0: max(1, round(rate x population)))
  double timeout_s = 1800;  // longest wait for a neighbour's migrants (it may be `interval` generations behind)
};

// Wraps `inner` (the rank's strategy, e.g. evo::builtin_strategy(cfg)) for a run over the session's
// ranks. Collective: every rank calls it, in the same order. Throws RankError from tell() when the
// previous rank's migrants do not come within timeout_s (the journal already holds that batch).
evo::Strategy rank_islands(Session& session, evo::Strategy inner, const evo::Config& cfg, IslandOptions options = {});

// The seed rank `rank` runs with (rank 0: `seed` itself).
std::uint64_t rank_seed(std::uint64_t seed, int rank) noexcept;

// One rank's outcome, as gathered on rank 0.
struct RankSummary {
  int rank = 0;
  std::uint64_t evaluations = 0, valid = 0;
  std::uint64_t history_hash = 0;
  std::optional<evo::Individual> best;
};

struct IslandsResult {
  evo::Result local;                     // this rank's engine result
  std::vector<RankSummary> ranks;        // rank 0: every rank's summary, in rank order; others: empty
  std::optional<evo::Individual> best;   // rank 0: the best over all ranks (evo::better)
  std::uint64_t evaluations = 0;         // rank 0: summed over ranks
  std::uint64_t history_hash = 0;        // rank 0: hash of the ranks' history hashes in rank order
};

// Collective: rank 0 records the rank count in `file` (fresh run; a file already there is an error)
// or checks it against the recorded one (resume); every rank throws kevo::Error with rank 0's message.
void check_rank_count(Session& session, const std::filesystem::path& file, bool resume);

// The whole islands run for embedders: every rank calls it with its own problem and the same cfg.
// cfg.checkpoint.dir (when set) holds one directory per rank (rank-0, rank-1, ...) and ranks.txt;
// resume = true continues that run (refused with another rank count). `setup` runs on each rank's
// engine before run() (observers, operators). Gathers the summaries to rank 0 (bounded).
IslandsResult run_islands(Session& session, evo::Problem problem, evo::Config cfg, IslandOptions options = {},
                          bool resume = false, const std::function<void(evo::Engine&)>& setup = {});

// After the engine's run() returns on a rank: tells the next rank this one is done, takes in the
// previous rank's last messages until it is done too (no message is left in flight), then gathers
// every rank's summary on rank 0. `wrapped` is the engine's strategy (made by rank_islands).
// Collective; every wait is bounded by timeout_s without word from the awaited rank.
IslandsResult finish_islands(const evo::Strategy& wrapped, const evo::Result& local);

}  // namespace kevo::mpi
