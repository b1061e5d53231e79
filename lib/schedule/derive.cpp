// Derives the schedule space of any kernel: fusion chains, contraction roles, and the genes.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>

#include "kevo/schedule/detail/plan.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/schedule/detail/structure.hpp"

namespace kevo::schedule {

const ir::Tensor& SpaceImpl::tensor(std::string_view name) const {
  const auto* t = kernel.tensor(name);
  if (!t) throw Error(fmt::format("kevo: unknown tensor '{}'", name));
  return *t;
}
int SpaceImpl::tensor_index(std::string_view name) const {
  for (std::size_t i = 0; i < kernel.tensors.size(); ++i)
    if (kernel.tensors[i].name == name) return static_cast<int>(i);
  return -1;
}

namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

void reads_of(const ir::Expr& e, std::set<std::string>& out) {
  if (e.kind == ir::Expr::Kind::access) out.insert(e.tensor);
  for (const auto& a : e.args) reads_of(a, out);
}

// Tile sizes offered for an index: powers of two up to the cap (from 16, or smaller for small
// extents) plus the extent itself, so that both dividing and edge-tiled sizes are reachable.
std::vector<std::int64_t> tile_values(std::int64_t ext, std::int64_t cap) {
  std::vector<std::int64_t> v;
  // below 32 elements a tile is all fixed overhead, and the unrolled program explodes in size
  const std::int64_t lo = std::min<std::int64_t>(32, ext);
  for (std::int64_t p = 1; p <= cap && p < ext; p *= 2)
    if (p >= lo) v.push_back(p);
  if (ext <= cap) v.push_back(ext);
  if (v.empty()) v.push_back(std::min(ext, cap));
  return v;
}

std::vector<std::int64_t> block_values(std::int64_t max_tiles) {
  std::vector<std::int64_t> v;
  for (std::int64_t b = 1; b <= 64; b *= 2) {
    v.push_back(b);
    if (b >= max_tiles) break;
  }
  return v;
}

int value_index(const Gene& g, std::int64_t want) {
  // the largest value <= want (values ascend)
  int best = 0;
  for (std::size_t i = 0; i < g.values.size(); ++i)
    if (g.values[i] <= want) best = static_cast<int>(i);
  return best;
}


bool is_access(const ir::Expr& e, const std::string& t, const std::vector<std::string>& idx) {
  return e.kind == ir::Expr::Kind::access && e.tensor == t && e.indices == idx;
}
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
      ee.args.size() != 1 || ee.args[0].kind != ir::Expr::Kind::call || ee.args[0].fn != ir::Fn::sub ||
      !is_access(ee.args[0].args[0], last, X) || !is_access(ee.args[0].args[1], mxo.out, Xr))
    return std::nullopt;
  const auto& so = k.ops[b + 2];
  if (so.kind() != ir::OpKind::reduce || so.reduce != ir::ReduceOp::sum || so.reduce_indices != std::vector<std::string>{j} ||
      so.out_indices != Xr || !is_access(so.expr, eo.out, X))
    return std::nullopt;
  const auto& pv = k.ops[b + 3];
  if (pv.kind() != ir::OpKind::contract || s.ops[b + 3].contract < 0 || pv.reduce_indices != std::vector<std::string>{j})
    return std::nullopt;
  const auto& c2 = s.contracts[static_cast<std::size_t>(s.ops[b + 3].contract)];
  int eop = -1;
  for (int q = 0; q < 2; ++q)
    if (is_access(pv.expr.args[static_cast<std::size_t>(q)], eo.out, X)) eop = q;
  if (eop < 0 || c2.idx[static_cast<std::size_t>(eop)] != f.row || !c2.present[static_cast<std::size_t>(1 - eop)]) return std::nullopt;
  // pv's output indices: qk's batch indices, the row index and V's free index
  f.vd = c2.idx[static_cast<std::size_t>(1 - eop)];
  if (c2.outer != f.outer) return std::nullopt;
  f.e_operand = eop;
  f.mx = static_cast<int>(b);
  f.ex = static_cast<int>(b + 1);
  f.sum = static_cast<int>(b + 2);
  f.pv = static_cast<int>(b + 3);
  inside.emplace_back(mxo.out, Xr);
  inside.emplace_back(eo.out, X);
  inside.emplace_back(so.out, Xr);
  // maps on pv's output (the division by the sum), reading only pv's output, the row statistics
  // and tensors from outside the pattern
  std::vector<std::pair<std::string, std::vector<std::string>>> post_in{{pv.out, pv.out_indices}, {mxo.out, Xr}, {so.out, Xr}};
  std::size_t c = b + 4;
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
  tiles_only.insert(tiles_only.end(), f.pre.begin(), f.pre.end());
  for (int o : tiles_only) {
    const auto& t = s.tensor(k.ops[static_cast<std::size_t>(o)].out);
    if (t.role != ir::Role::temp) return std::nullopt;
    for (std::size_t u = 0; u < n; ++u) {
      if (static_cast<int>(u) >= f.first && static_cast<int>(u) <= f.last) continue;
      std::set<std::string> rd;
      reads_of(k.ops[u].expr, rd);
      if (rd.count(t.name)) return std::nullopt;
    }
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

}  // namespace

