// The nest kinds (schedule::NestKind), one line each. Each kind lives in its folder lib/nests/<kind>/:
//   derive.cpp  its genes and their defaults (derive_<kind>, defaults_<kind>; lib/schedule/deriver.hpp),
//   plan.cpp    its planning (plan_<kind>, sbuf_fix_<kind>; lib/schedule/planner.hpp),
//   text.cpp    its schedule-text statements (print_<kind>, Parser::<kind>_stmt; lib/schedule/text.hpp),
//               these three compiled into the schedule module (kevo_schedule), including no lower header;
//   lower.cpp   its lowering (Lowerer::lower_<kind>; lib/lower/lowerer.hpp), compiled into the lower
//               module (kevo_lower).
// lib/schedule/CMakeLists.txt and lib/lower/CMakeLists.txt pick up every lib/nests/*/ source. The
// drivers (make_plan in lib/schedule/plan.cpp, the defaults in ScheduleSpace::try_derive,
// Lowerer::walk_nests in lib/lower/lowerer.cpp) dispatch on NestKind through this list. Adding a
// kind: its folder, its line here, and the shared data and calls docs/EXTENDING.md lists.
#pragma once

#define KEVO_NEST_KINDS(X) \
  X(contract)              \
  X(vector)                \
  X(flash)                 \
  X(online)
