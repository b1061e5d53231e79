// Tuning records: every measurement kevo makes, kept in an SQLite database (WAL mode, so several
// searches on one machine share it), queried to warm-start new searches and to check recorded
// figures again. A corrupt or foreign file is a clear error, never a silent reset. docs/RECORDS.md.
#pragma once
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/core/expected.hpp"
#include "kevo/core/genes.hpp"
#include "kevo/ir/kernel.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/target/target.hpp"

namespace kevo::records {

inline constexpr int kSchemaVersion = 1;

struct Record {
  std::int64_t id = 0;              // assigned by the database
  std::string kernel_name;
  std::uint64_t kernel_hash = 0;    // ir::kernel_hash: the same kernel at the same shape
  std::uint64_t structure_hash = 0; // the same kernel at any shape (structure_hash below)
  std::string kernel_text;          // canonical .kir
  std::string shape;                // "M=2048,N=2048,K=2048"
  std::string target;               // target name
  std::uint64_t target_hash = 0;    // Target::hash (its figures and simulator parameters)
  std::string runner;               // runner identity (RunnerTraits::identity)
  std::string schedule;             // schedule text
  std::string status = "ok";        // kevo::Status name
  std::string reason;               // why, when status is not ok
  std::vector<double> samples_ns;
  double latency_ns = 0;            // median of the samples (0 unless ok)
  double fraction_of_peak = 0;
  std::string bottleneck;
  std::string kevo_version;
  double time = 0;                  // seconds since the epoch, when measured
  bool verified = false;            // checked against the reference evaluator (a search's winner)
};

// The kernel with its dimension sizes left out: equal for the same algorithm at other shapes.
std::uint64_t structure_hash(const ir::Kernel& k);
// "M=2048,N=2048,K=2048" in declaration order.
std::string shape_of(const ir::Kernel& k);
// A record for kernel `k` on target `t` (ids, hashes, texts and time filled; the caller sets the
// runner, schedule and outcome).
Record make_record(const ir::Kernel& k, const target::Target& t);

struct Query {
  std::optional<std::uint64_t> kernel_hash, structure_hash;
  std::string kernel_name;        // "" = any
  std::string target;             // "" = any
  std::string runner;             // "" = any
  std::string not_target;         // "" = none: records of every other target
  bool ok_only = false;
  bool best_first = false;        // ok records by latency, then the rest by id
  // With best_first: records of this target definition (Target::hash) first, then the others (a
  // target file named "trn2" with other figures records under "trn2" too)
  std::optional<std::uint64_t> prefer_target_hash;
  // Leaves out every schedule recorded `incorrect` for the same kernel and target (a candidate the
  // reference or the device's output check rejected, whatever its ok evaluations measured).
  bool skip_rejected = false;
  // One record per schedule: its fastest (with best_first) or first.
  bool distinct_schedules = false;
  std::size_t limit = 0;          // 0 = all
};

struct KernelSummary {
  std::uint64_t kernel_hash = 0;
  std::string kernel_name, shape, target;
  std::string runner;             // with kernels(target, by_runner = true)
  std::size_t records = 0, ok = 0;
  double best_latency_ns = 0;     // 0 when none is ok
  std::string best_schedule;
};

struct GcOptions {
  std::size_t keep_best = 16;     // per (kernel, target, runner): ok records kept, fastest first
  bool drop_failed = true;        // drop records whose status is not ok
};

class Database {
 public:
  // Opens (creating it and its directory when `create`) a records database. Errors name the file
  // and say what is wrong: not an SQLite file, another program's SQLite file, a newer schema.
  static Expected<Database, std::string> open(const std::filesystem::path& path, bool create = true);
  // $KEVO_DB, else $XDG_DATA_HOME/kevo/records.db, else ~/.local/share/kevo/records.db.
  static std::filesystem::path default_path();

  Database(Database&&) noexcept;
  Database& operator=(Database&&) noexcept;
  ~Database();

  // Appends records in one transaction (all or none); waits up to 30 s for another writer.
  // Throws kevo::Error on an I/O failure.
  void add(std::span<const Record> rs);
  void add(const Record& r) { add(std::span<const Record>(&r, 1)); }

  [[nodiscard]] std::vector<Record> find(const Query& q) const;
  // The fastest ok record of a kernel on a target (from `runner` when given, of the definition
  // `target_hash` first when given), never a schedule recorded `incorrect` there.
  [[nodiscard]] std::optional<Record> best(std::uint64_t kernel_hash, std::string_view target, std::string_view runner = "",
                                           std::optional<std::uint64_t> target_hash = std::nullopt) const;
  // One row per recorded (kernel, target), or per (kernel, target, runner) with `by_runner`.
  [[nodiscard]] std::vector<KernelSummary> kernels(std::string_view target = "", bool by_runner = false) const;
  [[nodiscard]] std::size_t size() const;

  // JSON lines, one record per line (ids not kept). Import skips records already present (same
  // kernel, target, runner, schedule, time) and reports the first malformed line as
  // "<name>:<line>: ...", importing nothing then.
  std::size_t export_jsonl(std::ostream& out, const Query& q = {}) const;
  Expected<std::size_t, std::string> import_jsonl(std::istream& in, const std::string& name);

  // Removes records per `o`; returns how many went.
  std::size_t gc(const GcOptions& o);
  // PRAGMA integrity_check: "ok" or what SQLite found.
  [[nodiscard]] std::string integrity_check() const;
  [[nodiscard]] const std::filesystem::path& path() const noexcept;

 private:
  struct Impl;
  explicit Database(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Seeds for a new search of `space` (its kernel on its target) from the records, best first:
// the same kernel on the same target; then the same kernel structure at the nearest shapes (each
// schedule transferred into this space gene by gene, then repaired); then the same kernel on
// other targets (parsed here, then repaired). Distinct genomes that `space` accepts only.
struct WarmStart {
  std::vector<Genome> genomes;
  std::size_t same_kernel = 0, other_shapes = 0, other_targets = 0;
  [[nodiscard]] std::string summary() const;  // "12 from records: 8 same kernel, 4 other shapes (M=2048,...)"
  std::vector<std::string> shapes;            // the other shapes the transferred schedules came from
};
WarmStart warm_start(const Database& db, const schedule::ScheduleSpace& space, std::size_t max = 16);

}  // namespace kevo::records
