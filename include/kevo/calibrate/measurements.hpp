// Measurement files for `kevo calibrate` (docs/CALIBRATE.md): TOML rows of a kernel (workload
// name or .kir file), a schedule file, a target, a measured latency, optional busy fractions and
// provenance. This module reads them, lowers each row once into a TileProgram for
// runner::fit_sim_params, and writes the fitted target file (the base target's JSON plus a "sim"
// object). Every error is one located Diagnostic (FILE:LINE:COL: what).
#pragma once
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/core/error.hpp"
#include "kevo/core/expected.hpp"
#include "kevo/runner/calibrate.hpp"
#include "kevo/runner/sim.hpp"
#include "kevo/target/target.hpp"

namespace kevo::calibrate {

// One [[row]] of a measurement file. Paths are resolved already (see read_measurements).
struct Measurement {
  std::string name;
  std::string workload;   // "matmul:M=...", or empty when `kernel` is given
  std::string kernel;     // a .kir file, or empty
  std::string schedule;   // a schedule text file
  std::string target;     // a built-in name or a .json file
  double latency_ms = 0;  // > 0
  runner::BusyFractions busy;  // tensor, vector, scalar, gpsimd, dma; each in [0, 1]
  std::string source;     // where the number was published or measured
  std::string toolchain;  // "current", "2024", ...
  std::string note;       // optional free text (how the row was written as a schedule, caveats)
  bool fit = true;        // false: reported beside the fit, never fitted (`note` says why; required then)
  SourceLoc loc, workload_loc, schedule_loc, target_loc;  // the row, and its values (for later errors)
};

struct MeasurementFile {
  std::string path;
  std::vector<Measurement> rows;        // the rows kept by the toolchain filter
  std::size_t excluded = 0;             // rows left out by the toolchain filter
  std::vector<Measurement> unfitted;    // rows with fit = false (kept by the toolchain filter): not fitted
  std::vector<runner::FitParam> params; // [fit] params (with [fit] bounds); empty: the defaults
  std::optional<double> busy_weight;    // [fit] busy_weight
};

struct ReadOptions {
  std::string toolchain;                 // keep only rows of this toolchain ("" = every row)
  std::vector<std::string> params;       // replaces [fit] params (bounds from [fit] bounds, else defaults)
};

// Parses a measurement file. Relative kernel, schedule and target paths are resolved against the
// file's directory, then the current directory, then the file's parent directories (so
// repository-relative paths work from targets/measurements.toml); the first that exists wins.
// Every row is checked (keys, types, ranges); files are not opened yet.
Expected<MeasurementFile, Diagnostic> read_measurements(const std::filesystem::path& file, const ReadOptions& options = {});
Expected<MeasurementFile, Diagnostic> parse_measurements(std::string_view toml, const std::string& file,
                                                         const ReadOptions& options = {});

// The rows, lowered: every row's kernel, schedule and target loaded, the schedule parsed and
// lowered once. `base_target` ("" = the rows' own target) replaces the rows' targets for the
// figures; every row must name a target with the same `name` as the base (without a base: the
// same target). Errors are located at the row's offending value.
struct Prepared {
  target::Target target;
  std::string target_spec;  // the built-in name or the file the target came from
  std::vector<runner::CalibrationRow> rows;
  std::size_t other_target = 0;  // rows measured on another generation than the base target (skipped)
};
// Without `base_target`, every row must be for one target. With it, rows measured on another
// generation are skipped (counted in other_target); none left is an error.
Expected<Prepared, Diagnostic> prepare(const MeasurementFile& file, std::string_view base_target = "");

// The JSON text of a target: a built-in's text, or the file's.
Expected<std::string, Diagnostic> target_json_text(std::string_view name_or_path);

// The fitted target: `base_json` with its "sim" object set to
// {"params": {<base's sim params>, <fitted values>}, "fitted_by": ..., "source": ...}; every other
// field is kept as written.
std::string fitted_target_json(std::string_view base_json, const runner::FitResult& fit, const std::string& fitted_by,
                               const std::string& source);

// The simulator parameters a target file's "sim.params" set on top of default_sim_params(t);
// nullopt when the text has no "sim" object (what load_target + default_sim_params give for a
// file; for checking a written target's text). Throws kevo::Error for a malformed "sim" object.
std::optional<runner::SimParams> sim_params_of(std::string_view target_json, const target::Target& t);

}  // namespace kevo::calibrate
