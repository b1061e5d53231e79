// Progress on screen: a live line on a terminal, a plain line every few seconds otherwise.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace kevo::cli {

class Progress {
 public:
  Progress(bool quiet, std::uint64_t budget, double time_limit, std::uint64_t already_done);
  // Called after every evaluation (on the engine's thread).
  void evaluation(bool ok, double latency_ns, double fraction_of_peak);
  void new_best(double latency_ns, double fraction_of_peak);
  // Final newline on a terminal.
  void finish();

 private:
  void draw(bool force);
  bool quiet_, tty_;
  std::uint64_t budget_;
  double time_limit_;
  std::uint64_t done_ = 0, start_done_ = 0, ok_ = 0;
  double best_ns_ = 0, best_fop_ = 0;
  std::chrono::steady_clock::time_point start_, last_;
  bool drawn_ = false;
};

std::string format_ns(double ns);
// "[#########...............]  37%": `fraction` of `width` cells, clamped to [0, 1].
std::string progress_bar(double fraction, int width);

}  // namespace kevo::cli
