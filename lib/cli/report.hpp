// report.html: one self-contained page (inline SVG and CSS, no network, no scripts needed)
// summarising a run: convergence, latency distribution, engine utilisation and the simulated
// timeline of the best kernel, its schedule and NKI source.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kevo::cli {

// Text escaped for XML and HTML (element content and quoted attributes): & < > " ' as entities,
// control characters other than tab and newline as spaces.
std::string markup_escape(std::string_view s);

struct HistoryPoint {
  std::size_t index = 0;
  double latency_ns = 0;  // <= 0 when not ok
  std::string status;
  std::string op;
};
struct EngineBar {
  std::string name;
  double utilisation = 0;
};
struct GanttSpan {
  std::string track;
  double start_us = 0, dur_us = 0;
  std::string label;
};

struct ReportData {
  std::string title;
  std::vector<std::pair<std::string, std::string>> summary;  // label, value
  std::vector<HistoryPoint> history;
  std::vector<EngineBar> engines;
  std::vector<GanttSpan> spans;
  std::string schedule, kernel_text, nki;
  std::string warning;  // shown prominently under the title when not empty (unverified candidates skipped)
};

std::string render_report(const ReportData& d);
// Reads a Chrome-trace JSON (as the simulator writes) into Gantt spans, at most `limit` spans
// (evenly thinned beyond that). Returns {} for a missing or malformed file.
std::vector<GanttSpan> spans_from_trace(const std::string& path, std::size_t limit = 4000);

}  // namespace kevo::cli
