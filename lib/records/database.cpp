// The tuning-records database (include/kevo/records/database.hpp) on SQLite's C API.
#include "kevo/records/database.hpp"

#include <fmt/format.h>
#include <sqlite3.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <istream>
#include <map>
#include <mutex>
#include <ostream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "kevo/core/error.hpp"
#include "kevo/core/hash.hpp"
#include "kevo/core/rng.hpp"
#include "kevo/core/status.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/target/target.hpp"
#include "kevo/runner/runner.hpp"
#include "kevo/records/transfer.hpp"

namespace kevo::records {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr int kApplicationId = 0x4B45564F;  // "KEVO"

constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE records(
  id INTEGER PRIMARY KEY,
  kernel_name TEXT NOT NULL,
  kernel_hash TEXT NOT NULL,
  structure_hash TEXT NOT NULL,
  kernel_text TEXT NOT NULL,
  shape TEXT NOT NULL,
  target TEXT NOT NULL,
  target_hash TEXT NOT NULL,
  runner TEXT NOT NULL,
  schedule TEXT NOT NULL,
  status TEXT NOT NULL,
  reason TEXT NOT NULL,
  samples_ns TEXT NOT NULL,
  latency_ns REAL NOT NULL,
  fraction_of_peak REAL NOT NULL,
  bottleneck TEXT NOT NULL,
  kevo_version TEXT NOT NULL,
  time REAL NOT NULL,
  verified INTEGER NOT NULL
);
CREATE INDEX records_kernel ON records(kernel_hash, target, status, latency_ns);
CREATE INDEX records_structure ON records(structure_hash, target);
CREATE UNIQUE INDEX records_unique ON records(kernel_hash, target_hash, runner, schedule, time);
)sql";

constexpr const char* kColumns =
    "id, kernel_name, kernel_hash, structure_hash, kernel_text, shape, target, target_hash, runner, schedule, status, "
    "reason, samples_ns, latency_ns, fraction_of_peak, bottleneck, kevo_version, time, verified";

std::string hex(std::uint64_t v) { return hex64(v); }
std::uint64_t unhex(const std::string& s) { return std::strtoull(s.c_str(), nullptr, 16); }

// A prepared statement, finalized on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, std::string_view sql, const fs::path& path) {
    if (sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &s_, nullptr) != SQLITE_OK)
      throw Error(fmt::format("records database {}: {}", path.string(), sqlite3_errmsg(db)));
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt& text(int i, std::string_view v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& real(int i, double v) {
    sqlite3_bind_double(s_, i, v);
    return *this;
  }
  Stmt& integer(int i, std::int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  int step() { return sqlite3_step(s_); }
  void reset() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  [[nodiscard]] std::string col_text(int i) const {
    const auto* p = sqlite3_column_text(s_, i);
    return p ? std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(sqlite3_column_bytes(s_, i))) : std::string();
  }
  [[nodiscard]] double col_real(int i) const { return sqlite3_column_double(s_, i); }
  [[nodiscard]] std::int64_t col_int(int i) const { return sqlite3_column_int64(s_, i); }

 private:
  sqlite3_stmt* s_ = nullptr;
};

json samples_json(const std::vector<double>& v) { return json(v); }

Record read_record(const Stmt& s) {
  Record r;
  r.id = s.col_int(0);
  r.kernel_name = s.col_text(1);
  r.kernel_hash = unhex(s.col_text(2));
  r.structure_hash = unhex(s.col_text(3));
  r.kernel_text = s.col_text(4);
  r.shape = s.col_text(5);
  r.target = s.col_text(6);
  r.target_hash = unhex(s.col_text(7));
  r.runner = s.col_text(8);
  r.schedule = s.col_text(9);
  r.status = s.col_text(10);
  r.reason = s.col_text(11);
  const auto j = json::parse(s.col_text(12), nullptr, false);
  if (j.is_array())
    for (const auto& x : j)
      if (x.is_number()) r.samples_ns.push_back(x.get<double>());
  r.latency_ns = s.col_real(13);
  r.fraction_of_peak = s.col_real(14);
  r.bottleneck = s.col_text(15);
  r.kevo_version = s.col_text(16);
  r.time = s.col_real(17);
  r.verified = s.col_int(18) != 0;
  return r;
}

