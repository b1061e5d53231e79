// The schedule text of a flash nest: the flash statement, printed and parsed.
#include <fmt/format.h>

#include <algorithm>

#include "schedule/text.hpp"

namespace kevo::schedule::detail {

// flash NAME=yes|no ROW=INT KV=INT bufs=N psum=N skew=yes|no [qblock=N] [issue=ready|list]
// (qblock printed when not 1, issue when not steps)
std::string print_flash(const SpaceImpl& s, const Genome& g, const FlashSlot& f) {
  const std::string qb = lab(s, g, f.qblock);
  return fmt::format("flash {}={} {}={} {}={} bufs={} psum={} skew={}{}{}", f.name, v_of(s, g, f.gene) ? "yes" : "no", f.row,
                     lab(s, g, f.tile_row), f.kv, lab(s, g, f.tile_kv), lab(s, g, f.bufs), lab(s, g, f.psum_bufs),
                     v_of(s, g, f.skew) ? "yes" : "no", qb == "1" ? "" : " qblock=" + qb,
                     v_of(s, g, f.issue) == 0 ? "" : " issue=" + lab(s, g, f.issue));
}

void Parser::flash_stmt() {
  const FlashSlot* f = nullptr;
  std::vector<std::string> names;
  for (const auto& x : s_.flashes) names.push_back(x.name);
  bool first = true, row_set = false, kv_set = false;
  const auto yes_no = [&](int gene, const Tok& value, const std::string& what) {
    if (value.s != "yes" && value.s != "no") fail(value, fmt::format("bad value '{}' for {} (allowed: yes, no)", value.s, what));
    set(gene, value.s == "yes" ? 1 : 0);
  };
  pairs([&](const Tok& name, const Tok& value) {
    if (first) {
      first = false;
      for (const auto& x : s_.flashes)
        if (x.name == name.s) f = &x;
      if (!f)
        fail(name, names.empty() ? fmt::format("'{}': this kernel has no QKᵀ-softmax-PV pattern to run as flash attention", name.s)
                                 : fmt::format("unknown flash nest '{}' (allowed: {})", name.s, join(names, ", ")));
      yes_no(f->gene, value, "flash " + name.s);
      return;
    }
    // the index names come first (as print writes them), so an index called bufs or psum
    // still round-trips: each name is taken by the first slot it can fill
    if (name.s == f->row && !row_set) set_label(f->tile_row, value, "flash tile " + name.s), row_set = true;
    else if (name.s == f->kv && !kv_set) set_label(f->tile_kv, value, "flash tile " + name.s), kv_set = true;
    else if (name.s == "bufs") set_label(f->bufs, value, "flash bufs");
    else if (name.s == "psum") set_label(f->psum_bufs, value, "flash psum buffers");
    else if (name.s == "skew") yes_no(f->skew, value, "flash skew");
    else if (name.s == "qblock") set_label(f->qblock, value, "flash qblock");
    else if (name.s == "issue") set_label(f->issue, value, "flash issue");
    else fail(name, fmt::format("unknown flash option '{}' (allowed: {}, {}, bufs, psum, skew, qblock, issue)", name.s, f->row, f->kv));
  });
}

}  // namespace kevo::schedule::detail
