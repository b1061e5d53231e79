// kevo db (the tuning-records database) and kevo check (re-measure recorded winners; exit 5 on a
// regression, JUnit XML for CI). docs/RECORDS.md.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "toml_file.hpp"

#include "commands.hpp"
#include "kevo/core/io.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/records.hpp"
#include "kevo/runner.hpp"
#include "kevo/search.hpp"
#include "kevo/target/target.hpp"
#include "report.hpp"
#include "resolve.hpp"

namespace kevo::cli {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr int kExitRegression = 5;  // kevo check: a recorded schedule is slower now, or failed (docs/CLI.md)

records::Database open_db(const Options& o, bool create) {
  const fs::path p = o.db_file.empty() ? records::Database::default_path() : fs::path(o.db_file);
  auto d = records::Database::open(p, create);
  if (!d) throw UsageError{fmt::format("--db: {}", d.error())};
  return std::move(*d);
}

// A kernel named on the command line: a workload NAME:ARGS or a .kir file.
// `file_only`: a .kir file's path, never a workload (a check list's `kernel`).
ir::Kernel kernel_arg(const std::string& arg, const std::string& what, bool file_only = false) {
  if (arg.empty()) throw UsageError{fmt::format("kevo db {} needs a KERNEL (a workload NAME:ARGS or a .kir file)", what)};
  std::error_code ec;
  if (fs::is_directory(arg, ec)) throw UsageError{fmt::format("cannot read {}: is a directory, not a .kir file", arg)};
  if (file_only || fs::is_regular_file(arg, ec) || arg.ends_with(".kir")) {
    Options k;
    k.kernel_file = arg;
    std::string src;
    return resolve_kernel(k, src);
  }
  auto k = ir::workload(arg);
  if (!k) throw UsageError{fmt::format("{}: {}", arg, k.error())};
  return std::move(*k);
}

std::string us(double ns) { return ns > 0 ? fmt::format("{:.2f} us", ns / 1e3) : std::string("-"); }

json record_json(const records::Record& r) {
  return {{"kernel", r.kernel_name}, {"shape", r.shape},       {"target", r.target},         {"runner", r.runner},
          {"schedule", r.schedule},  {"status", r.status},     {"reason", r.reason},         {"latency_ns", r.latency_ns},
          {"samples_ns", r.samples_ns}, {"fraction_of_peak", r.fraction_of_peak}, {"verified", r.verified},
          {"time", r.time},          {"kevo_version", r.kevo_version}};
}

// Relative spread of a sample set: (p90 - p10) / median (0 for fewer than 2 samples).
double spread(const std::vector<double>& s) {
  if (s.size() < 2) return 0;
  const auto sum = runner::summarize(s);
  return sum.median > 0 ? (sum.p90 - sum.p10) / sum.median : 0;
}

}  // namespace

