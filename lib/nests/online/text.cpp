// The schedule text of an online-softmax nest: the online statement, printed and parsed.
#include <fmt/format.h>

#include "schedule/text.hpp"

namespace kevo::schedule::detail {

// online NAME=yes|no ROW=INT J=INT bufs=N queues=N [issue=ready|list] (issue printed when not steps)
std::string print_online(const SpaceImpl& s, const Genome& g, const OnlineSlot& o) {
  return fmt::format("online {}={} {}={} {}={} bufs={} queues={}{}", o.name, v_of(s, g, o.gene) ? "yes" : "no", o.row,
                     lab(s, g, o.tile_row), o.j, lab(s, g, o.tile_j), lab(s, g, o.bufs), lab(s, g, o.queues),
                     v_of(s, g, o.issue) == 0 ? "" : " issue=" + lab(s, g, o.issue));
}

void Parser::online_stmt() {
  const OnlineSlot* o = nullptr;
  std::vector<std::string> names;
  for (const auto& x : s_.onlines) names.push_back(x.name);
  bool first = true, row_set = false, j_set = false;
  pairs([&](const Tok& name, const Tok& value) {
    if (first) {
      first = false;
      for (const auto& x : s_.onlines)
        if (x.name == name.s) o = &x;
      if (!o)
        fail(name, names.empty() ? fmt::format("'{}': this kernel has no row max, exp and row sum to run as an online softmax", name.s)
                                 : fmt::format("unknown online nest '{}' (allowed: {})", name.s, join(names, ", ")));
      if (value.s != "yes" && value.s != "no")
        fail(value, fmt::format("bad value '{}' for online {} (allowed: yes, no)", value.s, name.s));
      set(o->gene, value.s == "yes" ? 1 : 0);
      return;
    }
    // the index names come first (as print writes them), so an index called bufs still round-trips
    if (name.s == o->row && !row_set) set_label(o->tile_row, value, "online tile " + name.s), row_set = true;
    else if (name.s == o->j && !j_set) set_label(o->tile_j, value, "online tile " + name.s), j_set = true;
    else if (name.s == "bufs") set_label(o->bufs, value, "online bufs");
    else if (name.s == "queues") set_label(o->queues, value, "online queues");
    else if (name.s == "issue") set_label(o->issue, value, "online issue");
    else fail(name, fmt::format("unknown online option '{}' (allowed: {}, {}, bufs, queues, issue)", name.s, o->row, o->j));
  });
}

}  // namespace kevo::schedule::detail
