// The schedule text form: print (canonical, every gene) and parse (located errors). Grammar: docs/SCHEDULE.md.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "kevo/schedule/detail/plan.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/schedule/detail/structure.hpp"

namespace kevo::schedule {

namespace {

const Gene& gene(const SpaceImpl& s, int i) { return s.space.gene(static_cast<std::size_t>(i)); }
int v_of(const SpaceImpl& s, const Genome& g, int i) { return s.space.at(g, static_cast<std::size_t>(i)); }
const std::string& lab(const SpaceImpl& s, const Genome& g, int i) {
  return gene(s, i).labels[static_cast<std::size_t>(v_of(s, g, i))];
}

std::string operand_label(const SpaceImpl& s, const ContractSlot& c, int q) {
  return gene(s, c.stationary).labels[static_cast<std::size_t>(q)];
}

void print_contract(const SpaceImpl& s, const Genome& g, const ContractSlot& c, std::vector<std::string>& st) {
  std::string t = "tile", b = "block", o = "order";
  for (int cl : c.cls_list) {
    t += fmt::format(" {}={}", c.idx[static_cast<std::size_t>(cl)], lab(s, g, c.tile[cl]));
    b += fmt::format(" {}={}", c.idx[static_cast<std::size_t>(cl)], lab(s, g, c.block[cl]));
  }
  for (int gi : {c.order_b, c.order_t}) {
    const auto& gg = gene(s, gi);
    for (auto q : s.space.slots(g, static_cast<std::size_t>(gi))) o += " " + gg.labels[static_cast<std::size_t>(q)];
  }
  st.push_back(t);
  st.push_back(b);
  st.push_back(o);
  {
    // stationary X [out=pe_transpose]: the third value is operand out_tr_operand with the output
    // transposed on chip before the store
    const int sv = v_of(s, g, c.stationary);
    st.push_back(sv == kStationaryOutPe ? "stationary " + operand_label(s, c, c.out_tr_operand) + " out=pe_transpose"
                                        : "stationary " + lab(s, g, c.stationary));
  }
  std::string tr;
  for (int q = 0; q < 2; ++q)
    if (c.transpose[q] >= 0) tr += fmt::format(" {}={}", operand_label(s, c, q), lab(s, g, c.transpose[q]));
  if (!tr.empty()) st.push_back("transpose" + tr);
  for (int q = 0; q < 2; ++q)
    st.push_back(fmt::format("load {}@{} x{} dma={} q={}", operand_label(s, c, q), lab(s, g, c.load_level[q]),
                             lab(s, g, c.load_bufs[q]), lab(s, g, c.load_dma[q]), lab(s, g, c.load_q[q])));
  // acc psum xN zero=Z | acc sbuf xN dtype=fp32|out zero=Z (the dtype of SBUF partial sums)
  const int acc = v_of(s, g, c.acc);
  st.push_back(fmt::format("acc {} x{}{} zero={}", acc == 0 ? "psum" : "sbuf", lab(s, g, c.psum_bufs),
                           acc == 0 ? "" : acc == kAccSbufOut ? " dtype=out" : " dtype=fp32", lab(s, g, c.acc_zero)));
  st.push_back(fmt::format("store {}@{} x{} dma={} q={}", s.kernel.ops[static_cast<std::size_t>(c.op)].out,
                           lab(s, g, c.store_level), lab(s, g, c.store_bufs), lab(s, g, c.store_dma), lab(s, g, c.store_q)));
  st.push_back("evict " + lab(s, g, c.evict));
}

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
  if (v.window >= 0) st.push_back("window " + lab(s, g, v.window));
  if (v.chunk >= 0) st.push_back("chunk " + lab(s, g, v.chunk));
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string r;
  for (std::size_t i = 0; i < v.size(); ++i) r += (i ? sep : "") + v[i];
  return r;
}

// ---- parsing ----
struct Tok {
  std::string s;
  std::size_t pos;
  bool end_of_stmt = false;  // ';' or newline
};

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

struct ParseFail {
  std::size_t pos;
  std::string msg;
};

class Parser {
 public:
  Parser(const SpaceImpl& s, std::string_view text, Genome g) : s_(s), toks_(tokenize(text)), g_(std::move(g)), text_(text) {}

