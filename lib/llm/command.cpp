#include "kevo/llm/command.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <tuple>

#include "detail.hpp"
#include "kevo/llm/openai.hpp"

extern char** environ;

namespace kevo::llm {
namespace {

struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// SIGPIPE is blocked in the calling thread while writing the prompt (a command that exits
// without reading stdin must not kill the search); a pending one is consumed afterwards.
class BlockSigpipe {
 public:
  BlockSigpipe() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
  }
  ~BlockSigpipe() {
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE) && !sigismember(&old_, SIGPIPE)) {
      timespec zero{0, 0};
      while (sigtimedwait(&set_, nullptr, &zero) > 0) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  BlockSigpipe(const BlockSigpipe&) = delete;
  BlockSigpipe& operator=(const BlockSigpipe&) = delete;

 private:
  sigset_t set_{}, old_{};
};

std::string plain_prompt(const ChatRequest& r) {
  std::string s;
  for (const auto& m : r.messages) {
    if (!s.empty()) s += "\n\n";
    s += m.content;
  }
  s += '\n';
  return s;
}

}  // namespace

CommandClient::CommandClient(CommandConfig cfg) : cfg_(std::move(cfg)) {}

Expected<ChatReply, LlmError> CommandClient::complete(const ChatRequest& r) const {
  auto fail = [](LlmErrorKind k, std::string m) { return unexpected(LlmError{k, std::move(m), 0, 1}); };
  if (cfg_.command.empty()) return fail(LlmErrorKind::config, "command client has an empty command");
  const std::string input = cfg_.json_input ? OpenAiClient::request_body(r, r.model) + "\n" : plain_prompt(r);

  // Everything the child needs is prepared before fork: after fork only async-signal-safe calls.
  std::vector<std::string> env_store;
  for (char** e = environ; e && *e; ++e) {
    std::string_view v(*e);
    if (v.starts_with("KEVO_LLM_MODEL=") || v.starts_with("KEVO_LLM_TEMPERATURE=") ||
        v.starts_with("KEVO_LLM_MAX_TOKENS="))
      continue;
    env_store.emplace_back(v);
  }
  env_store.push_back("KEVO_LLM_MODEL=" + r.model);
  env_store.push_back("KEVO_LLM_TEMPERATURE=" + std::to_string(r.temperature));
  env_store.push_back("KEVO_LLM_MAX_TOKENS=" + std::to_string(r.max_tokens));
  std::vector<char*> envp;
  for (auto& s : env_store) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string sh = "/bin/sh", dash_c = "-c", cmd = cfg_.command;
  char* argv[] = {sh.data(), dash_c.data(), cmd.data(), nullptr};

  int in_p[2], out_p[2], err_p[2];
  if (pipe2(in_p, O_CLOEXEC) != 0) return fail(LlmErrorKind::process, std::string("pipe: ") + std::strerror(errno));
  Fd in_r(in_p[0]), in_w(in_p[1]);
  if (pipe2(out_p, O_CLOEXEC) != 0) return fail(LlmErrorKind::process, std::string("pipe: ") + std::strerror(errno));
  Fd out_r(out_p[0]), out_w(out_p[1]);
  if (pipe2(err_p, O_CLOEXEC) != 0) return fail(LlmErrorKind::process, std::string("pipe: ") + std::strerror(errno));
  Fd err_r(err_p[0]), err_w(err_p[1]);

  BlockSigpipe block;
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) return fail(LlmErrorKind::process, std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    dup2(in_r.fd, 0);
    dup2(out_w.fd, 1);
    dup2(err_w.fd, 2);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve("/bin/sh", argv, envp.data());
    _exit(127);
  }
  setpgid(pid, pid);  // also here: whichever runs first, the group exists before we may kill it
  in_r.reset();
  out_w.reset();
  err_w.reset();
  fcntl(in_w.fd, F_SETFL, O_NONBLOCK);

  // stdout is the reply, at most max_output_bytes (more is an error). stderr is only drained — a
  // model loader may log megabytes — keeping its last kErrKeep bytes to quote in an error.
  constexpr std::size_t kErrKeep = std::size_t{64} << 10;
  std::string out, err;
  char buf[65536];
  std::size_t written = 0;
  bool timed_out = false, cancelled = false, too_much = false, exited = false;  // too_much: stdout only
  const auto take = [&](bool is_out, std::size_t k) {
    if (is_out) {
      if (out.size() + k > cfg_.max_output_bytes) {
        too_much = true;
        k = cfg_.max_output_bytes - std::min(cfg_.max_output_bytes, out.size());
      }
      out.append(buf, k);
    } else {
      err.append(buf, k);
      if (err.size() > 2 * kErrKeep) err.erase(0, err.size() - kErrKeep);
    }
  };
  int status = 0;
  const auto deadline = t0 + std::chrono::duration<double>(cfg_.timeout_s);
  if (input.empty()) in_w.reset();
  while (out_r.fd >= 0 || err_r.fd >= 0) {
    pollfd fds[3];
    int n = 0;
    int i_out = -1, i_err = -1, i_in = -1;
    if (out_r.fd >= 0) fds[i_out = n++] = {out_r.fd, POLLIN, 0};
    if (err_r.fd >= 0) fds[i_err = n++] = {err_r.fd, POLLIN, 0};
    if (in_w.fd >= 0) fds[i_in = n++] = {in_w.fd, POLLOUT, 0};
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      timed_out = true;
      break;
    }
    if (r.cancel && r.cancel->load()) {
      cancelled = true;
      break;
    }
    if (waitpid(pid, &status, WNOHANG) == pid) {
      // The command exited (checked on every turn: a background child that keeps writing must not
      // hide the exit until the deadline). Something it started may still hold stdout or stderr
      // open: take what is already in the pipes, kill what it left behind, and do not wait for an
      // EOF that may come only at the deadline.
      exited = true;
      ::kill(-pid, SIGKILL);
      for (const bool is_out : {true, false}) {
        Fd& fd = is_out ? out_r : err_r;
        if (fd.fd < 0) continue;
        fcntl(fd.fd, F_SETFL, O_NONBLOCK);  // (a writer outside the group must not block us)
        // (bounded: such a writer could otherwise keep this loop reading)
        for (std::size_t got = 0; !too_much && got <= cfg_.max_output_bytes + kErrKeep;) {
          const ssize_t k = ::read(fd.fd, buf, sizeof buf);
          if (k <= 0) break;
          take(is_out, static_cast<std::size_t>(k));
          got += static_cast<std::size_t>(k);
        }
      }
      break;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    const int wait_ms = static_cast<int>(std::min<long long>(left + 1, 50));
    const int pr = poll(fds, static_cast<nfds_t>(n), wait_ms);
    if (pr < 0) {
      if (errno == EINTR) continue;
      break;
    }
    auto drain = [&](int idx, Fd& fd, bool is_out) {
      if (idx < 0 || !(fds[idx].revents & (POLLIN | POLLHUP | POLLERR))) return;
      const ssize_t k = ::read(fd.fd, buf, sizeof buf);
      if (k > 0)
        take(is_out, static_cast<std::size_t>(k));
      else if (k == 0 || (errno != EINTR && errno != EAGAIN))
        fd.reset();
    };
    drain(i_out, out_r, true);
    drain(i_err, err_r, false);
    if (too_much) break;
    if (i_in >= 0 && (fds[i_in].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t k = ::write(in_w.fd, input.data() + written, input.size() - written);
      if (k > 0) written += static_cast<std::size_t>(k);
      if ((k < 0 && errno != EAGAIN && errno != EINTR) || written >= input.size()) in_w.reset();
    }
  }
  in_w.reset();
  if (exited) {
    // reaped above
  } else if (timed_out || cancelled || too_much) {
    ::kill(-pid, SIGKILL);  // the whole group: a wrapper's children die with it
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  } else {
    // stdout closed; the shell may still be finishing. Wait, but never past the deadline.
    while (true) {
      const pid_t w = waitpid(pid, &status, WNOHANG);
      if (w == pid) break;
      if (w < 0 && errno != EINTR) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        timed_out = true;
        ::kill(-pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        break;
      }
      timespec ts{0, 5'000'000};
      nanosleep(&ts, nullptr);
    }
  }
  const double latency = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string what = "command '" + detail::one_line(cfg_.command, 80) + "'";
  if (cancelled) return fail(LlmErrorKind::cancelled, what + " cancelled");
  if (timed_out)
    return fail(LlmErrorKind::timeout, fmt::format("{} timed out after {:g} s; its process group was killed", what, cfg_.timeout_s));
  if (too_much)
    return fail(LlmErrorKind::process, what + " printed more than " + std::to_string(cfg_.max_output_bytes) +
                                           " bytes on stdout; its process group was killed");
  if (WIFSIGNALED(status))
    return fail(LlmErrorKind::process, what + " killed by signal " + std::to_string(WTERMSIG(status)) + ": " +
                                           detail::last_words(err));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fail(LlmErrorKind::process, what + " exited with status " + std::to_string(WEXITSTATUS(status)) + ": " +
                                           detail::last_words(err));
  if (out.find_first_not_of(" \t\r\n") == std::string::npos)
    return fail(LlmErrorKind::empty, what + " printed nothing");
  ChatReply rep;
  rep.text = std::move(out);
  // An API stops generating at max_tokens; a command is cut there too, by the same estimate of
  // characters per token it is billed by, so it is billed at most max_tokens (the cost cap counts on it).
  const auto max_tokens = static_cast<std::size_t>(std::max(0, r.max_tokens));
  const std::size_t max_chars = max_tokens * detail::kCharsPerToken;
  rep.finish_reason = "stop";
  if (rep.text.size() > max_chars) {
    rep.text.resize(detail::utf8_cut(rep.text, max_chars));
    rep.finish_reason = "length";  // (the parser drops the incomplete last schedule, as for an API)
  }
  std::size_t chars = 0;
  for (const auto& m : r.messages) chars += m.content.size();
  rep.prompt_tokens = detail::estimate_tokens(chars);
  rep.completion_tokens = std::min<unsigned long long>(detail::estimate_tokens(rep.text.size()), max_tokens);
  rep.usage_estimated = true;
  rep.latency_s = latency;
  return rep;
}

}  // namespace kevo::llm
