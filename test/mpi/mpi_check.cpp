// The MPI checks' program, run under mpirun by test/mpi/run_checks.sh (registered in ctest):
//   mpi_check farm|islands [--evals N] [--pop P] [--seed S] [--algorithm ga|islands|steady_state]
//             [--dir D] [--resume] [--no-local] [--timeout SEC] [--sleep-ms MS]
//             [--interval G] [--kill-at RANK:K] [--hang-at RANK:K]
// Rank 0 prints "hash=<hex> evaluations=<n> best=<f>". A deterministic problem (Rastrigin over 8
// ordinal genes) that can kill its own rank with SIGKILL, or hang it, at its K-th evaluation on
// that rank -- the faults the checks inject.
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>

#include "kevo/evo.hpp"
#include "kevo/mpi.hpp"

using namespace kevo;

namespace {

struct Args {
  std::string mode;
  std::uint64_t evals = 96, seed = 7;
  std::size_t pop = 8;
  std::string algorithm = "ga";
  std::string dir;
  bool resume = false;
  bool local = true;  // farm: rank 0 evaluates too
  double timeout = 30;
  int sleep_ms = 0;
  int interval = 2;
  int kill_rank = -1, hang_rank = -1;
  std::uint64_t kill_at = 0, hang_at = 0;
};

struct Faulty {
  Space s;
  int rank = 0;
  int sleep_ms = 0;
  int kill_rank = -1, hang_rank = -1;
  std::uint64_t kill_at = 0, hang_at = 0;
  std::shared_ptr<std::atomic<std::uint64_t>> count = std::make_shared<std::atomic<std::uint64_t>>(0);
  Faulty() {
    std::vector<std::int64_t> vals;
    for (int v = -10; v <= 10; ++v) vals.push_back(v);
    for (int i = 0; i < 8; ++i) s.add(Gene::ordinal(fmt::format("x{}", i), vals));
  }
  const Space& space() const { return s; }
  // For cost models (the surrogate): the farm's problem must pass these on from rank 0's copy.
  std::vector<double> features(const Genome& g) const { return {static_cast<double>(s.at(g, 0)), 1.0}; }
  bool deterministic() const { return true; }
  evo::ThreadSafety thread_safety() const { return evo::ThreadSafety::constant; }
  std::vector<evo::Evaluation> evaluate(std::span<const Genome> gs) const {
    std::vector<evo::Evaluation> out;
    for (const auto& g : gs) {
      const auto k = ++*count;
      if (rank == kill_rank && k == kill_at) std::raise(SIGKILL);
      if (rank == hang_rank && k == hang_at)
        while (true) ::pause();
      if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
      double f = 0;
      for (std::size_t i = 0; i < s.size(); ++i) {
        const double x = static_cast<double>(s.gene(i).values[static_cast<std::size_t>(s.at(g, i))]) / 2.0;
        f += x * x - 10 * std::cos(2 * M_PI * x) + 10;
      }
      evo::Evaluation e;
      e.fitness = {f};
      out.push_back(std::move(e));
    }
    return out;
  }
};

void parse_fault(const std::string& v, int& rank, std::uint64_t& at) {
  const auto c = v.find(':');
  rank = std::stoi(v.substr(0, c));
  at = std::stoull(v.substr(c + 1));
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (argc < 2) {
    fmt::print(stderr, "usage: mpi_check farm|islands [options]\n");
    return 2;
  }
  a.mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        fmt::print(stderr, "mpi_check: {} needs a value\n", k);
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--evals") a.evals = std::stoull(val());
    else if (k == "--pop") a.pop = std::stoull(val());
    else if (k == "--seed") a.seed = std::stoull(val());
    else if (k == "--algorithm") a.algorithm = val();
    else if (k == "--dir") a.dir = val();
    else if (k == "--resume") a.resume = true;
    else if (k == "--no-local") a.local = false;
    else if (k == "--timeout") a.timeout = std::stod(val());
    else if (k == "--sleep-ms") a.sleep_ms = std::stoi(val());
    else if (k == "--interval") a.interval = std::stoi(val());
    else if (k == "--kill-at") parse_fault(val(), a.kill_rank, a.kill_at);
    else if (k == "--hang-at") parse_fault(val(), a.hang_rank, a.hang_at);
    else {
      fmt::print(stderr, "mpi_check: unknown option {}\n", k);
      return 2;
    }
  }
  mpi::Session session;
  Faulty p;
  p.rank = session.rank();
  p.sleep_ms = a.sleep_ms;
  p.kill_rank = a.kill_rank;
  p.kill_at = a.kill_at;
  p.hang_rank = a.hang_rank;
  p.hang_at = a.hang_at;
  evo::Config cfg;
  cfg.algorithm = *evo::algorithm_from_string(a.algorithm);
  cfg.seed = a.seed;
  cfg.population = a.pop;
  cfg.elites = 1;
  cfg.islands.count = 2;
  cfg.islands.interval = 2;
  cfg.budget.max_evaluations = a.evals;
  cfg.checkpoint.sync = false;
  if (!a.dir.empty()) cfg.checkpoint.dir = a.dir;
  try {
    if (a.mode == "farm") {
      mpi::FarmOptions fo;
      fo.timeout_s = a.timeout;
      fo.coordinator_evaluates = a.local;
      mpi::Farm farm(session, evo::Problem(p), fo);
      if (session.rank() != 0) {
        farm.serve();
        return 0;
      }
      cfg = farm.adapt(cfg);
      {
        const evo::Problem local(p), farmed = farm.problem();
        const Genome g0 = local.space().first();
        if (!farmed.has_features() || farmed.features(g0) != local.features(g0)) {
          fmt::print(stderr, "mpi_check: the farm's problem does not pass on the local problem's features\n");
          session.abort(1);
        }
      }
      std::optional<evo::Engine> engine;
      if (a.resume)
        engine.emplace(evo::Engine::resume(a.dir, farm.problem(), cfg));
      else
        engine.emplace(farm.problem(), cfg);
      // Deterministic runs end at once, like a kill: the journal holds every batch before the
      // failed one and a resume reproduces the uninterrupted run. (A stop would journal the
      // batch's completed evaluations, under other ids than the uninterrupted run gives them.)
      farm.on_failure([&](const std::string& why) {
        if (!engine->deterministic()) return engine->request_stop();
        fmt::print(stderr, "kevo: {}; checkpoint {} holds every batch before this one (resume it)\n", why, a.dir);
        session.abort(3);
      });
      const auto r = engine->run();
      if (const auto f = farm.failure(); !f.empty()) {
        fmt::print(stderr, "kevo: {}; checkpoint {} holds every evaluation completed (resume it)\n", f, a.dir);
        session.abort(3);
      }
      farm.close();
      const auto st = farm.stats();
      fmt::print("hash={:016x} evaluations={} best={} deterministic={} remote={} messages={} overhead_ms={:.3f}\n", r.history_hash,
                 r.evaluations, r.best ? r.best->eval.fitness[0] : -1.0, r.deterministic, st.remote, st.messages,
                 1e3 * st.overhead_s());
    } else if (a.mode == "islands") {
      mpi::IslandOptions io;
      io.timeout_s = a.timeout;
      io.interval = a.interval;
      const auto r = mpi::run_islands(session, evo::Problem(p), cfg, io, a.resume);
      if (session.rank() == 0)
        fmt::print("hash={:016x} evaluations={} best={} local_hash={:016x}\n", r.history_hash, r.evaluations,
                   r.best ? r.best->eval.fitness[0] : -1.0, r.local.history_hash);
    } else {
      fmt::print(stderr, "mpi_check: unknown mode {}\n", a.mode);
      return 2;
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "kevo: rank {}: {}\n", session.rank(), e.what());
    session.abort(3);
  }
  return 0;
}