std::string_view Unsupported::code() const noexcept {
  switch (why) {
    case Why::no_ops: return "no_ops";
    case Why::contraction_operands: return "contraction_operands";
    case Why::contraction_indices: return "contraction_indices";
    case Why::contraction_index_unshared: return "contraction_index_unshared";
    case Why::no_layout: return "no_layout";
  }
  return "unsupported";
}

std::string Unsupported::str() const {
  return op.empty() ? fmt::format("kernel '{}': {}", kernel, message) : fmt::format("kernel '{}', op '{}': {}", kernel, op, message);
}

ScheduleSpace ScheduleSpace::derive(const ir::Kernel& k, const target::Target& t) { return derive(k, t, false); }

ScheduleSpace ScheduleSpace::derive(const ir::Kernel& k, const target::Target& t, bool every_orientation) {
  auto s = try_derive(k, t, every_orientation);
  if (!s) throw Error("kevo: " + s.error().str());
  return std::move(s).value();
}

Expected<ScheduleSpace, Unsupported> ScheduleSpace::try_derive(const ir::Kernel& k, const target::Target& t, bool every_orientation) {
  const auto unsupported = [&](Unsupported::Why why, std::string op, std::string message) {
    return unexpected(Unsupported{why, k.name, std::move(op), std::move(message)});
  };
  if (k.ops.empty()) return unsupported(Unsupported::Why::no_ops, "", "has no ops");
  auto impl = std::make_shared<SpaceImpl>();
  SpaceImpl& s = *impl;
  s.kernel = k;
  s.target = t;

  // Which op writes each tensor.
  std::vector<std::string> writes;
  for (const auto& op : k.ops) writes.push_back(op.out);

  for (std::size_t i = 0; i < k.ops.size(); ++i) {
    OpSlot o;
    o.op = static_cast<int>(i);
    o.kind = k.ops[i].kind();
    o.name = k.ops[i].out;
    for (auto& [n, e] : k.op_indices(i)) {
      o.idx.push_back(n);
      o.ext.push_back(e);
    }
    s.ops.push_back(std::move(o));
  }

  // Static fusion chains: op j may join the nest holding op j-1 when it reads a tensor that
  // nest writes and its indices fit the chain root's loop domain.
  for (std::size_t j = 0; j < s.ops.size(); ++j) {
    auto& o = s.ops[j];
    o.chain_root = static_cast<int>(j);
    if (j == 0 || o.kind == ir::OpKind::contract) continue;
    const int r = s.ops[j - 1].chain_root;
    const auto& root = s.ops[static_cast<std::size_t>(r)];
    std::set<std::string> rd;
    reads_of(k.ops[j].expr, rd);
    bool reads_chain = false;
    for (int q = r; q < static_cast<int>(j); ++q) reads_chain = reads_chain || rd.count(writes[static_cast<std::size_t>(q)]);
    if (!reads_chain) continue;
    bool fits = true;
    if (root.kind == ir::OpKind::contract) {
      const auto& ro = k.ops[static_cast<std::size_t>(r)].out_indices;
      const auto& jo = k.ops[j].out_indices;
      fits = o.kind == ir::OpKind::map && ro.size() == jo.size() &&
             std::all_of(jo.begin(), jo.end(), [&](const std::string& x) { return contains(ro, x); });
    } else {
      fits = std::all_of(o.idx.begin(), o.idx.end(), [&](const std::string& x) { return contains(root.idx, x); });
    }
    if (!fits) continue;
    o.chain_root = r;
  }

  // Variance patterns (the LayerNorm tutorial's bn_stats/bn_aggr move): var = mean over one index
  // f of square(xc) (or xc * xc), xc = E - mu, mu = mean over f of E, all in one static chain.
  const auto producer = [&](const std::string& t, std::size_t before) {  // op writing t, or -1
    const auto it = std::find(writes.begin(), writes.begin() + static_cast<std::ptrdiff_t>(before), t);
    return it == writes.begin() + static_cast<std::ptrdiff_t>(before) ? -1 : static_cast<int>(it - writes.begin());
  };
  const auto is_mean_over = [&](const ir::Op& op, const std::vector<std::string>& red) {
    return op.kind() == ir::OpKind::reduce && op.reduce == ir::ReduceOp::mean && op.reduce_indices == red;
  };
  for (std::size_t j = 0; j < s.ops.size(); ++j) {
    const auto& vop = k.ops[j];
    if (vop.reduce_indices.size() != 1 || !is_mean_over(vop, vop.reduce_indices)) continue;
    const ir::Expr& body = vop.expr;
    const bool squared = body.kind == ir::Expr::Kind::call &&
                         ((body.fn == ir::Fn::square && body.args.size() == 1) ||
                          (body.fn == ir::Fn::mul && body.args.size() == 2 && body.args[0] == body.args[1]));
    if (!squared || body.args[0].kind != ir::Expr::Kind::access) continue;
    const int m = producer(body.args[0].tensor, j);
    if (m < 0) continue;
    const auto& mop = k.ops[static_cast<std::size_t>(m)];
    const ir::Expr& centre = mop.expr;
    if (mop.kind() != ir::OpKind::map || !is_access(body.args[0], mop.out, mop.out_indices) ||
        centre.kind != ir::Expr::Kind::call || centre.fn != ir::Fn::sub || centre.args.size() != 2)
      continue;
    const int mu = producer(centre.args[1].tensor, static_cast<std::size_t>(m));
    if (mu < 0) continue;
    const auto& muop = k.ops[static_cast<std::size_t>(mu)];
    if (!is_mean_over(muop, vop.reduce_indices) || muop.out_indices != vop.out_indices ||
        !is_access(centre.args[1], muop.out, muop.out_indices) || !(muop.expr == centre.args[0]))
      continue;
    const int root = s.ops[j].chain_root;
    if (s.ops[static_cast<std::size_t>(m)].chain_root != root || s.ops[static_cast<std::size_t>(mu)].chain_root != root) continue;
    s.ops[j].stats_mean = mu;
  }

  Space& sp = s.space;
  const auto ord = [&](const std::string& n, std::vector<std::int64_t> v, const std::string& grp) {
    return static_cast<int>(sp.add(Gene::ordinal(n, std::move(v), grp)));
  };
  const auto cat = [&](const std::string& n, std::vector<std::string> v, const std::string& grp) {
    return static_cast<int>(sp.add(Gene::categorical(n, std::move(v), grp)));
  };

  for (std::size_t j = 0; j < s.ops.size(); ++j) {
    auto& o = s.ops[j];
    const auto& op = k.ops[j];
    const std::string& grp = o.name;
    if (o.chain_root != static_cast<int>(j)) o.fuse_gene = static_cast<int>(sp.add(Gene::boolean("fuse." + o.name, grp)));
    if (o.kind != ir::OpKind::contract) o.engine_gene = cat("engine." + o.name, {"vector", "scalar", "gpsimd"}, grp);
    if (o.stats_mean >= 0) o.stats_gene = cat("stats." + o.name, {"reduce", "bn"}, grp);

    if (o.kind == ir::OpKind::contract) {
      ContractSlot c;
      c.op = static_cast<int>(j);
      const ir::Expr* a[2] = {&op.expr.args[0], &op.expr.args[1]};
      if (a[0]->kind != ir::Expr::Kind::access || a[1]->kind != ir::Expr::Kind::access)
        return unsupported(Unsupported::Why::contraction_operands, o.name, "a contraction must multiply two tensor accesses");
      if (op.reduce_indices.size() != 1)
        return unsupported(Unsupported::Why::contraction_indices, o.name,
                           fmt::format("a contraction over {} indices is not supported (one contracted index)", op.reduce_indices.size()));
      const std::string kx = op.reduce_indices[0];
      if (!contains(a[0]->indices, kx) || !contains(a[1]->indices, kx))
        return unsupported(Unsupported::Why::contraction_index_unshared, o.name,
                           fmt::format("a contraction must contract an index both operands use ('{}' is not)", kx));
      c.operand = {a[0]->tensor, a[1]->tensor};
      // m: innermost out index used by operand 0 only; n: by operand 1 only; the rest loop outside.
      for (const auto& x : op.out_indices) {
        const bool in0 = contains(a[0]->indices, x), in1 = contains(a[1]->indices, x);
        if (in0 && !in1) c.idx[0] = x;
        if (in1 && !in0) c.idx[1] = x;
      }
      c.idx[2] = kx;
      for (int cl = 0; cl < 3; ++cl) {
        c.present[cl] = !c.idx[cl].empty();
        if (c.present[cl]) {
          for (std::size_t q = 0; q < o.idx.size(); ++q)
            if (o.idx[q] == c.idx[cl]) c.ext[cl] = o.ext[q];
          c.cls_list.push_back(cl);
        }
      }
      for (const auto& x : op.out_indices)
        if (x != c.idx[0] && x != c.idx[1]) c.outer.push_back(x);
      for (int q = 0; q < 2; ++q) {
        const auto& ix = a[q]->indices;
        c.needs_transpose[q] = ix.back() == kx && c.present[q];
      }
      const auto& tg = t;
      const std::int64_t fcap = std::max(tg.stationary_fmax, tg.moving_fmax);
      for (int cl : c.cls_list) {
        const std::int64_t cap = cl == 2 ? tg.pmax : fcap;
        auto tv = tile_values(c.ext[cl], cap);
        const std::int64_t max_tiles = (c.ext[cl] + tv.front() - 1) / tv.front();
        c.tile[cl] = ord(grp + ".tile." + c.idx[cl], tv, grp);
        c.block[cl] = ord(grp + ".block." + c.idx[cl], block_values(max_tiles), grp);
      }
      std::vector<std::string> bl, tl;
      for (int cl : c.cls_list) {
        bl.push_back(c.idx[cl] + ".b");
        tl.push_back(c.idx[cl]);
      }
      c.order_b = static_cast<int>(sp.add(Gene::permutation(grp + ".order.blocks", bl, grp)));
      c.order_t = static_cast<int>(sp.add(Gene::permutation(grp + ".order.tiles", tl, grp)));
      std::string l0 = c.operand[0], l1 = c.operand[1];
      if (l0 == l1) l1 += "#2";
      // the operand whose free index is the output's innermost index: with it stationary the
      // output tile is transposed with respect to C's layout (a third stationary value offers
      // it with the tile transposed on chip before the store)
      // It is offered where it removes waste: the PE array costs a matmul by its moving size, so
      // an extent cut into stationary tiles with a partial last one pays full matmuls for it
      // (M = 271: 384 rows' worth for 271); with that operand stationary instead of the other
      // the stationary tiles are fewer per element. Elsewhere the third value would only add
      // transposes (and dilute the search: test/search's GA-against-random check).
      if (!op.out_indices.empty())
        for (int q = 0; q < 2; ++q)
          if (c.present[static_cast<std::size_t>(q)] && c.present[static_cast<std::size_t>(1 - q)] &&
              c.idx[static_cast<std::size_t>(q)] == op.out_indices.back()) {
            const std::int64_t cap = std::max<std::int64_t>(1, std::min<std::int64_t>(t.stationary_fmax, t.pmax));
            const auto waste = [&](int x) {  // stationary rows paid per useful row
              const auto e = c.ext[static_cast<std::size_t>(x)];
              return static_cast<double>((e + cap - 1) / cap * cap) / static_cast<double>(e);
            };
            if (every_orientation || waste(q) < waste(1 - q)) c.out_tr_operand = q;
          }
      std::vector<std::string> sv{l0, l1};
      if (c.out_tr_operand >= 0) sv.push_back((c.out_tr_operand == 0 ? l0 : l1) + ".out_pe");
      c.stationary = cat(grp + ".stationary", sv, grp);
      c.level_labels = {"auto", "root"};
      for (auto& b : bl) c.level_labels.push_back(b);
      for (auto& x : tl) c.level_labels.push_back(x);
      for (int q = 0; q < 2; ++q) {
        const std::string nm = q == 0 ? l0 : l1;
        // dma_transpose_block: one transpose per k tile of the footprint (a choice of the method, so
        // that no gene is neutral when the method is not dma_transpose)
        if (c.needs_transpose[q])
          c.transpose[q] = cat(grp + ".transpose." + nm, {"strided", "dma_transpose", "pe_transpose", "dma_transpose_block"}, grp);
        c.load_level[q] = cat(grp + ".load." + nm, c.level_labels, grp);
        // hand kernels rotate 8-16 load slots; SBUF capacity bounds the depth (sbuf_overflow)
        c.load_bufs[q] = ord(grp + ".bufs." + nm, {1, 2, 3, 4, 6, 8, 12, 16}, grp);
        c.load_dma[q] = cat(grp + ".dma." + nm, {"tile", "row", "region"}, grp);
        c.load_q[q] = ord(grp + ".queues." + nm, {1, 2, 4}, grp);
      }
      // sbuf.out: SBUF partial sums kept in the output's dtype (acc sbuf dtype=out)
      c.acc = cat(grp + ".acc", {"psum", "sbuf", "sbuf.out"}, grp);
      // PSUM rotation up to the target's banks (psum_banks rejects what does not fit)
      std::vector<std::int64_t> pb;
      for (std::int64_t b = 1; b <= std::min<std::int64_t>(8, std::max<std::int64_t>(2, t.psum_banks)); ++b)
        if (b <= 4 || b % 2 == 0) pb.push_back(b);
      c.psum_bufs = ord(grp + ".acc.bufs", pb, grp);
      c.acc_zero = cat(grp + ".acc.zero", {"start", "memset"}, grp);
      std::vector<std::string> sl{"auto", "root"};
      for (int cl : c.cls_list)
        if (cl != 2) sl.push_back(c.idx[cl] + ".b");
      for (int cl : c.cls_list)
        if (cl != 2) sl.push_back(c.idx[cl]);
      c.store_level = cat(grp + ".store", sl, grp);
      c.store_bufs = ord(grp + ".store.bufs", {1, 2, 3, 4}, grp);
      c.store_dma = cat(grp + ".store.dma", {"tile", "row", "region"}, grp);
      c.store_q = ord(grp + ".store.queues", {1, 2, 4}, grp);
      c.evict = cat(grp + ".evict", {"vector", "scalar"}, grp);
      o.contract = static_cast<int>(s.contracts.size());
      s.contracts.push_back(std::move(c));
    } else {
      VectorSlot v;
      v.op = static_cast<int>(j);
      v.dom = o.idx;
      v.ext = o.ext;
      const auto& outs = op.out_indices;
      auto pos = [&](const std::string& x) {
        return static_cast<int>(std::find(v.dom.begin(), v.dom.end(), x) - v.dom.begin());
      };
      // Preferred layout first: rows of the second-innermost out index, innermost along the free dim.
      if (o.kind == ir::OpKind::reduce) {
        for (auto it = outs.rbegin(); it != outs.rend(); ++it)
          for (auto rt = op.reduce_indices.rbegin(); rt != op.reduce_indices.rend(); ++rt)
            v.layouts.push_back({pos(*it), pos(*rt)});
        if (outs.empty())
          for (auto rt = op.reduce_indices.rbegin(); rt != op.reduce_indices.rend(); ++rt) v.layouts.push_back({-1, pos(*rt)});
      } else {
        const int n = static_cast<int>(outs.size());
        std::vector<int> order;  // out positions, innermost-but-one first
        for (int q = n - 2; q >= 0; --q) order.push_back(q);
        order.push_back(n - 1);
        for (int pq : order)
          for (int fq = n - 1; fq >= 0; --fq)
            if (fq != pq) v.layouts.push_back({pos(outs[static_cast<std::size_t>(pq)]), pos(outs[static_cast<std::size_t>(fq)])});
        if (n == 1) v.layouts.push_back({pos(outs[0]), -1});
      }
      if (o.kind == ir::OpKind::reduce && ir::has_shifts(op.expr)) {
        // A reduction reading shifted inputs (a convolution, a stencil) may also lay two output
        // indices on partitions and free dim, its reduction looped one step at a time (a
        // multiply-accumulate per filter tap). Layouts that would put the partition and the free
        // index into one shifted position (a diagonal band) go last: the plan rejects them.
        const int n = static_cast<int>(outs.size());
        std::vector<std::array<int, 2>> both;
        std::vector<int> order;  // out positions, innermost-but-one first (as for maps)
        for (int q = n - 2; q >= 0; --q) order.push_back(q);
        if (n > 0) order.push_back(n - 1);
        for (int pq : order)
          for (int fq = n - 1; fq >= 0; --fq)
            if (fq != pq) both.push_back({pos(outs[static_cast<std::size_t>(pq)]), pos(outs[static_cast<std::size_t>(fq)])});
        v.layouts.insert(v.layouts.begin(), both.begin(), both.end());
        const auto band = [&](const std::array<int, 2>& l) {
          if (l[0] < 0 || l[1] < 0) return false;
          const auto& pi = v.dom[static_cast<std::size_t>(l[0])];
          const auto& fi = v.dom[static_cast<std::size_t>(l[1])];
          std::vector<const ir::Expr*> nodes;
          preorder(op.expr, nodes);
          for (const auto* e : nodes)
            for (std::size_t d = 0; e->kind == ir::Expr::Kind::access && d < e->shifts.size(); ++d) {
              const auto& sh = e->shifts[d];
              const auto has = [&](const std::string& x) { return e->indices[d] == x || sh.plus == x; };
              if (!sh.plain() && has(pi) && has(fi)) return true;
            }
          return false;
        };
        std::stable_partition(v.layouts.begin(), v.layouts.end(), [&](const auto& l) { return !band(l); });
      }
      if (v.layouts.empty()) return unsupported(Unsupported::Why::no_layout, o.name, "has no loop index to lay out");
      std::vector<std::string> ll;
      for (auto [p, f] : v.layouts)
        ll.push_back(fmt::format("{},{}", p < 0 ? "-" : v.dom[static_cast<std::size_t>(p)],
                                 f < 0 ? "-" : v.dom[static_cast<std::size_t>(f)]));
      v.layout = cat(grp + ".layout", ll, grp);
      std::set<int> tiled;
      for (auto [p, f] : v.layouts) {
        if (p >= 0) tiled.insert(p);
        if (f >= 0) tiled.insert(f);
      }
      v.tile.assign(v.dom.size(), -1);
      for (int q : tiled) {
        const std::int64_t cap = std::max<std::int64_t>(t.pmax, std::min<std::int64_t>(t.sbuf_free_max_elems, 65536));
        v.tile[static_cast<std::size_t>(q)] = ord(grp + ".tile." + v.dom[static_cast<std::size_t>(q)],
                                                  tile_values(v.ext[static_cast<std::size_t>(q)], cap), grp);
      }
      v.bufs = ord(grp + ".bufs", {1, 2, 3, 4}, grp);
      v.queues = ord(grp + ".queues", {1, 2, 4}, grp);
      if (o.kind == ir::OpKind::reduce && ir::has_shifts(op.expr)) {
        v.window = cat(grp + ".window", {"no", "yes", "fold"}, grp);
        std::vector<std::int64_t> cw;
        for (std::int64_t x = 1; x <= 4096; x *= 2) cw.push_back(x);
        v.chunk = ord(grp + ".chunk", cw, grp);
      }
      o.vec = static_cast<int>(s.vectors.size());
      s.vectors.push_back(std::move(v));
    }
  }

  // Flash attention: one online-softmax nest for a QKᵀ -> softmax -> PV pattern (FlashSlot).
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
    a = static_cast<std::size_t>(f->last);
    s.flashes.push_back(std::move(*f));
  }

  // Defaults: one tile per engine limit, no blocking, loads at their innermost useful level,
  // double buffering, PSUM accumulation, everything fused that may fuse.
  Genome d = sp.first();
  auto set = [&](int gi, int val) {
    if (gi >= 0) sp.slots(d, static_cast<std::size_t>(gi))[0] = val;
  };
  for (const auto& c : s.contracts) {
    for (int cl : c.cls_list) {
      const auto& g = sp.gene(static_cast<std::size_t>(c.tile[cl]));
      const std::int64_t want = cl == 0 ? t.stationary_fmax : cl == 1 ? t.moving_fmax : t.pmax;
      set(c.tile[cl], value_index(g, want));
    }
    for (int q = 0; q < 2; ++q) set(c.load_bufs[q], 1);
    // transposes through the PE array, as NKI kernels usually do (strided DMA of 2-byte elements is slow)
    for (int q = 0; q < 2; ++q) set(c.transpose[q], 2);
    set(c.psum_bufs, 1);
    set(c.store_bufs, 1);
  }
  for (const auto& v : s.vectors) {
    for (std::size_t q = 0; q < v.dom.size(); ++q) {
      if (v.tile[q] < 0) continue;
      const auto& g = sp.gene(static_cast<std::size_t>(v.tile[q]));
      const auto [p, f] = v.layouts[0];
      const std::int64_t want = static_cast<int>(q) == p ? t.pmax : 2048;
      set(v.tile[q], value_index(g, want));
    }
    set(v.bufs, 1);
    if (v.chunk >= 0) set(v.chunk, static_cast<int>(sp.gene(static_cast<std::size_t>(v.chunk)).values.size()) - 1);
  }
  for (const auto& o : s.ops) set(o.fuse_gene, 1);
  // flash stays off by default (the default schedule is the nest-by-nest one); its tiles start at
  // the engine limits, K/V loads double-buffered
  for (const auto& f : s.flashes) {
    set(f.tile_row, value_index(sp.gene(static_cast<std::size_t>(f.tile_row)), t.pmax));
    set(f.tile_kv, value_index(sp.gene(static_cast<std::size_t>(f.tile_kv)), 512));
    set(f.bufs, 1);
  }
  s.defaults = d;

  ScheduleSpace out;
  out.impl_ = impl;
  Rng rng(0x5eed);
  Genome dd = d;
  out.repair(dd, rng);
  impl->defaults = dd;
  return Expected<ScheduleSpace, Unsupported>(std::move(out));
}

