// kevo model FILE.onnx: a whole model in (kevo/model.hpp): the kernel table (op, shape, FLOPs,
// bytes, time with the default schedule, share of the total), the hot kernels searched with the
// budget split by share, each winner verified, and the end-to-end gain by Amdahl's law in the
// terminal, result.json and report.html (docs/MODEL.md).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "options.hpp"
#include "report.hpp"
#include "resolve.hpp"
#include "kevo/core/io.hpp"
#include "kevo/ir/text.hpp"
#ifdef KEVO_WITH_MODEL
#include "kevo/model.hpp"
#include "kevo/records/database.hpp"
#endif

namespace kevo::cli {

namespace {

namespace fs = std::filesystem;

struct ModelOptions {
  std::string file;
  std::string target;
  std::string runner = "sim";
  std::uint64_t budget = 1000;
  double share = 0.9;
  std::string out;
  std::vector<std::string> dims;
  std::string dtype;
  std::uint64_t seed = 1;
  int threads = 0;
  std::string db_file;
  bool no_db = false;
  bool no_tune = false;
  bool json = false;
  bool quiet = false;
};

#ifdef KEVO_WITH_MODEL
using nlohmann::json;

std::string hex64(std::uint64_t h) { return fmt::format("{:016x}", h); }

std::string out_dir(const ModelOptions& mo) {
  if (!mo.out.empty()) return mo.out;
  const auto t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "runs/model-%Y%m%d-%H%M%S", &tm);
  std::string d = buf;
  for (int i = 2; fs::exists(d); ++i) d = fmt::format("{}-{}", buf, i);
  return d;
}

std::string us(double ns) { return fmt::format("{:.2f}", ns / 1000.0); }

// report.html: the summary, a bar chart of each kernel's time (x count) before and after, the
// kernel table, the tuned kernels and the nodes kevo does not express.
std::string render_model_report(const json& r) {
  std::string s = R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>)" +
                  markup_escape("kevo model " + r["model"]["file"].get<std::string>()) + R"(</title>
<style>
body{font-family:system-ui,sans-serif;margin:16px 2vw;color:#222}
h1{font-size:22px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse} td,th{padding:2px 14px 2px 0;vertical-align:top;text-align:left}
th{border-bottom:1px solid #ccc;font-weight:600} table.grid td{border-bottom:1px solid #eee}
table.kv td:first-child{color:#555} svg.chart{display:block;width:100%;height:auto}
.note{background:#e8f1fb;border:1px solid #7aa7d6;padding:8px 12px;color:#123}
</style></head><body>
)";
  s += "<h1>" + markup_escape("kevo model " + r["model"]["file"].get<std::string>()) + "</h1>\n";
  const auto& e2e = r["end_to_end"];
  s += "<section id=\"summary\"><h2>Summary</h2><table class=\"kv\">";
  auto kv = [&](const std::string& k, const std::string& v) {
    s += "<tr><td>" + markup_escape(k) + "</td><td>" + markup_escape(v) + "</td></tr>";
  };
  kv("model", fmt::format("{} ({}, opset {}), {} nodes", r["model"]["file"].get<std::string>(), r["model"]["producer"].get<std::string>(),
                          r["model"]["opset"].get<std::int64_t>(), r["model"]["nodes"].get<std::size_t>()));
  kv("kernels", fmt::format("{} distinct, {} instances; {} nodes not expressed", r["kernels"].size(),
                            r["model"]["kernel_instances"].get<std::size_t>(), r["model"]["not_expressed"].get<std::size_t>()));
  kv("target / runner", r["target"].get<std::string>() + " / " + r["runner"].get<std::string>());
  kv("time before (default schedules)", us(e2e["before_ns"].get<double>()) + " us");
  kv("time after (tuned, verified)", us(e2e["after_ns"].get<double>()) + " us");
  kv("end-to-end speedup (Amdahl)", fmt::format("{:.3f}x", e2e["speedup"].get<double>()));
  s += "</table><p class=\"note\">" + markup_escape(r["end_to_end"]["note"].get<std::string>()) + "</p>";
  if (r.value("interrupted", false)) s += "<p class=\"note\">Interrupted: " + markup_escape(r.value("interrupted_note", "")) + "</p>";
  s += "</section>\n";

  // Bar chart: one row per kernel, before (grey) and after (blue), x count.
  const auto& ks = r["kernels"];
  double vmax = 0;
  for (const auto& k : ks) vmax = std::max({vmax, k["total_ns"].get<double>(), k["after_total_ns"].get<double>()});
  const int W = 900, label_w = 300, row_h = 30, top = 24;
  const int H = top + row_h * static_cast<int>(ks.size()) + 30;
  s += "<section id=\"chart\"><h2>Time per kernel, before and after</h2>";
  s += fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {} {}" width="100%" role="img" aria-label="time per kernel before and after tuning">)",
                   W, H);
  s += fmt::format(R"(<rect x="{}" y="4" width="12" height="10" fill="#b0b0b0"/><text x="{}" y="13" font-size="11">default schedule</text>)",
                   label_w, label_w + 16);
  s += fmt::format(R"(<rect x="{}" y="4" width="12" height="10" fill="#2f6fb5"/><text x="{}" y="13" font-size="11">after (searched kernels: their verified winner)</text>)",
                   label_w + 130, label_w + 146);
  const double scale = vmax > 0 ? (W - label_w - 90) / vmax : 0;
  for (std::size_t i = 0; i < ks.size(); ++i) {
    const auto& k = ks[i];
    const int y = top + row_h * static_cast<int>(i);
    const double b = k["total_ns"].get<double>(), a = k["after_total_ns"].get<double>();
    s += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text>)", label_w - 6, y + 16,
                     markup_escape(fmt::format("#{} {} {} x{}", i + 1, k["kind"].get<std::string>(), k["shape"].get<std::string>(),
                                               k["count"].get<std::size_t>())));
    s += fmt::format(R"(<rect class="before" x="{}" y="{}" width="{:.1f}" height="11" fill="#b0b0b0"><title>{} us</title></rect>)", label_w,
                     y + 3, b * scale, us(b));
    s += fmt::format(R"(<rect class="after" x="{}" y="{}" width="{:.1f}" height="11" fill="#2f6fb5"><title>{} us</title></rect>)", label_w,
                     y + 15, a * scale, us(a));
    s += fmt::format(R"(<text x="{:.1f}" y="{}" font-size="10">{} us</text>)", label_w + b * scale + 4, y + 12, us(b));
    s += fmt::format(R"(<text x="{:.1f}" y="{}" font-size="10">{} us</text>)", label_w + a * scale + 4, y + 24, us(a));
  }
  s += "</svg></section>\n";

