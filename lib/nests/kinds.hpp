// The nest kinds (schedule::NestKind), one line each. Each kind lives in its folder lib/nests/<kind>/:
//   plan.cpp   its planning, compiled into the schedule module (kevo_schedule): plan_<kind> and
//              sbuf_fix_<kind>, declared from this list in lib/schedule/planner.hpp;
//   lower.cpp  its lowering, compiled into the lower module (kevo_lower): Lowerer::lower_<kind>,
//              declared from this list in lib/lower/lowerer.hpp.
// lib/schedule/CMakeLists.txt and lib/lower/CMakeLists.txt pick up every lib/nests/*/plan.cpp and
// lower.cpp. The drivers (make_plan in lib/schedule/plan.cpp, Lowerer::walk_nests in
// lib/lower/lowerer.cpp) dispatch on NestKind through this list. Planning sources include no lower
// header. Adding a kind: its folder, its enumerator in schedule::NestKind (and its slot and plan
// structs in kevo/schedule/detail/), and its line here (docs/EXTENDING.md).
#pragma once

#define KEVO_NEST_KINDS(X) \
  X(contract)              \
  X(vector)                \
  X(flash)
