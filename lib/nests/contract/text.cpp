// The schedule text of a contraction nest: tile, block, order, stationary, transpose, load, acc,
// store, evict, prologue and rows statements, printed and parsed.
#include <fmt/format.h>

#include <algorithm>

#include "schedule/text.hpp"

namespace kevo::schedule::detail {

namespace {

std::string operand_label(const SpaceImpl& s, const ContractSlot& c, int q) {
  return gene(s, c.stationary).labels[static_cast<std::size_t>(q)];
}

}  // namespace

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
    if (c.load_level[q] >= 0)  // (the implicit ones of a column sum are never loaded)
      st.push_back(fmt::format("load {}@{} x{} dma={} q={}", operand_label(s, c, q), lab(s, g, c.load_level[q]),
                             lab(s, g, c.load_bufs[q]), lab(s, g, c.load_dma[q]), lab(s, g, c.load_q[q])));
  // acc psum xN zero=Z | acc sbuf xN dtype=fp32|out zero=Z (the dtype of SBUF partial sums)
  const int acc = v_of(s, g, c.acc);
  st.push_back(fmt::format("acc {} x{}{} zero={}", acc == 0 ? "psum" : "sbuf", lab(s, g, c.psum_bufs),
                           acc == 0 ? "" : acc == kAccSbufOut ? " dtype=out" : " dtype=fp32", lab(s, g, c.acc_zero)));
  st.push_back(fmt::format("store {}@{} x{} dma={} q={}", s.kernel.ops[static_cast<std::size_t>(c.op)].out,
                           lab(s, g, c.store_level), lab(s, g, c.store_bufs), lab(s, g, c.store_dma), lab(s, g, c.store_q)));
  st.push_back("evict " + lab(s, g, c.evict));
  st.push_back("prologue " + lab(s, g, c.prologue));
  if (c.rest >= 0 && s.space.gene(static_cast<std::size_t>(c.rest)).labels.size() > 1) st.push_back("rest " + lab(s, g, c.rest));
  if (c.rows >= 0) st.push_back("rows " + lab(s, g, c.rows));
  if (c.kedge >= 0) st.push_back("kedge " + lab(s, g, c.kedge));
  if (c.sedge >= 0) st.push_back("sedge " + lab(s, g, c.sedge));
}

int Parser::cls_of(const ContractSlot& c, const Tok& t) {
  for (int cl : c.cls_list)
    if (c.idx[static_cast<std::size_t>(cl)] == t.s) return cl;
  std::vector<std::string> v;
  for (int cl : c.cls_list) v.push_back(c.idx[static_cast<std::size_t>(cl)]);
  fail(t, fmt::format("unknown index '{}' (allowed: {})", t.s, join(v, ", ")));
}

int Parser::operand_of(const ContractSlot& c, const Tok& t) {
  const auto& all = gene(s_, c.stationary).labels;
  const std::vector<std::string> labels(all.begin(), all.begin() + 2);  // not the out=pe_transpose value
  for (int q = 0; q < 2; ++q)
    if (labels[static_cast<std::size_t>(q)] == t.s) return q;
  fail(t, fmt::format("unknown operand '{}' (allowed: {})", t.s, join(labels, ", ")));
}

void Parser::contract_stmt(const Tok& kw, const ContractSlot& c, const OpSlot& o) {
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
    mark(c.order_b);
    mark(c.order_t);
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
    if (c.load_level[q] < 0)
      fail(t, fmt::format("'{}' is the implicit ones of the column sum {}: set in SBUF, never loaded", t.s,
                          s_.kernel.ops[static_cast<std::size_t>(c.op)].out));
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
    set_label(c.evict, word("an engine or alternate"), "evict");
  } else if (kw.s == "prologue") {
    set_label(c.prologue, word("own or spread"), "prologue");
  } else if (kw.s == "rest") {
    if (c.rest < 0)
      fail(kw, fmt::format("'rest' orders the tiles of blocks over k blocks, and {} = {} has one tile at every tile size: the gene "
                           "is not offered",
                           c.idx[2], c.ext[2]));
    set_label(c.rest, word("blocks or tiles"), "rest");
  } else if (kw.s == "rows") {
    if (c.rows < 0)
      fail(kw, fmt::format("'rows' orders the {} rows of a k block (and, in the full space, the output's with them), and {} = {} "
                           "has one tile at every tile size: the gene is not offered",
                           c.idx[2], c.idx[2], c.ext[2]));
    set_label(c.rows, word("a row order (natural, interleave, ...)"), "rows");
  } else if (kw.s == "kedge") {
    if (c.kedge < 0)
      fail(kw, fmt::format("'kedge' places the matmuls over a partial last {} tile in the PE array's row tiles, and {} = {} on this "
                           "target leaves none of at most 64 rows (or the target has no row tiling): the gene is not offered",
                           c.idx[2], c.idx[2], c.ext[2]));
    set_label(c.kedge, word("full or slices"), "kedge");
  } else if (kw.s == "sedge") {
    if (c.sedge < 0)
      fail(kw, fmt::format("'sedge' places the matmuls of the stationary's partial last tile in the PE array's column tiles, and "
                           "neither free extent ({} = {}, {} = {}) leaves one of at most 64 columns on this target (or the target has "
                           "no tiling mode): the gene is not offered",
                           c.idx[0], c.ext[0], c.idx[1], c.ext[1]));
    set_label(c.sedge, word("full or slices"), "sedge");
  } else {
    fail(kw, fmt::format("unknown statement '{}' for contraction nest {} (allowed: nest, fuse, engine, stats, flash, tile, block, order, "
                         "stationary, transpose, load, acc, store, evict, prologue, rest, rows, kedge, sedge)",
                         kw.s, o.name));
  }
}

}  // namespace kevo::schedule::detail
