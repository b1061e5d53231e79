// The evaluation farm's own cost over MPI (docs/SCALING.md): a problem whose evaluation sleeps a
// fixed time in-process (a device stand-in with no process protocol in the way), a GA over it run
// through mpi::Farm. Run under mpirun; rank 0 prints one JSON line:
//   mpirun -n N bench_mpi_farm [--sleep-ms MS] [--evals E] [--pop P] [--coordinator-evaluates 0|1]
// Figures: evaluations per second of the search, messages per evaluation, and the MPI overhead of a
// remote evaluation (job sent -> result received, minus the worker's evaluate() time). Measures;
// never gates.
#include <fmt/format.h>

#include <chrono>
#include <string>
#include <thread>

#include "kevo/evo.hpp"
#include "kevo/mpi.hpp"

using namespace kevo;

namespace {
struct Sleeper {
  Space s;
  int sleep_us = 0;
  Sleeper() {
    for (int i = 0; i < 12; ++i) s.add(Gene::ordinal(fmt::format("x{}", i), {0, 1, 2, 3, 4, 5, 6, 7}));
  }
  const Space& space() const { return s; }
  bool deterministic() const { return true; }
  evo::ThreadSafety thread_safety() const { return evo::ThreadSafety::constant; }
  std::vector<evo::Evaluation> evaluate(std::span<const Genome> gs) const {
    std::vector<evo::Evaluation> out(gs.size());
    for (std::size_t i = 0; i < gs.size(); ++i) {
      if (sleep_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      double f = 0;
      for (auto v : gs[i]) f += (v - 3) * (v - 3);
      out[i].fitness = {f};
    }
    return out;
  }
};
}  // namespace

int main(int argc, char** argv) {
  double sleep_ms = 100;
  std::uint64_t evals = 0;
  std::size_t pop = 0;
  bool coord = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--sleep-ms") sleep_ms = std::stod(v);
    else if (k == "--evals") evals = std::stoull(v);
    else if (k == "--pop") pop = std::stoull(v);
    else if (k == "--coordinator-evaluates") coord = v != "0";
    else {
      fmt::print(stderr, "bench_mpi_farm: unknown option {}\n", k);
      return 2;
    }
  }
  mpi::Session session;
  Sleeper p;
  p.sleep_us = static_cast<int>(sleep_ms * 1000);
  mpi::Farm farm(session, evo::Problem(p), mpi::FarmOptions{600, coord});
  if (session.rank() != 0) {
    farm.serve();
    return 0;
  }
  const int ev = farm.evaluators();
  evo::Config cfg;
  cfg.seed = 1;
  cfg.population = pop ? pop : static_cast<std::size_t>(4 * ev);
  cfg.budget.max_evaluations = evals ? evals : 8 * cfg.population;
  const auto t0 = std::chrono::steady_clock::now();
  evo::Engine engine(farm.problem(), farm.adapt(cfg));
  const auto r = engine.run();
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  farm.close();
  const auto st = farm.stats();
  fmt::print(
      "{{\"ranks\": {}, \"evaluators\": {}, \"sleep_ms\": {}, \"population\": {}, \"evaluations\": {}, \"seconds\": {:.3f}, "
      "\"evaluations_per_s\": {:.3f}, \"ideal_evaluations_per_s\": {:.3f}, \"remote\": {}, \"messages_per_evaluation\": {:.3f}, "
      "\"overhead_ms_per_remote_evaluation\": {:.4f}, \"history_hash\": \"{:016x}\"}}\n",
      session.size(), ev, sleep_ms, cfg.population, r.evaluations, dt, double(r.evaluations) / dt,
      sleep_ms > 0 ? ev * 1000.0 / sleep_ms : 0.0, st.remote, st.evaluations ? double(st.messages) / double(st.evaluations) : 0.0,
      1e3 * st.overhead_s(), r.history_hash);
  return 0;
}
