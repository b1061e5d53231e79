// Progress on screen (stderr): a live line on a terminal, a plain line every few seconds
// otherwise. A heartbeat thread redraws it while nothing else happens (a batch of slow
// measurements, the re-measurement and verification phases after the search), so a running
// kevo is never silent for more than a few seconds.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace kevo::cli {

class Progress {
 public:
  Progress(bool quiet, std::uint64_t budget, double time_limit, std::uint64_t already_done);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Starts the heartbeat (the search's line, redrawn every 0.25 s on a terminal, every 5 s otherwise).
  void start();
  // Called after every evaluation (on the engine's thread).
  void evaluation(bool ok);
  void new_best(double latency_ns, double fraction_of_peak);
  // The search is over: its line once more (newline on a terminal).
  void end_search();
  // A phase after the search ("re-measuring the 5 leaders, 3 more runs each"): printed as
  // `kevo: WHAT`, then while it lasts `kevo: WHAT ... N s` every 5 s (on a terminal one live
  // line, redrawn).
  void phase(const std::string& what);
  // Ends the current phase: `kevo: RESULT (N.N s)`.
  void phase_done(const std::string& result);
  // The last line: the search's line with the best figure that the summary names and the real
  // time of the whole command instead of the ETA. `best_ns` <= 0: no best.
  void finish(double best_ns, double fraction_of_peak, const std::string& label, double total_seconds);

 private:
  void draw_locked(bool force);
  void clear_live_locked();
  void ticker();
  std::string search_line_locked(double rate_seconds, const std::string& tail) const;
  bool quiet_, tty_;
  std::uint64_t budget_;
  double time_limit_;
  std::uint64_t done_ = 0, start_done_ = 0, ok_ = 0;
  double best_ns_ = 0, best_fop_ = 0;
  double search_seconds_ = -1;  // the search's own time, once over (for the final line's rate)
  std::chrono::steady_clock::time_point start_, last_, phase_start_;
  std::string phase_;  // empty: the search
  bool searching_ = true, drawn_ = false, live_ = false, stop_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
};

std::string format_ns(double ns);
// Seconds as a person reads them: "0.4 s", "47.2 s", "2 min 08 s", "1 h 03 min".
std::string format_seconds(double s);
// "[#########...............]  37%": `fraction` of `width` cells, clamped to [0, 1].
std::string progress_bar(double fraction, int width);

}  // namespace kevo::cli
