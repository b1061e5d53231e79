// Row-major splits of one class of tied dimensions (include/kevo/ir/reshape.hpp).
#include "kevo/ir/reshape.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "kevo/core/error.hpp"
#include "kevo/ir/text.hpp"
#include "detail.hpp"

namespace kevo::ir {

namespace {

// The access an op writes, as an Expr (so that reads and the write are walked alike).
Expr out_expr(const Op& op) {
  Expr e;
  e.kind = Expr::Kind::access;
  e.tensor = op.out;
  e.indices = op.out_indices;
  return e;
}

template <class F>
void each_node(const Expr& e, F&& f) {
  f(e);
  for (const auto& a : e.args) each_node(a, f);
}

// New names that no dim, tensor or index of the kernel has, nor any name given before: base, or
// base2, base3, ...
class Fresh {
 public:
  explicit Fresh(const Kernel& k) {
    for (const auto& d : k.dims) taken_.insert(d.name);
    for (const auto& t : k.tensors) taken_.insert(t.name);
    for (std::size_t oi = 0; oi < k.ops.size(); ++oi)
      for (const auto& [x, e] : k.op_indices(oi)) taken_.insert(x);
  }
  std::string operator()(const std::string& base) {
    std::string n = base;
    for (int i = 2; taken_.count(n); ++i) n = fmt::format("{}{}", base, i);
    taken_.insert(n);
    return n;
  }

