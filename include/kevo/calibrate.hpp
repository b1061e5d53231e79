// kevo::calibrate — measurement files for `kevo calibrate`: TOML rows of measured kernels, lowered
// once for runner::fit_sim_params, and the fitted target file (docs/CALIBRATE.md).
#pragma once
#include "kevo/calibrate/measurements.hpp"
