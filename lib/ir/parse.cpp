// The .kir parser: a hand-written lexer and recursive-descent parser with bounded recursion.
// Syntax errors are reported here; names, shapes and index extents by the shared checker.
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>

#include "detail.hpp"
#include "kevo/ir/text.hpp"

namespace kevo::ir {

namespace {

using detail::kMaxExprDepth;

enum class Tok : std::uint8_t { ident, number, punct, end };

struct Token {
  Tok kind = Tok::end;
  std::string_view text;
  std::size_t pos = 0;
  int line = 0;
};

struct Fail {
  Diagnostic d;
};

std::string describe(const Token& t) {
  switch (t.kind) {
    case Tok::end: return "end of input";
    case Tok::ident: return fmt::format("'{}'", t.text);
    case Tok::number: return fmt::format("number {}", t.text);
    case Tok::punct: return fmt::format("'{}'", t.text);
  }
  return "?";
}

class Lexer {
 public:
  Lexer(std::string_view text, const std::string& file) : s_(text), file_(file) {}

  std::vector<Token> run() {
    std::vector<Token> out;
    int line = 1;
    std::size_t i = 0, last_end = 0;
    while (true) {
      while (i < s_.size()) {
        const char c = s_[i];
        if (c == '\n') {
          ++line;
          ++i;
        } else if (c == ' ' || c == '\t' || c == '\r') {
          ++i;
        } else if (c == '#') {
          while (i < s_.size() && s_[i] != '\n') ++i;
        } else {
          break;
        }
      }
      if (i >= s_.size()) {
        // point end-of-input errors just past the last token, where the missing text belongs
        if (!out.empty()) last_end = out.back().pos + out.back().text.size();
        int end_line = 1;
        for (std::size_t j = 0; j < last_end; ++j) end_line += s_[j] == '\n';
        out.push_back({Tok::end, {}, last_end, end_line});
        return out;
      }
      const char c = s_[i];
      const std::size_t start = i;
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        while (i < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i])) || s_[i] == '_')) ++i;
        if (i - start > detail::kMaxNameLength)
          fail(start, fmt::format("name is longer than {} characters", detail::kMaxNameLength));
        out.push_back({Tok::ident, s_.substr(start, i - start), start, line});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        while (i < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i]))) ++i;
        if (i < s_.size() && s_[i] == '.') {
          ++i;
          while (i < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i]))) ++i;
        }
        if (i < s_.size() && (s_[i] == 'e' || s_[i] == 'E')) {
          std::size_t j = i + 1;
          if (j < s_.size() && (s_[j] == '+' || s_[j] == '-')) ++j;
          if (j >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[j])))
            fail(j, "expected digits in the exponent of a number");
          i = j;
          while (i < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i]))) ++i;
        }
        if (i - start > 40) fail(start, "number is too long");
        out.push_back({Tok::number, s_.substr(start, i - start), start, line});
      } else {
        static constexpr std::string_view two[] = {"->", "<=", ">=", "==", "!="};
        std::size_t len = 0;
        for (auto t : two)
          if (s_.substr(i, 2) == t) len = 2;
        if (!len) {
          if (std::string_view("()[]{},:=+-*/<>").find(c) == std::string_view::npos) {
            const auto u = static_cast<unsigned char>(c);
            fail(start, u >= 0x20 && u < 0x7f ? fmt::format("unexpected character '{}'", c)
                                              : fmt::format("unexpected byte 0x{:02x}", u));
          }
          len = 1;
        }
        i += len;
        out.push_back({Tok::punct, s_.substr(start, len), start, line});
      }
    }
  }

 private:
  [[noreturn]] void fail(std::size_t pos, std::string msg) { throw Fail{make_diagnostic(s_, pos, file_, std::move(msg))}; }
  std::string_view s_;
  const std::string& file_;
};

// An expression under construction with the source position of each node (preorder) and its depth.
struct PExpr {
  Expr e;
  std::vector<std::size_t> locs;
  int depth = 1;
};