json to_json(const Record& r) {
  return json{{"kernel_name", r.kernel_name},       {"kernel_hash", hex(r.kernel_hash)},
              {"structure_hash", hex(r.structure_hash)}, {"kernel_text", r.kernel_text},
              {"shape", r.shape},                   {"target", r.target},
              {"target_hash", hex(r.target_hash)},  {"runner", r.runner},
              {"schedule", r.schedule},             {"status", r.status},
              {"reason", r.reason},                 {"samples_ns", r.samples_ns},
              {"latency_ns", r.latency_ns},         {"fraction_of_peak", r.fraction_of_peak},
              {"bottleneck", r.bottleneck},         {"kevo_version", r.kevo_version},
              {"time", r.time},                     {"verified", r.verified}};
}

// A record from one JSON line; the error says which field is wrong.
Expected<Record, std::string> from_json(const json& j) {
  if (!j.is_object()) return unexpected(std::string("not a JSON object"));
  Record r;
  auto str = [&](const char* k, std::string& out, bool required = true) -> std::optional<std::string> {
    if (!j.contains(k)) {
      if (required) return fmt::format("missing \"{}\"", k);
      return std::nullopt;
    }
    if (!j[k].is_string()) return fmt::format("\"{}\" must be a string", k);
    out = j[k].get<std::string>();
    return std::nullopt;
  };
  auto num = [&](const char* k, double& out) -> std::optional<std::string> {
    if (!j.contains(k)) return fmt::format("missing \"{}\"", k);
    if (!j[k].is_number()) return fmt::format("\"{}\" must be a number", k);
    out = j[k].get<double>();
    return std::nullopt;
  };
  std::string kh, sh, th;
  for (auto e : {str("kernel_name", r.kernel_name), str("kernel_hash", kh), str("structure_hash", sh),
                 str("kernel_text", r.kernel_text), str("shape", r.shape), str("target", r.target), str("target_hash", th),
                 str("runner", r.runner), str("schedule", r.schedule), str("status", r.status),
                 str("reason", r.reason, false), str("bottleneck", r.bottleneck, false),
                 str("kevo_version", r.kevo_version, false), num("latency_ns", r.latency_ns), num("time", r.time)})
    if (e) return unexpected(*e);
  if (j.contains("fraction_of_peak")) {
    if (!j["fraction_of_peak"].is_number()) return unexpected(std::string("\"fraction_of_peak\" must be a number"));
    r.fraction_of_peak = j["fraction_of_peak"].get<double>();
  }
  if (j.contains("samples_ns")) {
    if (!j["samples_ns"].is_array()) return unexpected(std::string("\"samples_ns\" must be an array of numbers"));
    for (const auto& x : j["samples_ns"]) {
      if (!x.is_number()) return unexpected(std::string("\"samples_ns\" must be an array of numbers"));
      r.samples_ns.push_back(x.get<double>());
    }
  }
  if (j.contains("verified")) {
    if (!j["verified"].is_boolean()) return unexpected(std::string("\"verified\" must be true or false"));
    r.verified = j["verified"].get<bool>();
  }
  for (const std::string* h : {&kh, &sh, &th})
    if (h->empty() || h->size() > 16 || h->find_first_not_of("0123456789abcdef") != std::string::npos)
      return unexpected(fmt::format("hash '{}' is not 1-16 lower-case hex digits", *h));
  r.kernel_hash = unhex(kh);
  r.structure_hash = unhex(sh);
  r.target_hash = unhex(th);
  if (!status_from_string(r.status)) return unexpected(fmt::format("unknown status '{}'", r.status));
  if (!(r.latency_ns >= 0) || !std::isfinite(r.latency_ns)) return unexpected(std::string("\"latency_ns\" must be a finite number >= 0"));
  // an ok record's figure is a kernel time (as a worker's must be: docs/PROTOCOL.md)
  if (r.status == "ok" && !runner::is_kernel_time_ns(r.latency_ns))
    return unexpected(fmt::format("\"latency_ns\" = {} is not a kernel time (1 ns to 1 day)", r.latency_ns));
  if (!(r.fraction_of_peak >= 0 && r.fraction_of_peak <= 10)) return unexpected(std::string("\"fraction_of_peak\" must be in [0, 10]"));
  for (double x : r.samples_ns)
    if (!(x >= 0) || !std::isfinite(x)) return unexpected(std::string("\"samples_ns\" must hold finite numbers >= 0"));
  // the kernel must be the one the record names: its text parses and hashes to kernel_hash
  const auto k = ir::parse_kernel(r.kernel_text, "<record kernel_text>");
  if (!k) return unexpected(fmt::format("\"kernel_text\" does not parse: {}", k.error().message));
  if (ir::kernel_hash(*k) != r.kernel_hash)
    return unexpected(fmt::format("\"kernel_hash\" {} is not the hash of its kernel_text ({:x})", kh, ir::kernel_hash(*k)));
  return r;
}

}  // namespace

