#include "report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

namespace kevo::cli {

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

namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string fmt_ns(double ns) {
  if (ns >= 1e6) return fmt::format("{:.3f} ms", ns / 1e6);
  if (ns >= 1e3) return fmt::format("{:.2f} us", ns / 1e3);
  return fmt::format("{:.0f} ns", ns);
}

// Best-so-far against evaluations, with every ok evaluation as a dot coloured by operator.
std::string convergence_svg(const std::vector<HistoryPoint>& h) {
  const double W = 760, H = 300, L = 70, R = 150, T = 15, B = 35;
  std::vector<const HistoryPoint*> ok;
  for (const auto& p : h)
    if (p.latency_ns > 0 && std::isfinite(p.latency_ns)) ok.push_back(&p);
  if (ok.empty()) return "<p>No successful evaluation to plot.</p>";
  double lo = ok.front()->latency_ns, hi = lo;
  for (auto* p : ok) {
    lo = std::min(lo, p->latency_ns);
    hi = std::max(hi, p->latency_ns);
  }
  const double llo = std::log10(lo * 0.95), lhi = std::log10(std::max(hi, lo * 1.01) * 1.05);
  const double n = static_cast<double>(std::max<std::size_t>(1, h.empty() ? 1 : h.back().index + 1));
  auto X = [&](double i) { return L + (W - L - R) * (i / n); };
  auto Y = [&](double v) { return T + (H - T - B) * (1.0 - (std::log10(v) - llo) / (lhi - llo)); };
  std::map<std::string, int> colour;
  std::string s = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" role="img">)", W, H);
  s += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="#fafafa" stroke="#ccc"/>)", L, T, W - L - R, H - T - B);
  for (int k = 0; k <= 4; ++k) {
    const double lv = llo + (lhi - llo) * k / 4.0;
    s += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text>)", L - 4, Y(std::pow(10, lv)) + 4,
                     fmt_ns(std::pow(10, lv)));
  }
  s += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="middle">evaluations ({} total)</text>)",
                   (L + W - R) / 2, H - 8, h.size());
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
  s += fmt::format(R"(<path d="{}" fill="none" stroke="#000" stroke-width="2"/>)", path);
  int row = 0;
  for (const auto& [op, c] : colour) {
    s += fmt::format(R"(<circle cx="{}" cy="{}" r="5" fill="{}"/><text x="{}" y="{}" font-size="12">{}</text>)", W - R + 15,
                     T + 12 + 18 * row, kPalette[c % 10], W - R + 25, T + 16 + 18 * row, markup_escape(op));
    ++row;
  }
  s += fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#000" stroke-width="2"/><text x="{}" y="{}" font-size="12">best so far</text>)",
                   W - R + 8, T + 12 + 18 * row, W - R + 22, T + 12 + 18 * row, W - R + 25, T + 16 + 18 * row);
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
  const double W = 760, H = 220, L = 50, B = 35, T = 10;
  std::string s = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" role="img">)", W, H);
  const double bw = (W - L - 10) / bins;
  for (int i = 0; i < bins; ++i) {
    const double hh = (H - B - T) * c[i] / std::max(1, top);
    s += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="#1f77b4"/>)", L + i * bw,
                     H - B - hh, bw - 1, hh);
  }
  s += fmt::format(R"(<text x="{}" y="{}" font-size="11">{}</text>)", L, H - 18, fmt_ns(std::pow(10, lo)));
  s += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text>)", W - 10, H - 18, fmt_ns(std::pow(10, hi)));
  s += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="middle">latency (log scale), {} valid evaluations</text>)",
                   W / 2, H - 4, v.size());
  return s + "</svg>";
}

std::string engines_svg(const std::vector<EngineBar>& e) {
  if (e.empty()) return "<p>No per-engine figures from this runner.</p>";
  const double W = 760, rowh = 26;
  const double H = rowh * static_cast<double>(e.size()) + 10;
  std::string s = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" role="img">)", W, H);
  for (std::size_t i = 0; i < e.size(); ++i) {
    const double y = 5 + rowh * static_cast<double>(i);
    const double u = std::clamp(e[i].utilisation, 0.0, 1.0);
    s += fmt::format(R"(<text x="0" y="{}" font-size="12">{}</text>)", y + 16, markup_escape(e[i].name));
    s += fmt::format(R"(<rect x="90" y="{}" width="{:.1f}" height="18" fill="{}"/>)", y + 3, 560 * u, kPalette[i % 10]);
    s += fmt::format(R"(<rect x="90" y="{}" width="560" height="18" fill="none" stroke="#ccc"/>)", y + 3);
    s += fmt::format(R"(<text x="660" y="{}" font-size="12">{:.1f}%</text>)", y + 16, 100 * e[i].utilisation);
  }
  return s + "</svg>";
}

