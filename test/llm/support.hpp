// Test support for test_llm: a real HTTP/1.1 server on 127.0.0.1 (ephemeral port) serving the
// chat-completions protocol with scripted replies, a toy problem with a text form, a small
// evolution loop, and environment / temporary-directory helpers.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kevo/core/io.hpp"
#include "kevo/evo/operator.hpp"
#include "kevo/evo/problem.hpp"
#include "kevo/llm.hpp"

namespace kevo::llm::test {

struct HttpRequest {
  std::string method, path, body;
  std::map<std::string, std::string> headers;  // lowercase names
  double at_s = 0;                             // arrival, seconds since the server started
  [[nodiscard]] nlohmann::json json() const { return nlohmann::json::parse(body); }
};

struct HttpResponse {
  int status = 200;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  int delay_ms = 0;  // the server holds the reply this long (interrupted when the server stops)
};

inline std::string chat_json(const std::string& text, int prompt_tokens = 100, int completion_tokens = 50,
                             const std::string& finish = "stop") {
  nlohmann::json j = {{"id", "chatcmpl-test"},
                      {"object", "chat.completion"},
                      {"choices", {{{"index", 0}, {"message", {{"role", "assistant"}, {"content", text}}},
                                    {"finish_reason", finish}}}},
                      {"usage", {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens},
                                 {"total_tokens", prompt_tokens + completion_tokens}}}};
  return j.dump();
}

inline HttpResponse ok(const std::string& text, int pt = 100, int ct = 50) { return {200, chat_json(text, pt, ct), {}, 0}; }

class LoopbackServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&, std::size_t index)>;

  explicit LoopbackServer(Handler fallback = nullptr) : fallback_(std::move(fallback)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 64) != 0)
      throw std::runtime_error("test server: cannot bind 127.0.0.1");
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    t0_ = std::chrono::steady_clock::now();
    accept_thread_ = std::thread([this] { accept_loop(); });
  }
  ~LoopbackServer() {
    stop_ = true;
    release();
    accept_thread_.join();
    std::vector<std::thread> ts;
    {
      std::lock_guard l(mu_);
      ts.swap(conns_);
    }
    for (auto& t : ts) t.join();
    ::close(fd_);
  }
  LoopbackServer(const LoopbackServer&) = delete;
  LoopbackServer& operator=(const LoopbackServer&) = delete;

  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1"; }
  // Replies served in order before the fallback handler.
  void script(std::vector<HttpResponse> rs) {
    std::lock_guard l(mu_);
    for (auto& r : rs) script_.push_back(std::move(r));
  }
  // While held, every reply waits until release() (lets a test see calls in flight without timing).
  void hold() {
    std::lock_guard l(mu_);
    held_ = true;
  }
  void release() {
    {
      std::lock_guard l(mu_);
      held_ = false;
    }
    cv_.notify_all();
  }
  [[nodiscard]] std::vector<HttpRequest> requests() const {
    std::lock_guard l(mu_);
    return requests_;
  }
  [[nodiscard]] std::size_t request_count() const {
    std::lock_guard l(mu_);
    return requests_.size();
  }
  // Waits until `n` requests arrived (bounded, so a broken test fails instead of hanging).
  bool wait_requests(std::size_t n, double timeout_s = 20) {
    std::unique_lock l(mu_);
    return cv_.wait_for(l, std::chrono::duration<double>(timeout_s), [&] { return requests_.size() >= n; });
  }

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::lock_guard l(mu_);
      conns_.emplace_back([this, c] { serve(c); });
    }
  }

  void serve(int c) {
    std::string buf;
    char tmp[65536];
    std::size_t header_end = std::string::npos;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    auto read_more = [&]() -> bool {
      pollfd p{c, POLLIN, 0};
      while (!stop_ && std::chrono::steady_clock::now() < deadline) {
        if (::poll(&p, 1, 20) > 0) {
          const ssize_t k = ::recv(c, tmp, sizeof tmp, 0);
          if (k <= 0) return false;
          buf.append(tmp, static_cast<std::size_t>(k));
          return true;
        }
      }
      return false;
    };
    while ((header_end = buf.find("\r\n\r\n")) == std::string::npos)
      if (!read_more()) return finish(c);
    HttpRequest req;
    std::istringstream hs(buf.substr(0, header_end));
    std::string line;
    std::getline(hs, line);
    std::istringstream rl(line);
    rl >> req.method >> req.path;
    while (std::getline(hs, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string k = line.substr(0, colon), v = line.substr(colon + 1);
      for (auto& ch : k) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      while (!v.empty() && v.front() == ' ') v.erase(v.begin());
      req.headers[k] = v;
    }
    const std::size_t len = req.headers.count("content-length") ? std::stoul(req.headers["content-length"]) : 0;
    while (buf.size() < header_end + 4 + len)
      if (!read_more()) return finish(c);
    req.body = buf.substr(header_end + 4, len);
    req.at_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    HttpResponse resp;
    std::size_t index = 0;
    {
      std::unique_lock l(mu_);
      index = requests_.size();
      requests_.push_back(req);
      cv_.notify_all();
      if (!script_.empty()) {
        resp = std::move(script_.front());
        script_.pop_front();
      } else if (fallback_) {
        l.unlock();
        resp = fallback_(req, index);
        l.lock();
      } else {
        resp = ok("a=1 b=1 c=1");
      }
      cv_.wait(l, [&] { return !held_ || stop_; });
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(resp.delay_ms);
    while (!stop_ && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::string out = "HTTP/1.1 " + std::to_string(resp.status) + " Status\r\nContent-Type: application/json\r\n";
    for (const auto& [k, v] : resp.headers) out += k + ": " + v + "\r\n";
    out += "Content-Length: " + std::to_string(resp.body.size()) + "\r\nConnection: close\r\n\r\n" + resp.body;
    std::size_t off = 0;
    while (off < out.size()) {
      const ssize_t k = ::send(c, out.data() + off, out.size() - off, MSG_NOSIGNAL);
      if (k <= 0) break;
      off += static_cast<std::size_t>(k);
    }
    finish(c);
  }
  static void finish(int c) {
    ::shutdown(c, SHUT_WR);
    ::close(c);
  }

  int fd_ = -1;
  int port_ = 0;
  std::chrono::steady_clock::time_point t0_;
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> conns_;
  std::deque<HttpResponse> script_;
  std::vector<HttpRequest> requests_;
  Handler fallback_;
  bool held_ = false;
};

// A port with nothing listening (bound, then closed).
inline int dead_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

class ScopedEnv {
 public:
  ScopedEnv(std::string name, const std::string& value) : name_(std::move(name)) {
    if (const char* v = std::getenv(name_.c_str())) old_ = v;
    ::setenv(name_.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

class TempDir {
 public:
  TempDir() {
    std::string tpl = (std::filesystem::temp_directory_path() / "kevo-llm-XXXXXX").string();
    if (!::mkdtemp(tpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  [[nodiscard]] std::filesystem::path operator/(const std::string& s) const { return path_ / s; }

 private:
  std::filesystem::path path_;
};

// Every file under `dir`, read whole (to check no file holds a secret).
inline std::vector<std::pair<std::string, std::string>> all_files(const std::filesystem::path& dir) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    out.emplace_back(e.path().string(), kevo::read_file(e.path()));
  }
  return out;
}

// Three ordinal genes 1..16 printed "a=3 b=5 c=7". The optimum is a=11 b=3 c=7; a=16 is
// "invalid" (to exercise rejection feedback).
struct ToyProblem {
  Space space_;
  ToyProblem() {
    std::vector<std::int64_t> vals;
    for (int i = 1; i <= 16; ++i) vals.push_back(i);
    for (const char* n : {"a", "b", "c"}) space_.add(Gene::ordinal(n, vals));
  }
  [[nodiscard]] const Space& space() const { return space_; }
  [[nodiscard]] std::string name() const { return "toy"; }
  [[nodiscard]] bool deterministic() const { return true; }
  [[nodiscard]] std::string context() const {
    return "Toy problem: choose integers a, b, c in 1..16 to minimise latency.\n"
           "Grammar: a=<int> b=<int> c=<int> on one line.";
  }
  [[nodiscard]] std::string to_text(const Genome& g) const {
    return "a=" + std::to_string(g[0] + 1) + " b=" + std::to_string(g[1] + 1) + " c=" + std::to_string(g[2] + 1);
  }
  [[nodiscard]] Expected<Genome, std::string> from_text(std::string_view s) const {
    Genome g(3, -1);
    std::string text(s);
    for (auto& ch : text)
      if (ch == ',' || ch == ';') ch = ' ';
    std::istringstream is(text);
    std::string tok;
    while (is >> tok) {
      const auto eq = tok.find('=');
      if (eq == std::string::npos) return unexpected(std::string("expected name=value, got '" + tok + "'"));
      const std::string k = tok.substr(0, eq), v = tok.substr(eq + 1);
      const int idx = k == "a" ? 0 : k == "b" ? 1 : k == "c" ? 2 : -1;
      if (idx < 0) return unexpected("unknown gene '" + k + "'");
      if (g[idx] >= 0) return unexpected("gene '" + k + "' given twice");
      int val = 0;
      try {
        val = std::stoi(v);
      } catch (...) {
        return unexpected("value of '" + k + "' is not an integer: '" + v + "'");
      }
      if (val < 1 || val > 16) return unexpected("value of '" + k + "' must be in 1..16, got " + v);
      g[idx] = val - 1;
    }
    for (int i = 0; i < 3; ++i)
      if (g[i] < 0) return unexpected(std::string("missing gene '") + "abc"[i] + "'");
    return g;
  }
  [[nodiscard]] std::vector<evo::Evaluation> evaluate(std::span<const Genome> gs) const {
    std::vector<evo::Evaluation> out;
    for (const auto& g : gs) {
      evo::Evaluation e;
      const int a = g[0] + 1, b = g[1] + 1, c = g[2] + 1;
      if (a == 16) {
        e.status = Status::invalid;
        e.reason = "sbuf_overflow: a=16 needs 300 KiB of SBUF per partition";
        out.push_back(e);
        continue;
      }
      const double f = (a - 11) * (a - 11) + (b - 3) * (b - 3) + (c - 7) * (c - 7);
      const double lat = 1000 + 100 * f;
      e.fitness = {lat};
      e.metrics = {{"latency_ns", lat}, {"fraction_of_peak", 1000 / lat}};
      e.profile = "bottleneck: " + std::string(std::abs(a - 11) >= std::abs(b - 3) ? "gene a" : "gene b") +
                  "\nvector busy 40%, tensor busy 55%";
      out.push_back(e);
    }
    return out;
  }
};

// A minimal steady-state loop standing in for the evo engine: best individual as parent,
// population sorted as elites, outcomes fed back. Returns every proposal's text, in order.
struct LoopResult {
  std::vector<std::string> proposals;
  double best = 0;
};
inline LoopResult run_loop(evo::Operator op, const evo::Problem& problem, int steps, std::uint64_t seed = 1,
                           const std::function<void(evo::Operator&)>& after_propose = nullptr) {
  LoopResult res;
  std::vector<evo::Individual> pop;
  std::set<std::uint64_t> seen;
  Genome g0 = problem.space().first();
  evo::Individual first{g0, problem.evaluate(std::span<const Genome>(&g0, 1))[0], 0, "init", 0};
  pop.push_back(first);
  seen.insert(genome_hash(g0));
  Rng rng(seed);
  for (int step = 0; step < steps; ++step) {
    std::sort(pop.begin(), pop.end(), [](const auto& x, const auto& y) {
      const double fx = x.eval.ok() ? x.eval.fitness[0] : 1e300, fy = y.eval.ok() ? y.eval.fitness[0] : 1e300;
      return fx != fy ? fx < fy : x.id < y.id;
    });
    Rng r = rng.fork(static_cast<std::uint64_t>(step));
    evo::OperatorContext ctx{problem, std::span<const evo::Individual>(pop.data(), 1),
                             std::span<const evo::Individual>(pop.data(), std::min<std::size_t>(pop.size(), 5)),
                             static_cast<std::uint64_t>(step), pop.size(), r};
    std::vector<Genome> gs = op.propose(ctx);
    if (after_propose) after_propose(op);
    std::vector<evo::ProposalOutcome> outcomes;
    for (auto& g : gs) {
      res.proposals.push_back(problem.to_text(g));
      evo::ProposalOutcome o;
      o.genome = g;
      if (!seen.insert(genome_hash(g)).second) {
        o.eval.status = Status::invalid;
        o.eval.reason = "duplicate";
      } else {
        o.eval = problem.evaluate(std::span<const Genome>(&g, 1))[0];
        pop.push_back({g, o.eval, pop.size(), op.name(), static_cast<std::uint64_t>(step)});
      }
      outcomes.push_back(o);
    }
    op.feedback(outcomes);
  }
  res.best = 1e300;
  for (const auto& i : pop)
    if (i.eval.ok()) res.best = std::min(res.best, i.eval.fitness[0]);
  return res;
}

}  // namespace kevo::llm::test
