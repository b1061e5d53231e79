#include "kevo/session/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

namespace kevo::session {

std::string markup_escape(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default: o += (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') ? ' ' : c;
    }
  }
  return o;
}

bool natural_less(std::string_view a, std::string_view b) {
  std::size_t i = 0, j = 0;
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      std::size_t i2 = i, j2 = j;
      while (i2 < a.size() && digit(a[i2])) ++i2;
      while (j2 < b.size() && digit(b[j2])) ++j2;
      std::string_view x = a.substr(i, i2 - i), y = b.substr(j, j2 - j);
      while (x.size() > 1 && x.front() == '0') x.remove_prefix(1);
      while (y.size() > 1 && y.front() == '0') y.remove_prefix(1);
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      i = i2;
      j = j2;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

namespace {

// A number without trailing zeros or zero padding: 2, 2.5, 0.25, 120.
std::string plain_number(double v) {
  if (std::abs(v) < 1e-12) v = 0;  // never "-0"
  for (int d = 0; d <= 6; ++d) {
    const double p = std::pow(10.0, d);
    if (std::abs(std::round(v * p) / p - v) <= 1e-9 * std::max(1.0, std::abs(v))) return fmt::format("{:.{}f}", v, d);
  }
  return fmt::format("{:g}", v);
}

// 1, 2 or 5 x 10^k nearest above `raw`.
double nice_step(double raw) {
  const double e = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * e >= raw * (1 - 1e-9)) return m * e;
  return 10 * e;
}

std::vector<double> linear_ticks(double lo, double hi, int want) {
  std::vector<double> out;
  if (!(hi > lo)) return {lo};
  const double step = nice_step((hi - lo) / want);
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi * (1 + 1e-12); k += 1) out.push_back(k * step);
  return out;
}

}  // namespace

std::vector<std::pair<double, std::string>> latency_ticks(double lo, double hi) {
  std::vector<double> v;
  if (lo > 0 && hi >= lo && std::isfinite(hi)) {
    const int d0 = static_cast<int>(std::floor(std::log10(lo))), d1 = static_cast<int>(std::ceil(std::log10(hi)));
    auto log_ticks = [&](std::initializer_list<double> mant) {
      std::vector<double> t;
      for (int d = d0; d <= d1; ++d)
        for (double m : mant) {
          const double x = m * std::pow(10.0, d);
          if (x >= lo * (1 - 1e-9) && x <= hi * (1 + 1e-9)) t.push_back(x);
        }
      return t;
    };
    if (hi / lo < 10) {
      // Less than a decade: evenly spaced round values (5, 10, 15 ms) read better than 6, 7, 8, 9, 10.
      v = linear_ticks(lo, hi, 5);
      if (v.size() < 2) v = log_ticks({1, 2, 3, 4, 5, 6, 7, 8, 9});
    } else {
      v = log_ticks({1});
    }
    if (v.size() > 8) {  // many decades: every second (third, ...) one
      const std::size_t keep = (v.size() + 7) / 8;
      std::vector<double> thin;
      for (std::size_t i = 0; i < v.size(); i += keep) thin.push_back(v[i]);
      v = thin;
    }
    if (v.size() < 3) {
      auto t = log_ticks({1, 2, 5});
      if (t.size() < 3) {
        auto f = log_ticks({1, 2, 3, 4, 5, 6, 7, 8, 9});
        t = f.size() >= 3 && f.size() <= 8 ? f : t;
      }
      if (t.size() >= 3 && t.size() <= 8) v = t;
      else if (t.size() < 3) v = linear_ticks(lo, hi, 4);
    }
  }
  if (v.empty()) return {};
  // Each label in its own unit (10 us, 100 us, 1 ms on a log axis), never zero-padded.
  std::vector<std::pair<double, std::string>> out;
  for (double x : v) {
    const auto [unit, name] = x >= 1e9 * (1 - 1e-9)   ? std::pair{1e9, "s"}
                              : x >= 1e6 * (1 - 1e-9) ? std::pair{1e6, "ms"}
                              : x >= 1e3 * (1 - 1e-9) ? std::pair{1e3, "us"}
                                                      : std::pair{1.0, "ns"};
    out.emplace_back(x, plain_number(x / unit) + " " + name);
  }
  return out;
}

namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string fmt_ns(double ns) {
  if (ns >= 1e9) return fmt::format("{:.3f} s", ns / 1e9);
  if (ns >= 1e6) return fmt::format("{:.3f} ms", ns / 1e6);
  if (ns >= 1e3) return fmt::format("{:.2f} us", ns / 1e3);
  return fmt::format("{:.0f} ns", ns);
}

