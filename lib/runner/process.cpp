// ProcessRunner: a worker process per runner (or per candidate), spawned in its own process
// group so that a timeout kills everything it started; pipes read with poll() against a
// deadline; SIGPIPE blocked around writes so a dead worker is an EPIPE, never a signal.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <utility>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kevo/core/error.hpp"
#include "kevo/core/hash.hpp"
#include "kevo/emit/nki.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/runner/process.hpp"

extern char** environ;  // NOLINT

namespace kevo::runner {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxWorkerMessage = 2048;

std::string clip(std::string_view s, std::size_t n = 120) {
  std::string out = printable(s.substr(0, n));
  if (s.size() > n) out += "...";
  return out;
}

Measurement failed(Status st, std::string msg) {
  Measurement m;
  m.status = st;
  m.message = std::move(msg);
  return m;
}

constexpr long long kSliceMs = 100;  // longest single poll(): how soon a cancel is noticed
constexpr double kLongestTimeout = 1e9;  // seconds (ProcessOptions::timeout_s): ~31 years, far inside int64 ns

bool cancelled(const std::atomic<bool>* cancel) { return cancel != nullptr && cancel->load(std::memory_order_acquire); }

constexpr const char* kCancelled = "cancelled: the search is stopping";

// Writes all of `data` to a pipe by `deadline`; false with `err` set on timeout, cancel or a closed
// pipe. `drain(wait_ms)` is called while the pipe is full: it reads what the worker writes meanwhile
// (a worker blocked on a full stderr pipe never reads its request: a 216 KB request timed out
// behind 200 KB of start-up logging).
template <typename Drain>
bool write_all(int fd, std::string_view data, Clock::time_point deadline, const std::atomic<bool>* cancel, std::string& err,
               bool& timed_out, Drain&& drain) {
  // Block SIGPIPE for this thread while writing; consume one that became pending (EPIPE path).
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  bool ok = true;
  std::size_t off = 0;
  while (off < data.size()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      ok = false;
      timed_out = true;
      err = "worker did not read its request in time";
      break;
    }
    if (cancelled(cancel)) {
      ok = false;
      err = kCancelled;
      break;
    }
    pollfd pf{fd, POLLOUT, 0};
    const int pr = poll(&pf, 1, 0);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) {
      drain(std::min<long long>(left, kSliceMs));  // waits up to then for the worker to write or read
      continue;
    }
    const ssize_t w = ::write(fd, data.data() + off, data.size() - off);
    if (w < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      ok = false;
      err = errno == EPIPE ? "worker closed its stdin" : fmt::format("writing to worker: {}", std::strerror(errno));
      break;
    }
    off += static_cast<std::size_t>(w);
  }
  sigset_t pending;
  sigpending(&pending);
  if (sigismember(&pending, SIGPIPE)) {
    const timespec zero{0, 0};
    sigtimedwait(&block, nullptr, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return ok;
}

std::string describe_exit(int st) {
  if (WIFEXITED(st)) return fmt::format("worker exited with status {}", WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return fmt::format("worker killed by signal {} ({})", WTERMSIG(st), strsignal(WTERMSIG(st)));
  return "worker ended";
}

}  // namespace

struct ProcessRunner::Worker {
  pid_t pid = -1;
  int in = -1, out = -1, err = -1;
  std::string outbuf, errtail;
  std::size_t started = 0;
  int exit_status = -1;  // the wait status read_line reaped while stdout stayed open (else -1)

  [[nodiscard]] bool running() const { return pid > 0; }

  void close_fds() {
    for (int* fd : {&in, &out, &err})
      if (*fd >= 0) {
        ::close(*fd);
        *fd = -1;
      }
  }

  // Kills the whole process group and reaps the worker; returns its wait status (or -1).
  int kill_group() {
    int st = -1;
    if (pid > 0) {
      ::kill(-pid, SIGKILL);
      while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
      pid = -1;
    }
    close_fds();
    outbuf.clear();
    return st;
  }

  // After stdout reached EOF: the worker is exiting; reap it (killing the group after a grace period).
  int reap_after_eof() {
    if (pid <= 0) {  // already reaped by read_line
      close_fds();
      outbuf.clear();
      return std::exchange(exit_status, -1);
    }
    int st = -1;
    for (int i = 0; i < 50 && pid > 0; ++i) {
      const pid_t r = ::waitpid(pid, &st, WNOHANG);
      if (r == pid) {
        ::kill(-pid, SIGKILL);  // anything it left behind in its group
        pid = -1;
        close_fds();
        outbuf.clear();
        return st;
      }
      ::usleep(10000);
    }
    return kill_group();
  }

  bool start(const ProcessOptions& opt, std::string& error) {
    close_fds();  // (a worker read_line saw exit after its last answer leaves its pipes open)
    exit_status = -1;
    if (opt.command.empty()) {
      error = "process runner: no worker command";
      return false;
    }
    int pin[2], pout[2], perr[2];
    if (::pipe2(pin, O_CLOEXEC) != 0) {
      error = fmt::format("pipe: {}", std::strerror(errno));
      return false;
    }
    if (::pipe2(pout, O_CLOEXEC) != 0) {
      ::close(pin[0]), ::close(pin[1]);
      error = fmt::format("pipe: {}", std::strerror(errno));
      return false;
    }
    if (::pipe2(perr, O_CLOEXEC) != 0) {
      ::close(pin[0]), ::close(pin[1]), ::close(pout[0]), ::close(pout[1]);
      error = fmt::format("pipe: {}", std::strerror(errno));
      return false;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pin[0], 0);
    posix_spawn_file_actions_adddup2(&fa, pout[1], 1);
    posix_spawn_file_actions_adddup2(&fa, perr[1], 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setpgroup(&attr, 0);  // its own process group: a timeout kills all it started
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

    std::vector<std::string> envs;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) envs.emplace_back(*e);
    for (const std::string& kv : opt.env) {
      const auto eq = kv.find('=');
      const std::string key = kv.substr(0, eq);
      std::erase_if(envs, [&](const std::string& s) { return s.compare(0, key.size() + 1, key + "=") == 0; });
      envs.push_back(kv);
    }
    std::vector<char*> argv, envp;
    for (const std::string& a : opt.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (std::string& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t child = -1;
    const int rc = posix_spawnp(&child, argv[0], &fa, &attr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    ::close(pin[0]);
    ::close(pout[1]);
    ::close(perr[1]);
    if (rc != 0) {
      ::close(pin[1]), ::close(pout[0]), ::close(perr[0]);
      error = fmt::format("cannot start worker '{}': {}", opt.command[0], std::strerror(rc));
      return false;
    }
    pid = child;
    in = pin[1];
    out = pout[0];
    err = perr[0];
    for (int fd : {in, out, err}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    outbuf.clear();
    errtail.clear();
    ++started;
    return true;
  }

  // While a request is being written: waits up to `wait_ms` for the worker's stdin to take more or
  // for it to write; keeps what it writes (stderr's tail, stdout in outbuf up to `max_out`).
  void drain(long long wait_ms, std::size_t max_out) {
    pollfd pf[3] = {{in, POLLOUT, 0}, {err, POLLIN, 0}, {out, POLLIN, 0}};
    const int pr = poll(pf, 3, static_cast<int>(wait_ms));
    if (pr <= 0) return;
    char buf[65536];
    if (err >= 0 && (pf[1].revents & (POLLIN | POLLHUP | POLLERR))) read_err(buf, sizeof buf);
    if (out >= 0 && (pf[2].revents & POLLIN) && outbuf.size() <= max_out) {
      const ssize_t r = ::read(out, buf, sizeof buf);
      if (r > 0) outbuf.append(buf, static_cast<std::size_t>(r));
    }
  }

  // One read of stderr into its tail (closed at EOF).
  void read_err(char* buf, std::size_t size) {
    const ssize_t r = ::read(err, buf, size);
    if (r > 0) keep_err(buf, static_cast<std::size_t>(r));
    else if (r == 0) {
      ::close(err);
      err = -1;
    }
  }

  void keep_err(const char* data, std::size_t n) {
    errtail.append(data, n);
    if (errtail.size() > 4096) errtail.erase(0, errtail.size() - 4096);
  }

  [[nodiscard]] std::string err_hint() const {
    std::string_view t = errtail;
    while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.remove_suffix(1);
    const auto nl = t.rfind('\n');
    if (nl != std::string_view::npos) t = t.substr(nl + 1);
    return t.empty() ? std::string() : fmt::format(" (stderr: {})", clip(t, 200));
  }

  // Whether the worker itself has exited (reaped now, its group killed, its status kept for
  // reap_after_eof); its stdout may still be open in a process it left behind.
  bool worker_exited() {
    int st = 0;
    if (pid <= 0 || ::waitpid(pid, &st, WNOHANG) != pid) return false;
    ::kill(-pid, SIGKILL);
    pid = -1;
    exit_status = st;
    return true;
  }

  // Whether the worker has written to stdout while no request was pending: an answer nobody has
  // asked for yet (its id may well be the next request's) means it is out of step. Blank lines
  // are tolerated. Reads only what is there, without waiting.
  bool spoke_unasked() {
    char buf[4096];
    while (outbuf.size() < (std::size_t{1} << 20)) {
      pollfd pf{out, POLLIN, 0};
      if (::poll(&pf, 1, 0) <= 0 || !(pf.revents & POLLIN)) break;
      const ssize_t r = ::read(out, buf, sizeof buf);
      if (r <= 0) break;
      outbuf.append(buf, static_cast<std::size_t>(r));
    }
    return outbuf.find_first_not_of(" \t\r\n") != std::string::npos;
  }

  enum class Read { line, timeout, eof, flood, cancelled };
  // Reads one '\n'-terminated line from stdout by `deadline`, draining stderr meanwhile.
  Read read_line(std::string& line, Clock::time_point deadline, std::size_t max_bytes, const std::atomic<bool>* cancel) {
    char buf[65536];
    while (true) {
      const auto nl = outbuf.find('\n');
      if (nl != std::string::npos) {
        line.assign(outbuf, 0, nl);
        outbuf.erase(0, nl + 1);
        return Read::line;
      }
      if (outbuf.size() > max_bytes) return Read::flood;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return Read::timeout;
      if (cancelled(cancel)) return Read::cancelled;
      pollfd pf[2] = {{out, POLLIN, 0}, {err, POLLIN, 0}};
      const nfds_t nf = err >= 0 ? 2 : 1;
      const int pr = poll(pf, nf, static_cast<int>(std::min<long long>(left, kSliceMs)));
      if (pr < 0 && errno != EINTR) return Read::eof;
      // (checked whenever stdout has nothing new, not only on a quiet poll: a child the worker
      // left behind that keeps writing stderr made a crash wait out the whole timeout)
      if ((pr == 0 || !(pf[0].revents & (POLLIN | POLLHUP | POLLERR))) && worker_exited()) {
        // The worker is gone but something it started still holds its stdout open: that is no
        // answer, and waiting for EOF would turn a crash into a timeout. What it wrote before it
        // exited is still in the pipe and counts.
        while (true) {
          const ssize_t r = ::read(out, buf, sizeof buf);
          if (r <= 0) break;
          outbuf.append(buf, static_cast<std::size_t>(r));
        }
        const auto at = outbuf.find('\n');
        if (at == std::string::npos) return Read::eof;
        line.assign(outbuf, 0, at);
        outbuf.erase(0, at + 1);
        return Read::line;
      }
      if (pr <= 0) continue;
      if (nf == 2 && (pf[1].revents & (POLLIN | POLLHUP | POLLERR))) read_err(buf, sizeof buf);
      if (pf[0].revents & (POLLIN | POLLHUP | POLLERR)) {
        const ssize_t r = ::read(out, buf, sizeof buf);
        if (r > 0) {
          // Only keep what can still be part of a legal line.
          outbuf.append(buf, static_cast<std::size_t>(r));
        } else if (r == 0) {
          return Read::eof;
        } else if (errno != EAGAIN && errno != EINTR) {
          return Read::eof;
        }
      }
    }
  }
};

ProcessRunner::ProcessRunner(ProcessOptions opt) : opt_(std::move(opt)), w_(std::make_unique<Worker>()) {}
ProcessRunner::ProcessRunner(const ProcessRunner& o)
    : opt_(o.opt_), w_(std::make_unique<Worker>()), next_id_(o.next_id_), ok_seconds_(o.ok_seconds_), startup_s_(o.startup_s_) {}
ProcessRunner::ProcessRunner(ProcessRunner&&) noexcept = default;
ProcessRunner& ProcessRunner::operator=(const ProcessRunner& o) {
  if (this != &o) {
    stop();
    opt_ = o.opt_;
    next_id_ = o.next_id_;
    ok_seconds_ = o.ok_seconds_;
    startup_s_ = o.startup_s_;
  }
  return *this;
}
ProcessRunner& ProcessRunner::operator=(ProcessRunner&& o) noexcept {
  if (this != &o) {
    stop();
    opt_ = std::move(o.opt_);
    w_ = std::move(o.w_);
    next_id_ = o.next_id_;
    ok_seconds_ = std::move(o.ok_seconds_);
  }
  return *this;
}
ProcessRunner::~ProcessRunner() { stop(); }

void ProcessRunner::stop() {
  if (!w_) return;
  if (!w_->running()) {
    w_->close_fds();
    return;
  }
  // A polite end first: closing stdin tells a well-behaved worker to exit.
  if (w_->in >= 0) {
    ::close(w_->in);
    w_->in = -1;
  }
  int st = 0;
  for (int i = 0; i < 20; ++i) {
    if (::waitpid(w_->pid, &st, WNOHANG) == w_->pid) {
      ::kill(-w_->pid, SIGKILL);
      w_->pid = -1;
      w_->close_fds();
      return;
    }
    ::usleep(5000);
  }
  w_->kill_group();
}

std::size_t ProcessRunner::workers_started() const noexcept { return w_ ? w_->started : 0; }

double ProcessRunner::current_timeout() const {
  if (!opt_.adaptive_timeout || ok_seconds_.size() < std::max<std::size_t>(1, opt_.adaptive_min_samples)) return opt_.timeout_s;
  std::vector<double> v = ok_seconds_;
  const auto k = static_cast<std::size_t>(std::ceil(0.9 * static_cast<double>(v.size()))) - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return std::min(opt_.timeout_s, std::max(opt_.adaptive_floor_s, opt_.adaptive_multiple * v[k]));
}

RunnerTraits ProcessRunner::traits() const {
  RunnerTraits t;
  if (!opt_.identity.empty()) {
    t.identity = opt_.identity;
  } else {
    std::string cmd;
    for (const std::string& a : opt_.command) cmd += (cmd.empty() ? "" : " ") + a;
    t.identity = "process:" + cmd;
  }
  t.deterministic = false;
  t.thread_safety = ThreadSafety::basic;
  t.cost_seconds = opt_.cost_seconds;
  t.checks_outputs = false;
  return t;
}

std::string protocol_request(const Candidate& c, std::uint64_t id, int repeats, std::string_view nki, std::string_view extra_text) {
  nlohmann::json j;
  j["v"] = kProtocolVersion;
  j["id"] = id;
  std::string kernel = c.kernel_text;
  if (kernel.empty() && c.kernel != nullptr) kernel = ir::print_kernel(*c.kernel);
  j["kernel"] = kernel;
  j["schedule"] = c.schedule_text;
  j["nki"] = std::string(nki);
  j["target"] = c.target != nullptr ? c.target->name : std::string();
  j["repeats"] = repeats;
  if (!extra_text.empty()) {
    const auto extra = nlohmann::json::parse(extra_text);  // the caller's own JSON: a bad one is a broken invariant
    if (!extra.is_object()) throw Error("ProcessOptions::request_fields gave no JSON object");
    for (const auto& [key, value] : extra.items())
      if (!j.contains(key)) j[key] = value;
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

// A worker's response nested deeper than this is refused before it is parsed: dumping (the
// profile) or freeing a JSON value recurses once per level, and 50,000 levels overflow a search
// thread's stack. No protocol field nests more than a few levels.
constexpr int kMaxResponseDepth = 64;

// The deepest nesting of arrays and objects in a JSON text, outside its strings.
int json_nesting(std::string_view s) {
  int depth = 0, most = 0;
  bool in_string = false, escaped = false;
  for (const char c : s) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') most = std::max(most, ++depth);
    else if (c == ']' || c == '}') --depth;
  }
  return most;
}

Measurement parse_response(std::string_view line, std::uint64_t id, bool& out_of_step) {
  nlohmann::json j;
  out_of_step = true;
  if (const int depth = json_nesting(line); depth > kMaxResponseDepth)
    return failed(Status::error, fmt::format("worker response nests {} levels of arrays or objects, more than {}: '{}'", depth,
                                             kMaxResponseDepth, clip(line)));
  try {
    j = nlohmann::json::parse(line);
  } catch (const std::exception&) {
    return failed(Status::error, fmt::format("worker printed garbage: '{}'", clip(line)));
  }
  if (!j.is_object()) return failed(Status::error, fmt::format("worker response is not a JSON object: '{}'", clip(line)));
  if (!j.contains("v") || !j["v"].is_number_integer() || j["v"].get<long long>() != kProtocolVersion)
    return failed(Status::error, fmt::format("worker response has protocol version {}, expected {}",
                                             j.contains("v") ? clip(j["v"].dump()) : std::string("(none)"), kProtocolVersion));
  if (!j.contains("id") || !j["id"].is_number_unsigned() || j["id"].get<std::uint64_t>() != id)
    return failed(Status::error, fmt::format("worker answered id {} to request {}",
                                             j.contains("id") ? clip(j["id"].dump()) : std::string("(none)"), id));
  out_of_step = false;
  if (!j.contains("status") || !j["status"].is_string())
    return failed(Status::error, "worker response has no status");
  const auto st = status_from_string(j["status"].get<std::string>());
  if (!st) return failed(Status::error, fmt::format("worker sent unknown status '{}'", clip(j["status"].get<std::string>())));
  Measurement m;
  m.status = *st;
  // A worker's message reaches the summary, history.jsonl and the report: escaped (a terminal
  // escape was printed raw) and cut at 2 KB (a 500 KB message was kept on every evaluation).
  if (j.contains("message") && j["message"].is_string()) m.message = excerpt(j["message"].get<std::string>(), kMaxWorkerMessage);
  if (j.contains("latency_ns")) {
    if (!j["latency_ns"].is_array()) return failed(Status::error, "worker's latency_ns is not an array");
    // A sample that is no kernel time (is_kernel_time_ns) is a worker's unit or arithmetic error,
    // which would otherwise be named the best (a 1e-300 ns sample) or poison the statistics.
    for (const auto& v : j["latency_ns"]) {
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0)
        return failed(Status::error, fmt::format("worker's latency_ns holds {}, not a positive number", clip(v.dump())));
      if (!is_kernel_time_ns(v.get<double>()))
        return failed(Status::error, fmt::format("worker's latency_ns holds {}, outside [1 ns, 1 day]: not a kernel time", clip(v.dump())));
      m.samples_ns.push_back(v.get<double>());
    }
  }
  if (m.status == Status::ok && m.samples_ns.empty()) return failed(Status::error, "worker said ok without latency samples");
  // (capped and escaped as the message is: a 900 KB profile per answer grew the journal 11 MB in 12
  // evaluations)
  if (j.contains("profile"))
    m.profile = excerpt(j["profile"].is_string() ? j["profile"].get<std::string>() : j["profile"].dump(), kMaxWorkerMessage);
  m.latency = summarize(m.samples_ns);
  return m;
}

}  // namespace

Measurement protocol_parse_response(std::string_view line, std::uint64_t id) {
  bool out_of_step = false;
  return parse_response(line, id, out_of_step);
}

Measurement ProcessRunner::measure_one(const Candidate& c) {
  if (!w_) w_ = std::make_unique<Worker>();
  if (cancelled(opt_.cancel)) return failed(Status::error, kCancelled);
  std::string nki;
  try {
    if (opt_.nki_source) nki = opt_.nki_source(c);
    else if (c.program != nullptr && c.kernel != nullptr) nki = emit::emit_nki(*c.program, *c.kernel);
  } catch (const std::exception& e) {
    return failed(Status::error, fmt::format("cannot build NKI source: {}", e.what()));
  }
  std::string extra;
  try {
    if (opt_.request_fields) extra = opt_.request_fields(c);
  } catch (const std::exception& e) {
    return failed(Status::error, fmt::format("cannot build the request's extra fields: {}", e.what()));
  }
  // One deadline for the candidate: retries share it, so a candidate costs at most one timeout.
  // Bounded so the deadline cannot overflow (1e300 s or inf in nanoseconds is past int64; NaN is none).
  const double timeout = [t = current_timeout()] { return t > 0 ? std::min(t, kLongestTimeout) : 0.0; }();
  const auto t0 = Clock::now();
  auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout));
  const auto seconds = [](double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); };
  std::optional<Clock::time_point> started_at;  // when this candidate had to start a worker
  auto timed_out_msg = [&](const std::string& what) {
    return failed(Status::timeout, fmt::format("{} within the candidate's {:g} s; worker process group killed", what, timeout));
  };
  Measurement last;
  const int attempts = 1 + std::max(0, opt_.retries);
  for (int attempt = 0; attempt < attempts; ++attempt) {
    if (attempt > 0 && Clock::now() >= deadline) {
      last.message += fmt::format(" (no time left to retry within {:g} s)", timeout);
      break;
    }
    Worker& w = *w_;
    if (w.running() && w.worker_exited()) w.reap_after_eof();  // exited after its last answer: a new one, no attempt spent
    // Output before the request is written would be read as its answer: a worker that spoke
    // unasked is out of step, and a new one takes the request (no attempt spent).
    if (w.running() && w.spoke_unasked()) w.kill_group();
    if (!w.running()) {
      std::string err;
      if (!w.start(opt_, err)) return failed(Status::error, err);  // retrying a missing program is pointless
      started_at = Clock::now();
      // An adaptive timeout is the steady state's: a fresh worker's start-up (a device runtime, a
      // compiler cache) comes on top of it, up to the fixed limit (after one restart every later
      // candidate of a worker that takes 11 s to start timed out at the 10 s floor, and restarted it)
      if (timeout < opt_.timeout_s && startup_s_ > 0)
        deadline = std::min(t0 + seconds(std::min(opt_.timeout_s, kLongestTimeout)),
                            std::max(deadline, *started_at + seconds(timeout + startup_s_)));
    }
    const std::uint64_t id = next_id_++;
    w.outbuf.clear();  // a stale partial line from an earlier attempt can only confuse this one
    std::string err;
    bool timed_out = false;
    const std::string req = protocol_request(c, id, opt_.repeats, nki, extra) + "\n";
    if (!write_all(w.in, req, deadline, opt_.cancel, err, timed_out,
                   [&](long long ms) { w.drain(ms, opt_.max_line_bytes); })) {
      if (timed_out || err == kCancelled) {
        w.kill_group();
        last = timed_out ? timed_out_msg("worker did not read its request") : failed(Status::error, kCancelled);
        break;
      }
      const int st = w.reap_after_eof();
      last = failed(Status::crashed, fmt::format("{}; {}{}", err, describe_exit(st), w.err_hint()));
      continue;
    }
    std::string line;
    Worker::Read r = w.read_line(line, deadline, opt_.max_line_bytes, opt_.cancel);
    // blank lines are tolerated (docs/PROTOCOL.md): one before the answer was "garbage: ''"
    while (r == Worker::Read::line && line.find_first_not_of(" \t\r") == std::string::npos)
      r = w.read_line(line, deadline, opt_.max_line_bytes, opt_.cancel);
    if (r == Worker::Read::timeout) {
      w.kill_group();
      last = timed_out_msg("no response");
      break;
    }
    if (r == Worker::Read::cancelled) {
      w.kill_group();
      last = failed(Status::error, kCancelled);
      break;
    }
    if (r == Worker::Read::flood) {
      w.kill_group();
      last = failed(Status::error, fmt::format("worker output line exceeds {} bytes; worker killed", opt_.max_line_bytes));
      continue;
    }
    if (r == Worker::Read::eof) {
      const int st = w.reap_after_eof();
      last = failed(Status::crashed, fmt::format("{} before answering{}", describe_exit(st), w.err_hint()));
      continue;
    }
    bool out_of_step = false;
    last = parse_response(line, id, out_of_step);
    if (out_of_step) {
      // Garbage, a wrong id or version: the worker is out of step with us; start afresh.
      w.kill_group();
      continue;
    }
    if (last.status == Status::ok) {
      if (started_at) startup_s_ = std::max(startup_s_, std::chrono::duration<double>(Clock::now() - *started_at).count());
      ok_seconds_.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      if (ok_seconds_.size() > 256) ok_seconds_.erase(ok_seconds_.begin());  // the recent ones
    }
    break;  // a well-formed answer is final, whatever its status
  }
  if (!opt_.persistent) stop();
  return last;
}

std::vector<Measurement> ProcessRunner::measure(std::span<const Candidate> candidates) {
  std::vector<Measurement> out;
  out.reserve(candidates.size());
  for (const Candidate& c : candidates) out.push_back(measure_one(c));
  return out;
}

}  // namespace kevo::runner
