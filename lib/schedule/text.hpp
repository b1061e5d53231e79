// Private to the schedule module and lib/nests/*/text.cpp: the schedule text's shared parts (gene
// labels, the tokenizer, the Parser and its helpers); each nest kind prints and parses its own
// statements in lib/nests/<kind>/text.cpp (print_<kind>, Parser::<kind>_stmt). Grammar: docs/SCHEDULE.md.
#pragma once
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/schedule/detail/structure.hpp"
#include "kevo/schedule/space.hpp"

namespace kevo::schedule::detail {

inline const Gene& gene(const SpaceImpl& s, int i) { return s.space.gene(static_cast<std::size_t>(i)); }
inline int v_of(const SpaceImpl& s, const Genome& g, int i) { return s.space.at(g, static_cast<std::size_t>(i)); }
inline const std::string& lab(const SpaceImpl& s, const Genome& g, int i) {
  return gene(s, i).labels[static_cast<std::size_t>(v_of(s, g, i))];
}

inline std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string r;
  for (std::size_t i = 0; i < v.size(); ++i) r += (i ? sep : "") + v[i];
  return r;
}

// Each nest kind's statements as print writes them (lib/nests/<kind>/text.cpp).
void print_contract(const SpaceImpl& s, const Genome& g, const ContractSlot& c, std::vector<std::string>& st);
void print_vector(const SpaceImpl& s, const Genome& g, const VectorSlot& v, std::vector<std::string>& st);
std::string print_flash(const SpaceImpl& s, const Genome& g, const FlashSlot& f);
std::string print_online(const SpaceImpl& s, const Genome& g, const OnlineSlot& o);

// ---- parsing ----
struct Tok {
  std::string s;
  std::size_t pos;
  bool end_of_stmt = false;  // ';' or newline
};

std::vector<Tok> tokenize(std::string_view text);

struct ParseFail {
  std::size_t pos;
  std::string msg;
};

// Parses schedule text into a genome (defaults for what the text leaves out); ParseFail on error.
class Parser {
 public:
  Parser(const SpaceImpl& s, std::string_view text, Genome g) : s_(s), toks_(tokenize(text)), g_(std::move(g)), text_(text) {}

  Genome run();

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
  // A gene is set by one statement of the text, once: a repeated key or statement ("tile m=64
  // m=128", "load A@k x2; load A@m x4") is an error, not the last one silently winning.
  struct Seen {
    int gene, stmt;
    std::size_t label_pos;  // the value token that set it (set_label), or npos
  };
  std::vector<Seen> seen_;
  int stmt_ = 0;               // the statement being parsed (run() counts them)
  const Tok* stmt_kw_ = nullptr;  // its keyword
  Seen* seen(int gi) {
    for (auto& x : seen_)
      if (x.gene == gi) return &x;
    return nullptr;
  }
  // Records that this statement sets gene gi (an error when an earlier statement did).
  void mark(int gi) {
    if (Seen* x = seen(gi)) {
      if (x->stmt != stmt_)
        fail(stmt_kw_ ? *stmt_kw_ : peek(), fmt::format("'{}' is set twice: an earlier statement sets it already", gene(s_, gi).name));
    } else {
      seen_.push_back({gi, stmt_, std::string::npos});
    }
  }
  void set(int gi, int v) {
    mark(gi);
    s_.space.slots(g_, static_cast<std::size_t>(gi))[0] = v;
  }
  void set_label(int gi, const Tok& t, const std::string& what) {
    if (const Seen* x = seen(gi); x != nullptr && x->stmt == stmt_ && x->label_pos != std::string::npos && x->label_pos != t.pos)
      fail(t, fmt::format("{} is given twice in this statement", what));
    const auto& gg = gene(s_, gi);
    for (std::size_t q = 0; q < gg.labels.size(); ++q)
      if (gg.labels[q] == t.s) {
        set(gi, static_cast<int>(q));
        seen(gi)->label_pos = t.pos;
        return;
      }
    // values only the full space offers (DeriveOptions::every_structure) say where they are
    const bool full_only = !s_.options.every_structure &&
                           std::find(std::begin(kFullSpaceLabels), std::end(kFullSpaceLabels), t.s) != std::end(kFullSpaceLabels);
    fail(t, fmt::format("bad value '{}' for {} (allowed: {}){}", t.s, what, join(gg.labels, ", "),
                        full_only ? fmt::format("; '{}' is in the full space only (--space full)", t.s) : std::string()));
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
        fail(t, fmt::format("unknown option '{}' for {} (allowed: xN buffers, dma=tile|row|region (and pair: --space full), q=1|2|4)", t.s, what));
      }
    }
  }
  int cls_of(const ContractSlot& c, const Tok& t);
  int operand_of(const ContractSlot& c, const Tok& t);

  // flash NAME=yes|no [ROW=INT] [KV=INT] [bufs=N] [psum=N]
  void flash_stmt();
  // online NAME=yes|no [ROW=INT] [J=INT] [bufs=N] [queues=N] [issue=steps|ready|list]
  void online_stmt();

  void contract_stmt(const Tok& kw, const ContractSlot& c, const OpSlot& o);

  void vector_stmt(const Tok& kw, const VectorSlot& v, const OpSlot& o);

  const SpaceImpl& s_;
  std::vector<Tok> toks_;
  std::size_t i_ = 0;
  Genome g_;
  std::string_view text_;
};

}  // namespace kevo::schedule::detail
