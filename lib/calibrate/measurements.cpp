// Measurement files (TOML) -> lowered calibration rows, and the fitted target file.
#include "kevo/calibrate/measurements.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cctype>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "kevo/core/io.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/runner/runner.hpp"
#include "kevo/target/target.hpp"
#include "kevo/lower/lower.hpp"
#include "kevo/schedule/space.hpp"

namespace kevo::calibrate {

namespace fs = std::filesystem;

namespace {

// A located failure while reading; becomes the Diagnostic.
struct Bad {
  SourceLoc loc;
  std::string message;
};

SourceLoc at(const std::string& file, const toml::source_region& r) {
  SourceLoc l;
  l.file = file;
  l.line = static_cast<int>(r.begin.line);
  l.column = static_cast<int>(r.begin.column);
  if (l.line == 0) l.line = l.column = 1;
  return l;
}

std::string source_line(std::string_view text, int line) {
  int n = 1;
  std::size_t i = 0;
  while (n < line && i < text.size()) {
    if (text[i] == '\n') ++n;
    ++i;
  }
  const auto e = text.find('\n', i);
  return std::string(text.substr(i, e == std::string_view::npos ? std::string_view::npos : e - i));
}

Diagnostic diag(const SourceLoc& loc, std::string message, std::string_view text = {}) {
  Diagnostic d;
  d.loc = loc;
  d.message = std::move(message);
  if (!text.empty() && loc.line > 0) d.source_line = source_line(text, loc.line);
  return d;
}

constexpr const char* kRowKeys[] = {"name",       "workload", "kernel", "schedule", "target",
                                    "latency_ms", "busy",     "source", "toolchain", "note", "fit"};
constexpr const char* kFitKeys[] = {"params", "bounds", "busy_weight"};

std::string keys_list(std::span<const char* const> keys) { return fmt::format("{}", fmt::join(keys, ", ")); }

// Resolves a relative path: the file's directory, the current directory, the file's parents.
std::string resolve_path(const std::string& p, const fs::path& base_dir) {
  const fs::path path(p);
  if (path.is_absolute()) return p;
  std::error_code ec;
  std::vector<fs::path> tries{base_dir / path, path};
  for (fs::path d = fs::absolute(base_dir, ec).lexically_normal(); d.has_parent_path() && d != d.parent_path();) {
    d = d.parent_path();
    tries.push_back(d / path);
  }
  for (const auto& c : tries)
    if (fs::exists(c, ec)) return c.lexically_normal().string();
  return (base_dir / path).lexically_normal().string();  // does not exist: the error names this
}

class RowReader {
 public:
  RowReader(const std::string& file, const toml::table& t) : file_(file), t_(t) {
    for (auto&& [k, v] : t) {
      if (std::find_if(std::begin(kRowKeys), std::end(kRowKeys), [&k = k](const char* a) { return k.str() == a; }) ==
          std::end(kRowKeys))
        throw Bad{at(file, k.source()),
                  fmt::format("unknown key '{}' in [[row]] (allowed: {})", k.str(), keys_list(kRowKeys))};
    }
  }
  const toml::node* get(const char* k) const { return t_.get(k); }
  SourceLoc loc_of(const char* k) const { return at(file_, t_.get(k)->source()); }
  SourceLoc row_loc() const { return at(file_, t_.source()); }
  std::string str(const char* k, bool required = true) const {
    const toml::node* n = t_.get(k);
    if (!n) {
      if (required) throw Bad{row_loc(), fmt::format("[[row]] is missing '{}'", k)};
      return {};
    }
    auto v = n->value<std::string>();
    if (!v || !n->is_string()) throw Bad{at(file_, n->source()), fmt::format("'{}' must be a string", k)};
    if (v->empty()) throw Bad{at(file_, n->source()), fmt::format("'{}' must not be empty", k)};
    return *v;
  }
  double num(const char* k) const {
    const toml::node* n = t_.get(k);
    if (!n) throw Bad{row_loc(), fmt::format("[[row]] is missing '{}'", k)};
    if (!n->is_number()) throw Bad{at(file_, n->source()), fmt::format("'{}' must be a number", k)};
    return *n->value<double>();
  }

