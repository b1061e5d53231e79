// ProcessRunner: measures candidates through an external worker program (a Trainium box, a GPU,
// anything) over a versioned JSON-lines protocol on the worker's stdin/stdout (docs/PROTOCOL.md).
// Whatever the worker does -- hang, die, flood, print garbage -- the candidate gets a status
// (timeout, crashed, error) and the search goes on; the runner never hangs.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/runner/runner.hpp"

namespace kevo::runner {

inline constexpr int kProtocolVersion = 1;

struct ProcessOptions {
  std::vector<std::string> command;    // argv of the worker; command[0] is looked up in PATH
  std::vector<std::string> env;        // extra "KEY=VALUE" entries for the worker's environment
  bool persistent = true;              // one worker for many candidates (false: a fresh one per candidate)
  double timeout_s = 300;              // per attempt: request written -> response line read
  int retries = 1;                     // extra attempts after crashed or error
  bool retry_timeouts = false;         // also retry after a timeout (costly on a hung device)
  int repeats = 10;                    // asked of the worker: latency samples per candidate
  std::size_t max_line_bytes = 1 << 20;  // a longer response line is a flood: error, worker killed
  std::string identity;                // part of cache keys; default "process:" + the command line
  double cost_seconds = 10;            // what traits() reports
  // NKI source sent to the worker. Unset: emit::emit_nki(program, kernel) when the candidate has
  // both, else empty (a worker may rebuild the kernel from the kernel and schedule texts).
  std::function<std::string(const Candidate&)> nki_source;
};

class ProcessRunner {
 public:
  explicit ProcessRunner(ProcessOptions opt);
  ProcessRunner(const ProcessRunner& o);  // a copy starts its own worker when first used
  ProcessRunner(ProcessRunner&&) noexcept;
  ProcessRunner& operator=(const ProcessRunner& o);
  ProcessRunner& operator=(ProcessRunner&&) noexcept;
  ~ProcessRunner();

  std::vector<Measurement> measure(std::span<const Candidate> candidates);
  Measurement measure_one(const Candidate& c);
  [[nodiscard]] RunnerTraits traits() const;
  [[nodiscard]] const ProcessOptions& options() const noexcept { return opt_; }

  // How many worker processes this runner has started (tests and logs).
  [[nodiscard]] std::size_t workers_started() const noexcept;
  // Kills the worker's process group now (the next candidate starts a new one).
  void stop();

 private:
  struct Worker;
  ProcessOptions opt_;
  std::unique_ptr<Worker> w_;
  std::uint64_t next_id_ = 1;
};

// The request line for one candidate (no trailing newline).
std::string protocol_request(const Candidate& c, std::uint64_t id, int repeats, std::string_view nki);
// Parses one response line for request `id`. Garbage, a wrong id or version, an unknown status
// or an ok without samples give status error with a message saying which.
Measurement protocol_parse_response(std::string_view line, std::uint64_t id);

}  // namespace kevo::runner