std::string gantt_svg(const std::vector<GanttSpan>& spans) {
  if (spans.empty()) return "<p>No timeline from this runner.</p>";
  std::vector<std::string> tracks;
  double end = 0;
  for (const auto& sp : spans) {
    if (std::find(tracks.begin(), tracks.end(), sp.track) == tracks.end()) tracks.push_back(sp.track);
    end = std::max(end, sp.start_us + sp.dur_us);
  }
  const double W = 900, L = 90, rowh = 16;
  const double H = rowh * static_cast<double>(tracks.size()) + 30;
  auto X = [&](double t) { return L + (W - L - 10) * t / std::max(end, 1e-9); };
  std::string s = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" role="img">)", W, H);
  for (std::size_t i = 0; i < tracks.size(); ++i)
    s += fmt::format(R"(<text x="0" y="{}" font-size="11">{}</text>)", 12 + rowh * static_cast<double>(i), markup_escape(tracks[i]));
  for (const auto& sp : spans) {
    const auto row = static_cast<double>(std::find(tracks.begin(), tracks.end(), sp.track) - tracks.begin());
    s += fmt::format(R"(<rect x="{:.2f}" y="{:.1f}" width="{:.2f}" height="{}" fill="{}"><title>{}</title></rect>)", X(sp.start_us),
                     2 + rowh * row, std::max(0.5, X(sp.start_us + sp.dur_us) - X(sp.start_us)), rowh - 3,
                     kPalette[static_cast<std::size_t>(row) % 10], markup_escape(sp.label));
  }
  s += fmt::format(R"(<text x="{}" y="{}" font-size="11">0</text><text x="{}" y="{}" font-size="11" text-anchor="end">{:.1f} us</text>)",
                   L, H - 6, W - 10, H - 6, end);
  return s + "</svg>";
}

}  // namespace

std::string render_report(const ReportData& d) {
  std::string s = R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>)" + markup_escape(d.title) + R"(</title>
<style>
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1000px}
h1{font-size:22px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse} td{padding:2px 12px 2px 0;vertical-align:top}
td:first-child{color:#555}
.warning{background:#fff3cd;border:1px solid #e0a800;padding:8px 12px;color:#5c4400}
pre{white-space:pre-wrap;word-break:break-all;background:#f6f6f6;padding:10px;overflow:auto;max-height:420px;font-size:12px}
</style></head><body>
)";
  s += "<h1>" + markup_escape(d.title) + "</h1>\n";
  if (!d.warning.empty()) s += "<p class=\"warning\" role=\"alert\"><strong>Warning:</strong> " + markup_escape(d.warning) + "</p>\n";
  s += "<table>";
  for (const auto& [k, v] : d.summary) s += "<tr><td>" + markup_escape(k) + "</td><td>" + markup_escape(v) + "</td></tr>";
  s += "</table>\n<h2>Convergence</h2>\n" + convergence_svg(d.history);
  s += "\n<h2>Latency distribution</h2>\n" + histogram_svg(d.history);
  s += "\n<h2>Engine utilisation of the best kernel</h2>\n" + engines_svg(d.engines);
  s += "\n<h2>Timeline of the best kernel</h2>\n" + gantt_svg(d.spans);
  s += "\n<h2>Best schedule</h2>\n<pre>" + markup_escape(d.schedule) + "</pre>";
  s += "\n<h2>Kernel</h2>\n<pre>" + markup_escape(d.kernel_text) + "</pre>";
  s += "\n<h2>NKI source of the best kernel</h2>\n<pre>" + markup_escape(d.nki) + "</pre>\n</body></html>\n";
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
  for (const auto& e : *ev)
    if (e.is_object() && e.value("ph", "") == "M" && e.value("name", "") == "thread_name" && e.contains("args"))
      names[{e.value("pid", 0LL), e.value("tid", 0LL)}] = e["args"].value("name", "");
  std::vector<GanttSpan> out;
  for (const auto& e : *ev) {
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    const auto key = std::make_pair(e.value("pid", 0LL), e.value("tid", 0LL));
    auto it = names.find(key);
    out.push_back({it != names.end() ? it->second : fmt::format("track {}", key.second), e.value("ts", 0.0),
                   e.value("dur", 0.0), e.value("name", "")});
  }
  if (out.size() > limit) {
    std::vector<GanttSpan> thin;
    const double step = static_cast<double>(out.size()) / static_cast<double>(limit);
    for (std::size_t i = 0; i < limit; ++i) thin.push_back(out[static_cast<std::size_t>(static_cast<double>(i) * step)]);
    out = std::move(thin);
  }
  return out;
}

}  // namespace kevo::cli
