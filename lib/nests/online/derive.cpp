// Derivation of online-softmax nests (OnlineSlot): a row max, the exp of the row less its max, the
// exp's row sum and the maps after them, found structurally, and their genes.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <set>

#include "schedule/deriver.hpp"

namespace kevo::schedule::detail {

// The online-softmax pattern starting at op `b` (OnlineSlot), or nullopt.
std::optional<OnlineSlot> match_online(const SpaceImpl& s, std::size_t b) {
  const auto& k = s.kernel;
  const auto n = k.ops.size();
  if (b + 3 >= n) return std::nullopt;
  const auto& mxo = k.ops[b];
  if (mxo.kind() != ir::OpKind::reduce || mxo.reduce != ir::ReduceOp::max || mxo.reduce_indices.size() != 1 ||
      mxo.expr.kind != ir::Expr::Kind::access || !ir::is_plain(mxo.expr) || mxo.out_indices.empty())
    return std::nullopt;
  const std::string j = mxo.reduce_indices[0];
  const std::string& a = mxo.expr.tensor;
  const auto& X = mxo.expr.indices;
  const auto& Xr = mxo.out_indices;
  // A is read with the max's out indices and j, each once
  // (j last: A's rows are contiguous along the free axis)
  if (X.size() != Xr.size() + 1 || X.back() != j || std::count(X.begin(), X.end(), j) != 1) return std::nullopt;
  for (const auto& x : Xr)
    if (std::count(X.begin(), X.end(), x) != 1) return std::nullopt;
  const auto& eo = k.ops[b + 1];
  const auto& ee = eo.expr;
  if (eo.kind() != ir::OpKind::map || eo.out_indices != X || ee.kind != ir::Expr::Kind::call || ee.fn != ir::Fn::exp ||
      ee.args.size() != 1 || ee.args[0].kind != ir::Expr::Kind::call || ee.args[0].fn != ir::Fn::sub ||
      !is_access(ee.args[0].args[0], a, X) || !is_access(ee.args[0].args[1], mxo.out, Xr))
    return std::nullopt;
  const auto& so = k.ops[b + 2];
  if (so.kind() != ir::OpKind::reduce || so.reduce != ir::ReduceOp::sum || so.reduce_indices != std::vector<std::string>{j} ||
      so.out_indices != Xr || !is_access(so.expr, eo.out, X))
    return std::nullopt;
  OnlineSlot o;
  o.mx = static_cast<int>(b);
  o.ex = static_cast<int>(b + 1);
  o.sum = static_cast<int>(b + 2);
  o.j = j;
  o.row = Xr.back();
  for (std::size_t q = 0; q + 1 < Xr.size(); ++q) o.outer.push_back(Xr[q]);
  // maps after the sum with A's indices, each reading e or an earlier post; every access to a
  // value of the pattern uses the indices it was computed with
  std::vector<std::pair<std::string, std::vector<std::string>>> inside{{eo.out, X}, {mxo.out, Xr}, {so.out, Xr}};
  std::size_t c = b + 3;
  while (c < n && k.ops[c].kind() == ir::OpKind::map && k.ops[c].out_indices == X) {
    std::set<std::string> rd;
    reads_of(k.ops[c].expr, rd);
    bool reads_pattern = rd.count(eo.out) > 0;
    for (int p : o.post) reads_pattern = reads_pattern || rd.count(k.ops[static_cast<std::size_t>(p)].out) > 0;
    if (!reads_pattern) break;
    bool ok = true;
    const std::function<void(const ir::Expr&)> check = [&](const ir::Expr& e) {
      if (e.kind == ir::Expr::Kind::access) {
        if (!ir::is_plain(e)) ok = false;  // shifted reads have no window here
        for (const auto& [t, idx] : inside)
          if (t == e.tensor && (e.indices != idx || !ir::is_plain(e))) ok = false;
        // A itself only as it is read by the max
        if (e.tensor == a && (e.indices != X || !ir::is_plain(e))) ok = false;
      }
      for (const auto& x : e.args) check(x);
    };
    check(k.ops[c].expr);
    if (!ok) break;
    o.post.push_back(static_cast<int>(c));
    inside.emplace_back(k.ops[c].out, X);
    ++c;
  }
  if (o.post.empty()) return std::nullopt;
  o.first = static_cast<int>(b);
  o.last = static_cast<int>(c - 1);
  // e is a temp read only inside the pattern; A is not written inside it
  const auto& et = s.tensor(eo.out);
  if (et.role != ir::Role::temp) return std::nullopt;
  if (const auto r = s.readers.find(eo.out); r != s.readers.end())
    for (int u : r->second)
      if (u < o.first || u > o.last) return std::nullopt;
  for (int q = o.first; q <= o.last; ++q)
    if (k.ops[static_cast<std::size_t>(q)].out == a) return std::nullopt;
  const auto& os = s.ops[b];
  for (std::size_t q = 0; q < os.idx.size(); ++q) {
    if (os.idx[q] == o.row) o.ext_row = os.ext[q];
    if (os.idx[q] == o.j) o.ext_j = os.ext[q];
  }
  o.name = k.ops[static_cast<std::size_t>(o.last)].out;
  return o;
}

// The online-softmax patterns of the kernel (match_online) outside flash patterns, one nest's genes each.
void derive_online(const Deriver& d) {
  auto& s = d.s;
  auto& sp = d.sp;
  const auto& k = d.k;
  const auto& t = d.t;
  std::vector<char> in_flash(k.ops.size(), 0);
  for (const auto& f : s.flashes)
    for (int o = f.first; o <= f.last; ++o) in_flash[static_cast<std::size_t>(o)] = 1;
  for (std::size_t b = 0; b < k.ops.size(); ++b) {
    if (in_flash[b]) continue;
    auto o = match_online(s, b);
    if (!o) continue;
    bool clash = false;
    for (int q = o->first; q <= o->last; ++q) clash = clash || in_flash[static_cast<std::size_t>(q)];
    if (clash) continue;
    const std::string grp = "online." + o->name;
    o->gene = static_cast<int>(sp.add(Gene::boolean(grp, grp)));
    const std::int64_t jcap = std::max<std::int64_t>(t.pmax, std::min<std::int64_t>(t.sbuf_free_max_elems, 65536));
    o->tile_row = static_cast<int>(sp.add(Gene::ordinal(grp + ".tile." + o->row, tile_values(o->ext_row, t.pmax), grp)));
    o->tile_j = static_cast<int>(sp.add(Gene::ordinal(grp + ".tile." + o->j, tile_values(o->ext_j, jcap), grp)));
    o->bufs = static_cast<int>(sp.add(Gene::ordinal(grp + ".bufs", {1, 2, 3, 4}, grp)));
    o->queues = static_cast<int>(sp.add(Gene::ordinal(grp + ".queues", {1, 2, 4}, grp)));
    o->issue = static_cast<int>(sp.add(Gene::categorical(grp + ".issue", {"steps", "ready", "list"}, grp)));  // IssueOrder
    b = static_cast<std::size_t>(o->last);
    s.onlines.push_back(std::move(*o));
  }
}

// Default values of this kind's genes in `g` (ScheduleSpace::default_genome, before repair): off,
// full-partition row tiles, 2048-column tiles, double-buffered.
void defaults_online(const Deriver& d, Genome& g) {
  const auto& s = d.s;
  auto& sp = d.sp;
  const auto& t = d.t;
  const auto set = [&](int gi, int val) { set_value(sp, g, gi, val); };
  for (const auto& o : s.onlines) {
    set(o.tile_row, value_index(sp.gene(static_cast<std::size_t>(o.tile_row)), t.pmax));
    set(o.tile_j, value_index(sp.gene(static_cast<std::size_t>(o.tile_j)), 2048));
    set(o.bufs, 1);
    set(o.queues, 1);
  }
}

}  // namespace kevo::schedule::detail
