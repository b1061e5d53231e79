// Parts of report.html and the progress line, tested directly (lib/session/report.cpp and
// progress.cpp are compiled into this binary): axis ticks, track order, durations.
#include <catch2/catch.hpp>

#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "progress.hpp"
#include "report_checks.hpp"
#include "report.hpp"

namespace {
using kevo_test::round_label;
using kevo_test::svg_texts;
double label_ns(const std::string& s) {
  const double v = std::stod(s);
  if (s.size() > 3 && s.substr(s.size() - 3) == " ns") return v;
  if (s.substr(s.size() - 3) == " us") return v * 1e3;
  if (s.substr(s.size() - 3) == " ms") return v * 1e6;
  return v * 1e9;
}



}  // namespace

TEST_CASE("latency axis ticks are round, unpadded and inside the range", "[cli][report]") {
  for (double lo : {3.0, 870.0, 4.87e3, 5.2e6, 2.5e8, 8.4e6, 2.2e8, 9.99e5}) {
    for (double ratio : {1.05, 1.3, 2.0, 3.0, 9.0, 11.0, 40.0, 1e3, 1e6}) {
      const double hi = lo * ratio;
      const auto t = kevo::cli::latency_ticks(lo, hi);
      INFO(lo << " .. " << hi);
      CHECK(t.size() >= 2);
      CHECK(t.size() <= 9);
      double prev = 0;
      for (const auto& [v, label] : t) {
        INFO(label);
        CHECK(round_label(label));
        CHECK(v >= lo * (1 - 1e-9));
        CHECK(v <= hi * (1 + 1e-9));
        CHECK(v > prev);
        CHECK(label_ns(label) == Approx(v).epsilon(1e-9));
        prev = v;
      }
      // Evenly spaced ticks are spaced by 1, 2 or 5 x 10^k.
      if (t.size() >= 3 && std::abs((t[2].first - t[1].first) - (t[1].first - t[0].first)) < 1e-6 * t[1].first) {
        const double step = t[1].first - t[0].first;
        const double m = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
        CHECK((std::abs(m - 1) < 1e-6 || std::abs(m - 2) < 1e-6 || std::abs(m - 5) < 1e-6));
      }
    }
  }
  // The label of the issue: "008.425 ms" (a zero-padded, unround figure) never appears.
  for (const auto& [v, label] : kevo::cli::latency_ticks(7.9e6, 9.1e6)) CHECK(label.find("00") != 0);
}

TEST_CASE("report tracks come in natural order; wall time is readable", "[cli][report]") {
  CHECK(kevo::cli::natural_less("dma.q2", "dma.q10"));
  CHECK_FALSE(kevo::cli::natural_less("dma.q10", "dma.q2"));
  CHECK(kevo::cli::natural_less("q1", "q01x"));
  CHECK(kevo::cli::format_seconds(81.3) == "1 min 21 s");
  CHECK(kevo::cli::format_seconds(47.25) == "47.2 s");
  CHECK(kevo::cli::format_seconds(3725) == "1 h 02 min");
  kevo::cli::ReportData d;
  d.title = "t";
  for (const char* q : {"dma.q10", "dma.q2", "tensor", "dma.q1", "dma.q11"}) d.spans.push_back({q, 0, 1, "x", -1});
  const auto html = kevo::cli::render_report(d);
  const auto tracks = svg_texts(html, "track");
  CHECK(tracks == std::vector<std::string>{"dma.q1", "dma.q2", "dma.q10", "dma.q11", "tensor"});
  // The trace's own sort index wins over names.
  kevo::cli::ReportData e;
  for (auto [q, o] : std::vector<std::pair<std::string, long long>>{{"dma.q10", 12}, {"tensor", 0}, {"dma.q2", 4}})
    e.spans.push_back({q, 0, 1, "x", o});
  CHECK(svg_texts(kevo::cli::render_report(e), "track") == std::vector<std::string>{"tensor", "dma.q2", "dma.q10"});
}

