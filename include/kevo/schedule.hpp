// Module schedule: the schedule space of a kernel on a target (typed genes derived from the
// kernel's ops), its text form, and the plan that resolves a genome into nests and buffers.
#pragma once
#include "kevo/schedule/plan.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/schedule/structure.hpp"