 private:
  std::set<std::string> taken_;
};

struct Dsu {
  std::vector<int> up;
  explicit Dsu(std::size_t n) : up(n) { std::iota(up.begin(), up.end(), 0); }
  int find(int x) { return up[static_cast<std::size_t>(x)] == x ? x : up[static_cast<std::size_t>(x)] = find(up[static_cast<std::size_t>(x)]); }
  void join(int a, int b) { up[static_cast<std::size_t>(find(a))] = find(b); }
};

}  // namespace

std::vector<DimClass> dim_classes(const Kernel& k) {
  std::map<std::string, int> dim_no;
  for (std::size_t d = 0; d < k.dims.size(); ++d) dim_no[k.dims[d].name] = static_cast<int>(d);
  Dsu dsu(k.dims.size());
  std::vector<std::string> pinned(k.dims.size());  // why a dim cannot split (first reason)
  // per op and index: the dims it runs along
  std::vector<std::map<std::string, std::set<int>>> along(k.ops.size());
  for (std::size_t oi = 0; oi < k.ops.size(); ++oi) {
    const Op& op = k.ops[oi];
    std::set<std::string> pinned_idx;  // indices of this op used other than plainly
    std::map<std::string, std::string> pin_why;
    const auto visit = [&](const Expr& e) {
      if (e.kind == Expr::Kind::index) {
        pinned_idx.insert(e.index);
        pin_why.try_emplace(e.index, fmt::format("op '{}' reads the value of index {}", op.out, e.index));
      }
      if (e.kind != Expr::Kind::access) return;
      const Tensor* t = k.tensor(e.tensor);
      if (t == nullptr) return;
      for (std::size_t d = 0; d < e.indices.size() && d < t->dims.size(); ++d) {
        const auto it = dim_no.find(t->dims[d]);
        if (it == dim_no.end()) continue;
        along[oi][e.indices[d]].insert(it->second);
        if (d < e.shifts.size() && !e.shifts[d].plain()) {
          const std::string why = fmt::format("op '{}' reads {}[.., {}, ..]", op.out, e.tensor, index_text(e, d));
          if (pinned[static_cast<std::size_t>(it->second)].empty()) pinned[static_cast<std::size_t>(it->second)] = why;
          pinned_idx.insert(e.indices[d]);
          pin_why.try_emplace(e.indices[d], why);
          if (!e.shifts[d].plus.empty()) {
            pinned_idx.insert(e.shifts[d].plus);
            pin_why.try_emplace(e.shifts[d].plus, why);
          }
        }
      }
    };
    visit(out_expr(op));
    each_node(op.expr, visit);
    for (const auto& [x, ds] : along[oi]) {
      for (int d : ds) dsu.join(d, *ds.begin());
      if (pinned_idx.count(x))
        for (int d : ds)
          if (pinned[static_cast<std::size_t>(d)].empty()) pinned[static_cast<std::size_t>(d)] = pin_why[x];
    }
    // a pinned index that runs along no dim (a mask's value of a reduce-only index) pins nothing
  }
  std::map<int, DimClass> by_root;
  for (std::size_t d = 0; d < k.dims.size(); ++d) {
    auto& c = by_root[dsu.find(static_cast<int>(d))];
    c.dims.push_back(k.dims[d].name);
    c.size = k.dims[d].size;
    if (c.why_not.empty() && !pinned[d].empty()) c.why_not = pinned[d];
  }
  for (std::size_t oi = 0; oi < k.ops.size(); ++oi)
    for (const auto& [x, ds] : along[oi]) by_root[dsu.find(*ds.begin())].uses.emplace_back(static_cast<int>(oi), x);
  // a class every access reads plainly can be held as one with another (a merge lowers ranks)
  for (auto& [root, c] : by_root) c.mergeable = c.why_not.empty() && !c.uses.empty();
  // a tensor's rank grows by the class's dims it has: it must stay within what the IR supports
  for (const auto& t : k.tensors) {
    std::map<int, std::size_t> grows;
    for (const auto& d : t.dims)
      if (const auto it = dim_no.find(d); it != dim_no.end()) ++grows[dsu.find(it->second)];
    for (const auto& [root, n] : grows)
      if (t.dims.size() + n > detail::kMaxRank && by_root[root].why_not.empty())
        by_root[root].why_not = fmt::format("tensor '{}' would have {} dims, above {}", t.name, t.dims.size() + n, detail::kMaxRank);
  }
  std::vector<DimClass> out;
  for (auto& [root, c] : by_root) {
    c.splittable = c.why_not.empty() && !c.uses.empty();
    if (c.uses.empty() && c.why_not.empty()) c.why_not = "no op indexes it";
    out.push_back(std::move(c));
  }
  std::sort(out.begin(), out.end(), [&](const DimClass& a, const DimClass& b) { return dim_no[a.dims[0]] < dim_no[b.dims[0]]; });
  return out;
}

Kernel split_class(const Kernel& k, const DimClass& c, std::int64_t outer, Split* what) {
  if (!c.splittable) throw Error(fmt::format("kevo: cannot split dims {}: {}", fmt::join(c.dims, ", "), c.why_not));
  if (outer < 1 || c.size % outer != 0)
    throw Error(fmt::format("kevo: cannot split dims {} of size {} into {} parts", fmt::join(c.dims, ", "), c.size, outer));
  const std::int64_t inner = c.size / outer;
  Fresh fresh(k);
  std::map<std::string, std::pair<std::string, std::string>> dim_to, idx_to;
  for (const auto& d : c.dims) dim_to[d] = {fresh(d + "_o"), fresh(d + "_i")};
  for (const auto& [op, x] : c.uses)
    if (!idx_to.count(x)) idx_to[x] = {fresh(x + "_o"), fresh(x + "_i")};
  std::map<int, std::set<std::string>> split_in;  // op -> its indices that split
  for (const auto& [op, x] : c.uses) split_in[op].insert(x);

  Kernel r;
  r.name = k.name;
  for (const auto& d : k.dims) {
    if (const auto it = dim_to.find(d.name); it != dim_to.end()) {
      r.dims.push_back({it->second.first, outer});
      r.dims.push_back({it->second.second, inner});
    } else {
      r.dims.push_back(d);
    }
  }
  for (const auto& t : k.tensors) {
    Tensor nt = t;
    nt.dims.clear();
    for (const auto& d : t.dims) {
      if (const auto it = dim_to.find(d); it != dim_to.end()) {
        nt.dims.push_back(it->second.first);
        nt.dims.push_back(it->second.second);
      } else {
        nt.dims.push_back(d);
      }
    }
    r.tensors.push_back(std::move(nt));
  }
  const auto split_list = [&](const std::vector<std::string>& v, const std::set<std::string>& sp) {
    std::vector<std::string> o;
    for (const auto& x : v) {
      if (sp.count(x)) {
        o.push_back(idx_to[x].first);
        o.push_back(idx_to[x].second);
      } else {
        o.push_back(x);
      }
    }
    return o;
  };
  for (std::size_t oi = 0; oi < k.ops.size(); ++oi) {
    Op op = k.ops[oi];
    const auto it = split_in.find(static_cast<int>(oi));
    if (it != split_in.end()) {
      const auto& sp = it->second;
      op.out_indices = split_list(op.out_indices, sp);
      op.reduce_indices = split_list(op.reduce_indices, sp);
      const auto rewrite = [&](auto&& self, Expr& e) -> void {
        for (auto& a : e.args) self(self, a);
        if (e.kind != Expr::Kind::access) return;
        std::vector<std::string> idx;
        std::vector<IndexShift> sh;
        for (std::size_t d = 0; d < e.indices.size(); ++d) {
          const bool s = sp.count(e.indices[d]) > 0;
          if (s) {
            idx.push_back(idx_to[e.indices[d]].first);
            idx.push_back(idx_to[e.indices[d]].second);
          } else {
            idx.push_back(e.indices[d]);
          }
          if (!e.shifts.empty()) {
            sh.push_back(e.shifts[d]);
            if (s) sh.push_back(IndexShift{});
          }
        }
        e.indices = std::move(idx);
        e.shifts = std::move(sh);
      };
      rewrite(rewrite, op.expr);
    }
    r.ops.push_back(std::move(op));
  }
  auto v = validate(std::move(r));
  if (!v) throw Error("kevo: splitting dims " + fmt::format("{}", fmt::join(c.dims, ", ")) + " made an invalid kernel: " + v.error().headline());
  if (what != nullptr) {
    what->dims.clear();
    what->indices.clear();
    for (const auto& d : c.dims) what->dims.push_back({-1, d, dim_to[d].first, dim_to[d].second});
    for (const auto& [op, x] : c.uses) what->indices.push_back({op, x, idx_to[x].first, idx_to[x].second});
    what->outer = outer;
    what->inner = inner;
  }
  return std::move(v).value();
}

namespace {

bool in(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The (x, y) index pairs of op `op` along the dims of classes a then b, or why they are not pairs.
std::string op_pairs(const Kernel& k, const Op& op, const DimClass& a,
                     std::map<std::string, std::string>& x_to_y) {
  std::map<std::string, std::string> y_to_x;
  std::string why;
  const auto visit = [&](const Expr& e) {
    if (!why.empty() || e.kind != Expr::Kind::access) return;
    const Tensor* t = k.tensor(e.tensor);
    if (t == nullptr) return;
    for (std::size_t d = 0; d < t->dims.size() && d < e.indices.size(); ++d) {
      if (!in(a.dims, t->dims[d])) continue;
      const std::string& x = e.indices[d];
      const std::string& y = e.indices[d + 1];  // the tensor check put b's dim at d + 1
      const auto [ix, nx] = x_to_y.emplace(x, y);
      const auto [iy, ny] = y_to_x.emplace(y, x);
      if (ix->second != y || iy->second != x)
        why = fmt::format("op '{}' pairs {} with {} and {}", op.out, nx ? y : x, nx ? iy->second : ix->second, nx ? x : y);
    }
  };
  visit(out_expr(op));
  each_node(op.expr, visit);
  if (!why.empty()) return why;
  for (const auto& [x, y] : x_to_y)
    if (in(op.reduce_indices, x) != in(op.reduce_indices, y))
      return fmt::format("op '{}' reduces over one of {} and {} only", op.out, x, y);
  return "";
}

}  // namespace

std::string why_not_merge(const Kernel& k, const DimClass& a, const DimClass& b) {
  if (!a.mergeable) return a.why_not;
  if (!b.mergeable) return b.why_not;
  for (const auto& t : k.tensors)
    for (std::size_t d = 0; d < t.dims.size(); ++d) {
      if (in(a.dims, t.dims[d]) && (d + 1 >= t.dims.size() || !in(b.dims, t.dims[d + 1])))
        return fmt::format("tensor '{}' has {} without {} after it", t.name, t.dims[d], b.dims.front());
      if (in(b.dims, t.dims[d]) && (d == 0 || !in(a.dims, t.dims[d - 1])))
        return fmt::format("tensor '{}' has {} without {} before it", t.name, t.dims[d], a.dims.front());
    }
  for (const auto& op : k.ops) {
    std::map<std::string, std::string> pairs;
    if (auto why = op_pairs(k, op, a, pairs); !why.empty()) return why;
  }
  return "";
}

Kernel merge_classes(const Kernel& k, const DimClass& a, const DimClass& b, Merge* what) {
  if (const auto why = why_not_merge(k, a, b); !why.empty())
    throw Error(fmt::format("kevo: cannot merge dims {} with {}: {}", fmt::join(a.dims, ", "), fmt::join(b.dims, ", "), why));
  Fresh fresh(k);
  Merge m;
  m.outer = a.size;
  m.inner = b.size;
  std::map<std::pair<std::string, std::string>, std::string> dim_pair;
  for (const auto& t : k.tensors)
    for (std::size_t d = 0; d + 1 < t.dims.size(); ++d)
      if (in(a.dims, t.dims[d]) && !dim_pair.count({t.dims[d], t.dims[d + 1]})) {
        const std::string n = fresh(t.dims[d] + t.dims[d + 1]);
        dim_pair[{t.dims[d], t.dims[d + 1]}] = n;
        m.dims.push_back({-1, t.dims[d], t.dims[d + 1], n});
      }
  Kernel r;
  r.name = k.name;
  for (const auto& d : k.dims) {
    if (in(b.dims, d.name)) continue;
    if (!in(a.dims, d.name)) {
      r.dims.push_back(d);
      continue;
    }
    for (const auto& p : m.dims)
      if (p.first == d.name) r.dims.push_back({p.merged, a.size * b.size});
  }
  const auto merge_list = [](const std::vector<std::string>& v, const std::map<std::string, std::string>& xy,
                             const std::map<std::string, std::string>& name) {
    std::vector<std::string> o;
    std::set<std::string> ys;
    for (const auto& [x, y] : xy) ys.insert(y);
    for (const auto& x : v) {
      if (ys.count(x)) continue;
      const auto it = xy.find(x);
      o.push_back(it == xy.end() ? x : name.at(x));
    }
    return o;
  };
  for (const auto& t : k.tensors) {
    Tensor nt = t;
    nt.dims.clear();
    for (std::size_t d = 0; d < t.dims.size(); ++d) {
      if (in(b.dims, t.dims[d])) continue;
      nt.dims.push_back(in(a.dims, t.dims[d]) ? dim_pair.at({t.dims[d], t.dims[d + 1]}) : t.dims[d]);
    }
    r.tensors.push_back(std::move(nt));
  }
  std::map<std::pair<std::string, std::string>, std::string> idx_pair;
  for (std::size_t oi = 0; oi < k.ops.size(); ++oi) {
    Op op = k.ops[oi];
    std::map<std::string, std::string> xy;
    op_pairs(k, k.ops[oi], a, xy);
    std::map<std::string, std::string> name;  // x -> xy's name
    for (const auto& [x, y] : xy) {
      auto it = idx_pair.find({x, y});
      if (it == idx_pair.end()) it = idx_pair.emplace(std::make_pair(x, y), fresh(x + y)).first;
      name[x] = it->second;
      m.indices.push_back({static_cast<int>(oi), x, y, it->second});
    }
    if (!xy.empty()) {
      op.out_indices = merge_list(op.out_indices, xy, name);
      op.reduce_indices = merge_list(op.reduce_indices, xy, name);
      const auto rewrite = [&](auto&& self, Expr& e) -> void {
        for (auto& arg : e.args) self(self, arg);
        if (e.kind != Expr::Kind::access) return;
        const Tensor* t = k.tensor(e.tensor);
        std::vector<std::string> idx;
        std::vector<IndexShift> sh;
        for (std::size_t d = 0; d < e.indices.size(); ++d) {
          if (t != nullptr && d < t->dims.size() && in(b.dims, t->dims[d])) continue;
          const bool pair = t != nullptr && d < t->dims.size() && in(a.dims, t->dims[d]);
          idx.push_back(pair ? name.at(e.indices[d]) : e.indices[d]);
          if (!e.shifts.empty()) sh.push_back(e.shifts[d]);
        }
        e.indices = std::move(idx);
        e.shifts = std::move(sh);
      };
      rewrite(rewrite, op.expr);
    }
    r.ops.push_back(std::move(op));
  }
  auto v = validate(std::move(r));
  if (!v) throw Error("kevo: merging dims made an invalid kernel: " + v.error().headline());
  if (what != nullptr) *what = std::move(m);
  return std::move(v).value();
}

namespace {
void rewrite_divisions(Expr& e) {
  for (auto& a : e.args) rewrite_divisions(a);
  if (e.kind != Expr::Kind::call || e.fn != Fn::div || e.args.size() != 2) return;
  Expr& y = e.args[1];
  if (y.kind == Expr::Kind::constant) {
    if (e.args[0].kind == Expr::Kind::constant) {
      const double v = e.args[0].value / y.value;
      e = Expr{};
      e.kind = Expr::Kind::constant;
      e.value = v;
      return;
    }
    y.value = 1.0 / y.value;
  } else {
    Expr r;
    r.kind = Expr::Kind::call;
    r.fn = Fn::reciprocal;
    r.args.push_back(std::move(y));
    y = std::move(r);
  }
  e.fn = Fn::mul;
}
}  // namespace

Kernel divisions_as_products(const Kernel& k) {
  Kernel r = k;
  for (auto& op : r.ops) rewrite_divisions(op.expr);
  return r;
}

}  // namespace kevo::ir
