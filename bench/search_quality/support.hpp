// Small helpers shared by kevo's benchmark programs (search_quality, cpu_vs_blas, scaling):
// argument parsing with clear errors, robust statistics, machine facts and peak RSS. Private to
// bench/; nothing here is part of the library's API.
#pragma once
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kevo::bench {

// "--name value" and "--flag" arguments; unknown names are errors so a typo never silently
// runs the full suite.
class Args {
 public:
  Args(int argc, char** argv, std::vector<std::string> flags, std::vector<std::string> valued) {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      std::string v;
      bool has_v = false;
      if (auto eq = a.find('='); eq != std::string::npos) {
        v = a.substr(eq + 1);
        a = a.substr(0, eq);
        has_v = true;
      }
      if (std::find(flags.begin(), flags.end(), a) != flags.end()) {
        if (has_v) throw std::runtime_error("option " + a + " takes no value");
        values_[a].assign(1, '1');  // (operator=("1") trips GCC 12's -Wrestrict false positive)
      } else if (std::find(valued.begin(), valued.end(), a) != valued.end()) {
        if (!has_v) {
          if (i + 1 >= argc) throw std::runtime_error("option " + a + " needs a value");
          v = argv[++i];
        }
        values_[a] = v;
      } else {
        std::string allowed;
        for (const auto& f : flags) allowed += " " + f;
        for (const auto& f : valued) allowed += " " + f + " V";
        throw std::runtime_error("unknown argument '" + a + "'; allowed:" + allowed);
      }
    }
  }
  [[nodiscard]] bool flag(const std::string& n) const { return values_.count(n) != 0; }
  [[nodiscard]] std::optional<std::string> get(const std::string& n) const {
    auto it = values_.find(n);
    if (it == values_.end()) return std::nullopt;
    return it->second;
  }
  [[nodiscard]] std::string str(const std::string& n, std::string def) const { return get(n).value_or(std::move(def)); }
  [[nodiscard]] long long integer(const std::string& n, long long def) const {
    auto v = get(n);
    if (!v) return def;
    char* end = nullptr;
    long long x = std::strtoll(v->c_str(), &end, 10);
    if (v->empty() || *end != '\0' || x < 0) throw std::runtime_error("option " + n + ": '" + *v + "' is not a non-negative integer");
    return x;
  }
  [[nodiscard]] double real(const std::string& n, double def) const {
    auto v = get(n);
    if (!v) return def;
    char* end = nullptr;
    double x = std::strtod(v->c_str(), &end);
    if (v->empty() || *end != '\0' || !(x >= 0)) throw std::runtime_error("option " + n + ": '" + *v + "' is not a non-negative number");
    return x;
  }

 private:
  std::map<std::string, std::string> values_;
};

inline std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    auto p = s.find(sep, start);
    if (p == std::string_view::npos) p = s.size();
    if (p > start) out.emplace_back(s.substr(start, p - start));
    start = p + 1;
  }
  return out;
}

// Linear-interpolated quantile of a copy (q in [0, 1]); NaN for an empty input.
inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}
inline double median(std::vector<double> v) { return quantile(std::move(v), 0.5); }

// Peak resident set size of this process in bytes (Linux reports ru_maxrss in KiB).
inline double peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) * 1024.0;
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Median wall time in seconds of `fn` over repeats, after one warm-up call, stopping after
// `max_reps` calls or once `budget_s` is spent (at least `min_reps`).
template <typename F>
double time_median(F&& fn, int min_reps, int max_reps, double budget_s) {
  fn();
  std::vector<double> t;
  const auto start = std::chrono::steady_clock::now();
  while (static_cast<int>(t.size()) < max_reps) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(seconds_since(t0));
    if (static_cast<int>(t.size()) >= min_reps && seconds_since(start) > budget_s) break;
  }
  return median(t);
}

}  // namespace kevo::bench