  s += "<section id=\"kernels\"><h2>Kernels</h2><div style=\"overflow-x:auto\"><table class=\"grid\"><tr><th>#</th><th>kernel</th><th>ONNX ops</th><th>shape</th>"
       "<th>count</th><th>GFLOP</th><th>MB</th><th>default us</th><th>share</th><th>tuned us</th><th>speedup</th><th>verified</th></tr>";
  for (std::size_t i = 0; i < ks.size(); ++i) {
    const auto& k = ks[i];
    const bool tuned = k.contains("tuned");
    s += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.3f}</td><td>{:.2f}</td><td>{}</td><td>{:.1f}%</td>"
                     "<td>{}</td><td>{}</td><td>{}</td></tr>",
                     i + 1, markup_escape(k["kind"].get<std::string>()), markup_escape(k["op"].get<std::string>()),
                     markup_escape(k["shape"].get<std::string>()), k["count"].get<std::size_t>(), k["flops"].get<double>() / 1e9,
                     k["bytes"].get<double>() / 1e6, k["ok"].get<bool>() ? us(k["default_ns"].get<double>()) : markup_escape(k["status"].get<std::string>()),
                     100 * k["share"].get<double>(), tuned ? us(k["tuned"]["after_ns"].get<double>()) : "",
                     tuned ? fmt::format("{:.2f}x", k["tuned"]["speedup"].get<double>()) : "",
                     tuned ? markup_escape(k["tuned"]["verified"].get<bool>() ? k["tuned"]["verification"].get<std::string>() : "no") : "");
  }
  s += "</table></div></section>\n";
  s += "<section id=\"not-expressed\"><h2>Nodes kevo does not express</h2><table class=\"grid\"><tr><th>op</th><th>count</th><th>reason</th><th>nodes</th></tr>";
  for (const auto& u : r["not_expressed"])
    s += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", markup_escape(u["op"].get<std::string>()),
                     u["count"].get<std::size_t>(), markup_escape(u["reason"].get<std::string>()),
                     markup_escape(u["nodes"].dump().substr(0, 400)));
  s += "</table></section>\n</body></html>\n";
  return s;
}

