// kevo::runner — measuring tile programs: the Runner interface, the NeuronCore simulator
// (SimRunner), real timing on this CPU (CpuRunner), external devices through a worker process
// (ProcessRunner), and the measurement cache that keeps identical candidates from being re-run.
#pragma once
#include "kevo/runner/runner.hpp"
#include "kevo/runner/sim.hpp"
#include "kevo/runner/cache.hpp"
#include "kevo/runner/cpu.hpp"
#include "kevo/runner/process.hpp"
#include "kevo/runner/calibrate.hpp"
