// `mpirun -n N kevo search ...` (or srun): the search over MPI ranks (docs/SCALING.md). Rank 0
// runs cmd_search as always (results directory, journal, verification, report); the other ranks
// build the same problem from the same options and either evaluate for rank 0 (farm) or evolve
// their own islands (islands), then exit. Null when kevo does not run under MPI or --mpi-mode off.
#pragma once
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "kevo/evo/engine.hpp"
#include "kevo/search/kernel_problem.hpp"
#include "options.hpp"

namespace kevo::cli {

class MpiSearch {
 public:
  // From the command line's flags (before --resume replaces them). Throws UsageError on a bad
  // --mpi-mode or when it asks for MPI in a kevo built without it.
  static std::unique_ptr<MpiSearch> start(const Options& flags);
  ~MpiSearch();

  [[nodiscard]] bool coordinator() const;  // rank 0
  // Collective: rank 0's results directory on every rank (a default one is named by rank 0's clock).
  [[nodiscard]] std::filesystem::path shared_dir(const std::filesystem::path& mine) const;
  // Ranks other than 0: serve the farm or run this rank's islands; returns the exit code.
  int serve(const search::KernelProblem& problem, evo::Config config, bool resuming, const std::filesystem::path& dir);
  // Rank 0: the problem and configuration its engine runs with.
  evo::Problem problem(const search::KernelProblem& problem);
  evo::Config config(evo::Config config, bool resuming);
  // Rank 0, once the engine exists: the islands strategy, the farm's failure policy.
  void attach(evo::Engine& engine);
  // Rank 0, after run(): releases the other ranks (islands: merges their counts and bests into
  // `res`); returns the "mpi" object of result.json.
  nlohmann::json finish(evo::Engine& engine, evo::Result& res);

  // Any rank: prints "kevo: error: rank K: <message>" and ends every rank of the job with `code`.
  [[noreturn]] void fail(int code, const std::string& message);

  struct Impl;

 private:
  explicit MpiSearch(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kevo::cli
