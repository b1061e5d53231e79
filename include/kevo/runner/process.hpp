// ProcessRunner: measures candidates through an external worker program (a Trainium box, a GPU,
// anything) over a versioned JSON-lines protocol on the worker's stdin/stdout (docs/PROTOCOL.md).
// Whatever the worker does -- hang, die, flood, print garbage -- the candidate gets a status
// (timeout, crashed, error) and the search goes on; the runner never hangs.
#pragma once
#include <atomic>
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
  // Per candidate, all its attempts together (worker start, request, response): one candidate
  // never costs more than this, however its retries go. Beyond 1e9 s (inf included) it is 1e9 s;
  // zero, negative or NaN leaves no time at all.
  double timeout_s = 300;
  int retries = 1;                     // extra attempts after crashed or error, while time is left
  // Adaptive timeout: timeout_s bounds the first candidates; once `adaptive_min_samples` have
  // answered ok, a candidate's timeout is max(adaptive_floor_s, adaptive_multiple x the p90 of
  // their response times), never above timeout_s.
  bool adaptive_timeout = false;
  double adaptive_multiple = 5;
  double adaptive_floor_s = 10;
  std::size_t adaptive_min_samples = 5;
  // When set and it becomes true (a signal handler may set it), the attempt in progress ends
  // within about 0.1 s -- the worker's process group killed -- and later candidates are not sent;
  // they all get status error with a message starting "cancelled".
  const std::atomic<bool>* cancel = nullptr;
  int repeats = 10;                    // asked of the worker: latency samples per candidate
  std::size_t max_line_bytes = 1 << 20;  // a longer response line is a flood: error, worker killed
  std::string identity;                // part of cache keys; default "process:" + the command line
  double cost_seconds = 10;            // what traits() reports
  // NKI source sent to the worker. Unset: emit::emit_nki(program, kernel) when the candidate has
  // both, else empty (a worker may rebuild the kernel from the kernel and schedule texts).
  std::function<std::string(const Candidate&)> nki_source;
  // Extra request fields: the text of a JSON object whose members are added to each request
  // (a GPU worker's "triton" source and "problem", docs/GPU.md). Unset: none.
  std::function<std::string(const Candidate&)> request_fields;
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
  // The timeout the next candidate gets (timeout_s, or the adaptive one).
  [[nodiscard]] double current_timeout() const;

 private:
  struct Worker;
  ProcessOptions opt_;
  std::unique_ptr<Worker> w_;
  std::uint64_t next_id_ = 1;
  std::vector<double> ok_seconds_;  // response times of candidates answered ok (adaptive timeout)
  double startup_s_ = 0;            // the longest a fresh worker took to its first ok answer
};

// The request line for one candidate (no trailing newline). `extra`: a JSON object's text whose
// members are added (fields the protocol already has are kept), or empty.
std::string protocol_request(const Candidate& c, std::uint64_t id, int repeats, std::string_view nki, std::string_view extra = {});
// Parses one response line for request `id`. Garbage, a wrong id or version, an unknown status
// or an ok without samples give status error with a message saying which.
Measurement protocol_parse_response(std::string_view line, std::uint64_t id);

}  // namespace kevo::runner
