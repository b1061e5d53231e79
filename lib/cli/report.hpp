// The report page lives in the public session module (kevo/session/report.hpp) so that other
// front ends render the same report; the CLI uses it under its own namespace.
#pragma once
#include "kevo/session/report.hpp"

namespace kevo::cli {
using session::EngineBar;
using session::GanttSpan;
using session::HistoryPoint;
using session::latency_ticks;
using session::markup_escape;
using session::natural_less;
using session::render_report;
using session::ReportData;
using session::spans_from_trace;
using session::Table;
}  // namespace kevo::cli
