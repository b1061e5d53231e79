// The schedule text form: print (canonical, every gene) and parse (located errors). Grammar: docs/SCHEDULE.md.
// The statements of each nest kind are printed and parsed in lib/nests/<kind>/text.cpp (text.hpp).
#include <fmt/format.h>

#include <cctype>

#include <algorithm>
#include <charconv>

#include "kevo/schedule/detail/plan.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/schedule/detail/structure.hpp"
#include "text.hpp"

namespace kevo::schedule {

namespace detail {

std::vector<Tok> tokenize(std::string_view text) {
  std::vector<Tok> out;
  std::size_t i = 0;
  while (i < text.size()) {
    const char ch = text[i];
    if (ch == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
      continue;
    }
    if (ch == '\n' || ch == ';') {
      out.push_back({std::string(1, ch), i, true});
      ++i;
      continue;
    }
    if (ch == ' ' || ch == '\t' || ch == '\r') {
      ++i;
      continue;
    }
    if (ch == '=' || ch == '@' || ch == ':') {
      out.push_back({std::string(1, ch), i, false});
      ++i;
      continue;
    }
    const std::size_t st = i;
    while (i < text.size() && std::string_view(" \t\r\n;#=@:").find(text[i]) == std::string_view::npos) ++i;
    out.push_back({std::string(text.substr(st, i - st)), st, false});
  }
  out.push_back({"", text.size(), true});
  return out;
}

Genome Parser::run() {
  int nest = 0;
  while (i_ < toks_.size()) {
    if (toks_[i_].end_of_stmt) {
      ++i_;
      continue;
    }
    const Tok& kw = toks_[i_++];
    ++stmt_;
    stmt_kw_ = &kw;
    if (kw.s == "nest") {
      const Tok& nm = word("a nest name");
      nest = -1;
      for (std::size_t q = 0; q < s_.ops.size(); ++q)
        if (s_.ops[q].name == nm.s) nest = static_cast<int>(q);
      if (nest < 0) fail(nm, fmt::format("unknown nest '{}' (nests: {})", nm.s, nest_names()));
      expect(":");
      continue;  // statements may follow on the same line
    }
    if (kw.s == "fuse" || kw.s == "engine" || kw.s == "stats") {
      pairs([&](const Tok& name, const Tok& value) {
        const OpSlot* o = nullptr;
        for (const auto& x : s_.ops)
          if (x.name == name.s) o = &x;
        if (!o) fail(name, fmt::format("unknown op '{}' (ops: {})", name.s, nest_names()));
        const int gi = kw.s == "fuse" ? o->fuse_gene : kw.s == "stats" ? o->stats_gene : o->engine_gene;
        if (gi < 0)
          fail(name, kw.s == "fuse"    ? fmt::format("'{}' cannot fuse into the nest before it", name.s)
                     : kw.s == "stats" ? fmt::format("'{}' is not a variance of a mean of the same values (mean(square(x - "
                                                     "mean(x)))), which bn_stats computes",
                                                     name.s)
                                       : fmt::format("'{}' is a contraction: its PSUM eviction engine is set by 'evict'", name.s));
        if (kw.s == "fuse") {
          if (value.s != "yes" && value.s != "no") fail(value, fmt::format("bad value '{}' for fuse {} (allowed: yes, no)", value.s, name.s));
          set(gi, value.s == "yes" ? 1 : 0);
        } else {
          set_label(gi, value, kw.s + " " + name.s);
        }
      });
      end_stmt();
      continue;
    }
    if (kw.s == "flash") {
      flash_stmt();
      end_stmt();
      continue;
    }
    if (kw.s == "online") {
      online_stmt();
      end_stmt();
      continue;
    }
    const OpSlot& o = s_.ops[static_cast<std::size_t>(nest)];
    if (o.contract >= 0) contract_stmt(kw, s_.contracts[static_cast<std::size_t>(o.contract)], o);
    else vector_stmt(kw, s_.vectors[static_cast<std::size_t>(o.vec)], o);
    end_stmt();
  }
  return g_;
}

}  // namespace detail

using namespace detail;

std::string ScheduleSpace::print(const Genome& g) const {
  const SpaceImpl& s = *impl_;
  if (!s.space.contains(g)) throw Error("kevo: ScheduleSpace::print: genome does not belong to this space");
  std::vector<std::string> lines;
  std::vector<std::string> fuse, eng, stats;
  for (const auto& o : s.ops) {
    if (o.fuse_gene >= 0) fuse.push_back(fmt::format("{}={}", o.name, v_of(s, g, o.fuse_gene) ? "yes" : "no"));
    if (o.engine_gene >= 0) eng.push_back(fmt::format("{}={}", o.name, lab(s, g, o.engine_gene)));
    if (o.stats_gene >= 0) stats.push_back(fmt::format("{}={}", o.name, lab(s, g, o.stats_gene)));
  }
  if (!fuse.empty()) lines.push_back("fuse " + join(fuse, " "));
  if (!eng.empty()) lines.push_back("engine " + join(eng, " "));
  if (!stats.empty()) lines.push_back("stats " + join(stats, " "));
  for (const auto& f : s.flashes) lines.push_back(print_flash(s, g, f));
  for (const auto& o : s.onlines) lines.push_back(print_online(s, g, o));
  for (const auto& o : s.ops) {
    std::vector<std::string> st;
    if (o.contract >= 0) print_contract(s, g, s.contracts[static_cast<std::size_t>(o.contract)], st);
    else print_vector(s, g, s.vectors[static_cast<std::size_t>(o.vec)], st);
    lines.push_back((s.ops.size() > 1 ? "nest " + o.name + ": " : std::string()) + join(st, "; "));
  }
  return join(lines, "\n") + "\n";
}

Expected<Genome, Diagnostic> ScheduleSpace::parse(std::string_view text, std::string file) const {
  try {
    Parser p(*impl_, text, impl_->defaults);
    return p.run();
  } catch (const ParseFail& f) {
    // a message echoes the offending token: a 2 MB token is shown by its start and its size
    constexpr std::size_t kMaxMessage = 400;
    std::string msg = f.msg;
    if (msg.size() > kMaxMessage) msg = msg.substr(0, kMaxMessage) + fmt::format("... ({} bytes in all)", f.msg.size());
    // a schedule written with the user's index where the space split it (a text from before the
    // split, or from the kernel's own names): say which indices it has instead
    const std::string tok(f.pos < text.size() ? text.substr(f.pos, text.find_first_of(";\n", f.pos) - f.pos) : std::string_view());
    const auto names = [&](const std::string& x) {  // x as a whole word of the failing statement
      const auto word = [&](std::size_t i) { return i >= tok.size() || !(std::isalnum(static_cast<unsigned char>(tok[i])) || tok[i] == '_'); };
      for (auto at = tok.find(x); at != std::string::npos; at = tok.find(x, at + 1))
        if ((at == 0 || word(at - 1)) && word(at + x.size())) return true;
      return false;
    };
    for (const auto& sp : impl_->splits)
      for (const auto& x : sp.indices)
        if (names(x.from)) {
          msg += fmt::format(" ({} is split across partitions here, {} = {}*{} + {}: schedules name {} and {}; docs/SCHEDULE.md)", x.from,
                             x.from, sp.inner, x.outer, x.inner, x.outer, x.inner);
          return unexpected(make_diagnostic(text, f.pos, std::move(file), msg));
        }
    for (const auto& m : impl_->merges)
      for (const auto& x : m.indices)
        if (names(x.first) || names(x.second)) {
          msg += fmt::format(" ({} and {} are held as one index here, {} = {}*{} + {}, before any split: `kevo space` names "
                             "the schedule's indices; docs/SCHEDULE.md)",
                             x.first, x.second, x.merged, m.inner, x.first, x.second);
          return unexpected(make_diagnostic(text, f.pos, std::move(file), msg));
        }
    return unexpected(make_diagnostic(text, f.pos, std::move(file), msg));
  }
}

}  // namespace kevo::schedule

