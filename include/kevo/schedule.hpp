// Module schedule: the schedule space of a kernel on a target (typed genes derived from the
// kernel's ops) and its text form. The plan that resolves a genome into nests and buffers, and
// the derived structure it reads, are planning internals in kevo/schedule/detail/ (not part of
// this face, and not a stable API).
#pragma once
#include "kevo/schedule/space.hpp"