int run_model(const ModelOptions& mo) {
  const auto t0 = std::chrono::steady_clock::now();
  if (mo.file.empty()) throw UsageError{"kevo model: give an ONNX file (kevo model FILE.onnx)"};
  if (!(mo.share > 0 && mo.share <= 1)) throw UsageError{fmt::format("--share {}: expected a fraction in (0, 1]", mo.share)};
  refuse_gpu_target(mo.target, "model");
  if (mo.no_db && !mo.db_file.empty()) throw UsageError{fmt::format("--no-db and --db {}: give one or the other", mo.db_file)};
  model::ImportOptions io;
  for (const auto& d : mo.dims) {
    auto parsed = model::parse_dims(d);
    if (!parsed) throw UsageError{parsed.error()};
    for (const auto& [k, v] : *parsed)
      if (!io.dims.emplace(k, v).second) throw UsageError{fmt::format("--dim: '{}' is given twice", printable(k))};
  }
  if (!mo.dtype.empty()) {
    auto t = ir::dtype_from_string(mo.dtype);
    if (!t) throw UsageError{fmt::format("--dtype '{}': expected one of {}", mo.dtype, ir::dtype_names())};
    io.dtype = *t;
  }
  auto m = model::import_onnx(mo.file, io);
  if (!m) throw UsageError{m.error()};
  Options o;
  o.target = mo.target;
  o.runner = mo.runner;
  std::string tname;
  const auto tgt = resolve_target(o, tname);
  const auto runner = resolve_runner(o, tgt);
  std::optional<records::Database> db;
  if (!mo.no_db && !mo.no_tune) {
    const fs::path p = mo.db_file.empty() ? records::Database::default_path() : fs::path(mo.db_file);
    auto d = records::Database::open(p);
    if (!d) throw UsageError{fmt::format("--db: {}", d.error())};
    db.emplace(std::move(*d));
  }
  const fs::path dir = out_dir(mo);
  std::error_code ec;
  fs::create_directories(dir / "kernels", ec);
  if (ec) throw UsageError{fmt::format("--out {}: {}", dir.string(), ec.message())};
  const bool talk = !mo.json && !mo.quiet;
  std::size_t instances = 0;
  for (const auto& k : m->kernels) instances += k.count();
  if (talk)
    fmt::print("kevo model {}: {} nodes -> {} kernels ({} instances), {} nodes not expressed; target {}, runner {}\n", mo.file,
               m->nodes, m->kernels.size(), instances, m->unsupported.size(), tgt.name, mo.runner);
  catch_stop_signals();  // a worker runner's workers are killed on Ctrl-C, not orphaned
  const auto prof = model::profile(*m, tgt, runner);
  const auto interrupted = [] {
    if (const int sig = stop_signal(); sig != 0) {
      fmt::print(stderr, "kevo: interrupted\n");
      return 128 + sig;
    }
    return 0;
  };
  if (const int rc = interrupted(); rc != 0) return rc;
  model::TuneResult tr;
  std::vector<double> after = [&] {
    std::vector<double> v;
    for (const auto& row : prof.rows) v.push_back(row.total_ns);
    return v;
  }();
  auto print_table = [&] {
    fmt::print("\n{:>3}  {:<16} {:<28} {:<26} {:>3} {:>9} {:>9} {:>12} {:>7}\n", "#", "kernel", "ONNX ops", "shape", "x", "GFLOP",
               "MB", "default us", "share");
    for (std::size_t i = 0; i < prof.rows.size(); ++i) {
      const auto& row = prof.rows[i];
      const auto& k = m->kernels[row.kernel];
      std::string op = k.op.size() > 28 ? k.op.substr(0, 25) + "..." : k.op;
      fmt::print("{:>3}  {:<16} {:<28} {:<26} {:>3} {:>9.3f} {:>9.2f} {:>12} {:>6.1f}%\n", i + 1, k.kind, op, k.shape, k.count(),
                 static_cast<double>(row.flops) * static_cast<double>(k.count()) / 1e9,
                 static_cast<double>(row.bytes) * static_cast<double>(k.count()) / 1e6, row.ok ? us(row.total_ns) : "n/a",
                 100 * row.share);
      if (!row.ok) fmt::print("     not timed: {}\n", row.status);
    }
    fmt::print("{:>3}  {:<16} {:<28} {:<26} {:>3} {:>9} {:>9} {:>12} {:>6.1f}%\n", "", "total", "", "", "", "", "", us(prof.total_ns), 100.0);
  };
  // Not expressed: grouped by op and reason.
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> groups;
  for (const auto& u : m->unsupported) groups[{u.op_type, u.reason}].push_back(u.node);
  if (talk) {
    print_table();
    std::fflush(stdout);
    if (!groups.empty()) {
      fmt::print("\nnot expressed as kernels ({} nodes; not timed):\n", m->unsupported.size());
      for (const auto& [key, nodes] : groups) fmt::print("  {:<18} x{:<3} {}\n", key.first, nodes.size(), key.second);
    }
  }
  if (!mo.no_tune) {
    model::TuneOptions to;
    to.share = mo.share;
    to.budget = mo.budget;
    to.seed = mo.seed;
    to.threads = mo.threads;
    to.db = db ? &*db : nullptr;
    to.version = KEVO_VERSION_STRING;
    if (talk) {
      const auto hot = model::hot_rows(prof, mo.share);
      double covered = 0;
      for (auto i : hot) covered += prof.rows[i].share;
      fmt::print("\nsearching {} kernel(s) covering {:.1f}% of the time (--share {}), budget {} evaluations split by share\n", hot.size(),
                 100 * covered, mo.share, mo.budget);
      to.log = [](const std::string& line) {
        fmt::print("  {}\n", line);
        std::fflush(stdout);
      };
    }
    // Ctrl-C stops the tuning, not the run: the kernel being searched keeps the verified best of
    // what it measured, and the results so far are written before the exit status says 130.
    to.should_stop = [] { return stop_signal() != 0; };
    tr = model::tune(*m, prof, tgt, runner, to);
    after = tr.after_row_ns;
  }
  const double before_ns = prof.total_ns;
  double after_ns = 0;
  for (double a : after) after_ns += a;
  const double speedup = after_ns > 0 ? before_ns / after_ns : 1.0;
  // Kernels kevo could not time are in neither figure: named beside them, so a 1.00x over one
  // small kernel does not read as the whole model's (a 550-GFLOP MatMul that was not timed once
  // vanished from "1.12 us -> 1.12 us").
  json untimed = json::array();
  std::string untimed_text;
  for (std::size_t i = 0; i < prof.rows.size(); ++i)
    if (!prof.rows[i].ok) {
      const auto& k = m->kernels[prof.rows[i].kernel];
      untimed.push_back({{"row", i + 1}, {"kind", k.kind}, {"shape", k.shape}, {"count", k.count()}, {"status", prof.rows[i].status}});
      untimed_text += fmt::format("{}#{} {}", untimed_text.empty() ? "" : ", ", i + 1, k.kind);
    }
  const std::string scope = untimed.empty()
                                ? std::string("the kernels kevo expresses")
                                : fmt::format("the kernels kevo timed; {} of {} not timed and in neither figure: {}", untimed.size(),
                                              prof.rows.size(), untimed_text);

  json kernels = json::array();
  for (std::size_t i = 0; i < prof.rows.size(); ++i) {
    const auto& row = prof.rows[i];
    const auto& k = m->kernels[row.kernel];
    const std::string kir = fmt::format("kernels/{:02}_{}.kir", i + 1, k.kind);
    write_file_atomic(dir / kir, ir::print_kernel(k.kernel));
    json inst = json::array();
    for (const auto& in : k.instances) {
      json ins = json::object(), outs = json::object();
      for (const auto& b : in.inputs) ins[b.tensor] = b.value;
      for (const auto& b : in.outputs) outs[b.tensor] = b.value;
      inst.push_back({{"nodes", in.nodes}, {"inputs", ins}, {"outputs", outs}});
    }
    json kj{{"kind", k.kind},       {"op", k.op},
            {"shape", k.shape},     {"count", k.count()},
            {"kernel_hash", hex64(k.hash)}, {"kir", kir},
            {"flops", static_cast<double>(row.flops)}, {"bytes", static_cast<double>(row.bytes)},
            {"ok", row.ok},         {"status", row.status},
            {"default_ns", row.default_ns}, {"total_ns", row.total_ns},
            {"share", row.share},   {"after_total_ns", after[i]},
            {"instances", inst}};
    for (const auto& tk : tr.tuned)
      if (tk.row == i)
        kj["tuned"] = {{"source", tk.source},       {"budget", tk.budget},
                       {"evaluations", tk.evaluations}, {"before_ns", tk.before_ns},
                       {"after_ns", tk.after_ns},   {"speedup", tk.speedup()},
                       {"verified", tk.verification.ok}, {"verification", tk.verification.method + (tk.verification.detail.empty() ? "" : ": " + tk.verification.detail)},
                       {"verification_message", tk.verification.message}, {"schedule", tk.schedule}};
    kernels.push_back(std::move(kj));
  }
  json ne = json::array();
  for (const auto& [key, nodes] : groups) ne.push_back({{"op", key.first}, {"reason", key.second}, {"count", nodes.size()}, {"nodes", nodes}});
  json result{{"version", 1},
              {"model", {{"file", mo.file}, {"producer", m->producer}, {"opset", m->opset}, {"nodes", m->nodes},
                         {"kernel_instances", instances}, {"not_expressed", m->unsupported.size()},
                         {"dims", io.dims}, {"dtype", mo.dtype.empty() ? "graph" : mo.dtype}}},
              {"target", tgt.name},
              {"runner", mo.runner},
              {"runner_identity", runner.traits().identity},
              {"share", mo.share},
              {"budget", mo.no_tune ? 0 : mo.budget},
              {"seed", mo.seed},
              {"kernels", kernels},
              {"not_expressed", ne},
              {"end_to_end",
               {{"before_ns", before_ns}, {"after_ns", after_ns}, {"speedup", speedup},
                {"note", "Amdahl over the kernels kevo expresses: each kernel's time with the default schedule times its count, the "
                         "searched ones replaced by their verified winners; the nodes listed as not expressed (data movement, "
                         "shape computation) are not timed and not in either figure." +
                             (untimed.empty() ? std::string() : " Kernels kevo could not time are not in either figure either: " + untimed_text + ".")},
                {"untimed", untimed}}},
              {"records", db ? json(db->path().string()) : json(nullptr)}};
  result["interrupted"] = tr.interrupted;
  if (tr.interrupted)
    result["interrupted_note"] = fmt::format("stopped by a signal after {} of {} searched kernels; the others keep their default schedules",
                                             tr.tuned.size(), tr.hot);
  result["wall_seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  write_file_atomic(dir / "result.json", result.dump(2) + "\n");
  write_file_atomic(dir / "report.html", render_model_report(result));
  const int stop_rc = tr.interrupted ? interrupted() : 0;  // "kevo: interrupted" on stderr
  if (mo.json) {
    fmt::print("{}\n", result.dump(2));
    return stop_rc;
  }
  if (!mo.no_tune && !mo.quiet) {
    fmt::print("\n{:>3}  {:<16} {:<26} {:>3} {:>12} {:>12} {:>8}  {:<8} {}\n", "#", "kernel", "shape", "x", "default us", "tuned us",
               "speedup", "from", "verified");
    for (const auto& tk : tr.tuned) {
      const auto& k = m->kernels[prof.rows[tk.row].kernel];
      fmt::print("{:>3}  {:<16} {:<26} {:>3} {:>12} {:>12} {:>7.2f}x  {:<8} {}\n", tk.row + 1, k.kind, k.shape, k.count(), us(tk.before_ns),
                 us(tk.after_ns), tk.speedup(), tk.source,
                 tk.verification.ok ? tk.verification.method : "no: " + tk.verification.message);
    }
  }
  fmt::print("end-to-end (Amdahl, {}): {} us -> {} us, {:.3f}x\n", scope, us(before_ns), us(after_ns), speedup);
  if (tr.interrupted) fmt::print("interrupted: {}\n", result["interrupted_note"].get<std::string>());
  fmt::print("results: {} ({}, {})\n", dir.string(), (dir / "result.json").string(), (dir / "report.html").string());
  return stop_rc;
}
#endif

}  // namespace