 private:
  const std::string& file_;
  const toml::table& t_;
};

Measurement read_row(const std::string& file, const fs::path& dir, const toml::node& node) {
  const toml::table* tp = node.as_table();
  if (!tp) throw Bad{at(file, node.source()), "each 'row' must be a table ([[row]])"};
  RowReader r(file, *tp);
  Measurement m;
  m.loc = r.row_loc();
  m.name = r.str("name");
  const bool has_w = r.get("workload") != nullptr, has_k = r.get("kernel") != nullptr;
  if (has_w == has_k)
    throw Bad{has_w ? r.loc_of("kernel") : m.loc,
              has_w ? "give either 'workload' or 'kernel', not both" : "[[row]] is missing 'workload' (or 'kernel')"};
  if (has_w) {
    m.workload = r.str("workload");
    m.workload_loc = r.loc_of("workload");
  } else {
    m.kernel = resolve_path(r.str("kernel"), dir);
    m.workload_loc = r.loc_of("kernel");
  }
  m.schedule = resolve_path(r.str("schedule"), dir);
  m.schedule_loc = r.loc_of("schedule");
  m.target = r.str("target");
  m.target_loc = r.loc_of("target");
  {
    const auto builtin = target::builtin_targets();
    if (std::find(builtin.begin(), builtin.end(), m.target) == builtin.end()) m.target = resolve_path(m.target, dir);
  }
  m.latency_ms = r.num("latency_ms");
  // a kernel time (runner::is_kernel_time_ns: inf, 1e308 or 1e-320 are typos)
  if (!runner::is_kernel_time_ns(m.latency_ms * 1e6))
    throw Bad{r.loc_of("latency_ms"), fmt::format("'latency_ms' must be a kernel time in [1e-06, 8.64e+07] ms, found {}", m.latency_ms)};
  if (const toml::node* b = r.get("busy")) {
    const toml::table* bt = b->as_table();
    if (!bt) throw Bad{at(file, b->source()), "'busy' must be a table, e.g. busy = { dma = 0.99, tensor = 0.87 }"};
    for (auto&& [k, v] : *bt) {
      const auto it = std::find(runner::kBusyNames.begin(), runner::kBusyNames.end(), k.str());
      if (it == runner::kBusyNames.end())
        throw Bad{at(file, k.source()), fmt::format("unknown engine '{}' in 'busy' (allowed: {})", k.str(),
                                                    fmt::join(runner::kBusyNames, ", "))};
      if (!v.is_number()) throw Bad{at(file, v.source()), fmt::format("'busy.{}' must be a number", k.str())};
      const double f = *v.value<double>();
      if (!(f >= 0 && f <= 1))
        throw Bad{at(file, v.source()), fmt::format("'busy.{}' = {} is outside [0, 1] (a fraction of the latency)", k.str(), f)};
      m.busy[static_cast<std::size_t>(it - runner::kBusyNames.begin())] = f;
    }
  }
  m.source = r.str("source");
  m.toolchain = r.str("toolchain");
  m.note = r.str("note", false);
  if (const toml::node* f = r.get("fit")) {
    if (!f->is_boolean()) throw Bad{r.loc_of("fit"), "'fit' must be true or false"};
    m.fit = *f->value<bool>();
    if (!m.fit && m.note.empty())
      throw Bad{r.loc_of("fit"), "a row with fit = false needs a 'note' saying why it is not fitted"};
  }
  return m;
}

void read_fit(const std::string& file, const toml::node& node, const ReadOptions& o, MeasurementFile& out) {
  const toml::table* ft = node.as_table();
  if (!ft) throw Bad{at(file, node.source()), "'fit' must be a table ([fit])"};
  for (auto&& [k, v] : *ft)
    if (std::find_if(std::begin(kFitKeys), std::end(kFitKeys), [&k = k](const char* a) { return k.str() == a; }) == std::end(kFitKeys))
      throw Bad{at(file, k.source()), fmt::format("unknown key '{}' in [fit] (allowed: {})", k.str(), keys_list(kFitKeys))};
  auto param = [&](const std::string& name, const toml::source_region& where) {
    try {
      return runner::fit_param(name);
    } catch (const Error& e) {
      throw Bad{at(file, where), e.what()};
    }
  };
  std::vector<runner::FitParam> params;
  if (const toml::node* p = ft->get("params")) {
    const toml::array* a = p->as_array();
    if (!a) throw Bad{at(file, p->source()), "'params' must be an array of parameter names"};
    for (const auto& e : *a) {
      if (!e.is_string()) throw Bad{at(file, e.source()), "'params' must be an array of parameter names"};
      const std::string name = *e.value<std::string>();
      for (const auto& q : params)
        if (q.name == name) throw Bad{at(file, e.source()), fmt::format("parameter '{}' listed twice", name)};
      params.push_back(param(name, e.source()));
    }
    if (params.empty()) throw Bad{at(file, p->source()), "'params' must name at least one parameter"};
  }
  if (!o.params.empty()) {
    params.clear();
    for (const auto& name : o.params) params.push_back(param(name, node.source()));
  }
  if (params.empty()) params = runner::default_fit_params();
  if (const toml::node* b = ft->get("bounds")) {
    const toml::table* bt = b->as_table();
    if (!bt) throw Bad{at(file, b->source()), "'bounds' must be a table: bounds.NAME = [lo, hi]"};
    for (auto&& [k, v] : *bt) {
      const std::string name(k.str());
      (void)param(name, k.source());
      auto it = std::find_if(params.begin(), params.end(), [&](const runner::FitParam& q) { return q.name == name; });
      if (it == params.end())
        throw Bad{at(file, k.source()), fmt::format("bounds for '{}', which is not fitted (add it to 'params')", name)};
      const toml::array* a = v.as_array();
      if (!a || a->size() != 2 || !(*a)[0].is_number() || !(*a)[1].is_number())
        throw Bad{at(file, v.source()), fmt::format("'bounds.{}' must be [lo, hi] (two numbers)", name)};
      const double lo = *(*a)[0].value<double>(), hi = *(*a)[1].value<double>();
      if (!(lo < hi)) throw Bad{at(file, v.source()), fmt::format("'bounds.{}' = [{}, {}] needs lo < hi", name, lo, hi)};
      const auto r = target::sim_param_range(name);
      if (!std::isfinite(lo) || !std::isfinite(hi) || lo < r.lo || hi > r.hi)
        throw Bad{at(file, v.source()),
                  fmt::format("'bounds.{}' = [{}, {}] leaves the parameter's physical range [{:g}, {:g}]", name, lo, hi, r.lo, r.hi)};
      it->lo = lo;
      it->hi = hi;
    }
  }
  if (const toml::node* w = ft->get("busy_weight")) {
    if (!w->is_number() || !(*w->value<double>() >= 0) || !std::isfinite(*w->value<double>()))
      throw Bad{at(file, w->source()), "'busy_weight' must be a finite number >= 0"};
    out.busy_weight = *w->value<double>();
  }
  out.params = std::move(params);
}

}  // namespace

Expected<MeasurementFile, Diagnostic> parse_measurements(std::string_view text, const std::string& file,
                                                         const ReadOptions& o) {
  // toml++ ends a document at a NUL byte: a binary file would read as a file without rows
  if (const auto z = text.find('\0'); z != std::string_view::npos) return unexpected(make_diagnostic(text, z, file, "a NUL byte: not a TOML file"));
  toml::table t;
  try {
    t = toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    return unexpected(diag(at(file, e.source()), std::string(e.description()), text));
  }
  MeasurementFile out;
  out.path = file;
  const fs::path dir = fs::path(file).parent_path();
  try {
    for (auto&& [k, v] : t)
      if (k.str() != "row" && k.str() != "fit")
        throw Bad{at(file, k.source()), fmt::format("unknown key '{}' (allowed: [[row]] tables and one [fit] table)", k.str())};
    const toml::node* rows = t.get("row");
    if (!rows) throw Bad{SourceLoc{file, 1, 1}, "no [[row]] tables: nothing to fit"};
    const toml::array* ra = rows->as_array();
    if (!ra) throw Bad{at(file, rows->source()), "'row' must be an array of tables ([[row]])"};
    for (const auto& n : *ra) {
      Measurement m = read_row(file, dir, n);
      if (!o.toolchain.empty() && m.toolchain != o.toolchain) {
        ++out.excluded;
        continue;
      }
      if (!m.fit) {
        out.unfitted.push_back(std::move(m));
        continue;
      }
      out.rows.push_back(std::move(m));
    }
    if (out.rows.empty())
      throw Bad{at(file, rows->source()),
                out.unfitted.empty()
                    ? fmt::format("no row has toolchain = \"{}\" ({} rows excluded)", o.toolchain, out.excluded)
                    : fmt::format("no row to fit ({} rows excluded by the toolchain filter, {} with fit = false)", out.excluded,
                                  out.unfitted.size())};
    if (const toml::node* f = t.get("fit")) {
      read_fit(file, *f, o, out);
    } else if (!o.params.empty()) {
      toml::table empty;
      read_fit(file, empty, o, out);
    }
  } catch (const Bad& b) {
    return unexpected(diag(b.loc, b.message, text));
  }
  return out;
}

Expected<MeasurementFile, Diagnostic> read_measurements(const fs::path& file, const ReadOptions& o) {
  std::string text;
  try {
    text = read_file(file, kMaxTextFileBytes);
  } catch (const Error& e) {
    Diagnostic d;
    d.loc.file = file.string();
    d.message = e.what();
    return unexpected(std::move(d));
  }
  return parse_measurements(text, file.string(), o);
}

Expected<std::string, Diagnostic> target_json_text(std::string_view name_or_path) {
  std::string text = target::builtin_target_json(name_or_path);
  if (!text.empty()) return text;
  try {
    return read_file(fs::path(std::string(name_or_path)));
  } catch (const Error& e) {
    Diagnostic d;
    d.loc.file = std::string(name_or_path);
    d.message = e.what();
    return unexpected(std::move(d));
  }
}

std::optional<runner::SimParams> sim_params_of(std::string_view target_json, const target::Target& t) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(target_json);
  } catch (const std::exception& e) {
    throw Error(std::string("target JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("sim")) return std::nullopt;
  const auto& sim = j["sim"];
  if (!sim.is_object()) throw Error("target JSON: 'sim' must be an object");
  runner::SimParams p = runner::default_sim_params(t);
  if (sim.contains("params")) {
    const auto& ps = sim["params"];
    if (!ps.is_object()) throw Error("target JSON: 'sim.params' must be an object of numbers");
    for (auto it = ps.begin(); it != ps.end(); ++it) {
      if (!it.value().is_number()) throw Error(fmt::format("target JSON: 'sim.params.{}' must be a number", it.key()));
      runner::calibrate_detail::set_param(p, it.key(), it.value().get<double>());
    }
  }
  return p;
}

std::string fitted_target_json(std::string_view base_json, const runner::FitResult& fit, const std::string& fitted_by,
                               const std::string& source) {
  auto j = nlohmann::ordered_json::parse(base_json);
  nlohmann::ordered_json params = nlohmann::ordered_json::object();
  if (j.contains("sim") && j["sim"].is_object() && j["sim"].contains("params") && j["sim"]["params"].is_object())
    params = j["sim"]["params"];
  for (const auto& p : fit.fitted) params[p.name] = p.value;
  const nlohmann::ordered_json sim{{"params", params}, {"fitted_by", fitted_by}, {"source", source}};
  // Only the "sim" object changes: the rest of the file keeps its text (its layout, its order), so
  // a fitted file diffs against its base in the sim section alone.
  std::string sim_text = sim.dump(2);
  for (std::size_t q = sim_text.find('\n'); q != std::string::npos; q = sim_text.find('\n', q + 1)) sim_text.insert(q + 1, "  ");
  const std::string text(base_json);
  // the value of the top-level key "sim": scan tokens, tracking depth and strings
  int depth = 0;
  std::size_t i = 0, key_start = std::string::npos, value_begin = std::string::npos, value_end = std::string::npos;
  std::string last_string;
  std::size_t last_string_begin = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '"') {
      const std::size_t b = i++;
      std::string str;
      while (i < text.size() && text[i] != '"') {
        if (text[i] == '\\') ++i;
        if (i < text.size()) str += text[i++];
      }
      ++i;
      last_string = str;
      last_string_begin = b;
      continue;
    }
    if (c == ':' && depth == 1 && last_string == "sim" && value_begin == std::string::npos) {
      key_start = last_string_begin;
      std::size_t v = i + 1;
      while (v < text.size() && std::isspace(static_cast<unsigned char>(text[v]))) ++v;
      value_begin = v;
      if (v < text.size() && text[v] == '{') {
        int d = 0;
        std::size_t k = v;
        for (; k < text.size(); ++k) {
          if (text[k] == '"') {
            for (++k; k < text.size() && text[k] != '"'; ++k)
              if (text[k] == '\\') ++k;
            continue;
          }
          if (text[k] == '{') ++d;
          if (text[k] == '}' && --d == 0) break;
        }
        value_end = k + 1;
      }
      break;
    }
    if (c == '{' || c == '[') ++depth;
    if (c == '}' || c == ']') --depth;
    ++i;
  }
  std::string out;
  if (value_end != std::string::npos) {
    out = text.substr(0, value_begin) + sim_text + text.substr(value_end);
  } else if (key_start == std::string::npos) {
    const auto close = text.rfind('}');
    auto before = close;
    while (before > 0 && std::isspace(static_cast<unsigned char>(text[before - 1]))) --before;
    out = text.substr(0, before) + ",\n  \"sim\": " + sim_text + "\n" + text.substr(close);
  } else {
    j["sim"] = sim;  // "sim" is not an object in the base: the loader rejects that; write it whole
    return j.dump(2) + "\n";
  }
  if (out.empty() || out.back() != '\n') out += '\n';
  return out;
}

