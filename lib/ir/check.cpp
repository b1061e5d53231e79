// Semantic checks shared by parse_kernel() and validate(): names, shapes, index extents,
// def-before-use, single assignment, and that every op contributes to an output (Boost.Graph).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "detail.hpp"
#include "kevo/ir/graph.hpp"
#include "kevo/core/hash.hpp"
#include "kevo/ir/text.hpp"

namespace kevo::ir::detail {

bool is_identifier(std::string_view s) noexcept {
  if (s.empty() || s.size() > kMaxNameLength) return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!alpha(s[0])) return false;
  for (char c : s)
    if (!alpha(c) && !(c >= '0' && c <= '9')) return false;
  return s != "inf" && s != "nan" && s != "cast";
}

namespace {

constexpr std::size_t npos = static_cast<std::size_t>(-1);

struct Fail {
  Diagnostic d;
};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

std::string access_text(const std::string& t, const std::vector<std::string>& idx) {
  return fmt::format("{}[{}]", t, join(idx));
}

std::string access_text(const Expr& e) {
  std::string s = e.tensor + "[";
  for (std::size_t i = 0; i < e.indices.size(); ++i) s += (i ? ", " : "") + index_text(e, i);
  return s + "]";
}

// Shifts that are all plain are dropped, so that equal kernels compare equal.
void canonical_shifts(Expr& e) {
  if (e.kind == Expr::Kind::access && is_plain(e)) e.shifts.clear();
  for (auto& a : e.args) canonical_shifts(a);
}

class Checker {
 public:
  Checker(Kernel& k, const SourceMap* src) : k_(k), src_(src) {}

  Kernel run() {
    if (!is_identifier(k_.name))
      fail(src_ ? src_->kernel_name : npos, fmt::format("invalid kernel name '{}'", k_.name));
    check_dims();
    check_tensors();
    if (k_.ops.size() > kMaxOps) fail(npos, fmt::format("too many statements ({} > {})", k_.ops.size(), kMaxOps));
    for (std::size_t i = 0; i < k_.ops.size(); ++i) check_op(i);
    finish();
    return std::move(k_);
  }

 private:
  [[noreturn]] void fail(std::size_t pos, std::string msg) {
    if (src_ && pos != npos) throw Fail{make_diagnostic(src_->text, pos, src_->file, std::move(msg))};
    Diagnostic d;
    d.loc.file = src_ ? src_->file : "<kernel " + k_.name + ">";
    if (cur_op_ && !src_) msg = fmt::format("in statement `{}`: {}", print_op(*cur_op_), msg);
    d.message = std::move(msg);
    throw Fail{std::move(d)};
  }
  std::size_t op_pos(std::size_t OpLoc::*m) const { return src_ && cur_ < src_->ops.size() ? src_->ops[cur_].*m : npos; }
  std::size_t vec_pos(std::vector<std::size_t> OpLoc::*m, std::size_t i) const {
    if (!src_ || cur_ >= src_->ops.size()) return npos;
    const auto& v = src_->ops[cur_].*m;
    return i < v.size() ? v[i] : npos;
  }

  void check_dims() {
    std::set<std::string, std::less<>> seen;
    for (std::size_t i = 0; i < k_.dims.size(); ++i) {
      const Dim& d = k_.dims[i];
      const std::size_t pos = src_ && i < src_->dim_pos.size() ? src_->dim_pos[i] : npos;
      if (!is_identifier(d.name)) fail(pos, fmt::format("invalid dimension name '{}'", d.name));
      if (!seen.insert(d.name).second) fail(pos, fmt::format("dimension '{}' is declared twice", d.name));
      if (d.size < 1 || d.size > kMaxDimSize)
        fail(pos, fmt::format("dimension {} has size {}; expected a size in 1..{}", d.name, d.size, kMaxDimSize));
    }
  }

