// kevo::session -- what a front end needs beyond the search itself, shared by the `kevo` command
// and any other front end: kernels, targets and runners by name (session/resolve.hpp), the
// results directory and its run description for resume (session/results.hpp), and the report
// page (session/report.hpp).
#pragma once
#include "kevo/session/report.hpp"
#include "kevo/session/resolve.hpp"
#include "kevo/session/results.hpp"