  Genome run() {
    int nest = 0;
    while (i_ < toks_.size()) {
      if (toks_[i_].end_of_stmt) {
        ++i_;
        continue;
      }
      const Tok& kw = toks_[i_++];
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
      const OpSlot& o = s_.ops[static_cast<std::size_t>(nest)];
      if (o.contract >= 0) contract_stmt(kw, s_.contracts[static_cast<std::size_t>(o.contract)], o);
      else vector_stmt(kw, s_.vectors[static_cast<std::size_t>(o.vec)], o);
      end_stmt();
    }
    return g_;
  }

 private:
  [[noreturn]] void fail(const Tok& t, std::string msg) { throw ParseFail{t.pos, std::move(msg)}; }
  const Tok& peek() const { return toks_[std::min(i_, toks_.size() - 1)]; }
  const Tok& word(const char* what) {
    const Tok& t = peek();
    if (t.end_of_stmt || t.s == "=" || t.s == "@" || t.s == ":")
      fail(t, fmt::format("expected {}, found {}", what, t.s.empty() ? "end of text" : t.end_of_stmt ? "end of statement" : "'" + t.s + "'"));
    ++i_;
    return t;
  }
  void expect(const char* sym) {
    const Tok& t = peek();
    if (t.s != sym) fail(t, fmt::format("expected '{}', found {}", sym, t.s.empty() || t.end_of_stmt ? "end of statement" : "'" + t.s + "'"));
    ++i_;
  }
  void end_stmt() {
    const Tok& t = peek();
    if (!t.end_of_stmt) fail(t, fmt::format("unexpected '{}': expected ';' or a new line", t.s));
  }
  std::string nest_names() const {
    std::vector<std::string> v;
    for (const auto& o : s_.ops) v.push_back(o.name);
    return join(v, ", ");
  }
  void set(int gi, int v) { s_.space.slots(g_, static_cast<std::size_t>(gi))[0] = v; }
  void set_label(int gi, const Tok& t, const std::string& what) {
    const auto& gg = gene(s_, gi);
    for (std::size_t q = 0; q < gg.labels.size(); ++q)
      if (gg.labels[q] == t.s) return set(gi, static_cast<int>(q));
    fail(t, fmt::format("bad value '{}' for {} (allowed: {})", t.s, what, join(gg.labels, ", ")));
  }
  template <class F>
  void pairs(F&& f) {
    int n = 0;
    while (!peek().end_of_stmt) {
      const Tok& name = word("name=value");
      expect("=");
      const Tok& value = word("a value");
      f(name, value);
      ++n;
    }
    if (n == 0) fail(peek(), "expected name=value pairs");
  }
  // Optional trailing options of load/store: xN, dma=G, q=N.
  void options(int bufs, int dma, int q, const std::string& what) {
    while (!peek().end_of_stmt) {
      const Tok& t = word("an option (xN, dma=..., q=N)");
      if (t.s.size() > 1 && t.s[0] == 'x') {
        Tok v = t;
        v.s = t.s.substr(1);
        v.pos = t.pos + 1;
        set_label(bufs, v, what + " buffers");
      } else if (t.s == "dma") {
        expect("=");
        set_label(dma, word("a DMA granularity"), what + " dma");
      } else if (t.s == "q") {
        expect("=");
        set_label(q, word("a queue count"), what + " queues");
      } else {
        fail(t, fmt::format("unknown option '{}' for {} (allowed: xN buffers, dma=tile|row|region, q=1|2|4)", t.s, what));
      }
    }
  }
  int cls_of(const ContractSlot& c, const Tok& t) {
    for (int cl : c.cls_list)
      if (c.idx[static_cast<std::size_t>(cl)] == t.s) return cl;
    std::vector<std::string> v;
    for (int cl : c.cls_list) v.push_back(c.idx[static_cast<std::size_t>(cl)]);
    fail(t, fmt::format("unknown index '{}' (allowed: {})", t.s, join(v, ", ")));
  }
  int operand_of(const ContractSlot& c, const Tok& t) {
    const auto& all = gene(s_, c.stationary).labels;
    const std::vector<std::string> labels(all.begin(), all.begin() + 2);  // not the out=pe_transpose value
    for (int q = 0; q < 2; ++q)
      if (labels[static_cast<std::size_t>(q)] == t.s) return q;
    fail(t, fmt::format("unknown operand '{}' (allowed: {})", t.s, join(labels, ", ")));
  }

