// A model's kernels timed and tuned: the kernel table (FLOPs, bytes, time with the default
// schedule on the runner, share of the total), then searches of the kernels that together make up
// a chosen share of the time, with the budget split by share, each winner verified, and the
// end-to-end gain by Amdahl's law: the kernels not searched keep their default time.
// https://en.wikipedia.org/wiki/Amdahl%27s_law
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kevo/model/import.hpp"
#include "kevo/runner/runner.hpp"
#include "kevo/search/verify_best.hpp"
#include "kevo/target/target.hpp"

namespace kevo::records {
class Database;
}

namespace kevo::model {

struct KernelRow {
  std::size_t kernel = 0;         // index into Model::kernels
  std::int64_t flops = 0;         // one instance (ir::analyze)
  std::int64_t bytes = 0;         // one instance's minimum HBM traffic
  bool ok = false;                // the default schedule lowered and measured
  std::string status;             // why not, when !ok
  double default_ns = 0;          // one instance with the space's default schedule
  double total_ns = 0;            // default_ns x count
  double share = 0;               // total_ns / Profile::total_ns (0 when !ok)
};

struct Profile {
  std::vector<KernelRow> rows;  // in Model::kernels order
  double total_ns = 0;          // sum of the rows' total_ns: the shares add up to 1
};

// Lowers and measures every kernel's default schedule (repaired when it does not fit).
Profile profile(const Model& m, const target::Target& t, const runner::Runner& r);

// The rows to search, largest time first, until their shares reach `share` (at least one).
std::vector<std::size_t> hot_rows(const Profile& p, double share);
// The budget of each hot row, proportional to its share of the hot rows' time, at least `min_each`.
std::vector<std::uint64_t> split_budget(const Profile& p, const std::vector<std::size_t>& hot, std::uint64_t budget,
                                        std::uint64_t min_each = 32);

struct TuneOptions {
  double share = 0.9;
  std::uint64_t budget = 2000;  // evaluations over all searched kernels
  std::uint64_t seed = 1;
  int threads = 0;
  // Records: searches record into it, start warm from it, and a kernel with a verified record on
  // this target and runner is not searched again (its recorded schedule is re-measured instead).
  records::Database* db = nullptr;
  std::string version;                                   // kevo version written in records
  std::function<void(const std::string&)> log;            // progress lines
  // Polled before each kernel and after every evaluation: true stops the tuning (a Ctrl-C). The
  // kernel being searched keeps the verified best of what its search measured so far; the kernels
  // after it keep their default schedules (TuneResult::interrupted).
  std::function<bool()> should_stop;
};

struct TunedKernel {
  std::size_t row = 0;             // index into Profile::rows
  std::uint64_t budget = 0;        // evaluations given
  std::uint64_t evaluations = 0;   // evaluations made (0 when taken from records)
  std::string source;              // "search" or "records"
  double before_ns = 0, after_ns = 0;  // one instance
  std::string schedule;            // the verified winner's schedule text
  search::Verification verification;
  [[nodiscard]] double speedup() const { return after_ns > 0 ? before_ns / after_ns : 1.0; }
};

struct TuneResult {
  std::vector<TunedKernel> tuned;
  double before_ns = 0, after_ns = 0;  // the whole model's kernels
  [[nodiscard]] double speedup() const { return after_ns > 0 ? before_ns / after_ns : 1.0; }
  // The time of row i after tuning (its default time when it was not tuned or not verified).
  std::vector<double> after_row_ns;    // per row, x count
  bool interrupted = false;            // should_stop ended the tuning before every hot kernel was done
  std::size_t hot = 0;                 // kernels the share selected (tuned.size() of them were reached)
};

// Searches the hot kernels (search::run_search, the default GA) and names only verified winners;
// a kernel whose search finds no verified schedule faster than its default keeps the default.
TuneResult tune(const Model& m, const Profile& p, const target::Target& t, const runner::Runner& r, const TuneOptions& opt);

}  // namespace kevo::model