std::pair<CLI::App*, std::function<int()>> add_model_command(CLI::App& app) {
  auto mo = std::make_shared<ModelOptions>();
  auto* sc = app.add_subcommand("model", "a whole ONNX model: its kernels, timed, the hot ones tuned, the end-to-end gain (docs/MODEL.md)");
  sc->add_option("MODEL", mo->file, "an ONNX model file (.onnx)");
  sc->add_option("--target,-t", mo->target, "trn1|trn2|trn3|host|FILE.json (default trn2; host with --runner cpu)");
  sc->add_option("--runner,-r", mo->runner, "sim|cpu|cmd:COMMAND (default sim)");
  bounded(sc->add_option("--budget,-n", mo->budget, "evaluations over all searched kernels, split by their share (default 1000)"), "budget");
  sc->add_option("--share", mo->share, "search the kernels that together make up this share of the time (default 0.9)");
  sc->add_option("--out,-o", mo->out, "results directory (default runs/model-<timestamp>)");
  sc->add_option("--dim", mo->dims, "bind a dynamic dimension: NAME=N (repeatable, or NAME=N,NAME2=M)");
  sc->add_option("--dtype", mo->dtype, "storage dtype of every kernel tensor, e.g. bf16 (default: the graph's)");
  bounded(sc->add_option("--seed,-s", mo->seed, "random seed (default 1)"), "seed");
  bounded(sc->add_option("--threads,-j", mo->threads, "evaluation threads (default 0: all cores)"), "threads");
  sc->add_option("--db", mo->db_file, "tuning-records database (default $KEVO_DB, else $XDG_DATA_HOME/kevo/records.db, else ~/.local/share/kevo/records.db)");
  sc->add_flag("--no-db", mo->no_db, "record nothing and take nothing from records");
  sc->add_flag("--no-tune", mo->no_tune, "only the kernel table (no search)");
  sc->add_flag("--json", mo->json, "print result.json on stdout");
  sc->add_flag("--quiet,-q", mo->quiet, "only the end-to-end line and the results path");
  return {sc, [mo]() -> int {
#ifdef KEVO_WITH_MODEL
            return run_model(*mo);
#else
            throw UsageError{"kevo model: this kevo was built without ONNX support (install libonnx-dev libprotobuf-dev and reconfigure)"};
#endif
          }};
}

}  // namespace kevo::cli