  void check_tensors() {
    std::vector<Tensor> declared;
    bool seen_output = false;
    for (auto& t : k_.tensors) {
      if (t.role == Role::temp) {
        given_temps_.push_back(t);
        continue;
      }
      declared.push_back(t);
    }
    if (declared.size() > kMaxTensors) fail(npos, "too many tensors");
    std::set<std::string, std::less<>> names;
    for (std::size_t i = 0; i < declared.size(); ++i) {
      const Tensor& t = declared[i];
      const std::size_t pos = src_ && i < src_->tensor_pos.size() ? src_->tensor_pos[i] : npos;
      if (!is_identifier(t.name)) fail(pos, fmt::format("invalid tensor name '{}'", t.name));
      if (!names.insert(t.name).second) fail(pos, fmt::format("tensor '{}' is declared twice", t.name));
      if (t.role == Role::output) seen_output = true;
      if (t.role == Role::input && seen_output)
        fail(pos, fmt::format("input '{}' is listed after an output; inputs come first", t.name));
      if (t.dims.size() > kMaxRank)
        fail(pos, fmt::format("tensor '{}' has rank {}; at most {} dimensions are supported", t.name, t.dims.size(),
                              kMaxRank));
      std::int64_t elems = 1;
      for (const auto& d : t.dims) {
        const Dim* dd = k_.dim(d);
        if (!dd) fail(pos, fmt::format("tensor '{}' uses unknown dimension '{}'", t.name, d));
        elems *= dd->size;
        if (elems > kMaxElements)
          fail(pos, fmt::format("tensor '{}' has more than {} elements", t.name, kMaxElements));
      }
    }
    if (!seen_output) fail(npos, fmt::format("kernel '{}' has no outputs", k_.name));
    for (const auto& t : given_temps_)
      if (names.count(t.name)) fail(npos, fmt::format("temp '{}' has the name of a declared tensor", t.name));
    k_.tensors = std::move(declared);
    written_.assign(k_.tensors.size(), npos);
  }

  struct Binding {
    std::string dim;
    std::string where;
  };

  void bind(const std::string& idx, const std::string& dim, const std::string& where, std::size_t pos) {
    auto it = bound_.find(idx);
    if (it == bound_.end()) {
      bound_.emplace(idx, Binding{dim, where});
      return;
    }
    const std::int64_t a = k_.dim_size(it->second.dim), b = k_.dim_size(dim);
    if (a != b)
      fail(pos, fmt::format("index '{}' ranges over {}={} in {} but over {}={} in {}", idx, it->second.dim, a,
                            it->second.where, dim, b, where));
  }

  bool is_op_index(const std::string& i) const {
    const Op& op = *cur_op_;
    return std::find(op.out_indices.begin(), op.out_indices.end(), i) != op.out_indices.end() ||
           std::find(op.reduce_indices.begin(), op.reduce_indices.end(), i) != op.reduce_indices.end();
  }
  std::string index_help() const {
    const Op& op = *cur_op_;
    std::string s = fmt::format("the output indices ({})", join(op.out_indices));
    if (!op.reduce_indices.empty()) s += fmt::format(" or the reduction indices ({})", join(op.reduce_indices));
    return s;
  }

  std::optional<std::size_t> tensor_index(const std::string& name) const {
    for (std::size_t i = 0; i < k_.tensors.size(); ++i)
      if (k_.tensors[i].name == name) return i;
    return std::nullopt;
  }