const Space& ScheduleSpace::genes() const noexcept { return impl_->space; }
const ir::Kernel& ScheduleSpace::kernel() const noexcept { return impl_->kernel; }
const target::Target& ScheduleSpace::target() const noexcept { return impl_->target; }
Genome ScheduleSpace::default_genome() const { return impl_->defaults; }

bool ScheduleSpace::repair(Genome& g, Rng& rng) const {
  (void)rng;
  const Space& sp = impl_->space;
  if (!sp.contains(g)) return false;
  for (int iter = 0; iter < 64; ++iter) {
    auto p = make_plan(*this, g);
    if (p) return true;
    const auto& r = p.error();
    if (r.fix_gene < 0) return false;
    auto sl = sp.slots(g, static_cast<std::size_t>(r.fix_gene));
    if (sl[0] == r.fix_value) return false;
    sl[0] = r.fix_value;
  }
  return false;
}

double ScheduleSpace::sampled_validity(std::size_t samples, std::uint64_t seed) const {
  if (samples == 0) return 0;
  std::size_t ok = 0;
  for (std::size_t i = 0; i < samples; ++i) {
    Rng rng(seed, i);
    Genome g = impl_->space.random(rng);
    if (repair(g, rng)) ++ok;
  }
  return static_cast<double>(ok) / static_cast<double>(samples);
}

}  // namespace kevo::schedule