std::uint64_t structure_hash(const ir::Kernel& k) {
  // The canonical text with every "NAME=SIZE" dimension declaration reduced to "NAME".
  static const std::regex dim(R"(\b([A-Za-z_][A-Za-z0-9_]*)=[0-9]+)");
  return stable_hash(std::regex_replace(ir::print_kernel(k), dim, "$1"));
}

std::string shape_of(const ir::Kernel& k) {
  std::string s;
  for (const auto& d : k.dims) s += fmt::format("{}{}={}", s.empty() ? "" : ",", d.name, d.size);
  return s;
}

Record make_record(const ir::Kernel& k, const target::Target& t) {
  Record r;
  r.kernel_name = k.name;
  r.kernel_hash = ir::kernel_hash(k);
  r.structure_hash = structure_hash(k);
  r.kernel_text = ir::print_kernel(k);
  r.shape = shape_of(k);
  r.target = t.name;
  r.target_hash = t.hash();
  r.time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return r;
}

struct Database::Impl {
  sqlite3* db = nullptr;
  fs::path path;
  mutable std::mutex mu;  // one statement at a time on this connection
  ~Impl() {
    if (db) sqlite3_close_v2(db);
  }
  [[noreturn]] void fail(std::string_view what) const {
    throw Error(fmt::format("records database {}: {}: {}", path.string(), what, sqlite3_errmsg(db)));
  }
  void exec(const char* sql) const {
    char* err = nullptr;
    if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      std::string m = err ? err : "unknown error";
      sqlite3_free(err);
      throw Error(fmt::format("records database {}: {}", path.string(), m));
    }
  }
  // Records in the table (the caller holds `mu`).
  std::int64_t count() const {
    Stmt s(db, "SELECT count(*) FROM records", path);
    if (s.step() != SQLITE_ROW) fail("counting records");
    return s.col_int(0);
  }
  std::int64_t pragma(const char* name) const {
    Stmt s(db, fmt::format("PRAGMA {}", name), path);
    if (s.step() != SQLITE_ROW) fail(name);
    return s.col_int(0);
  }
};

Database::Database(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Database::Database(Database&&) noexcept = default;
Database& Database::operator=(Database&&) noexcept = default;
Database::~Database() = default;
const fs::path& Database::path() const noexcept { return impl_->path; }

fs::path Database::default_path() {
  if (const char* e = std::getenv("KEVO_DB"); e && *e) return e;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) return fs::path(x) / "kevo" / "records.db";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".local" / "share" / "kevo" / "records.db";
  return fs::path("kevo-records.db");
}

