// Recorder: a search's evaluations into the records database (include/kevo/records/recorder.hpp).
#include "kevo/records/recorder.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "kevo/core/error.hpp"
#include "kevo/core/status.hpp"

namespace kevo::records {

Recorder::Recorder(Database& db, const search::KernelProblem& problem, std::string version, std::size_t batch)
    : base_(make_record(problem.kernel(), problem.target())), db_(db), problem_(problem), batch_(batch ? batch : 1) {
  base_.runner = problem.runner_traits().identity;
  base_.kevo_version = std::move(version);
}

Recorder::~Recorder() {
  try {
    flush();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kevo: records: %zu evaluation(s) not recorded: %s\n", pending_.size(), e.what());
  }
}

Record Recorder::now(const Genome& g) const {
  Record r = base_;
  r.schedule = problem_.to_text(g);
  r.time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return r;
}

void Recorder::record(const evo::Individual& ind) {
  Record r = now(ind.genome);
  r.status = std::string(to_string(ind.eval.status));
  r.reason = ind.eval.reason;
  if (ind.eval.ok()) {
    r.latency_ns = ind.eval.metric("latency_ns", ind.eval.fitness[0]);
    r.fraction_of_peak = ind.eval.metric("fraction_of_peak");
    if (auto m = problem_.cached_measurement(ind.genome)) {
      r.samples_ns = m->samples_ns;
      r.bottleneck = m->bottleneck;
    }
    if (r.samples_ns.empty()) r.samples_ns = {r.latency_ns};
  }
  pending_.push_back(std::move(r));
  if (pending_.size() >= batch_) flush();
}

void Recorder::record_verified(const Genome& g, double latency_ns, double fraction_of_peak) {
  Record r = now(g);
  r.latency_ns = latency_ns;
  r.fraction_of_peak = fraction_of_peak;
  r.verified = true;
  if (auto m = problem_.cached_measurement(g)) {
    r.samples_ns = m->samples_ns;
    r.bottleneck = m->bottleneck;
  }
  if (r.samples_ns.empty()) r.samples_ns = {latency_ns};
  pending_.push_back(std::move(r));
  flush();
}

void Recorder::record_rejected(const Genome& g, const std::string& reason) {
  Record r = now(g);
  r.status = std::string(to_string(Status::incorrect));
  r.reason = reason;
  pending_.push_back(std::move(r));
  flush();
}

void Recorder::flush() {
  if (pending_.empty()) return;
  db_.add(pending_);  // all or none: on a throw the batch stays pending
  written_ += pending_.size();
  pending_.clear();
}

}  // namespace kevo::records