  void walk(const Expr& e, int depth, std::size_t& node) {
    const std::size_t pos = vec_pos(&OpLoc::expr, node++);
    if (depth > kMaxExprDepth) fail(pos, nested_too_deep());
    switch (e.kind) {
      case Expr::Kind::access: {
        if (!e.args.empty()) fail(pos, "a tensor access has no arguments");
        const auto ti = tensor_index(e.tensor);
        if (e.tensor == cur_op_->out)
          fail(pos, fmt::format("statement reads '{}', the tensor it writes", e.tensor));
        if (!ti) {
          bool later = false;
          for (std::size_t j = cur_ + 1; j < k_.ops.size(); ++j) later = later || k_.ops[j].out == e.tensor;
          if (later) fail(pos, fmt::format("temp '{}' is read before it is written", e.tensor));
          std::vector<std::string> known;
          for (const auto& t : k_.tensors)
            if (t.role == Role::input || written_[static_cast<std::size_t>(&t - k_.tensors.data())] != npos)
              known.push_back(t.name);
          fail(pos, fmt::format("unknown tensor '{}'; readable here: {}", e.tensor, join(known)));
        }
        const Tensor& t = k_.tensors[*ti];
        if (t.role != Role::input && written_[*ti] == npos)
          fail(pos, fmt::format("output '{}' is read before it is written", e.tensor));
        if (e.indices.size() != t.dims.size())
          fail(pos, fmt::format("tensor '{}' has {} dimension{} [{}] but is indexed with {} ind{}", t.name,
                                t.dims.size(), t.dims.size() == 1 ? "" : "s", join(t.dims), e.indices.size(),
                                e.indices.size() == 1 ? "ex" : "ices"));
        const std::string where = access_text(e);
        if (!e.shifts.empty() && e.shifts.size() != e.indices.size())
          fail(pos, fmt::format("{} has {} index shifts for {} indices", where, e.shifts.size(), e.indices.size()));
        if (!is_plain(e) && t.role != Role::input)
          fail(pos, fmt::format("{} reads {} '{}' with a shifted or strided index; only inputs may be read so (a "
                                "read outside an input is zero)",
                                where, t.role == Role::temp ? "temp" : "output", t.name));
        for (std::size_t i = 0; i < e.indices.size(); ++i) {
          if (!is_op_index(e.indices[i]))
            fail(pos, fmt::format("index '{}' in {} is not one of {}", e.indices[i], where, index_help()));
          const IndexShift sh = i < e.shifts.size() ? e.shifts[i] : IndexShift{};
          if (sh.plain()) {
            bind(e.indices[i], t.dims[i], where, pos);
            continue;
          }
          if (sh.stride < 1 || sh.stride > kMaxShift)
            fail(pos, fmt::format("index {} in {} has stride {}; a stride is an integer in 1..{}", index_text(e, i),
                                  where, sh.stride, kMaxShift));
          if (sh.offset < -kMaxShift || sh.offset > kMaxShift)
            fail(pos, fmt::format("index {} in {} has offset {}; an offset lies in -{}..{}", index_text(e, i), where,
                                  sh.offset, kMaxShift, kMaxShift));
          if (!sh.plus.empty()) {
            if (!is_op_index(sh.plus))
              fail(pos, fmt::format("index '{}' in {} is not one of {}", sh.plus, where, index_help()));
            if (sh.plus == e.indices[i])
              fail(pos, fmt::format("index {} in {} adds '{}' to itself; write {}*{}", index_text(e, i), where,
                                    sh.plus, sh.stride + 1, sh.plus));
          }
          shifted_.push_back({e.indices[i], where, pos});
          if (!sh.plus.empty()) shifted_.push_back({sh.plus, where, pos});
        }
        reads_.insert(*ti);
        break;
      }
      case Expr::Kind::constant:
        if (std::isnan(e.value)) fail(pos, "constant is NaN");
        if (!e.args.empty()) fail(pos, "a constant has no arguments");
        break;
      case Expr::Kind::index:
        if (!is_op_index(e.index)) fail(pos, fmt::format("index '{}' is not one of {}", e.index, index_help()));
        if (!e.args.empty()) fail(pos, "an index has no arguments");
        break;
      case Expr::Kind::call: {
        const int ar = fn_arity(e.fn);
        if (ar == 0) fail(pos, "unknown function");
        if (static_cast<int>(e.args.size()) != ar)
          fail(pos, fmt::format("function '{}' takes {} argument{}, got {}", to_string(e.fn), ar, ar == 1 ? "" : "s",
                                e.args.size()));
        for (const auto& a : e.args) walk(a, depth + 1, node);
        break;
      }
    }
  }