class Parser {
 public:
  Parser(std::string_view text, std::string file) : text_(text), file_(std::move(file)) {
    src_.text = text_;
    src_.file = file_;
  }

  Kernel run() {
    toks_ = Lexer(text_, file_).run();
    expect_word("kernel", "expected 'kernel' at the start of a kernel");
    const Token& name = expect_ident("expected the kernel name after 'kernel'");
    k_.name = std::string(name.text);
    src_.kernel_name = name.pos;
    expect("(", "expected '(' to open the kernel's input list");
    if (!is(")")) params(Role::input);
    expect(")", "expected ',' or ')' after an input declaration");
    expect("->", "expected '->' and the output list after the inputs");
    expect("(", "expected '(' to open the kernel's output list");
    params(Role::output);
    expect(")", "expected ',' or ')' after an output declaration");
    expect("{", "expected '{' to open the kernel body");
    while (!is("}")) {
      if (peek().kind == Tok::end) fail(peek(), "expected '}' to close the kernel body");
      statement();
    }
    next();
    if (peek().kind != Tok::end) fail(peek(), fmt::format("expected end of input after '}}', found {}", describe(peek())));
    return std::move(k_);
  }

  detail::SourceMap& source_map() { return src_; }

 private:
  [[noreturn]] void fail(const Token& t, std::string msg) { fail_at(t.pos, std::move(msg)); }
  [[noreturn]] void fail_at(std::size_t pos, std::string msg) {
    throw Fail{make_diagnostic(text_, pos, file_, std::move(msg))};
  }
  const Token& peek(std::size_t ahead = 0) const {
    const std::size_t i = std::min(p_ + ahead, toks_.size() - 1);
    return toks_[i];
  }
  const Token& next() {
    const Token& t = toks_[p_];
    if (p_ + 1 < toks_.size()) ++p_;
    return t;
  }
  bool is(std::string_view punct, std::size_t ahead = 0) const {
    const Token& t = peek(ahead);
    return t.kind == Tok::punct && t.text == punct;
  }
  const Token& expect(std::string_view punct, std::string_view msg) {
    if (!is(punct)) fail(peek(), fmt::format("{}, found {}", msg, describe(peek())));
    return next();
  }
  void expect_word(std::string_view w, std::string_view msg) {
    if (peek().kind != Tok::ident || peek().text != w) fail(peek(), fmt::format("{}, found {}", msg, describe(peek())));
    next();
  }
  const Token& expect_ident(std::string_view msg) {
    if (peek().kind != Tok::ident) fail(peek(), fmt::format("{}, found {}", msg, describe(peek())));
    if (!detail::is_identifier(peek().text))
      fail(peek(), fmt::format("'{}' is a reserved word and cannot be used as a name", peek().text));
    return next();
  }

  void params(Role role) {
    while (true) {
      const Token& n = expect_ident(role == Role::input ? "expected an input name such as 'A'"
                                                         : "expected an output name such as 'C'");
      Tensor t;
      t.name = std::string(n.text);
      t.role = role;
      src_.tensor_pos.push_back(n.pos);
      expect(":", fmt::format("expected ':' and a dtype after '{}'", t.name));
      const Token& dt = peek();
      const auto d = dt.kind == Tok::ident ? dtype_from_string(dt.text) : std::nullopt;
      if (!d) fail(dt, fmt::format("expected a dtype ({}), found {}", dtype_names(), describe(dt)));
      next();
      t.dtype = *d;
      expect("[", "expected '[' and the dimension list after the dtype");
      if (!is("]")) {
        while (true) {
          const Token& dn = expect_ident("expected a dimension name such as 'M' or 'M=128'");
          const std::string name(dn.text);
          if (t.dims.size() >= detail::kMaxRank)
            fail(dn, fmt::format("tensor '{}' has more than {} dimensions", t.name, detail::kMaxRank));
          if (is("=")) {
            next();
            const Token& sz = peek();
            std::int64_t v = 0;
            bool ok = sz.kind == Tok::number;
            if (ok) {
              auto [ptr, ec] = std::from_chars(sz.text.data(), sz.text.data() + sz.text.size(), v);
              ok = ec == std::errc() && ptr == sz.text.data() + sz.text.size();
            }
            if (!ok || v < 1 || v > detail::kMaxDimSize)
              fail(sz, fmt::format("expected the size of dimension {} (an integer in 1..{}), found {}", name,
                                   detail::kMaxDimSize, describe(sz)));
            next();
            if (const Dim* prev = k_.dim(name)) {
              if (prev->size != v)
                fail(sz, fmt::format("dimension {} is already declared with size {}; it cannot also be {}", name,
                                     prev->size, v));
            } else {
              k_.dims.push_back({name, v});
              src_.dim_pos.push_back(dn.pos);
            }
          } else if (!k_.dim(name)) {
            fail(dn, fmt::format("dimension '{}' has no size; give it at its first use as {}=<size>", name, name));
          }
          t.dims.push_back(name);
          if (!is(",")) break;
          next();
        }
      }
      expect("]", "expected ',' or ']' in the dimension list");
      if (k_.tensors.size() >= detail::kMaxTensors) fail(n, "too many tensors");
      k_.tensors.push_back(std::move(t));
      if (!is(",")) break;
      next();
    }
  }