// An SVG that scales to the width of the page (its text with it).
std::string svg_open(double W, double H, const std::string& cls) {
  return fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" class="{}" viewBox="0 0 {} {}" width="100%" role="img">)", cls, W, H);
}

// Best-so-far against evaluations, with every ok evaluation as a dot coloured by operator; the
// curve ends at `final_ns` (the named best after re-measurement) when it is given.
std::string convergence_svg(const std::vector<HistoryPoint>& h, double final_ns, const std::string& final_label) {
  const double W = 1000, H = 320, L = 80, R = 190, T = 15, B = 40;
  std::vector<const HistoryPoint*> ok;
  for (const auto& p : h)
    if (p.latency_ns > 0 && std::isfinite(p.latency_ns)) ok.push_back(&p);
  if (ok.empty()) return "<p>No successful evaluation to plot.</p>";
  double lo = ok.front()->latency_ns, hi = lo;
  for (auto* p : ok) {
    lo = std::min(lo, p->latency_ns);
    hi = std::max(hi, p->latency_ns);
  }
  if (final_ns > 0) {
    lo = std::min(lo, final_ns);
    hi = std::max(hi, final_ns);
  }
  const double llo = std::log10(lo * 0.95), lhi = std::log10(std::max(hi, lo * 1.01) * 1.05);
  const double n = static_cast<double>(std::max<std::size_t>(1, h.empty() ? 1 : h.back().index + 1));
  auto X = [&](double i) { return L + (W - L - R) * (i / n); };
  auto Y = [&](double v) { return T + (H - T - B) * (1.0 - (std::log10(v) - llo) / (lhi - llo)); };
  std::map<std::string, int> colour;
  std::string s = svg_open(W, H, "chart convergence");
  s += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="#fafafa" stroke="#ccc"/>)", L, T, W - L - R, H - T - B);
  for (const auto& [v, label] : latency_ticks(std::pow(10, llo), std::pow(10, lhi))) {
    s += fmt::format(R"(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="#e4e4e4"/>)", L, Y(v), W - R, Y(v));
    s += fmt::format(R"(<text class="ytick" x="{}" y="{:.1f}" font-size="12" text-anchor="end">{}</text>)", L - 6, Y(v) + 4, label);
  }
  for (double v : linear_ticks(0, n, 5))
    s += fmt::format(R"(<text class="xtick" x="{:.1f}" y="{}" font-size="12" text-anchor="middle">{}</text>)", X(v), H - B + 15,
                     plain_number(v));
  s += fmt::format(R"(<text x="{}" y="{}" font-size="12" text-anchor="middle">evaluations ({} total)</text>)",
                   (L + W - R) / 2, H - 6, h.size());
  const std::size_t stride = std::max<std::size_t>(1, ok.size() / 3000);
  for (std::size_t i = 0; i < ok.size(); i += stride) {
    auto* p = ok[i];
    auto [it, _] = colour.emplace(p->op, static_cast<int>(colour.size()));
    s += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="1.8" fill="{}" fill-opacity="0.55"/>)",
                     X(static_cast<double>(p->index)), Y(p->latency_ns), kPalette[it->second % 10]);
  }
  std::string path;
  double best = INFINITY;
  for (auto* p : ok) {
    if (p->latency_ns < best) {
      const double x = X(static_cast<double>(p->index));
      if (std::isfinite(best)) path += fmt::format(" L{:.1f},{:.1f}", x, Y(best));
      best = p->latency_ns;
      path += fmt::format("{}{:.1f},{:.1f}", path.empty() ? "M" : " L", x, Y(best));
    }
  }
  path += fmt::format(" L{:.1f},{:.1f}", X(n), Y(best));
  if (final_ns > 0) path += fmt::format(" L{:.1f},{:.1f}", X(n), Y(final_ns));
  s += fmt::format(R"(<path class="best-so-far" d="{}" fill="none" stroke="#000" stroke-width="2"/>)", path);
  if (final_ns > 0)
    s += fmt::format(R"(<circle class="final-best" data-latency-ns="{}" cx="{:.1f}" cy="{:.1f}" r="5" fill="#000"><title>{}: {}</title></circle>)",
                     final_ns, X(n), Y(final_ns), markup_escape(final_label), fmt_ns(final_ns));
  int row = 0;
  for (const auto& [op, c] : colour) {
    s += fmt::format(R"(<circle cx="{}" cy="{}" r="5" fill="{}"/><text x="{}" y="{}" font-size="12">{}</text>)", W - R + 15,
                     T + 12 + 18 * row, kPalette[c % 10], W - R + 25, T + 16 + 18 * row, markup_escape(op));
    ++row;
  }
  s += fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#000" stroke-width="2"/><text x="{}" y="{}" font-size="12">best so far</text>)",
                   W - R + 8, T + 12 + 18 * row, W - R + 22, T + 12 + 18 * row, W - R + 25, T + 16 + 18 * row);
  if (final_ns > 0) {
    ++row;
    s += fmt::format(R"(<circle cx="{}" cy="{}" r="5" fill="#000"/><text x="{}" y="{}" font-size="12">{}</text>)", W - R + 15,
                     T + 12 + 18 * row, W - R + 25, T + 16 + 18 * row, markup_escape(final_label));
  }
  return s + "</svg>";
}