  void check_op(std::size_t i) {
    cur_ = i;
    Op& op = k_.ops[i];
    cur_op_ = &op;
    bound_.clear();
    const std::size_t out_pos = op_pos(&OpLoc::out);
    if (!is_identifier(op.out)) fail(out_pos, fmt::format("invalid tensor name '{}'", op.out));
    auto ti = tensor_index(op.out);
    if (ti && k_.tensors[*ti].role == Role::input) fail(out_pos, fmt::format("cannot write input '{}'", op.out));
    if (ti && written_[*ti] != npos) {
      const std::size_t first = written_[*ti];
      std::string where = fmt::format("statement {}", first + 1);
      if (src_ && first < src_->ops.size())
        where = fmt::format("line {}", make_diagnostic(src_->text, src_->ops[first].stmt, "", "").loc.line);
      fail(out_pos, fmt::format("tensor '{}' is written twice (first at {})", op.out, where));
    }
    if (op.out_indices.size() > kMaxRank)
      fail(out_pos, fmt::format("'{}' is written with {} indices; at most {} are supported", op.out,
                                op.out_indices.size(), kMaxRank));
    for (std::size_t j = 0; j < op.out_indices.size(); ++j) {
      const auto& x = op.out_indices[j];
      if (!is_identifier(x)) fail(vec_pos(&OpLoc::out_idx, j), fmt::format("invalid index name '{}'", x));
      for (std::size_t m = 0; m < j; ++m)
        if (op.out_indices[m] == x)
          fail(vec_pos(&OpLoc::out_idx, j),
               fmt::format("index '{}' appears twice in {}", x, access_text(op.out, op.out_indices)));
    }
    if ((op.reduce == ReduceOp::none) != op.reduce_indices.empty())
      fail(op_pos(&OpLoc::stmt), op.reduce == ReduceOp::none ? "reduction indices given without a reduction"
                                                             : "a reduction needs at least one index");
    for (std::size_t j = 0; j < op.reduce_indices.size(); ++j) {
      const auto& x = op.reduce_indices[j];
      const std::size_t p = vec_pos(&OpLoc::red_idx, j);
      if (!is_identifier(x)) fail(p, fmt::format("invalid index name '{}'", x));
      if (std::find(op.out_indices.begin(), op.out_indices.end(), x) != op.out_indices.end())
        fail(p, fmt::format("reduction index '{}' is also an output index of {}", x,
                            access_text(op.out, op.out_indices)));
      for (std::size_t m = 0; m < j; ++m)
        if (op.reduce_indices[m] == x) fail(p, fmt::format("reduction index '{}' is listed twice", x));
    }
    if (ti) {
      const Tensor& t = k_.tensors[*ti];
      if (op.out_indices.size() != t.dims.size())
        fail(out_pos, fmt::format("output '{}' has {} dimension{} [{}] but is written with {} ind{}", t.name,
                                  t.dims.size(), t.dims.size() == 1 ? "" : "s", join(t.dims), op.out_indices.size(),
                                  op.out_indices.size() == 1 ? "ex" : "ices"));
      const std::string where = access_text(op.out, op.out_indices);
      for (std::size_t j = 0; j < op.out_indices.size(); ++j) bind(op.out_indices[j], t.dims[j], where, out_pos);
    }
    std::size_t node = 0;
    canonical_shifts(op.expr);
    shifted_.clear();
    walk(op.expr, 0, node);
    // an index used only inside shifted positions has no extent (a shifted read may leave the tensor)
    for (const auto& sh : shifted_)
      if (!bound_.count(sh.index))
        fail(sh.pos, fmt::format("index '{}' is used only in shifted positions ({}), so its extent is unknown; "
                                 "use it plainly in the output or another access",
                                 sh.index, sh.where));
    for (std::size_t j = 0; j < op.reduce_indices.size(); ++j)
      if (!bound_.count(op.reduce_indices[j]))
        fail(vec_pos(&OpLoc::red_idx, j),
             fmt::format("reduction index '{}' is not used by any tensor access, so its extent is unknown",
                         op.reduce_indices[j]));
    if (!ti) {
      // a new temp: shape from the extents its indices take on the right-hand side; held in fp32,
      // or in T when the whole right-hand side is cast<T>(...) (its values are T's already)
      if (k_.tensors.size() >= kMaxTensors) fail(out_pos, "too many tensors");
      Tensor t{op.out, op.temp_dtype(), {}, Role::temp};
      for (std::size_t j = 0; j < op.out_indices.size(); ++j) {
        auto it = bound_.find(op.out_indices[j]);
        if (it == bound_.end())
          fail(vec_pos(&OpLoc::out_idx, j),
               fmt::format("cannot infer the extent of index '{}' of temp '{}': no tensor access on the right-hand "
                           "side uses it",
                           op.out_indices[j], op.out));
        t.dims.push_back(it->second.dim);
      }
      for (const auto& g : given_temps_) {
        if (g.name != t.name) continue;
        bool same = g.dims.size() == t.dims.size();
        for (std::size_t j = 0; same && j < g.dims.size(); ++j)
          same = k_.dim(g.dims[j]) && k_.dim_size(g.dims[j]) == k_.dim_size(t.dims[j]);
        if (!same)
          fail(out_pos, fmt::format("temp '{}' is declared with dims [{}] but its statement gives it [{}]", t.name,
                                    join(g.dims), join(t.dims)));
        if (g.dtype != t.dtype)
          fail(out_pos, fmt::format("temp '{}' is declared {} but its statement makes it {} (a temp is fp32, or T "
                                    "when its right-hand side is cast<T>(...))",
                                    t.name, to_string(g.dtype), to_string(t.dtype)));
      }
      k_.tensors.push_back(std::move(t));
      written_.push_back(i);
    } else {
      written_[*ti] = i;
    }
    cur_op_ = nullptr;
  }