  std::vector<std::string> index_list(std::vector<std::size_t>& pos, std::string_view close) {
    std::vector<std::string> r;
    if (is(close)) return r;
    while (true) {
      const Token& t = expect_ident("expected an index name such as 'i'");
      if (r.size() >= 16) fail(t, "too many indices");
      r.emplace_back(t.text);
      pos.push_back(t.pos);
      if (!is(",")) break;
      next();
    }
    return r;
  }

  // An integer token in 1..kMaxShift (a stride or an offset).
  std::int64_t shift_number(const Token& t, std::string_view what) {
    std::int64_t v = 0;
    bool ok = t.kind == Tok::number;
    if (ok) {
      auto [ptr, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
      ok = ec == std::errc() && ptr == t.text.data() + t.text.size();
    }
    if (!ok || v > detail::kMaxShift)
      fail(t, fmt::format("expected an integer {} in 0..{}, found {}", what, detail::kMaxShift, describe(t)));
    return v;
  }

  // An access's indices: plain names or shifted ones, stride*i + j + offset (w + f - 1, 2*h + r).
  void access_indices(Expr& e) {
    if (is("]")) return;
    std::vector<IndexShift> shifts;
    while (true) {
      if (e.indices.size() >= 16) fail(peek(), "too many indices");
      struct Term {
        std::string name;
        std::int64_t coef = 1;
        std::size_t pos = 0;
      };
      std::vector<Term> terms;
      std::int64_t offset = 0;
      const std::size_t start = peek().pos;
      bool minus = false;
      if (is("-")) {
        minus = true;
        next();
      }
      while (true) {
        const Token& t = peek();
        Term term;
        term.pos = t.pos;
        bool named = false;
        if (t.kind == Tok::number) {
          const std::int64_t v = shift_number(next(), "stride or offset");
          if (is("*")) {
            next();
            const Token& n = expect_ident("expected an index name after '*' (write 2*w)");
            if (v < 1) fail(t, fmt::format("the stride of index '{}' is {}; a stride is at least 1", n.text, v));
            term.name = std::string(n.text);
            term.coef = v;
            named = true;
          } else {
            offset += minus ? -v : v;
            if (offset < -detail::kMaxShift || offset > detail::kMaxShift)
              fail(t, fmt::format("index offset out of range (at most {} either way)", detail::kMaxShift));
          }
        } else if (t.kind == Tok::ident) {
          term.name = std::string(expect_ident("expected an index name such as 'i'").text);
          named = true;
          if (is("*")) {
            next();
            const Token& c = peek();
            const std::int64_t v = shift_number(next(), "stride");
            if (v < 1) fail(c, fmt::format("the stride of index '{}' is {}; a stride is at least 1", term.name, v));
            term.coef = v;
          }
        } else {
          fail(t, fmt::format("expected an index name such as 'i' or an index expression such as 'w + f - 1', "
                              "found {}",
                              describe(t)));
        }
        if (named) {
          if (minus)
            fail_at(term.pos, fmt::format("index '{}' is subtracted; indices are only added (stride*i + j + offset) and "
                                       "a negative shift is a constant, as in w - 1",
                                       term.name));
          for (const auto& o : terms)
            if (o.name == term.name)
              fail_at(term.pos, fmt::format("index '{}' appears twice in one index expression; write it once with a "
                                         "stride, as in 2*{}",
                                         term.name, term.name));
          if (terms.size() == 2)
            fail_at(term.pos, "an index expression adds at most two indices (stride*i + j + offset)");
          if (!terms.empty() && term.coef > 1 && terms[0].coef > 1)
            fail_at(term.pos, "at most one index of an index expression has a stride (2*w + f, not 2*w + 3*f)");
          terms.push_back(std::move(term));
        }
        if (!is("+") && !is("-")) break;
        minus = is("-");
        next();
      }
      if (terms.empty()) fail_at(start, "an index expression needs an index name (a constant position is not supported)");
      // the strided term is the main one; the other is added
      if (terms.size() == 2 && terms[1].coef > 1) std::swap(terms[0], terms[1]);
      IndexShift sh;
      sh.stride = terms[0].coef;
      sh.plus = terms.size() == 2 ? terms[1].name : std::string();
      sh.offset = offset;
      e.indices.push_back(terms[0].name);
      shifts.push_back(std::move(sh));
      if (!is(",")) break;
      next();
    }
    bool plain = true;
    for (const auto& sh : shifts) plain = plain && sh.plain();
    if (!plain) e.shifts = std::move(shifts);
  }

  void statement() {
    detail::OpLoc loc;
    Op op;
    const Token& out = expect_ident("expected a statement such as 'C[i, j] = ...'");
    loc.stmt = loc.out = out.pos;
    op.out = std::string(out.text);
    expect("[", fmt::format("expected '[' and the indices written of '{}'", op.out));
    op.out_indices = index_list(loc.out_idx, "]");
    expect("]", "expected ',' or ']' after an index");
    expect("=", "expected '=' after the written tensor");
    if (reduction_header()) {
      const Token& r = next();
      op.reduce = r.text == "sum" ? ReduceOp::sum : r.text == "max" ? ReduceOp::max
                 : r.text == "min"  ? ReduceOp::min : ReduceOp::mean;
      expect("(", "expected '('");
      if (is(")")) fail(peek(), fmt::format("expected the indices {} reduces over, such as {}(k)", r.text, r.text));
      op.reduce_indices = index_list(loc.red_idx, ")");
      expect(")", "expected ',' or ')' after a reduction index");
    } else if (peek().kind == Tok::ident && (peek().text == "sum" || peek().text == "mean") && is("(", 1)) {
      fail(peek(2), fmt::format("expected the index names '{}' reduces over, such as {}(k)", peek().text, peek().text));
    }
    PExpr e = expr();
    op.expr = std::move(e.e);
    loc.expr = std::move(e.locs);
    if (k_.ops.size() >= detail::kMaxOps) fail(out, "too many statements");
    k_.ops.push_back(std::move(op));
    src_.ops.push_back(std::move(loc));
  }

  // At the start of a right-hand side: sum(k) / mean(k) always; max(j) / min(j) only when an
  // operand (a name, number or '(') follows on the same line; otherwise it is the max/min function.
  bool reduction_header() const {
    const Token& t = peek();
    if (t.kind != Tok::ident || !is("(", 1)) return false;
    const bool always = t.text == "sum" || t.text == "mean";
    if (!always && t.text != "max" && t.text != "min") return false;
    std::size_t i = 2;
    while (true) {
      if (peek(i).kind != Tok::ident) return false;
      ++i;
      if (is(")", i)) break;
      if (!is(",", i)) return false;
      ++i;
    }
    if (always) return true;
    const Token& close = peek(i);
    const Token& after = peek(i + 1);
    if (after.line != close.line) return false;
    // '-' continues a call (max(i, j) - x); a reduction body that starts with a minus is parenthesised
    return after.kind == Tok::ident || after.kind == Tok::number || (after.kind == Tok::punct && after.text == "(");
  }

  static PExpr call(Fn fn, std::size_t pos, std::vector<PExpr> args) {
    PExpr r;
    r.e.kind = Expr::Kind::call;
    r.e.fn = fn;
    r.locs.push_back(pos);
    int d = 0;
    for (auto& a : args) {
      r.locs.insert(r.locs.end(), a.locs.begin(), a.locs.end());
      d = std::max(d, a.depth);
      r.e.args.push_back(std::move(a.e));
    }
    r.depth = d + 1;
    return r;
  }
  PExpr checked(PExpr e, std::size_t pos) {
    if (e.depth > kMaxExprDepth + 1)
      fail_at(pos, detail::nested_too_deep());
    return e;
  }

  PExpr expr() {
    PExpr l = additive();
    static constexpr std::pair<std::string_view, Fn> cmps[] = {{"<", Fn::lt},  {"<=", Fn::le}, {">", Fn::gt},
                                                               {">=", Fn::ge}, {"==", Fn::eq}, {"!=", Fn::ne}};
    for (const auto& [s, f] : cmps) {
      if (!is(s)) continue;
      const Token& op = next();
      PExpr r = additive();
      for (const auto& [s2, f2] : cmps)
        if (is(s2)) fail(peek(), "comparisons do not chain; add parentheses");
      std::vector<PExpr> a;
      a.push_back(std::move(l));
      a.push_back(std::move(r));
      return checked(call(f, op.pos, std::move(a)), op.pos);
    }
    return l;
  }

  PExpr additive() {
    PExpr l = term();
    while (is("+") || is("-")) {
      const Token& op = next();
      PExpr r = term();
      std::vector<PExpr> a;
      a.push_back(std::move(l));
      a.push_back(std::move(r));
      l = checked(call(op.text == "+" ? Fn::add : Fn::sub, op.pos, std::move(a)), op.pos);
    }
    return l;
  }

  PExpr term() {
    PExpr l = unary();
    while (is("*") || is("/")) {
      const Token& op = next();
      PExpr r = unary();
      std::vector<PExpr> a;
      a.push_back(std::move(l));
      a.push_back(std::move(r));
      l = checked(call(op.text == "*" ? Fn::mul : Fn::div, op.pos, std::move(a)), op.pos);
    }
    return l;
  }

  PExpr unary() {
    if (!is("-")) return primary();
    const Token& m = next();
    if (++nest_ > kMaxExprDepth) fail(m, detail::nested_too_deep());
    PExpr r;
    if (peek().kind == Tok::number || (peek().kind == Tok::ident && peek().text == "inf")) {
      r = primary();
      r.e.value = -r.e.value;
      r.locs[0] = m.pos;
    } else {
      std::vector<PExpr> a;
      a.push_back(unary());
      r = checked(call(Fn::neg, m.pos, std::move(a)), m.pos);
    }
    --nest_;
    return r;
  }

  PExpr primary() {
    const Token& t = peek();
    if (t.kind == Tok::number) {
      next();
      PExpr r;
      r.e.kind = Expr::Kind::constant;
      auto [ptr, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), r.e.value);
      if (ec != std::errc() || ptr != t.text.data() + t.text.size() || !std::isfinite(r.e.value))
        fail(t, fmt::format("number {} is out of range", t.text));
      r.locs.push_back(t.pos);
      return r;
    }
    if (is("(")) {
      next();
      if (++nest_ > kMaxExprDepth) fail(t, detail::nested_too_deep());
      PExpr r = expr();
      --nest_;
      expect(")", "expected ')' to close '('");
      return r;
    }
    if (t.kind != Tok::ident)
      fail(t, fmt::format("expected an expression (a tensor access, number, index or function call), found {}",
                          describe(t)));
    next();
    if (t.text == "inf") {
      PExpr r;
      r.e.kind = Expr::Kind::constant;
      r.e.value = std::numeric_limits<double>::infinity();
      r.locs.push_back(t.pos);
      return r;
    }
    if (t.text == "nan") fail(t, "NaN constants are not allowed");
    if (is("[")) {
      next();
      PExpr r;
      r.e.kind = Expr::Kind::access;
      r.e.tensor = std::string(t.text);
      access_indices(r.e);
      expect("]", "expected ',' or ']' after an index");
      r.locs.push_back(t.pos);
      return r;
    }
    if (t.text == "cast") {
      if (!is("<")) fail(peek(), fmt::format("expected '<' after 'cast' (write cast<bf16>(x)), found {}", describe(peek())));
      next();
      const Token& dt = peek();
      const auto d = dt.kind == Tok::ident ? dtype_from_string(dt.text) : std::nullopt;
      if (!d) fail(dt, fmt::format("expected a dtype ({}), found {}", dtype_names(), describe(dt)));
      next();
      expect(">", "expected '>' after the cast's dtype");
      auto args = arguments(t, 1, "cast");
      PExpr r = checked(call(Fn::cast, t.pos, std::move(args)), t.pos);
      r.e.dtype = *d;
      return r;
    }
    if (is("(")) {
      if (t.text == "sum" || t.text == "mean")
        fail(t, fmt::format("a reduction {}(...) may only begin a statement's right-hand side", t.text));
      const auto fn = fn_from_string(t.text);
      if (!fn)
        fail(t, fmt::format("unknown function '{}'; expected one of add, sub, mul, div, max, min, exp, log, tanh, "
                            "gelu, gelu_erf, silu, relu, sigmoid, rsqrt, sqrt, square, abs, neg, reciprocal, "
                            "cast<dtype>, select, lt, le, gt, ge, eq, ne",
                            t.text));
      auto args = arguments(t, fn_arity(*fn), t.text);
      return checked(call(*fn, t.pos, std::move(args)), t.pos);
    }
    PExpr r;
    r.e.kind = Expr::Kind::index;
    r.e.index = std::string(t.text);
    r.locs.push_back(t.pos);
    return r;
  }