std::string histogram_svg(const std::vector<HistoryPoint>& h) {
  std::vector<double> v;
  for (const auto& p : h)
    if (p.latency_ns > 0 && std::isfinite(p.latency_ns)) v.push_back(std::log10(p.latency_ns));
  if (v.empty()) return "<p>No latencies.</p>";
  const auto [mn, mx] = std::minmax_element(v.begin(), v.end());
  const double lo = *mn, hi = std::max(*mx, lo + 1e-6);
  constexpr int bins = 40;
  std::vector<int> c(bins, 0);
  for (double x : v) c[std::min(bins - 1, static_cast<int>((x - lo) / (hi - lo) * bins))]++;
  const int top = *std::max_element(c.begin(), c.end());
  const double W = 1000, H = 220, L = 20, Rm = 20, B = 40, T = 10;
  std::string s = svg_open(W, H, "chart histogram");
  const double bw = (W - L - Rm) / bins;
  for (int i = 0; i < bins; ++i) {
    const double hh = (H - B - T) * c[i] / std::max(1, top);
    s += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="#1f77b4"><title>{}</title></rect>)", L + i * bw,
                     H - B - hh, bw - 1, hh, c[i]);
  }
  for (const auto& [x, label] : latency_ticks(std::pow(10, lo), std::pow(10, hi))) {
    const double px = L + (W - L - Rm) * (std::log10(x) - lo) / (hi - lo);
    s += fmt::format(R"(<line x1="{0:.1f}" y1="{1}" x2="{0:.1f}" y2="{2}" stroke="#999"/><text class="xtick" x="{0:.1f}" y="{3}" font-size="12" text-anchor="middle">{4}</text>)",
                     px, H - B, H - B + 4, H - B + 16, label);
  }
  s += fmt::format(R"(<text x="{}" y="{}" font-size="12" text-anchor="middle">latency (log scale), {} valid evaluations</text>)",
                   W / 2, H - 4, v.size());
  return s + "</svg>";
}

std::string engines_svg(const std::vector<EngineBar>& e) {
  if (e.empty()) return "<p>No per-engine figures from this runner.</p>";
  const double W = 1000, rowh = 26, L = 110, bar = 780;
  const double H = rowh * static_cast<double>(e.size()) + 10;
  std::string s = svg_open(W, H, "chart engines");
  for (std::size_t i = 0; i < e.size(); ++i) {
    const double y = 5 + rowh * static_cast<double>(i);
    const double u = std::clamp(e[i].utilisation, 0.0, 1.0);
    s += fmt::format(R"(<text x="0" y="{}" font-size="12">{}</text>)", y + 16, markup_escape(e[i].name));
    s += fmt::format(R"(<rect x="{}" y="{}" width="{:.1f}" height="18" fill="{}"/>)", L, y + 3, bar * u, kPalette[i % 10]);
    s += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="18" fill="none" stroke="#ccc"/>)", L, y + 3, bar);
    s += fmt::format(R"(<text x="{}" y="{}" font-size="12">{:.1f}%</text>)", L + bar + 10, y + 16, 100 * e[i].utilisation);
  }
  return s + "</svg>";
}