int cmd_db(const Options& o) {
  const std::string& a = o.db_action;
  if (a == "list") {
    auto db = open_db(o, false);
    const auto ks = db.kernels(o.target);
    if (o.json) {
      json j = json::array();
      for (const auto& k : ks)
        j.push_back({{"kernel", k.kernel_name}, {"shape", k.shape}, {"target", k.target}, {"records", k.records}, {"ok", k.ok},
                     {"best_latency_ns", k.best_latency_ns}, {"best_schedule", k.best_schedule}});
      fmt::print("{}\n", j.dump(2, ' ', false, json::error_handler_t::replace));
      return 0;
    }
    fmt::print("{} records in {}\n", db.size(), db.path().string());
    fmt::print("{:<12} {:<28} {:<6} {:>8} {:>6} {:>14}\n", "kernel", "shape", "target", "records", "ok", "best");
    for (const auto& k : ks)
      fmt::print("{:<12} {:<28} {:<6} {:>8} {:>6} {:>14}\n", printable(k.kernel_name), printable(k.shape), printable(k.target), k.records, k.ok, us(k.best_latency_ns));
    return 0;
  }
  if (a == "show" || a == "best") {
    auto db = open_db(o, false);
    const auto k = kernel_arg(o.db_arg, a);
    records::Query q;
    q.kernel_hash = ir::kernel_hash(k);
    q.target = o.target;
    // a target that loads: its records by name, this definition's first (a target file named
    // "trn2" with other figures records under "trn2" too)
    std::optional<target::Target> tl;
    if (!o.target.empty())
      if (auto t = target::load_target(o.target)) tl = std::move(*t), q.target = tl->name, q.prefer_target_hash = tl->hash();
    q.best_first = true;
    q.ok_only = a == "best";
    q.skip_rejected = a == "best";  // never a schedule the reference check rejected
    q.limit = a == "best" ? 1 : 20;
    const auto rs = db.find(q);
    if (rs.empty()) {
      fmt::print(stderr, "kevo: no records of {} ({}){}\n", k.name, records::shape_of(k),
                 o.target.empty() ? std::string() : " on " + o.target);
      return 1;
    }
    if (o.json) {
      json j = json::array();
      for (const auto& r : rs) j.push_back(record_json(r));
      fmt::print("{}\n", (a == "best" ? j[0] : j).dump(2, ' ', false, json::error_handler_t::replace));
      return 0;
    }
    if (a == "best") {
      const auto& r = rs.front();
      fmt::print("{} ({}) on {}: {}, {:.1f}% of peak, runner {}{}{}\n{}\n", printable(r.kernel_name), printable(r.shape), printable(r.target),
                 us(r.latency_ns), 100 * r.fraction_of_peak, printable(r.runner), r.verified ? ", verified" : "",
                 tl && r.target_hash != tl->hash() ? fmt::format(" (recorded on another definition of {})", tl->name) : std::string(),
                 printable_lines(r.schedule));
      return 0;
    }
    for (const auto& r : rs)
      fmt::print("{:<6} {:>12} {:<8} {}{}\n  {}\n", printable(r.target), us(r.latency_ns), printable(r.status), r.verified ? "verified " : "",
                 printable(r.status == "ok" ? r.runner : r.reason), printable_lines(r.schedule));
    return 0;
  }
  if (a == "export") {
    auto db = open_db(o, false);
    std::size_t n = 0;
    if (o.db_arg.empty() || o.db_arg == "-") {
      n = db.export_jsonl(std::cout);
      std::cout.flush();
    } else {
      check_not_input(o.db_arg, "kevo db export", {db.path()});  // (export over the database itself lost it)
      std::ostringstream ss;
      n = db.export_jsonl(ss);
      write_file_atomic(o.db_arg, ss.str());
    }
    fmt::print(stderr, "kevo: exported {} records\n", n);
    return 0;
  }
  if (a == "import") {
    if (o.db_arg.empty()) throw UsageError{"kevo db import needs a JSON lines FILE"};
    if (std::error_code ec; fs::is_directory(o.db_arg, ec)) throw UsageError{fmt::format("{}: a directory, not a JSON lines file", o.db_arg)};
    std::ifstream in(o.db_arg);
    if (!in) throw UsageError{fmt::format("{}: cannot read", o.db_arg)};
    auto db = open_db(o, true);
    auto n = db.import_jsonl(in, o.db_arg);
    if (!n) throw UsageError{n.error()};
    fmt::print("imported {} new records into {}\n", *n, db.path().string());
    return 0;
  }
  // gc
  auto db = open_db(o, false);
  records::GcOptions g;
  g.keep_best = o.keep_best;
  const std::size_t n = db.gc(g);
  fmt::print("removed {} records; {} left in {}\n", n, db.size(), db.path().string());
  return 0;
}