  // flash NAME=yes|no [ROW=INT] [KV=INT] [bufs=N] [psum=N]
  void flash_stmt() {
    const FlashSlot* f = nullptr;
    std::vector<std::string> names;
    for (const auto& x : s_.flashes) names.push_back(x.name);
    bool first = true, row_set = false, kv_set = false;
    pairs([&](const Tok& name, const Tok& value) {
      if (first) {
        first = false;
        for (const auto& x : s_.flashes)
          if (x.name == name.s) f = &x;
        if (!f)
          fail(name, names.empty() ? fmt::format("'{}': this kernel has no QKᵀ-softmax-PV pattern to run as flash attention", name.s)
                                   : fmt::format("unknown flash nest '{}' (allowed: {})", name.s, join(names, ", ")));
        if (value.s != "yes" && value.s != "no")
          fail(value, fmt::format("bad value '{}' for flash {} (allowed: yes, no)", value.s, name.s));
        set(f->gene, value.s == "yes" ? 1 : 0);
        return;
      }
      // the index names come first (as print writes them), so an index called bufs or psum
      // still round-trips: each name is taken by the first slot it can fill
      if (name.s == f->row && !row_set) set_label(f->tile_row, value, "flash tile " + name.s), row_set = true;
      else if (name.s == f->kv && !kv_set) set_label(f->tile_kv, value, "flash tile " + name.s), kv_set = true;
      else if (name.s == "bufs") set_label(f->bufs, value, "flash bufs");
      else if (name.s == "psum") set_label(f->psum_bufs, value, "flash psum buffers");
      else fail(name, fmt::format("unknown flash option '{}' (allowed: {}, {}, bufs, psum)", name.s, f->row, f->kv));
    });
  }