Expected<Prepared, Diagnostic> prepare(const MeasurementFile& file, std::string_view base_target) {
  Prepared out;
  std::optional<std::uint64_t> first_hash;
  std::string first_target;
  try {
    if (!base_target.empty()) {
      auto t = target::load_target(base_target);
      if (!t) return unexpected(t.error());
      out.target = *t;
      out.target_spec = std::string(base_target);
    }
    for (const Measurement& m : file.rows) {
      auto t = target::load_target(m.target);
      if (!t) throw Bad{m.target_loc, fmt::format("target '{}': {}", m.target, t.error().headline())};
      if (!base_target.empty()) {
        // a file may hold every generation's rows: --target picks that generation's
        if (t->name != out.target.name) {
          ++out.other_target;
          continue;
        }
      } else if (!first_hash) {
        first_hash = t->hash();
        first_target = m.target;
        out.target = *t;
        out.target_spec = m.target;
      } else if (t->hash() != *first_hash) {
        throw Bad{m.target_loc, fmt::format("row '{}' is for target '{}', earlier rows for '{}': one fit is for one target",
                                            m.name, m.target, first_target)};
      }
      // The kernel.
      ir::Kernel k;
      if (!m.workload.empty()) {
        auto w = ir::workload(m.workload);
        if (!w) throw Bad{m.workload_loc, fmt::format("workload '{}': {}", m.workload, w.error())};
        k = std::move(*w);
      } else {
        std::string text;
        try {
          text = read_file(m.kernel, kMaxTextFileBytes);
        } catch (const Error& e) {
          throw Bad{m.workload_loc, fmt::format("kernel '{}': {}", m.kernel, e.what())};
        }
        auto pk = ir::parse_kernel(text, m.kernel);
        if (!pk) throw Bad{m.workload_loc, fmt::format("kernel '{}' does not parse: {}", m.kernel, pk.error().headline())};
        k = std::move(*pk);
      }
      // The schedule, lowered once.
      std::string text;
      try {
        text = read_file(m.schedule, kMaxTextFileBytes);
      } catch (const Error& e) {
        throw Bad{m.schedule_loc, fmt::format("schedule '{}': {}", m.schedule, e.what())};
      }
      // rows are hand-written schedules: read in the full space (schedule::DeriveOptions::full)
      auto space = schedule::ScheduleSpace::try_derive(k, out.target, schedule::DeriveOptions::full());
      if (!space)
        throw Bad{m.workload_loc, fmt::format("kernel of row '{}' has no schedule space: {}", m.name, space.error().str())};
      auto g = space->parse(text, m.schedule);
      if (!g) throw Bad{m.schedule_loc, fmt::format("schedule does not parse: {}", g.error().headline())};
      auto p = lower::lower(*space, *g);
      if (!p)
        throw Bad{m.schedule_loc,
                  fmt::format("schedule '{}' does not lower on {}: {}", m.schedule, out.target.name, p.error().str())};
      runner::CalibrationRow row;
      row.name = m.name;
      row.program = std::make_shared<const lower::TileProgram>(std::move(*p));
      row.measured_ns = m.latency_ms * 1e6;
      row.busy = m.busy;
      out.rows.push_back(std::move(row));
    }
  } catch (const Bad& b) {
    return unexpected(diag(b.loc, b.message));
  }
  if (out.rows.empty())
    return unexpected(diag(SourceLoc{file.path, 1, 1}, fmt::format("no row is measured on {} ({} rows for other targets)", out.target.name,
                                                  out.other_target)));
  return out;
}

}  // namespace kevo::calibrate
