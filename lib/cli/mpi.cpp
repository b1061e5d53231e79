// The CLI's MPI wiring (see mpi.hpp); the machinery is the kevo_mpi module (kevo/mpi.hpp).
#include "mpi.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "kevo/evo/strategies.hpp"
#ifdef KEVO_WITH_MPI
#include "kevo/mpi.hpp"
#endif

namespace kevo::cli {

namespace fs = std::filesystem;

#ifdef KEVO_WITH_MPI

struct MpiSearch::Impl {
  std::string mode;
  double timeout = 1800;
  mpi::Session session;
  std::unique_ptr<mpi::Farm> farm;
  fs::path dir;
  bool resuming = false;
};

MpiSearch::MpiSearch(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MpiSearch::~MpiSearch() = default;

std::unique_ptr<MpiSearch> MpiSearch::start(const Options& flags) {
  const std::string& m = flags.mpi_mode;
  if (!m.empty() && m != "farm" && m != "islands" && m != "off")
    throw UsageError{fmt::format("--mpi-mode: '{}' is not one of farm, islands, off", m)};
  if (m == "off" || (m.empty() && !mpi::launched_by_mpi())) return nullptr;
  auto impl = std::make_unique<Impl>();
  impl->mode = m.empty() ? "farm" : m;
  impl->timeout = flags.mpi_timeout;
  if (impl->session.size() == 1 && m.empty()) return nullptr;  // mpirun -n 1 without --mpi-mode: a plain search
  return std::unique_ptr<MpiSearch>(new MpiSearch(std::move(impl)));
}

bool MpiSearch::coordinator() const { return impl_->session.rank() == 0; }

fs::path MpiSearch::shared_dir(const fs::path& mine) const { return fs::path(impl_->session.broadcast(mine.string())); }

namespace {
fs::path rank_checkpoint(const fs::path& dir, int rank) {
  return rank == 0 ? dir / "checkpoint" : dir / fmt::format("checkpoint-rank-{}", rank);
}
}  // namespace

int MpiSearch::serve(const search::KernelProblem& problem, evo::Config config, bool resuming, const fs::path& dir) {
  auto& s = impl_->session;
  try {
    if (impl_->mode == "farm") {
      mpi::Farm farm(s, evo::Problem(problem), mpi::FarmOptions{impl_->timeout, true});
      farm.serve();
      return 0;
    }
    mpi::check_rank_count(s, dir / "mpi-ranks.txt", resuming);
    config.checkpoint.dir = rank_checkpoint(dir, s.rank());
    fs::create_directories(config.checkpoint.dir);
    config.seed = mpi::rank_seed(config.seed, s.rank());
    config.seeds.clear();  // warm-start schedules are rank 0's
    auto strategy = mpi::rank_islands(s, evo::builtin_strategy(config), config, mpi::IslandOptions{config.islands.interval, 0, impl_->timeout});
    std::optional<evo::Engine> engine;
    if (resuming)
      engine.emplace(evo::Engine::resume(config.checkpoint.dir, evo::Problem(problem), config));
    else
      engine.emplace(evo::Problem(problem), config);
    engine->set_strategy(std::move(strategy));
    const auto r = engine->run();
    (void)mpi::finish_islands(engine->strategy(), r);
    return 0;
  } catch (const mpi::RankError& e) {  // another rank hung or died
    fail(3, e.what());
  } catch (const std::exception& e) {  // a usage error (e.g. a resume on another rank count)
    fail(2, e.what());
  }
}

evo::Problem MpiSearch::problem(const search::KernelProblem& problem) {
  if (impl_->mode != "farm") return evo::Problem(problem);
  impl_->farm = std::make_unique<mpi::Farm>(impl_->session, evo::Problem(problem), mpi::FarmOptions{impl_->timeout, true});
  try {
    return impl_->farm->problem();
  } catch (const std::exception& e) {
    fmt::print(stderr, "kevo: {}\n", e.what());
    impl_->session.abort(3);
  }
}

evo::Config MpiSearch::config(evo::Config config, bool resuming) {
  impl_->dir = config.checkpoint.dir.parent_path();
  impl_->resuming = resuming;
  if (impl_->farm) return impl_->farm->adapt(config);
  mpi::check_rank_count(impl_->session, impl_->dir / "mpi-ranks.txt", resuming);
  return config;
}

void MpiSearch::attach(evo::Engine& engine) {
  if (impl_->farm) {
    const fs::path dir = impl_->dir;
    auto& s = impl_->session;
    impl_->farm->on_failure([&engine, &s, dir](const std::string& why) {
      if (!engine.deterministic()) return engine.request_stop();
      // Deterministic: end at once, as a kill would: the journal holds every batch before this
      // one and a resume reproduces the uninterrupted run.
      fmt::print(stderr, "kevo: {}\nkevo: the job ends; resume with: mpirun -n N kevo search --resume {}\n", why, dir.string());
      s.abort(3);
    });
    return;
  }
  const auto& cfg = engine.config();
  engine.set_strategy(mpi::rank_islands(impl_->session, evo::builtin_strategy(cfg), cfg,
                                        mpi::IslandOptions{cfg.islands.interval, 0, impl_->timeout}));
}

void MpiSearch::fail(int code, const std::string& message) {
  fmt::print(stderr, "kevo: error: rank {}: {}\n", impl_->session.rank(), message);
  impl_->session.abort(code);
}

nlohmann::json MpiSearch::finish(evo::Engine& engine, evo::Result& res) {
  auto& s = impl_->session;
  nlohmann::json j{{"mode", impl_->mode}, {"ranks", s.size()}};
  try {
    if (impl_->farm) {
      if (const auto f = impl_->farm->failure(); !f.empty()) {
        fmt::print(stderr, "kevo: {}\nkevo: the job ends; resume with: mpirun -n N kevo search --resume {}\n", f, impl_->dir.string());
        s.abort(3);
      }
      impl_->farm->close();
      const auto st = impl_->farm->stats();
      j["evaluators"] = impl_->farm->evaluators();
      j["evaluations_by_rank"] = st.per_rank;
      j["messages"] = st.messages;
      j["messages_per_evaluation"] = st.evaluations ? double(st.messages) / double(st.evaluations) : 0.0;
      j["overhead_ms_per_remote_evaluation"] = 1e3 * st.overhead_s();
      return j;
    }
    const auto all = mpi::finish_islands(engine.strategy(), res);
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& r : all.ranks) {
      ranks.push_back({{"rank", r.rank},
                       {"evaluations", r.evaluations},
                       {"valid", r.valid},
                       {"history_hash", fmt::format("{:016x}", r.history_hash)},
                       {"best", r.best ? nlohmann::json(r.best->eval.fitness[0]) : nlohmann::json(nullptr)}});
      if (r.rank != 0 && r.best) res.elites.push_back(*r.best);  // candidates for the winner, checked like rank 0's
    }
    std::stable_sort(res.elites.begin(), res.elites.end(), [](const evo::Individual& a, const evo::Individual& b) { return evo::better(a, b); });
    if (all.best && (!res.best || evo::better(*all.best, *res.best))) res.best = all.best;
    j["by_rank"] = ranks;
    j["evaluations_all_ranks"] = all.evaluations;
    j["history_hash_all_ranks"] = fmt::format("{:016x}", all.history_hash);
    return j;
  } catch (const std::exception& e) {
    fmt::print(stderr, "kevo: {}\n", e.what());
    s.abort(3);
  }
}

#else  // built without MPI

struct MpiSearch::Impl {};
MpiSearch::MpiSearch(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MpiSearch::~MpiSearch() = default;

std::unique_ptr<MpiSearch> MpiSearch::start(const Options& flags) {
  const std::string& m = flags.mpi_mode;
  if (!m.empty() && m != "farm" && m != "islands" && m != "off")
    throw UsageError{fmt::format("--mpi-mode: '{}' is not one of farm, islands, off", m)};
  if (m == "farm" || m == "islands")
    throw UsageError{"--mpi-mode: this kevo was built without MPI (KEVO_WITH_MPI=OFF; install libopenmpi-dev and rebuild)"};
  return nullptr;
}
bool MpiSearch::coordinator() const { return true; }
fs::path MpiSearch::shared_dir(const fs::path& mine) const { return mine; }
int MpiSearch::serve(const search::KernelProblem&, evo::Config, bool, const fs::path&) { return 0; }
evo::Problem MpiSearch::problem(const search::KernelProblem& p) { return evo::Problem(p); }
evo::Config MpiSearch::config(evo::Config c, bool) { return c; }
void MpiSearch::attach(evo::Engine&) {}
nlohmann::json MpiSearch::finish(evo::Engine&, evo::Result&) { return nullptr; }
void MpiSearch::fail(int code, const std::string& message) {
  fmt::print(stderr, "kevo: error: {}\n", message);
  std::exit(code);
}

#endif

}  // namespace kevo::cli
