// summarize(): order statistics of latency samples, with a distribution-free confidence interval
// of the median (the binomial / order-statistic method), so that noisy runners can say how sure
// they are without assuming normal timings.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kevo/runner/runner.hpp"

namespace kevo::runner {
namespace {

// Linear interpolation between order statistics (the "type 7" quantile).
double quantile(const std::vector<double>& s, double q) {
  const double pos = q * static_cast<double>(s.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, s.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return s[lo] + (s[hi] - s[lo]) * frac;
}

// Largest 1-based rank l such that P(Bin(n, 1/2) <= l - 1) <= 0.025; the interval
// [x_(l), x_(n+1-l)] then covers the median with probability >= 95%. 0 when n is too small.
std::size_t lower_rank(std::size_t n) {
  if (n > 2000) {  // normal approximation; the exact sum below would lose all precision
    const double nn = static_cast<double>(n);
    const double l = std::floor(nn / 2.0 - 1.959963985 * std::sqrt(nn) / 2.0);
    return l < 1 ? 0 : static_cast<std::size_t>(l);
  }
  // cdf(j) = P(B <= j), computed in log space to stay finite for n up to 2000.
  const double ln2n = static_cast<double>(n) * std::log(2.0);
  const double lgn = std::lgamma(static_cast<double>(n) + 1.0);
  double cdf = 0;
  std::size_t best = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const double lp = lgn - std::lgamma(static_cast<double>(j) + 1.0) - std::lgamma(static_cast<double>(n - j) + 1.0) - ln2n;
    cdf += std::exp(lp);
    if (cdf <= 0.025) best = j + 1;  // l - 1 = j is still allowed
    else break;
  }
  return best;
}

}  // namespace

LatencySummary summarize(std::span<const double> samples_ns) {
  LatencySummary r;
  r.n = samples_ns.size();
  if (samples_ns.empty()) return r;
  std::vector<double> s(samples_ns.begin(), samples_ns.end());
  std::sort(s.begin(), s.end());
  const std::size_t n = s.size();
  r.min = s.front();
  r.median = (n % 2 == 1) ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  r.p10 = quantile(s, 0.10);
  r.p90 = quantile(s, 0.90);
  const std::size_t l = lower_rank(n);
  if (l == 0) {  // fewer than 6 samples: no order statistics give 95%; report the full range
    r.ci_low = s.front();
    r.ci_high = s.back();
  } else {
    r.ci_low = s[l - 1];
    r.ci_high = s[n - l];  // rank n + 1 - l, 1-based
  }
  return r;
}

}  // namespace kevo::runner
