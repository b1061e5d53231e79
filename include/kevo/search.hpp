// kevo::search — problems that connect kernels to the evolution engine (KernelProblem).
#pragma once
#include "kevo/search/kernel_problem.hpp"
#include "kevo/search/verify_best.hpp"
#include "kevo/search/session.hpp"
