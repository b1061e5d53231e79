// report.html: one self-contained page (inline SVG and CSS, no network, no scripts needed)
// summarising a run: the winner against the default schedule, its verification, convergence,
// latency distribution, what the winner did (the simulated engines and timeline, or for a run on
// the host the host's timing and the tile program it ran), the operators, LLM usage, the
// schedule, the kernel and the NKI source.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kevo::session {

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
  long long order = -1;  // the trace's thread_sort_index of the track; -1: none (tracks then in natural order)
};
struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

struct ReportData {
  std::string title;
  std::vector<std::pair<std::string, std::string>> summary;  // label, value
  std::string warning;  // shown prominently under the title when not empty (unverified candidates skipped)
  std::string note;     // shown under the title too (e.g. "these figures are a model")
  std::vector<HistoryPoint> history;
  // The named best (after re-measurement): the convergence curve ends at it. <= 0: none.
  double final_ns = 0;
  std::string final_label;
  Table baseline;      // the winner against the default schedule; empty rows: not measured
  std::string baseline_text;
  Table verification;  // the verification of the winner and the candidates that failed
  std::string verification_text;
  Table operators;
  Table llm;
  std::string llm_text;  // shown when `llm` has no rows ("No LLM was used.")
  bool host = false;     // the runner measured this CPU: host timing and program instead of engines and timeline
  Table host_timing, program;
  std::vector<EngineBar> engines;
  std::vector<GanttSpan> spans;
  std::string trace_file;  // relative path of the Perfetto trace, linked when not empty
  std::string schedule, kernel_text, nki;
  std::string nki_heading = "NKI source of the best kernel";
  std::string nki_note;
};

std::string render_report(const ReportData& d);
// Reads a Chrome-trace JSON (as the simulator writes) into Gantt spans, at most `limit` spans
// (evenly thinned beyond that). Returns {} for a missing or malformed file.
std::vector<GanttSpan> spans_from_trace(const std::string& path, std::size_t limit = 4000);

// Ticks of a log-scale latency axis over [lo_ns, hi_ns]: round values (1, 2, 5 x 10^k, or finer
// steps of such a size when the range is narrow), 2 to 8 of them, each labelled in its own unit
// ("500 us", "1 ms", "1.5 ms"); never zero-padded.
std::vector<std::pair<double, std::string>> latency_ticks(double lo_ns, double hi_ns);
// "q2" < "q10": digit runs compared as numbers.
bool natural_less(std::string_view a, std::string_view b);

}  // namespace kevo::session