std::string gantt_svg(const std::vector<GanttSpan>& spans) {
  if (spans.empty()) return "<p>No timeline from this runner.</p>";
  std::map<std::string, long long> order;
  double end = 0;
  for (const auto& sp : spans) {
    auto [it, fresh] = order.emplace(sp.track, sp.order);
    if (!fresh && sp.order >= 0) it->second = sp.order;
    end = std::max(end, sp.start_us + sp.dur_us);
  }
  std::vector<std::string> tracks;
  for (const auto& [t, _] : order) tracks.push_back(t);
  // The trace's own order (engines, then DMA queues by number), else natural order (q2 before q10).
  std::sort(tracks.begin(), tracks.end(), [&](const std::string& a, const std::string& b) {
    const long long oa = order[a], ob = order[b];
    if ((oa >= 0) != (ob >= 0)) return oa >= 0;
    if (oa != ob) return oa < ob;
    return natural_less(a, b);
  });
  const double W = 1000, L = 90, rowh = 16, B = 34;
  const double H = rowh * static_cast<double>(tracks.size()) + B;
  auto X = [&](double t) { return L + (W - L - 20) * t / std::max(end, 1e-9); };
  std::string s = svg_open(W, H, "chart gantt");
  for (std::size_t i = 0; i < tracks.size(); ++i)
    s += fmt::format(R"(<text class="track" x="0" y="{}" font-size="11">{}</text>)", 12 + rowh * static_cast<double>(i),
                     markup_escape(tracks[i]));
  for (const auto& sp : spans) {
    const auto row = static_cast<double>(std::find(tracks.begin(), tracks.end(), sp.track) - tracks.begin());
    s += fmt::format(R"(<rect x="{:.2f}" y="{:.1f}" width="{:.2f}" height="{}" fill="{}"><title>{}</title></rect>)", X(sp.start_us),
                     2 + rowh * row, std::max(0.5, X(sp.start_us + sp.dur_us) - X(sp.start_us)), rowh - 3,
                     kPalette[static_cast<std::size_t>(row) % 10], markup_escape(sp.label));
  }
  const double axis = rowh * static_cast<double>(tracks.size()) + 4;
  for (double t : linear_ticks(0, end, 6))
    s += fmt::format(R"(<line x1="{0:.1f}" y1="{1}" x2="{0:.1f}" y2="{2}" stroke="#999"/><text class="xtick" x="{0:.1f}" y="{3}" font-size="11" text-anchor="middle">{4} us</text>)",
                     X(t), axis, axis + 4, axis + 16, plain_number(t));
  return s + "</svg>";
}

std::string table_html(const Table& t, const std::string& cls) {
  std::string s = "<div class=\"tw\"><table class=\"" + cls + "\">";
  if (!t.header.empty()) {
    s += "<tr>";
    for (const auto& h : t.header) s += "<th>" + markup_escape(h) + "</th>";
    s += "</tr>";
  }
  for (const auto& r : t.rows) {
    s += "<tr>";
    for (const auto& c : r) s += "<td>" + markup_escape(c) + "</td>";
    s += "</tr>";
  }
  return s + "</table></div>\n";
}

}  // namespace

std::string render_report(const ReportData& d) {
  std::string s = R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>)" +
                  markup_escape(d.title) + R"(</title>
