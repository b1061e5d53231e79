// The schedule text of a vector (row) nest: layout, tile, bufs, queues, window, chunk, hold and pad statements.
#include <fmt/format.h>

#include <algorithm>

#include "schedule/text.hpp"

namespace kevo::schedule::detail {

void print_vector(const SpaceImpl& s, const Genome& g, const VectorSlot& v, std::vector<std::string>& st) {
  const auto& l = lab(s, g, v.layout);
  const auto comma = l.find(',');
  st.push_back(fmt::format("layout p={} f={}", l.substr(0, comma), l.substr(comma + 1)));
  std::string t = "tile";
  for (std::size_t q = 0; q < v.dom.size(); ++q)
    if (v.tile[q] >= 0) t += fmt::format(" {}={}", v.dom[q], lab(s, g, v.tile[q]));
  if (t != "tile") st.push_back(t);
  st.push_back("bufs " + lab(s, g, v.bufs));
  st.push_back("queues " + lab(s, g, v.queues));
  if (v.issue >= 0 && v_of(s, g, v.issue) != 0) st.push_back("issue " + lab(s, g, v.issue));  // steps: unsaid
  if (v.window >= 0) st.push_back("window " + lab(s, g, v.window));
  if (v.chunk >= 0) st.push_back("chunk " + lab(s, g, v.chunk));
  if (v.hold >= 0) st.push_back("hold " + lab(s, g, v.hold));
  if (v.pad >= 0) st.push_back("pad " + lab(s, g, v.pad));
  if (v.transpose >= 0) st.push_back("transpose " + lab(s, g, v.transpose));
}

void Parser::vector_stmt(const Tok& kw, const VectorSlot& v, const OpSlot& o) {
  if (kw.s == "layout") {
    std::string p, f;
    std::size_t ppos = kw.pos;
    pairs([&](const Tok& name, const Tok& value) {
      if (name.s == "p") {
        p = value.s;
        ppos = value.pos;
      } else if (name.s == "f") {
        f = value.s;
      } else {
        fail(name, fmt::format("unknown layout key '{}' (allowed: p, f)", name.s));
      }
    });
    const std::string want = p + "," + f;
    const auto& gg = gene(s_, v.layout);
    std::vector<std::string> shown;
    for (const auto& l : gg.labels) {
      const auto c = l.find(',');
      shown.push_back("p=" + l.substr(0, c) + " f=" + l.substr(c + 1));
    }
    for (std::size_t q = 0; q < gg.labels.size(); ++q)
      if (gg.labels[q] == want) return set(v.layout, static_cast<int>(q));
    throw ParseFail{ppos, fmt::format("bad layout p={} f={} for nest {} (allowed: {})", p, f, o.name, join(shown, "; "))};
  } else if (kw.s == "tile") {
    pairs([&](const Tok& name, const Tok& value) {
      for (std::size_t q = 0; q < v.dom.size(); ++q)
        if (v.dom[q] == name.s && v.tile[q] >= 0) return set_label(v.tile[q], value, "tile " + name.s);
      std::vector<std::string> ok;
      for (std::size_t q = 0; q < v.dom.size(); ++q)
        if (v.tile[q] >= 0) ok.push_back(v.dom[q]);
      fail(name, fmt::format("unknown index '{}' (allowed: {})", name.s, join(ok, ", ")));
    });
  } else if (kw.s == "bufs") {
    set_label(v.bufs, word("a buffer count"), "bufs");
  } else if (kw.s == "queues") {
    set_label(v.queues, word("a queue count"), "queues");
  } else if (kw.s == "issue" && v.issue >= 0) {
    set_label(v.issue, word("steps, ready or list"), "issue");
  } else if (kw.s == "window" && v.window >= 0) {
    set_label(v.window, word("no, yes or fold"), "window");
  } else if (kw.s == "chunk" && v.chunk >= 0) {
    set_label(v.chunk, word("a chunk width"), "chunk");
  } else if (kw.s == "hold" && v.hold >= 0) {
    set_label(v.hold, word("sbuf or psum"), "hold");
  } else if (kw.s == "pad" && v.pad >= 0) {
    set_label(v.pad, word("tile or halo"), "pad");
  } else if (kw.s == "transpose" && v.transpose >= 0) {
    set_label(v.transpose, word("strided, dma_transpose or pe_transpose"), "transpose");
  } else {
    fail(kw, fmt::format("unknown statement '{}' for nest {} (allowed: nest, fuse, engine, stats, flash, layout, tile, bufs, queues, issue{})",
                         kw.s, o.name,
                         std::string(v.window >= 0 ? ", window, chunk, hold" : "") + (v.pad >= 0 ? ", pad" : "") +
                             (v.transpose >= 0 ? ", transpose" : "")));
  }
}

}  // namespace kevo::schedule::detail