  std::vector<PExpr> arguments(const Token& fn, int arity, std::string_view name) {
    expect("(", fmt::format("expected '(' after '{}'", name));
    if (++nest_ > kMaxExprDepth) fail(fn, detail::nested_too_deep());
    std::vector<PExpr> args;
    if (!is(")")) {
      while (true) {
        if (static_cast<int>(args.size()) >= arity)
          fail(peek(), fmt::format("function '{}' takes {} argument{}; expected ')'", name, arity, arity == 1 ? "" : "s"));
        args.push_back(expr());
        if (!is(",")) break;
        next();
      }
    }
    if (static_cast<int>(args.size()) < arity && is(")"))
      fail(peek(), fmt::format("function '{}' takes {} argument{}, got {}", name, arity, arity == 1 ? "" : "s",
                               args.size()));
    expect(")", fmt::format("expected ',' or ')' in the arguments of '{}'", name));
    --nest_;
    return args;
  }

  std::string_view text_;
  std::string file_;
  std::vector<Token> toks_;
  std::size_t p_ = 0;
  int nest_ = 0;
  Kernel k_;
  detail::SourceMap src_;
};

}  // namespace

Expected<Kernel, Diagnostic> parse_kernel(std::string_view text, std::string file) {
  if (file.empty()) file = "<string>";
  if (text.size() > detail::kMaxTextBytes)
    return unexpected(make_diagnostic(text.substr(0, 0), 0, file,
                                      fmt::format("kernel text is {} bytes; at most {} are accepted", text.size(),
                                                  detail::kMaxTextBytes)));
  try {
    Parser p(text, file);
    Kernel k = p.run();
    return detail::check(std::move(k), &p.source_map());
  } catch (Fail& f) {
    return unexpected(std::move(f.d));
  }
}

}  // namespace kevo::ir
