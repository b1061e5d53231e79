#include "progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace kevo::cli {

std::string format_ns(double ns) {
  if (!(ns > 0)) return "-";
  if (ns >= 1e9) return fmt::format("{:.3f} s", ns / 1e9);
  if (ns >= 1e6) return fmt::format("{:.3f} ms", ns / 1e6);
  if (ns >= 1e3) return fmt::format("{:.2f} us", ns / 1e3);
  return fmt::format("{:.0f} ns", ns);
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
      last_(start_) {}

void Progress::evaluation(bool ok, double, double) {
  ++done_;
  if (ok) ++ok_;
  draw(false);
}

void Progress::new_best(double latency_ns, double fraction_of_peak) {
  best_ns_ = latency_ns;
  best_fop_ = fraction_of_peak;
}

void Progress::draw(bool force) {
  if (quiet_) return;
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_).count();
  if (!force && since < (tty_ ? 0.2 : 5.0)) return;
  last_ = now;
  const double el = std::chrono::duration<double>(now - start_).count();
  const double rate = el > 0 ? static_cast<double>(done_ - start_done_) / el : 0.0;
  std::string eta = "-";
  double left = -1;
  if (budget_ > 0 && rate > 0) left = static_cast<double>(budget_ > done_ ? budget_ - done_ : 0) / rate;
  if (time_limit_ > 0) left = left < 0 ? std::max(0.0, time_limit_ - el) : std::min(left, std::max(0.0, time_limit_ - el));
  if (left >= 0) eta = fmt::format("{:.0f}s", left);
  const std::string line =
      fmt::format("{}/{} evals  {:.0f}/s  best {} ({:.1f}% of peak)  valid {:.0f}%  ETA {}", done_,
                  budget_ ? fmt::format("{}", budget_) : std::string("-"), rate, format_ns(best_ns_), 100 * best_fop_,
                  done_ > start_done_ ? 100.0 * static_cast<double>(ok_) / static_cast<double>(done_ - start_done_) : 0.0,
                  eta);
  if (tty_) {
    // A bar of the budget (evaluations, else wall time) ahead of the figures.
    double frac = -1;
    if (budget_ > 0) frac = static_cast<double>(done_) / static_cast<double>(budget_);
    else if (time_limit_ > 0) frac = el / time_limit_;
    fmt::print(stderr, "\r\033[K{}{}", frac >= 0 ? progress_bar(frac, 24) + " " : std::string(), line);
    drawn_ = true;
  } else {
    fmt::print(stderr, "{}\n", line);
  }
  std::fflush(stderr);
}

void Progress::finish() {
  draw(true);
  if (tty_ && drawn_ && !quiet_) fmt::print(stderr, "\n");
}

}  // namespace kevo::cli