  void finish() {
    cur_ = npos;
    for (std::size_t i = 0; i < k_.tensors.size(); ++i) {
      const Tensor& t = k_.tensors[i];
      const std::size_t pos = src_ && i < src_->tensor_pos.size() ? src_->tensor_pos[i] : npos;
      if (t.role == Role::output && written_[i] == npos) fail(pos, fmt::format("output '{}' is never written", t.name));
      if (t.role == Role::input && !reads_.count(i)) fail(pos, fmt::format("input '{}' is never read", t.name));
    }
    for (const auto& g : given_temps_)
      if (!k_.tensor(g.name)) fail(npos, fmt::format("temp '{}' is declared but never written", g.name));
    const auto unused = unused_ops(k_);
    if (!unused.empty()) {
      const std::size_t u = unused.front();
      cur_ = u;
      fail(op_pos(&OpLoc::stmt),
           fmt::format("the result of statement `{}` never reaches an output", print_op(k_.ops[u])));
    }
    // canonical dimension order: first use in the signature
    std::vector<Dim> dims;
    for (const auto& t : k_.tensors)
      for (const auto& d : t.dims)
        if (std::none_of(dims.begin(), dims.end(), [&](const Dim& x) { return x.name == d; }))
          dims.push_back(*k_.dim(d));
    for (std::size_t i = 0; i < k_.dims.size(); ++i)
      if (std::none_of(dims.begin(), dims.end(), [&](const Dim& x) { return x.name == k_.dims[i].name; }))
        fail(src_ && i < src_->dim_pos.size() ? src_->dim_pos[i] : npos,
             fmt::format("dimension '{}' is declared but no tensor uses it", k_.dims[i].name));
    k_.dims = std::move(dims);
  }

  Kernel& k_;
  const SourceMap* src_;
  std::vector<Tensor> given_temps_;
  std::vector<std::size_t> written_;  // per tensor: op that writes it (npos: none yet)
  std::set<std::size_t> reads_;
  std::map<std::string, Binding> bound_;
  struct Shifted {
    std::string index, where;
    std::size_t pos;
  };
  std::vector<Shifted> shifted_;  // indices seen in shifted positions of the current statement
  std::size_t cur_ = npos;
  const Op* cur_op_ = nullptr;
};

}  // namespace

Expected<Kernel, Diagnostic> check(Kernel k, const SourceMap* src) {
  try {
    Checker c(k, src);
    return c.run();
  } catch (Fail& f) {
    return unexpected(std::move(f.d));
  }
}

}  // namespace kevo::ir::detail

namespace kevo::ir {

Expected<Kernel, Diagnostic> validate(Kernel k) { return detail::check(std::move(k), nullptr); }

std::uint64_t kernel_hash(const Kernel& k) { return StableHasher{}.str("kevo.kir.v1").str(print_kernel(k)).digest(); }

}  // namespace kevo::ir