int cmd_check(const Options& o) {
  auto db = open_db(o, false);
  // checked before the measurements: the report never replaces the list or the database
  if (!o.junit_file.empty()) {
    check_writable_file(o.junit_file);
    check_not_input(o.junit_file, "--junit", {o.check_file, db.path()});
  }
  struct Item {
    std::string label;
    std::optional<ir::Kernel> kernel;
    target::Target target;  // loaded once (a list's `target = "mytrn.json"` too); records are kept under its name
    std::uint64_t kernel_hash = 0;
  };
  Options ro = o;
  if (ro.runner.empty()) ro.runner = "sim";
  // The check's runner on a target: records are compared only with records of the same runner (a
  // worker's 5 us against the simulator's 17.7 us failed as a regression).
  std::map<std::pair<std::string, std::uint64_t>, std::string> identity_on;  // (target, its hash) -> runner identity
  const auto identity = [&](const target::Target& t) -> const std::string& {
    const std::pair<std::string, std::uint64_t> key{t.name, t.hash()};
    auto it = identity_on.find(key);
    if (it == identity_on.end()) it = identity_on.emplace(key, resolve_runner(ro, t).traits().identity).first;
    return it->second;
  };
  std::vector<Item> items;
  if (!o.check_file.empty()) {
    const toml::table t = read_toml_file(o.check_file);
    for (auto&& [k, v] : t)
      if (k.str() != "kernel")
        throw UsageError{fmt::format("{}:{}:{}: unknown key '{}' (a check list holds [[kernel]] tables only)", o.check_file,
                                     k.source().begin.line, k.source().begin.column, k.str())};
    const toml::array* ks = t["kernel"].as_array();
    if (const toml::node* kn = t.get("kernel"); kn != nullptr && ks == nullptr)
      throw UsageError{fmt::format("{}:{}:{}: 'kernel' must be an array of tables ([[kernel]])", o.check_file, kn->source().begin.line,
                                   kn->source().begin.column)};
    if (!ks || ks->empty()) throw UsageError{fmt::format("{}: no [[kernel]] tables", o.check_file)};
    // FILE:LINE:COL of a node of the list: each error names the value at fault
    const auto where = [&](const toml::node& n) {
      return fmt::format("{}:{}:{}", o.check_file, n.source().begin.line, n.source().begin.column);
    };
    for (const auto& n : *ks) {
      const toml::table* kt = n.as_table();
      const auto at = where(n);
      if (!kt) throw UsageError{fmt::format("{}: each 'kernel' must be a table ([[kernel]])", at)};
      for (auto&& [k, v] : *kt)
        if (k.str() != "workload" && k.str() != "kernel" && k.str() != "target")
          throw UsageError{fmt::format("{}:{}:{}: unknown key '{}' (allowed: workload, kernel, target)", o.check_file,
                                       k.source().begin.line, k.source().begin.column, k.str())};
      Item it;
      std::string target_spec;
      for (const char* key : {"workload", "kernel", "target"})
        if (const toml::node* v = kt->get(key); v != nullptr && !v->is_string())
          throw UsageError{fmt::format("{}: '{}' must be a string", where(*v), key)};
      const toml::node* wn = kt->get("workload");
      const toml::node* kn = kt->get("kernel");
      if ((wn != nullptr) == (kn != nullptr)) throw UsageError{fmt::format("{}: give either 'workload' or 'kernel'", at)};
      try {
        it.kernel = wn ? kernel_arg(*wn->value<std::string>(), "check")
                       : kernel_arg((fs::path(o.check_file).parent_path() / *kn->value<std::string>()).string(), "check", true);
      } catch (const UsageError& e) {
        throw UsageError{fmt::format("{}: {}", where(wn ? *wn : *kn), e.message)};
      }
      const toml::node* tn = kt->get("target");
      target_spec = tn ? *tn->value<std::string>() : std::string(o.target.empty() ? "trn2" : o.target);
      // a target that does not load is the list's error (exit 2), not a failed check
      auto tl = target::load_target(target_spec);
      if (!tl) throw UsageError{fmt::format("{}: target '{}': {}", tn ? where(*tn) : at, target_spec, tl.error().headline())};
      it.target = std::move(*tl);
      it.kernel_hash = ir::kernel_hash(*it.kernel);
      it.label = fmt::format("{} {}", it.kernel->name, records::shape_of(*it.kernel));
      items.push_back(std::move(it));
    }
  } else {
    // every recorded kernel this runner has an ok record of (records of other runners are not
    // this runner's baseline)
    std::set<std::pair<std::uint64_t, std::string>> seen;
    for (const auto& k : db.kernels(o.target, true)) {
      if (!k.ok || seen.count({k.kernel_hash, k.target})) continue;
      auto t = target::load_target(k.target);
      if (!t || identity(*t) != k.runner) continue;
      seen.insert({k.kernel_hash, k.target});
      items.push_back({fmt::format("{} {}", k.kernel_name, k.shape), std::nullopt, std::move(*t), k.kernel_hash});
    }
    if (items.empty())
      throw UsageError{fmt::format("{}: no recorded kernel to check with runner {}", db.path().string(), ro.runner)};
  }

  struct Outcome {
    std::string label, target, verdict, message, schedule;
    double recorded = 0, now = 0, allowed = 0, seconds = 0;
  };
  std::vector<Outcome> outs;
  int failures = 0;
  catch_stop_signals();
  for (auto& it : items) {
    if (stop_signal() != 0) break;
    const target::Target* t = &it.target;
    Outcome out{it.label, t->name, "fail", "", "", 0, 0, 0, 0};
    const auto t0 = std::chrono::steady_clock::now();
    const std::string& runner_id = identity(*t);
    const auto rec = db.best(it.kernel_hash, t->name, runner_id, t->hash());
    if (!rec) {
      const auto other = db.best(it.kernel_hash, t->name);
      out.message = other ? fmt::format("no ok record of this kernel on this target from runner {} (it has records from {})", runner_id,
                                        other->runner)
                          : std::string("no ok record of this kernel on this target");
    } else {
      out.recorded = rec->latency_ns;
      out.schedule = rec->schedule;
      auto k = it.kernel ? std::move(*it.kernel) : ir::parse_kernel(rec->kernel_text);
      // The searched space, or the full one where the schedule names a structure only that offers
      // (a search with --space full records such schedules, and they are no regression). The
      // searched space first: its canonical text is what the search measured.
      // (The full space is derived only when the searched one refuses the text.)
      std::optional<schedule::ScheduleSpace> space;
      if (k) {
        if (auto s = schedule::ScheduleSpace::try_derive(*k, *t)) space = std::move(*s);
        if (space && !space->parse(rec->schedule))
          if (auto s = schedule::ScheduleSpace::try_derive(*k, *t, schedule::DeriveOptions::full())) space = std::move(*s);
      }
      if (!k || !space) {
        out.message = !k ? "the recorded kernel text does not parse" : "the recorded kernel has no schedule space";
      } else {
        search::KernelProblem p(std::move(*space), resolve_runner(ro, *t));
        auto g = p.schedule_space().parse(rec->schedule);
        if (!g) {
          out.message = "the recorded schedule does not parse: " + g.error().headline();
        } else {
          const auto rep = p.measure_one(*g);
          if (rep.invalid) {
            out.message = "the recorded schedule is invalid now: " + rep.invalid->str();
          } else if (!rep.measurement || rep.measurement->status != Status::ok) {
            out.message = rep.measurement ? fmt::format("measurement {}: {}", to_string(rep.measurement->status), rep.measurement->message)
                                          : "no measurement";
          } else {
            out.now = rep.measurement->latency_ns();
            const double noise = std::max(spread(rec->samples_ns), spread(rep.measurement->samples_ns));
            out.allowed = o.check_tolerance + noise;
            const double ratio = out.now / out.recorded;
            out.verdict = ratio <= 1 + out.allowed ? "pass" : "fail";
            out.message = fmt::format("{} now vs {} recorded ({:+.1f}%, allowed +{:.1f}% = tolerance {:.1f}% + noise {:.1f}%){}", us(out.now),
                                      us(out.recorded), 100 * (ratio - 1), 100 * out.allowed, 100 * o.check_tolerance, 100 * noise,
                                      t->hash() != rec->target_hash ? "; the target's figures changed since it was recorded" : "");
          }
        }
      }
    }
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (out.verdict != "pass") ++failures;
    if (!o.json) fmt::print("{:<4} {:<40} {:<6} {}\n", out.verdict == "pass" ? "ok" : "FAIL", printable(out.label), printable(out.target),
                          printable(out.message));
    outs.push_back(std::move(out));
  }

  if (!o.junit_file.empty()) {
    double total = 0;
    for (const auto& x : outs) total += x.seconds;
    std::string xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    xml += fmt::format("<testsuites name=\"kevo check\" tests=\"{}\" failures=\"{}\" errors=\"0\" time=\"{:.3f}\">\n", outs.size(),
                       failures, total);
    xml += fmt::format("  <testsuite name=\"kevo check\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\" time=\"{:.3f}\">\n",
                       outs.size(), failures, total);
    for (const auto& x : outs) {
      xml += fmt::format("    <testcase classname=\"kevo.check.{}\" name=\"{}\" time=\"{:.3f}\"", markup_escape(x.target), markup_escape(x.label),
                         x.seconds);
      if (x.verdict == "pass") {
        xml += fmt::format(">\n      <system-out>{}</system-out>\n    </testcase>\n", markup_escape(x.message));
      } else {
        xml += fmt::format(">\n      <failure message=\"{}\" type=\"regression\">{}</failure>\n    </testcase>\n", markup_escape(x.message),
                           markup_escape(x.schedule));
      }
    }
    xml += "  </testsuite>\n</testsuites>\n";
    write_file_atomic(o.junit_file, xml);
  }
  if (o.json) {
    json j = json::array();
    for (const auto& x : outs)
      j.push_back({{"kernel", x.label}, {"target", x.target}, {"verdict", x.verdict}, {"message", x.message},
                   {"recorded_ns", x.recorded}, {"now_ns", x.now}, {"allowed", x.allowed}, {"schedule", x.schedule}});
    fmt::print("{}\n", json{{"checked", outs.size()}, {"failures", failures}, {"results", j}}.dump(2));
  } else {
    fmt::print("{} checked, {} failed\n", outs.size(), failures);
  }
  if (const int sig = stop_signal(); sig != 0) {
    fmt::print(stderr, "kevo: interrupted\n");
    return 128 + sig;
  }
  return failures ? kExitRegression : 0;
}

}  // namespace kevo::cli
