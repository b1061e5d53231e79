#include "progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kevo::cli {

namespace {
constexpr double kTtyPeriod = 0.25;   // s between redraws of the live line
constexpr double kPlainPeriod = 5.0;  // s between plain lines when stderr is not a terminal
}  // namespace

std::string format_ns(double ns) {
  if (!(ns > 0)) return "-";
  if (ns >= 1e9) return fmt::format("{:.3f} s", ns / 1e9);
  if (ns >= 1e6) return fmt::format("{:.3f} ms", ns / 1e6);
  if (ns >= 1e3) return fmt::format("{:.2f} us", ns / 1e3);
  return fmt::format("{:.0f} ns", ns);
}

std::string format_seconds(double s) {
  if (!(s >= 0) || !std::isfinite(s)) return "-";
  if (s < 60) return fmt::format("{:.1f} s", s);
  const auto whole = static_cast<long long>(std::llround(s));
  if (whole < 3600) return fmt::format("{} min {:02} s", whole / 60, whole % 60);
  return fmt::format("{} h {:02} min", whole / 3600, (whole % 3600) / 60);
}

std::string progress_bar(double fraction, int width) {
  const double f = std::clamp(fraction, 0.0, 1.0);
  const int full = static_cast<int>(f * width + 1e-9);
  return fmt::format("[{}{}] {:3.0f}%", std::string(static_cast<std::size_t>(full), '#'),
                     std::string(static_cast<std::size_t>(width - full), '.'), 100 * f);
}

Progress::Progress(bool quiet, std::uint64_t budget, double time_limit, std::uint64_t already_done)
    : quiet_(quiet),
      tty_(::isatty(STDERR_FILENO) == 1),
      budget_(budget),
      time_limit_(time_limit),
      done_(already_done),
      start_done_(already_done),
      start_(std::chrono::steady_clock::now()),
      last_(start_),
      phase_start_(start_) {}

Progress::~Progress() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Progress::start() {
  if (quiet_ || thread_.joinable()) return;
  thread_ = std::thread([this] { ticker(); });
}

void Progress::ticker() {
  std::unique_lock lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, std::chrono::duration<double>(tty_ ? kTtyPeriod : 0.5));
    if (!stop_) draw_locked(false);
  }
}

void Progress::evaluation(bool ok) {
  std::lock_guard lk(mu_);
  ++done_;
  if (ok) ++ok_;
}

void Progress::new_best(double latency_ns, double fraction_of_peak) {
  std::lock_guard lk(mu_);
  best_ns_ = latency_ns;
  best_fop_ = fraction_of_peak;
}

std::string Progress::search_line_locked(double el, const std::string& tail) const {
  const double rate = el > 0 ? static_cast<double>(done_ - start_done_) / el : 0.0;
  std::string line = fmt::format(
      "{}/{} evals  {:.1f}/s  best {} ({:.1f}% of peak)  valid {}  {}", done_,
      budget_ ? fmt::format("{}", budget_) : std::string("-"), rate, format_ns(best_ns_), 100 * best_fop_,
      done_ > start_done_
          ? fmt::format("{:.0f}%", 100.0 * static_cast<double>(ok_) / static_cast<double>(done_ - start_done_))
          : std::string("-"),
      tail);
  if (tty_) {
    // A bar of the budget (evaluations, else wall time) ahead of the figures.
    double frac = -1;
    if (budget_ > 0) frac = static_cast<double>(done_) / static_cast<double>(budget_);
    else if (time_limit_ > 0) frac = el / time_limit_;
    if (frac >= 0) line = progress_bar(frac, 24) + " " + line;
  }
  return line;
}

void Progress::clear_live_locked() {
  if (tty_ && live_) fmt::print(stderr, "\r\033[K");
  live_ = false;
}

void Progress::draw_locked(bool force) {
  if (quiet_) return;
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_).count();
  if (!force && since < (tty_ ? kTtyPeriod : kPlainPeriod) * 0.95) return;
  if (!force && !searching_ && phase_.empty()) return;  // between phases: nothing to redraw
  last_ = now;
  std::string line;
  if (searching_) {
    const double el = std::chrono::duration<double>(now - start_).count();
    std::string eta = "-";
    const double rate = el > 0 ? static_cast<double>(done_ - start_done_) / el : 0.0;
    double left = -1;
    if (budget_ > 0 && rate > 0) left = static_cast<double>(budget_ > done_ ? budget_ - done_ : 0) / rate;
    if (time_limit_ > 0) left = left < 0 ? std::max(0.0, time_limit_ - el) : std::min(left, std::max(0.0, time_limit_ - el));
    if (left >= 0) eta = format_seconds(left);
    line = search_line_locked(el, done_ == start_done_ ? fmt::format("{} so far, measuring", format_seconds(el))
                                                       : fmt::format("ETA {}", eta));
  } else {
    line = fmt::format("kevo: {} ... {:.0f} s", phase_, std::chrono::duration<double>(now - phase_start_).count());
  }
  if (tty_) {
    fmt::print(stderr, "\r\033[K{}", line);
    live_ = drawn_ = true;
  } else {
    fmt::print(stderr, "{}\n", line);
  }
  std::fflush(stderr);
}

void Progress::end_search() {
  std::lock_guard lk(mu_);
  if (quiet_) return;
  draw_locked(true);
  if (tty_ && live_) fmt::print(stderr, "\n");
  live_ = false;
  searching_ = false;
  search_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fflush(stderr);
}

void Progress::phase(const std::string& what) {
  std::lock_guard lk(mu_);
  searching_ = false;
  if (quiet_) return;
  phase_ = what;
  phase_start_ = std::chrono::steady_clock::now();
  if (tty_) {
    draw_locked(true);  // the live line: `kevo: WHAT ... N s`, replaced by the phase's result
  } else {
    fmt::print(stderr, "kevo: {}\n", what);
    std::fflush(stderr);
    last_ = phase_start_;
  }
}

void Progress::phase_done(const std::string& result) {
  std::lock_guard lk(mu_);
  if (quiet_) return;
  clear_live_locked();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - phase_start_).count();
  fmt::print(stderr, "kevo: {} ({})\n", result, format_seconds(took));
  std::fflush(stderr);
  phase_.clear();
}

void Progress::finish(double best_ns, double fraction_of_peak, const std::string& label, double total_seconds) {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    searching_ = false;
    phase_.clear();
    if (!quiet_) {
      clear_live_locked();
      best_ns_ = best_ns;
      best_fop_ = fraction_of_peak;
      std::string line = search_line_locked(search_seconds_ >= 0 ? search_seconds_ : total_seconds, fmt::format("done in {}", format_seconds(total_seconds)));
      if (!label.empty()) {
        // "best 1.234 ms (56.7% of peak)" gains the label inside its parentheses.
        const std::string from = fmt::format("({:.1f}% of peak)", 100 * fraction_of_peak);
        if (const auto at = line.find(from); at != std::string::npos)
          line.replace(at, from.size(), fmt::format("({:.1f}% of peak, {})", 100 * fraction_of_peak, label));
      }
      fmt::print(stderr, "{}\n", line);
      std::fflush(stderr);
    }
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace kevo::cli
