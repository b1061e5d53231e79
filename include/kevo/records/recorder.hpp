// Writing a search's evaluations into the records database as they happen (buffered, one
// transaction per batch), and its verified winner.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "kevo/evo/operator.hpp"
#include "kevo/records/database.hpp"
#include "kevo/search/kernel_problem.hpp"

namespace kevo::records {

class Recorder {
 public:
  // `db` and `problem` must outlive the recorder. `version` is the kevo version recorded.
  Recorder(Database& db, const search::KernelProblem& problem, std::string version, std::size_t batch = 32);
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;
  ~Recorder();  // flushes; an I/O failure then is reported on stderr (a destructor cannot throw)

  // One evaluation of the search (invalid ones too: they say what does not work on this target).
  void record(const evo::Individual& ind);
  // The search's winner, verified against the reference evaluator.
  void record_verified(const Genome& g, double latency_ns, double fraction_of_peak);
  // A candidate the reference check (or the device's own output check) rejected: recorded as
  // `incorrect`, so the database never ranks the schedule best again (Database::best).
  void record_rejected(const Genome& g, const std::string& reason);
  // Writes what is buffered; throws kevo::Error on an I/O failure (nothing is lost from the buffer then).
  void flush();
  [[nodiscard]] std::size_t written() const noexcept { return written_; }

 private:
  // The run's record for schedule `g`, measured now (the caller sets the outcome).
  [[nodiscard]] Record now(const Genome& g) const;
  Record base_;
  Database& db_;
  const search::KernelProblem& problem_;
  std::size_t batch_;
  std::vector<Record> pending_;
  std::size_t written_ = 0;
};

}  // namespace kevo::records