Expected<Database, std::string> Database::open(const fs::path& path, bool create) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  const std::string where = fmt::format("records database {}", path.string());
  std::error_code ec;
  const bool existed = fs::exists(path, ec);
  if (!existed) {
    if (!create) return unexpected(fmt::format("{}: no such file", where));
    if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  } else if (fs::is_directory(path, ec)) {
    return unexpected(fmt::format("{}: is a directory", where));
  }
  const int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_FULLMUTEX;
  // A file path, never one of SQLite's special names: ":memory:" (or "file:x?mode=memory")
  // opened a database in memory, and a search reported records that no file kept.
  const fs::path file = fs::absolute(path, ec);
  if (sqlite3_open_v2((ec ? path : file).c_str(), &impl->db, flags, nullptr) != SQLITE_OK)
    return unexpected(fmt::format("{}: cannot open: {}", where, impl->db ? sqlite3_errmsg(impl->db) : "out of memory"));
  sqlite3_busy_timeout(impl->db, 30000);
  sqlite3_extended_result_codes(impl->db, 1);
  // A database a search would record into must take writes: a read-only file was opened, the
  // search ran, and every record was lost with a warning mid-run and exit 0.
  if (create && sqlite3_db_readonly(impl->db, "main") == 1)
    return unexpected(fmt::format("{}: read-only; kevo records into it (choose a writable file with --db, or --no-db)", where));
  // Another process may be creating the same file or holding its lock while it switches the
  // journal mode (which SQLite does not wait for): retry such "locked" failures for up to 30 s.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) try {
    // A file that is not SQLite fails here ("file is not a database").
    std::int64_t app = 0, version = 0, tables = 0;
    {
      Stmt s(impl->db, "SELECT count(*) FROM sqlite_master", path);
      if (s.step() != SQLITE_ROW) impl->fail("reading the schema");
      tables = s.col_int(0);
    }
    app = impl->pragma("application_id");
    version = impl->pragma("user_version");
    if (app != kApplicationId && (tables > 0 || app != 0))
      return unexpected(fmt::format("{}: an SQLite file of another program (application_id {:#x}), not a kevo records "
                                    "database; choose another file with --db",
                                    where, app));
    if (version > kSchemaVersion)
      return unexpected(fmt::format("{}: schema version {} is newer than this kevo's ({}); use a newer kevo or another file",
                                    where, version, kSchemaVersion));
    impl->exec("PRAGMA journal_mode=WAL");
    impl->exec("PRAGMA synchronous=NORMAL");
    if (version < kSchemaVersion) {
      // Migrations, one version at a time, each in one transaction (version 0: a new file).
      impl->exec("BEGIN IMMEDIATE");
      try {
        const std::int64_t v = impl->pragma("user_version");  // another process may have migrated meanwhile
        if (v == 0) {
          impl->exec(kSchemaV1);
          impl->exec(fmt::format("PRAGMA application_id={}", kApplicationId).c_str());
          impl->exec("PRAGMA user_version=1");
        }
        impl->exec("COMMIT");
      } catch (...) {
        sqlite3_exec(impl->db, "ROLLBACK", nullptr, nullptr, nullptr);
        throw;
      }
    }
    break;
  } catch (const Error& e) {
    std::string m = e.what();
    if ((m.find("database is locked") != std::string::npos || m.find("busy") != std::string::npos) &&
        std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    if (m.find("file is not a database") != std::string::npos)
      return unexpected(fmt::format("{}: not an SQLite database (corrupt, or another kind of file)", where));
    return unexpected(m);
  }
  return Database(std::move(impl));
}

