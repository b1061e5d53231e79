// The canonical .kir printer. Parenthesises only where precedence requires, prints constants in
// shortest round-trip form, and declares each dimension's size at its first use.
#include <fmt/format.h>

#include <cmath>
#include <set>

#include "detail.hpp"
#include "kevo/ir/text.hpp"

namespace kevo::ir::detail {

namespace {

int prec(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::constant: return (e.value < 0 || std::signbit(e.value)) ? 4 : 5;
    case Expr::Kind::access:
    case Expr::Kind::index: return 5;
    case Expr::Kind::call:
      switch (e.fn) {
        case Fn::add:
        case Fn::sub: return 2;
        case Fn::mul:
        case Fn::div: return 3;
        case Fn::lt:
        case Fn::le:
        case Fn::gt:
        case Fn::ge:
        case Fn::eq:
        case Fn::ne: return 1;
        case Fn::neg: return 4;
        default: return 5;
      }
  }
  return 5;
}

std::string_view infix(Fn f) {
  switch (f) {
    case Fn::add: return "+";
    case Fn::sub: return "-";
    case Fn::mul: return "*";
    case Fn::div: return "/";
    case Fn::lt: return "<";
    case Fn::le: return "<=";
    case Fn::gt: return ">";
    case Fn::ge: return ">=";
    case Fn::eq: return "==";
    case Fn::ne: return "!=";
    default: return {};
  }
}

void print(const Expr& e, std::string& s);

void print_paren(const Expr& e, bool paren, std::string& s) {
  if (paren) s += '(';
  print(e, s);
  if (paren) s += ')';
}

void print(const Expr& e, std::string& s) {
  switch (e.kind) {
    case Expr::Kind::constant:
      if (std::isinf(e.value)) {
        s += e.value < 0 ? "-inf" : "inf";
      } else {
        s += fmt::format("{}", e.value);
      }
      return;
    case Expr::Kind::access:
      s += e.tensor;
      s += '[';
      for (std::size_t i = 0; i < e.indices.size(); ++i) {
        if (i) s += ", ";
        s += index_text(e, i);
      }
      s += ']';
      return;
    case Expr::Kind::index: s += e.index; return;
    case Expr::Kind::call: break;
  }
  const int p = prec(e);
  if (const auto op = infix(e.fn); !op.empty() && e.args.size() == 2) {
    const bool cmp = p == 1;
    print_paren(e.args[0], cmp ? prec(e.args[0]) <= p : prec(e.args[0]) < p, s);
    s += ' ';
    s += op;
    s += ' ';
    print_paren(e.args[1], prec(e.args[1]) <= p, s);
    return;
  }
  if (e.fn == Fn::neg && e.args.size() == 1) {
    s += '-';
    print_paren(e.args[0], prec(e.args[0]) < 4 || e.args[0].kind == Expr::Kind::constant, s);
    return;
  }
  if (e.fn == Fn::cast) {
    s += "cast<";
    s += to_string(e.dtype);
    s += '>';
  } else {
    s += to_string(e.fn);
  }
  s += '(';
  for (std::size_t i = 0; i < e.args.size(); ++i) {
    if (i) s += ", ";
    print(e.args[i], s);
  }
  s += ')';
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

}  // namespace

std::string print_expr(const Expr& e) {
  std::string s;
  print(e, s);
  return s;
}

std::string print_op(const Op& op) {
  std::string s = fmt::format("{}[{}] = ", op.out, join(op.out_indices));
  if (op.reduce != ReduceOp::none) {
    std::string body = print_expr(op.expr);
    // "max(j) -x" would read as the max function minus x
    if (body.starts_with("-")) body = "(" + body + ")";
    s += fmt::format("{}({}) {}", to_string(op.reduce), join(op.reduce_indices), body);
    return s;
  }
  std::string rhs = print_expr(op.expr);
  // "max(i, j) ..." at the start of a right-hand side would read as a reduction header
  if (rhs.starts_with("max(") || rhs.starts_with("min(")) rhs = "(" + rhs + ")";
  return s + rhs;
}

}  // namespace kevo::ir::detail

namespace kevo::ir {

std::string print_kernel(const Kernel& k) {
  std::set<std::string> sized;
  auto params = [&](Role role) {
    std::string s;
    bool first = true;
    for (const auto& t : k.tensors) {
      if (t.role != role) continue;
      if (!first) s += ", ";
      first = false;
      s += fmt::format("{}: {}[", t.name, to_string(t.dtype));
      for (std::size_t i = 0; i < t.dims.size(); ++i) {
        if (i) s += ", ";
        s += t.dims[i];
        if (sized.insert(t.dims[i]).second) {
          const Dim* d = k.dim(t.dims[i]);
          s += fmt::format("={}", d ? d->size : 0);
        }
      }
      s += ']';
    }
    return s;
  };
  std::string out = fmt::format("kernel {}(", k.name);
  out += params(Role::input);
  out += ") -> (";
  out += params(Role::output);
  out += ") {\n";
  for (const auto& op : k.ops) out += "  " + detail::print_op(op) + "\n";
  out += "}\n";
  return out;
}

}  // namespace kevo::ir