  void contract_stmt(const Tok& kw, const ContractSlot& c, const OpSlot& o) {
    if (kw.s == "tile" || kw.s == "block") {
      pairs([&](const Tok& name, const Tok& value) {
        const int cl = cls_of(c, name);
        set_label(kw.s == "tile" ? c.tile[cl] : c.block[cl], value, kw.s + " " + name.s);
      });
    } else if (kw.s == "order") {
      const auto& gb = gene(s_, c.order_b);
      const auto& gt = gene(s_, c.order_t);
      std::vector<std::int32_t> pb, pt;
      const std::string allowed = fmt::format("{} block loops then {} tile loops, each once: {} | {}", gb.labels.size(),
                                              gt.labels.size(), join(gb.labels, " "), join(gt.labels, " "));
      while (!peek().end_of_stmt) {
        const Tok& t = word("a loop");
        const bool in_blocks = pb.size() < gb.labels.size();
        const auto& labels = in_blocks ? gb.labels : gt.labels;
        auto& dst = in_blocks ? pb : pt;
        const auto it = std::find(labels.begin(), labels.end(), t.s);
        if (it == labels.end() || std::find(dst.begin(), dst.end(), it - labels.begin()) != dst.end() ||
            pt.size() >= gt.labels.size())
          fail(t, fmt::format("bad loop '{}' in order (expected {})", t.s, allowed));
        dst.push_back(static_cast<std::int32_t>(it - labels.begin()));
      }
      if (pb.size() != gb.labels.size() || pt.size() != gt.labels.size())
        fail(peek(), fmt::format("incomplete order (expected {})", allowed));
      std::copy(pb.begin(), pb.end(), s_.space.slots(g_, static_cast<std::size_t>(c.order_b)).begin());
      std::copy(pt.begin(), pt.end(), s_.space.slots(g_, static_cast<std::size_t>(c.order_t)).begin());
    } else if (kw.s == "stationary") {
      const Tok& t = word("an operand");
      const int q = operand_of(c, t);
      set(c.stationary, q);
      if (!peek().end_of_stmt) {
        pairs([&](const Tok& name, const Tok& value) {
          if (name.s != "out") fail(name, fmt::format("unknown stationary option '{}' (allowed: out)", name.s));
          if (value.s != "strided" && value.s != "pe_transpose")
            fail(value, fmt::format("bad value '{}' for stationary out (allowed: strided, pe_transpose)", value.s));
          if (value.s == "pe_transpose") {
            if (c.out_tr_operand < 0)
              fail(value, fmt::format("out=pe_transpose is not offered for {}: no orientation wastes fewer stationary rows "
                                      "than {} stationary",
                                      s_.kernel.ops[static_cast<std::size_t>(c.op)].out, operand_label(s_, c, 0)));
            if (q != c.out_tr_operand)
              fail(value, fmt::format("with {} stationary the output tiles are already laid out like {}: its store needs no "
                                      "transpose",
                                      t.s, s_.kernel.ops[static_cast<std::size_t>(c.op)].out));
            set(c.stationary, kStationaryOutPe);
          }
        });
      }
    } else if (kw.s == "transpose") {
      pairs([&](const Tok& name, const Tok& value) {
        const int q = operand_of(c, name);
        if (c.transpose[q] < 0) fail(name, fmt::format("{} is already laid out with {} on rows: it needs no transpose", name.s, c.idx[2]));
        set_label(c.transpose[q], value, "transpose " + name.s);
      });
    } else if (kw.s == "load") {
      const Tok& t = word("an operand");
      const int q = operand_of(c, t);
      expect("@");
      set_label(c.load_level[q], word("a loop level"), "load level of " + t.s);
      options(c.load_bufs[q], c.load_dma[q], c.load_q[q], "load " + t.s);
    } else if (kw.s == "acc") {
      const Tok& kind = word("psum or sbuf");
      if (kind.s != "psum" && kind.s != "sbuf") fail(kind, fmt::format("bad value '{}' for acc (allowed: psum, sbuf)", kind.s));
      int acc = kind.s == "psum" ? 0 : 1;
      set(c.acc, acc);
      while (!peek().end_of_stmt) {
        const Tok& t = word("an option (xN, dtype=..., zero=...)");
        if (t.s == "dtype") {
          expect("=");
          const Tok& v = word("fp32 or out");
          if (v.s != "fp32" && v.s != "out") fail(v, fmt::format("bad value '{}' for acc dtype (allowed: fp32, out)", v.s));
          if (acc == 0 && v.s == "out")
            fail(v, "acc psum has no partial sums in SBUF to keep in the output dtype (dtype=out needs acc sbuf)");
          if (acc != 0) set(c.acc, v.s == "out" ? kAccSbufOut : 1);
        } else if (t.s == "zero") {
          expect("=");
          set_label(c.acc_zero, word("start or memset"), "acc zero");
        } else if (t.s.size() >= 2 && t.s[0] == 'x') {
          Tok v = t;
          v.s = t.s.substr(1);
          v.pos = t.pos + 1;
          set_label(c.psum_bufs, v, "acc buffers");
        } else {
          fail(t, fmt::format("unknown option '{}' for acc (allowed: xN PSUM buffers ({}), dtype=fp32|out, zero=start|memset)", t.s,
                              join(gene(s_, c.psum_bufs).labels, ", ")));
        }
      }
    } else if (kw.s == "store") {
      const Tok& t = word("the output tensor");
      if (t.s != o.name) fail(t, fmt::format("this nest stores '{}', not '{}'", o.name, t.s));
      expect("@");
      set_label(c.store_level, word("a loop level"), "store level");
      options(c.store_bufs, c.store_dma, c.store_q, "store");
    } else if (kw.s == "evict") {
      set_label(c.evict, word("an engine"), "evict");
    } else {
      fail(kw, fmt::format("unknown statement '{}' for contraction nest {} (allowed: nest, fuse, engine, stats, flash, tile, block, order, "
                           "stationary, transpose, load, acc, store, evict)",
                           kw.s, o.name));
    }
  }

  void vector_stmt(const Tok& kw, const VectorSlot& v, const OpSlot& o) {
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
    } else if (kw.s == "window" && v.window >= 0) {
      set_label(v.window, word("no, yes or fold"), "window");
    } else if (kw.s == "chunk" && v.chunk >= 0) {
      set_label(v.chunk, word("a chunk width"), "chunk");
    } else {
      fail(kw, fmt::format("unknown statement '{}' for nest {} (allowed: nest, fuse, engine, stats, flash, layout, tile, bufs, queues{})",
                           kw.s, o.name, v.window >= 0 ? ", window, chunk" : ""));
    }
  }

  const SpaceImpl& s_;
  std::vector<Tok> toks_;
  std::size_t i_ = 0;
  Genome g_;
  std::string_view text_;
};

}  // namespace

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
  for (const auto& f : s.flashes)
    lines.push_back(fmt::format("flash {}={} {}={} {}={} bufs={} psum={}", f.name, v_of(s, g, f.gene) ? "yes" : "no", f.row,
                                lab(s, g, f.tile_row), f.kv, lab(s, g, f.tile_kv), lab(s, g, f.bufs), lab(s, g, f.psum_bufs)));
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
    return unexpected(make_diagnostic(text, f.pos, std::move(file), f.msg));
  }
}

}  // namespace kevo::schedule