<style>
body{font-family:system-ui,sans-serif;margin:16px 2vw;color:#222}
h1{font-size:22px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse} td,th{padding:2px 14px 2px 0;vertical-align:top;text-align:left}
th{border-bottom:1px solid #ccc;font-weight:600}
table.kv td:first-child{color:#555}
table.grid td{border-bottom:1px solid #eee}
.cols{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,520px),1fr));gap:0 32px}
table.grid{width:100%} td{overflow-wrap:break-word} table.grid td:first-child{white-space:nowrap}
code{font-size:12px} .tw{overflow-x:auto;max-width:100%}
svg.chart{display:block;width:100%;height:auto}
.warning{background:#fff3cd;border:1px solid #e0a800;padding:8px 12px;color:#5c4400}
.note{background:#e8f1fb;border:1px solid #7aa7d6;padding:8px 12px;color:#123}
pre{white-space:pre-wrap;word-break:break-all;background:#f6f6f6;padding:10px;overflow:auto;max-height:420px;font-size:12px}
</style></head><body>
)";
  s += "<h1>" + markup_escape(d.title) + "</h1>\n";
  if (!d.warning.empty()) s += "<p class=\"warning\" role=\"alert\"><strong>Warning:</strong> " + markup_escape(d.warning) + "</p>\n";
  if (!d.note.empty()) s += "<p class=\"note\" id=\"figures-note\"><strong>Note:</strong> " + markup_escape(d.note) + "</p>\n";
  s += "<section id=\"summary\"><h2>Summary</h2><table class=\"kv\">";
  for (const auto& [k, v] : d.summary) s += "<tr><td>" + markup_escape(k) + "</td><td>" + markup_escape(v) + "</td></tr>";
  s += "</table></section>\n<section id=\"baseline\"><h2>The winner against the default schedule</h2>\n";
  if (!d.baseline_text.empty()) s += "<p>" + markup_escape(d.baseline_text) + "</p>\n";
  if (!d.baseline.rows.empty()) s += table_html(d.baseline, "grid");
  s += "</section>\n<section id=\"verification\"><h2>Verification</h2>\n";
  if (!d.verification_text.empty()) s += "<p>" + markup_escape(d.verification_text) + "</p>\n";
  if (!d.verification.rows.empty()) s += table_html(d.verification, "grid");
  s += "</section>\n<h2>Convergence</h2>\n" + convergence_svg(d.history, d.final_ns, d.final_label);
  s += "\n<h2>Latency distribution</h2>\n" + histogram_svg(d.history);
  if (d.host) {
    s += "\n<div class=\"cols\"><section id=\"host-timing\"><h2>Timing of the best kernel on this CPU</h2>\n" + table_html(d.host_timing, "kv");
    s += "</section>\n<section id=\"host-program\"><h2>The program run on the host</h2>\n"
         "<p>The CPU runner executes the schedule's tile program (the instructions below) on this CPU and checks its "
         "outputs against the reference; these are the instructions it timed.</p>\n" +
         table_html(d.program, "grid") + "</section></div>";
  } else {
    s += "\n<h2>Engine utilisation of the best kernel</h2>\n" + engines_svg(d.engines);
    s += "\n<h2>Timeline of the best kernel</h2>\n";
    if (!d.trace_file.empty())
      s += "<p id=\"trace-link\">Full trace: <a href=\"" + markup_escape(d.trace_file) + "\">" + markup_escape(d.trace_file) +
           "</a> (Chrome trace / Perfetto format: open it in <a href=\"https://ui.perfetto.dev\">ui.perfetto.dev</a>).</p>\n";
    s += gantt_svg(d.spans);
  }
  s += "\n<section id=\"operators\"><h2>Operators</h2>\n";
  s += d.operators.rows.empty() ? std::string("<p>No operator proposed anything.</p>\n") : table_html(d.operators, "grid");
  s += "</section>\n<section id=\"llm\"><h2>LLM usage</h2>\n";
  if (!d.llm.rows.empty()) s += table_html(d.llm, "grid");
  s += "<p>" + markup_escape(d.llm_text.empty() ? "No LLM was used in this search." : d.llm_text) + "</p>\n";
  s += "</section>\n<h2>Best schedule</h2>\n<pre>" + markup_escape(d.schedule) + "</pre>";
  s += "\n<h2>Kernel</h2>\n<pre>" + markup_escape(d.kernel_text) + "</pre>";
  s += "\n<h2 id=\"nki\">" + markup_escape(d.nki_heading) + "</h2>\n";
  if (!d.nki_note.empty()) s += "<p>" + markup_escape(d.nki_note) + "</p>\n";
  s += "<pre>" + markup_escape(d.nki) + "</pre>\n</body></html>\n";
  return s;
}

std::vector<GanttSpan> spans_from_trace(const std::string& path, std::size_t limit) {
  std::ifstream in(path);
  if (!in) return {};
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) return {};
  const nlohmann::json* ev = &j;
  if (j.is_object() && j.contains("traceEvents")) ev = &j["traceEvents"];
  if (!ev->is_array()) return {};
  std::map<std::pair<long long, long long>, std::string> names;
  std::map<std::pair<long long, long long>, long long> sort_index;
  for (const auto& e : *ev) {
    if (!e.is_object() || e.value("ph", "") != "M" || !e.contains("args") || !e["args"].is_object()) continue;
    const auto key = std::make_pair(e.value("pid", 0LL), e.value("tid", 0LL));
    if (e.value("name", "") == "thread_name") names[key] = e["args"].value("name", "");
    if (e.value("name", "") == "thread_sort_index") sort_index[key] = e["args"].value("sort_index", -1LL);
  }
  std::vector<GanttSpan> out;
  for (const auto& e : *ev) {
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    const auto key = std::make_pair(e.value("pid", 0LL), e.value("tid", 0LL));
    auto it = names.find(key);
    const auto so = sort_index.find(key);
    out.push_back({it != names.end() ? it->second : fmt::format("track {}", key.second), e.value("ts", 0.0),
                   e.value("dur", 0.0), e.value("name", ""), so != sort_index.end() ? so->second : -1LL});
  }
  if (out.size() > limit) {
    std::vector<GanttSpan> thin;
    const double step = static_cast<double>(out.size()) / static_cast<double>(limit);
    for (std::size_t i = 0; i < limit; ++i) thin.push_back(out[static_cast<std::size_t>(static_cast<double>(i) * step)]);
    out = std::move(thin);
  }
  return out;
}

}  // namespace kevo::session
