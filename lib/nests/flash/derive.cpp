// Derivation of flash nests (FlashSlot): the QKᵀ -> row softmax -> PV pattern, found structurally,
// and its genes.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "schedule/deriver.hpp"

namespace kevo::schedule::detail {

namespace {

std::vector<std::string> without(std::vector<std::string> v, const std::string& x) {
  v.erase(std::remove(v.begin(), v.end(), x), v.end());
  return v;
}
// Every access in `e` to a tensor of `inside` uses exactly the indices that tensor was computed with.
bool reads_consistently(const ir::Expr& e, const std::vector<std::pair<std::string, std::vector<std::string>>>& inside) {
  if (e.kind == ir::Expr::Kind::access)
    for (const auto& [t, idx] : inside)
      if (t == e.tensor && e.indices != idx) return false;
  for (const auto& a : e.args)
    if (!reads_consistently(a, inside)) return false;
  return true;
}

}  // namespace

// The flash-attention pattern starting at contraction `a` (FlashSlot), or nullopt.
std::optional<FlashSlot> match_flash(const SpaceImpl& s, std::size_t a) {
  const auto& k = s.kernel;
  const auto n = k.ops.size();
  const auto& qk = k.ops[a];
  if (qk.kind() != ir::OpKind::contract || s.ops[a].contract < 0) return std::nullopt;
  const auto& c1 = s.contracts[static_cast<std::size_t>(s.ops[a].contract)];
  const auto& X = qk.out_indices;
  FlashSlot f;
  f.qk = static_cast<int>(a);
  std::vector<std::pair<std::string, std::vector<std::string>>> inside{{qk.out, X}};
  std::size_t b = a + 1;
  std::string last = qk.out;
  // maps on the scores, each with the scores' indices, reading the previous value
  while (b < n && k.ops[b].kind() == ir::OpKind::map && k.ops[b].out_indices == X) {
    std::set<std::string> rd;
    reads_of(k.ops[b].expr, rd);
    if (!rd.count(last) || !reads_consistently(k.ops[b].expr, inside)) break;
    f.pre.push_back(static_cast<int>(b));
    last = k.ops[b].out;
    inside.emplace_back(last, X);
    ++b;
  }
  if (b + 3 >= n) return std::nullopt;
  const auto& mxo = k.ops[b];
  if (mxo.kind() != ir::OpKind::reduce || mxo.reduce != ir::ReduceOp::max || mxo.reduce_indices.size() != 1 ||
      !is_access(mxo.expr, last, X))
    return std::nullopt;
  const std::string j = mxo.reduce_indices[0];
  const auto Xr = without(X, j);
  if (mxo.out_indices != Xr) return std::nullopt;
  // kv is the free index of one operand of qk; the row index is the other operand's
  int kvq = -1;
  for (int q = 0; q < 2; ++q)
    if (c1.idx[static_cast<std::size_t>(q)] == j) kvq = q;
  if (kvq < 0 || !c1.present[static_cast<std::size_t>(1 - kvq)]) return std::nullopt;
  f.q_operand = 1 - kvq;
  f.row = c1.idx[static_cast<std::size_t>(f.q_operand)];
  f.kv = j;
  f.hd = c1.idx[2];
  f.outer = c1.outer;
  const auto& eo = k.ops[b + 1];
  const auto& ee = eo.expr;
  if (eo.kind() != ir::OpKind::map || eo.out_indices != X || ee.kind != ir::Expr::Kind::call || ee.fn != ir::Fn::exp ||
      ee.args.size() != 1 || ee.args[0].kind != ir::Expr::Kind::call)
    return std::nullopt;
  // exp(s - mx), or exp((s - mx) * c) / exp(c * (s - mx)) with a positive constant c
  const ir::Expr* diff = &ee.args[0];
  if (diff->fn == ir::Fn::mul && diff->args.size() == 2) {
    const int ci = diff->args[0].kind == ir::Expr::Kind::constant ? 0 : diff->args[1].kind == ir::Expr::Kind::constant ? 1 : -1;
    if (ci < 0) return std::nullopt;
    const double cv = diff->args[static_cast<std::size_t>(ci)].value;
    if (!(cv > 0) || !std::isfinite(cv)) return std::nullopt;
    f.exp_scale = cv;
    diff = &diff->args[static_cast<std::size_t>(1 - ci)];
  }
  if (diff->kind != ir::Expr::Kind::call || diff->fn != ir::Fn::sub || diff->args.size() != 2 ||
      !is_access(diff->args[0], last, X) || !is_access(diff->args[1], mxo.out, Xr))
    return std::nullopt;
  const auto& so = k.ops[b + 2];
  if (so.kind() != ir::OpKind::reduce || so.reduce != ir::ReduceOp::sum || so.reduce_indices != std::vector<std::string>{j} ||
      so.out_indices != Xr || !is_access(so.expr, eo.out, X))
    return std::nullopt;
  // optionally e held in a narrower dtype for PV: ec[X] = cast<T>(e[X])
  std::size_t pvi = b + 3;
  std::string pe = eo.out;
  if (const auto& co = k.ops[pvi]; co.kind() == ir::OpKind::map && co.out_indices == X && co.expr.kind == ir::Expr::Kind::call &&
                                   co.expr.fn == ir::Fn::cast && co.expr.args.size() == 1 && is_access(co.expr.args[0], eo.out, X)) {
    if (pvi + 1 >= n) return std::nullopt;
    f.ecast = static_cast<int>(pvi);
    pe = co.out;
    ++pvi;
  }
  const auto& pv = k.ops[pvi];
  if (pv.kind() != ir::OpKind::contract || s.ops[pvi].contract < 0 || pv.reduce_indices != std::vector<std::string>{j})
    return std::nullopt;
  const auto& c2 = s.contracts[static_cast<std::size_t>(s.ops[pvi].contract)];
  int eop = -1;
  for (int q = 0; q < 2; ++q)
    if (is_access(pv.expr.args[static_cast<std::size_t>(q)], pe, X)) eop = q;
  if (eop < 0 || c2.idx[static_cast<std::size_t>(eop)] != f.row || !c2.present[static_cast<std::size_t>(1 - eop)]) return std::nullopt;
  // pv's output indices: qk's batch indices, the row index and V's free index
  f.vd = c2.idx[static_cast<std::size_t>(1 - eop)];
  if (c2.outer != f.outer) return std::nullopt;
  f.e_operand = eop;
  f.mx = static_cast<int>(b);
  f.ex = static_cast<int>(b + 1);
  f.sum = static_cast<int>(b + 2);
  f.pv = static_cast<int>(pvi);
  inside.emplace_back(mxo.out, Xr);
  inside.emplace_back(eo.out, X);
  inside.emplace_back(so.out, Xr);
  if (f.ecast >= 0) inside.emplace_back(pe, X);
  // maps on pv's output (the division by the sum), reading only pv's output, the row statistics
  // and tensors from outside the pattern
  std::vector<std::pair<std::string, std::vector<std::string>>> post_in{{pv.out, pv.out_indices}, {mxo.out, Xr}, {so.out, Xr}};
  std::size_t c = pvi + 1;
  std::string plast = pv.out;
  while (c < n && k.ops[c].kind() == ir::OpKind::map && k.ops[c].out_indices == pv.out_indices) {
    std::set<std::string> rd;
    reads_of(k.ops[c].expr, rd);
    if (!rd.count(plast)) break;
    bool ok = reads_consistently(k.ops[c].expr, post_in);
    for (const auto& [t, ix] : inside) ok = ok && !(rd.count(t) && t != mxo.out && t != so.out);
    if (!ok) break;
    f.post.push_back(static_cast<int>(c));
    plast = k.ops[c].out;
    post_in.emplace_back(plast, pv.out_indices);
    ++c;
  }
  f.first = static_cast<int>(a);
  f.last = static_cast<int>(c - 1);
  // the per-tile values (scores, their maps, e) are temps read only inside the pattern; the row
  // statistics, pv's output and the maps after it are final once the kv loop ends, and may leave
  std::vector<int> tiles_only{f.qk, f.ex};
  if (f.ecast >= 0) tiles_only.push_back(f.ecast);
  tiles_only.insert(tiles_only.end(), f.pre.begin(), f.pre.end());
  for (int o : tiles_only) {
    const auto& t = s.tensor(k.ops[static_cast<std::size_t>(o)].out);
    if (t.role != ir::Role::temp) return std::nullopt;
    if (const auto r = s.readers.find(t.name); r != s.readers.end())
      for (int u : r->second)
        if (u < f.first || u > f.last) return std::nullopt;
  }
  for (int cl = 0; cl < 3; ++cl) {
    const auto u = static_cast<std::size_t>(cl);
    if (c1.idx[u] == f.row) f.ext_row = c1.ext[u];
    if (c1.idx[u] == f.kv) f.ext_kv = c1.ext[u];
    if (c1.idx[u] == f.hd) f.ext_hd = c1.ext[u];
    if (c2.idx[u] == f.vd) f.ext_vd = c2.ext[u];
  }
  f.name = pv.out;
  return f;
}

// The flash patterns of the kernel (match_flash) and one nest's genes each, after every op's genes.
void derive_flash(const Deriver& d) {
  auto& s = d.s;
  auto& sp = d.sp;
  const auto& k = d.k;
  const auto& t = d.t;
  const auto ord = [&](const std::string& n, std::vector<std::int64_t> v, const std::string& grp) {
    return static_cast<int>(sp.add(Gene::ordinal(n, std::move(v), grp)));
  };
  for (std::size_t a = 0; a < k.ops.size(); ++a) {
    auto f = match_flash(s, a);
    if (!f) continue;
    const std::string grp = "flash." + f->name;
    f->gene = static_cast<int>(sp.add(Gene::boolean(grp, grp)));
    const std::int64_t rcap = std::min<std::int64_t>(t.pmax, t.stationary_fmax);
    const std::int64_t kcap = std::min<std::int64_t>({512, t.moving_fmax, t.psum_bank_bytes / 4});
    f->tile_row = ord(grp + ".tile." + f->row, tile_values(f->ext_row, rcap), grp);
    f->tile_kv = ord(grp + ".tile." + f->kv, tile_values(f->ext_kv, kcap), grp);
    f->bufs = ord(grp + ".bufs", {1, 2, 3, 4}, grp);
    f->psum_bufs = ord(grp + ".psum.bufs", {1, 2}, grp);
    f->skew = static_cast<int>(sp.add(Gene::boolean(grp + ".skew", grp)));
    f->qblock = ord(grp + ".qblock", {1, 2, 4}, grp);
    f->issue = static_cast<int>(sp.add(Gene::categorical(grp + ".issue", {"steps", "ready", "list"}, grp)));  // IssueOrder
    a = static_cast<std::size_t>(f->last);
    s.flashes.push_back(std::move(*f));
  }
}

// Default values of this kind's genes in `g` (ScheduleSpace::default_genome, before repair).
void defaults_flash(const Deriver& d, Genome& g) {
  // its tiles start at the engine limits, K/V loads double-buffered
  const auto& s = d.s;
  auto& sp = d.sp;
  const auto& t = d.t;
  const auto set = [&](int gi, int val) { set_value(sp, g, gi, val); };
  for (const auto& f : s.flashes) {
    set(f.tile_row, value_index(sp.gene(static_cast<std::size_t>(f.tile_row)), t.pmax));
    set(f.tile_kv, value_index(sp.gene(static_cast<std::size_t>(f.tile_kv)), 512));
    set(f.bufs, 1);
  }
}

}  // namespace kevo::schedule::detail