void Database::add(std::span<const Record> rs) {
  if (rs.empty()) return;
  std::lock_guard lock(impl_->mu);
  impl_->exec("BEGIN IMMEDIATE");
  try {
    Stmt s(impl_->db,
           "INSERT OR IGNORE INTO records(kernel_name, kernel_hash, structure_hash, kernel_text, shape, target, target_hash, "
           "runner, schedule, status, reason, samples_ns, latency_ns, fraction_of_peak, bottleneck, kevo_version, time, "
           "verified) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
           impl_->path);
    for (const Record& r : rs) {
      s.text(1, r.kernel_name).text(2, hex(r.kernel_hash)).text(3, hex(r.structure_hash)).text(4, r.kernel_text);
      s.text(5, r.shape).text(6, r.target).text(7, hex(r.target_hash)).text(8, r.runner).text(9, r.schedule);
      s.text(10, r.status).text(11, r.reason).text(12, samples_json(r.samples_ns).dump());
      s.real(13, r.latency_ns).real(14, r.fraction_of_peak).text(15, r.bottleneck).text(16, r.kevo_version);
      s.real(17, r.time).integer(18, r.verified ? 1 : 0);
      if (s.step() != SQLITE_DONE) impl_->fail("writing a record");
      s.reset();
    }
    impl_->exec("COMMIT");
  } catch (...) {
    sqlite3_exec(impl_->db, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

std::vector<Record> Database::find(const Query& q) const {
  // (SQLite takes a bare column of a min() aggregate from the row holding the minimum:
  // https://www.sqlite.org/lang_select.html#bare_columns_in_an_aggregate_query)
  std::string sql = q.distinct_schedules
                        ? fmt::format("SELECT {}, min(CASE WHEN status = 'ok' THEN latency_ns END) FROM records WHERE 1", kColumns)
                        : fmt::format("SELECT {} FROM records WHERE 1", kColumns);
  std::vector<std::string> args;
  if (q.kernel_hash) sql += " AND kernel_hash = ?", args.push_back(hex(*q.kernel_hash));
  if (q.structure_hash) sql += " AND structure_hash = ?", args.push_back(hex(*q.structure_hash));
  if (!q.kernel_name.empty()) sql += " AND kernel_name = ?", args.push_back(q.kernel_name);
  if (!q.target.empty()) sql += " AND target = ?", args.push_back(q.target);
  if (!q.runner.empty()) sql += " AND runner = ?", args.push_back(q.runner);
  if (!q.not_target.empty()) sql += " AND target != ?", args.push_back(q.not_target);
  // (an ok record's latency is a positive kernel time; one edited or damaged outside kevo is no
  // baseline: `kevo check` failed on a -5 ns "best" though valid records existed)
  if (q.ok_only) sql += " AND status = 'ok' AND latency_ns > 0 AND latency_ns < 1e300";
  if (q.skip_rejected)
    sql += " AND NOT EXISTS (SELECT 1 FROM records AS x WHERE x.kernel_hash = records.kernel_hash AND x.target = records.target "
           "AND x.schedule = records.schedule AND x.status = 'incorrect')";
  if (q.distinct_schedules) sql += " GROUP BY schedule";
  std::string order = "(status = 'ok') DESC, ";
  if (q.prefer_target_hash) order += "(target_hash = ?) DESC, ", args.push_back(hex(*q.prefer_target_hash));
  sql += q.best_first ? " ORDER BY " + order + "CASE WHEN status = 'ok' THEN latency_ns END, verified DESC, id" : " ORDER BY id";
  if (q.limit) sql += fmt::format(" LIMIT {}", q.limit);
  std::lock_guard lock(impl_->mu);
  Stmt s(impl_->db, sql, impl_->path);
  for (std::size_t i = 0; i < args.size(); ++i) s.text(static_cast<int>(i + 1), args[i]);
  std::vector<Record> out;
  int rc = 0;
  while ((rc = s.step()) == SQLITE_ROW) out.push_back(read_record(s));
  if (rc != SQLITE_DONE) impl_->fail("reading records");
  return out;
}

std::optional<Record> Database::best(std::uint64_t kernel_hash, std::string_view target, std::string_view runner,
                                     std::optional<std::uint64_t> target_hash) const {
  Query q;
  q.kernel_hash = kernel_hash;
  q.target = std::string(target);
  q.runner = std::string(runner);
  q.ok_only = true;
  q.best_first = true;
  q.skip_rejected = true;
  q.prefer_target_hash = target_hash;
  q.limit = 1;
  auto v = find(q);
  if (v.empty()) return std::nullopt;
  return v.front();
}

std::vector<KernelSummary> Database::kernels(std::string_view target, bool by_runner) const {
  std::string sql =
      "SELECT kernel_hash, kernel_name, shape, target, count(*), sum(status = 'ok'), "
      "min(CASE WHEN status = 'ok' THEN latency_ns END), runner FROM records";
  if (!target.empty()) sql += " WHERE target = ?";
  sql += by_runner ? " GROUP BY kernel_hash, target, runner ORDER BY kernel_name, shape, target, runner"
                   : " GROUP BY kernel_hash, target ORDER BY kernel_name, shape, target";
  std::vector<KernelSummary> out;
  {
    std::lock_guard lock(impl_->mu);
    Stmt s(impl_->db, sql, impl_->path);
    if (!target.empty()) s.text(1, target);
    int rc = 0;
    while ((rc = s.step()) == SQLITE_ROW) {
      KernelSummary k;
      k.kernel_hash = unhex(s.col_text(0));
      k.kernel_name = s.col_text(1);
      k.shape = s.col_text(2);
      k.target = s.col_text(3);
      k.records = static_cast<std::size_t>(s.col_int(4));
      k.ok = static_cast<std::size_t>(s.col_int(5));
      k.best_latency_ns = s.col_real(6);
      if (by_runner) k.runner = s.col_text(7);
      out.push_back(std::move(k));
    }
    if (rc != SQLITE_DONE) impl_->fail("reading kernels");
  }
  for (auto& k : out)
    if (k.ok)
      if (auto b = best(k.kernel_hash, k.target)) k.best_schedule = b->schedule;
  return out;
}

std::size_t Database::size() const {
  std::lock_guard lock(impl_->mu);
  return static_cast<std::size_t>(impl_->count());
}

std::size_t Database::export_jsonl(std::ostream& out, const Query& q) const {
  std::size_t n = 0;
  for (const Record& r : find(q)) {
    out << to_json(r).dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
    ++n;
  }
  if (!out) throw Error(fmt::format("records database {}: export: write failed", impl_->path.string()));
  return n;
}

namespace {

// Whether a record's schedule is one of its kernel's schedules on its target: the text parses in
// the full space (every structure kevo can lower; a search with `--space full` records those).
// A target this machine cannot load (a file recorded elsewhere) cannot be checked here; `kevo
// check` refuses such a record when it meets it. Spaces are derived once per kernel and target.
class ScheduleCheck {
 public:
  std::optional<std::string> operator()(const Record& r) {
    auto t = targets_.find(r.target);
    if (t == targets_.end()) {
      std::optional<target::Target> loaded;
      if (auto l = target::load_target(r.target)) loaded = std::move(*l);
      t = targets_.emplace(r.target, std::move(loaded)).first;
    }
    if (!t->second) return std::nullopt;
    const auto key = std::make_pair(r.kernel_hash, r.target);
    auto sp = spaces_.find(key);
    if (sp == spaces_.end()) {
      std::optional<schedule::ScheduleSpace> space;
      if (auto k = ir::parse_kernel(r.kernel_text, "<record kernel_text>"))
        if (auto d = schedule::ScheduleSpace::try_derive(*k, *t->second, schedule::DeriveOptions::full())) space = std::move(*d);
      sp = spaces_.emplace(key, std::move(space)).first;
    }
    if (!sp->second) return fmt::format("its kernel has no schedule space on target '{}'", printable(r.target));
    if (auto g = sp->second->parse(r.schedule, "schedule"); !g)
      return fmt::format("\"schedule\" is not a schedule of its kernel on target '{}': {}", printable(r.target), g.error().headline());
    return std::nullopt;
  }

 private:
  std::map<std::string, std::optional<target::Target>> targets_;
  std::map<std::pair<std::uint64_t, std::string>, std::optional<schedule::ScheduleSpace>> spaces_;
};

}  // namespace

Expected<std::size_t, std::string> Database::import_jsonl(std::istream& in, const std::string& name) {
  std::vector<Record> rs;
  std::string line;
  ScheduleCheck schedule_ok;
  for (int no = 1; std::getline(in, line); ++no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto j = json::parse(line, nullptr, false);
    if (j.is_discarded()) return unexpected(fmt::format("{}:{}: not valid JSON", name, no));
    auto r = from_json(j);
    if (!r) return unexpected(fmt::format("{}:{}: {}", name, no, r.error()));
    if (auto bad = schedule_ok(*r)) return unexpected(fmt::format("{}:{}: {}", name, no, *bad));
    rs.push_back(std::move(*r));
  }
  const std::size_t before = size();
  add(rs);
  return size() - before;
}

std::size_t Database::gc(const GcOptions& o) {
  std::lock_guard lock(impl_->mu);
  const std::int64_t before = impl_->count();
  impl_->exec("BEGIN IMMEDIATE");
  try {
    if (o.drop_failed) impl_->exec("DELETE FROM records WHERE status != 'ok'");
    Stmt s(impl_->db,
           "DELETE FROM records WHERE status = 'ok' AND id IN (SELECT id FROM (SELECT id, row_number() OVER "
           "(PARTITION BY kernel_hash, target, runner ORDER BY verified DESC, latency_ns, id) AS rk FROM records WHERE "
           "status = 'ok') WHERE rk > ?)",
           impl_->path);
    s.integer(1, static_cast<std::int64_t>(o.keep_best));
    if (s.step() != SQLITE_DONE) impl_->fail("gc");
    impl_->exec("COMMIT");
  } catch (...) {
    sqlite3_exec(impl_->db, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  impl_->exec("PRAGMA wal_checkpoint(TRUNCATE)");
  return static_cast<std::size_t>(before - impl_->count());
}

std::string Database::integrity_check() const {
  std::lock_guard lock(impl_->mu);
  Stmt s(impl_->db, "PRAGMA integrity_check", impl_->path);
  std::string out;
  while (s.step() == SQLITE_ROW) out += (out.empty() ? "" : "; ") + s.col_text(0);
  return out;
}

std::string WarmStart::summary() const {
  if (genomes.empty()) return "no schedules from records";
  std::string s = fmt::format("{} schedule(s) from records:", genomes.size());
  std::vector<std::string> parts;
  if (same_kernel) parts.push_back(fmt::format("{} of this kernel on this target", same_kernel));
  if (other_shapes) parts.push_back(fmt::format("{} transferred from {}", other_shapes, fmt::join(shapes, "; ")));
  if (other_targets) parts.push_back(fmt::format("{} of this kernel on other targets", other_targets));
  return s + " " + fmt::format("{}", fmt::join(parts, ", "));
}

WarmStart warm_start(const Database& db, const schedule::ScheduleSpace& space, std::size_t max) {
  WarmStart w;
  if (max == 0) return w;
  const ir::Kernel& k = space.kernel();
  const target::Target& t = space.target();
  const std::uint64_t kh = ir::kernel_hash(k);
  std::set<std::uint64_t> seen;
  Rng rng(0x57a27ULL);
  // A genome valid here (transferred or fitted with the least change), if new.
  auto take = [&](std::optional<Genome> g) {
    if (w.genomes.size() >= max || !g || !space.genes().contains(*g)) return false;
    if (!seen.insert(genome_hash(*g)).second) return false;
    w.genomes.push_back(std::move(*g));
    return true;
  };
  // 1. The same kernel on the same target, fastest first (any runner: a schedule is a schedule).
  {
    Query q;
    q.kernel_hash = kh;
    q.target = t.name;
    q.ok_only = true;
    q.best_first = true;
    q.skip_rejected = true;
    q.distinct_schedules = true;  // (28 of the 32 fastest records were once one schedule)
    q.prefer_target_hash = t.hash();
    q.limit = max * 4;
    for (const Record& r : db.find(q)) {
      auto g = space.parse(r.schedule);
      if (g && take(fit_schedule(space, std::move(*g), rng))) ++w.same_kernel;
    }
  }
  // 2. The same structure at other shapes, nearest shape first (log-distance of the dimensions).
  if (w.genomes.size() < max) {
    Query q;
    q.structure_hash = structure_hash(k);
    q.target = t.name;
    q.ok_only = true;
    q.best_first = true;
    std::map<std::uint64_t, std::vector<Record>> by_kernel;
    for (Record& r : db.find(q))
      if (r.kernel_hash != kh) by_kernel[r.kernel_hash].push_back(std::move(r));
    std::vector<std::pair<double, std::uint64_t>> order;
    for (const auto& [h, rs] : by_kernel) {
      auto other = ir::parse_kernel(rs.front().kernel_text);
      if (!other || other->dims.size() != k.dims.size()) continue;
      double d = 0;
      for (std::size_t i = 0; i < k.dims.size(); ++i)
        d += std::abs(std::log(static_cast<double>(std::max<std::int64_t>(1, other->dims[i].size))) -
                      std::log(static_cast<double>(std::max<std::int64_t>(1, k.dims[i].size))));
      order.emplace_back(d, h);
    }
    std::sort(order.begin(), order.end());
    for (const auto& [d, h] : order) {
      if (w.genomes.size() >= max) break;
      const auto& rs = by_kernel[h];
      auto other = ir::parse_kernel(rs.front().kernel_text);
      if (!other) continue;
      const auto from = schedule::ScheduleSpace::try_derive(*other, t);
      if (!from) continue;  // a recorded kernel kevo cannot schedule (any more) gives no warm start
      std::size_t n = 0;
      for (const Record& r : rs) {
        if (w.genomes.size() >= max) break;
        auto g = from->parse(r.schedule);
        if (!g) continue;
        if (take(transfer_schedule(*from, *g, space, rng))) ++w.other_shapes, ++n;
      }
      if (n) w.shapes.push_back(rs.front().shape);
    }
  }
  // 3. The same kernel on other targets (the schedule text parsed here, then repaired).
  if (w.genomes.size() < max) {
    Query q;
    q.kernel_hash = kh;
    q.not_target = t.name;
    q.ok_only = true;
    q.best_first = true;
    q.skip_rejected = true;
    q.distinct_schedules = true;
    q.limit = max * 4;
    for (const Record& r : db.find(q)) {
      auto g = space.parse(r.schedule);
      if (g && take(fit_schedule(space, std::move(*g), rng))) ++w.other_targets;
      if (w.genomes.size() >= max) break;
    }
  }
  return w;
}

}  // namespace kevo::records
