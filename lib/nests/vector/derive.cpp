// Derivation of a vector (row) nest's genes (VectorSlot): layouts, tiles, buffers, queues and, for
// reductions over shifted inputs, windows.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>

#include "schedule/deriver.hpp"

namespace kevo::schedule::detail {

// The genes of the vector nest map or reduce op j roots, or why it is unsupported.
std::optional<Unsupported> derive_vector(const Deriver& d, std::size_t j) {
  auto& s = d.s;
  auto& sp = d.sp;
  const auto& k = d.k;
  const auto& t = d.t;
  auto& o = s.ops[j];
  const auto& op = k.ops[j];
  const std::string& grp = o.name;
  const auto ord = [&](const std::string& n, std::vector<std::int64_t> v, const std::string& g) {
    return static_cast<int>(sp.add(Gene::ordinal(n, std::move(v), g)));
  };
  const auto cat = [&](const std::string& n, std::vector<std::string> v, const std::string& g) {
    return static_cast<int>(sp.add(Gene::categorical(n, std::move(v), g)));
  };
  const auto unsupported = [&](Unsupported::Why why, std::string op_name, std::string message) {
    return std::optional<Unsupported>(Unsupported{why, k.name, std::move(op_name), std::move(message)});
  };
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
    // A reduced index down the partitions (VectorPlan::p_reduced): partial results per partition,
    // combined across the partitions once per output tile. First where no output index could
    // take the partitions (a whole sum: one partition otherwise), last elsewhere.
    std::vector<std::array<int, 2>> across;
    if (!ir::has_shifts(op.expr))
      for (auto pt = op.reduce_indices.begin(); pt != op.reduce_indices.end(); ++pt) {  // outermost first
        for (auto it = outs.rbegin(); it != outs.rend(); ++it) across.push_back({pos(*pt), pos(*it)});
        for (auto rt = op.reduce_indices.rbegin(); rt != op.reduce_indices.rend(); ++rt)
          if (*rt != *pt) across.push_back({pos(*pt), pos(*rt)});
      }
    if (outs.empty()) {
      v.layouts = across;
      for (auto rt = op.reduce_indices.rbegin(); rt != op.reduce_indices.rend(); ++rt) v.layouts.push_back({-1, pos(*rt)});
    } else {
      v.layouts.insert(v.layouts.end(), across.begin(), across.end());
    }
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
  v.issue = cat(grp + ".issue", {"steps", "ready", "list"}, grp);  // IssueOrder
  if (o.kind == ir::OpKind::reduce && ir::has_shifts(op.expr)) {
    v.window = cat(grp + ".window", {"no", "yes", "fold"}, grp);
    std::vector<std::int64_t> cw;
    for (std::int64_t x = 1; x <= 4096; x *= 2) cw.push_back(x);
    v.chunk = ord(grp + ".chunk", cw, grp);
    v.hold = cat(grp + ".hold", {"sbuf", "psum"}, grp);
  }
  if (ir::has_shifts(op.expr)) v.pad = cat(grp + ".pad", {"tile", "halo"}, grp);
  {
    // a layout that lays a plain input's contiguous index on partitions and another of its
    // indices along the free dim: how such loads transpose (VectorSlot::transpose)
    std::vector<const ir::Expr*> nodes;
    preorder(op.expr, nodes);
    bool any = false;
    for (auto [p, f] : v.layouts)
      for (const auto* e : nodes)
        any = any || (p >= 0 && f >= 0 &&
                      transposed_load(*e, v.dom[static_cast<std::size_t>(p)], v.dom[static_cast<std::size_t>(f)]));
    if (any) v.transpose = cat(grp + ".transpose", {"strided", "dma_transpose", "pe_transpose"}, grp);
  }
  o.vec = static_cast<int>(s.vectors.size());
  s.vectors.push_back(std::move(v));
  return std::nullopt;
}

// Default values of this kind's genes in `g` (ScheduleSpace::default_genome, before repair).
void defaults_vector(const Deriver& d, Genome& g) {
  const auto& s = d.s;
  auto& sp = d.sp;
  const auto& t = d.t;
  const auto set = [&](int gi, int val) { set_value(sp, g, gi, val); };
  for (const auto& v : s.vectors) {
    for (std::size_t q = 0; q < v.dom.size(); ++q) {
      if (v.tile[q] < 0) continue;
      const auto& gg = sp.gene(static_cast<std::size_t>(v.tile[q]));
      const auto [p, f] = v.layouts[0];
      const std::int64_t want = static_cast<int>(q) == p ? t.pmax : 2048;
      set(v.tile[q], value_index(gg, want));
    }
    set(v.bufs, 1);
    if (v.transpose >= 0) {
      // a DMA transpose where every input that may go through one has 2-byte elements and the
      // target's DMA engines transpose (Target::dma_transposes), else the PE array
      std::vector<const ir::Expr*> nodes;
      preorder(d.k.ops[static_cast<std::size_t>(v.op)].expr, nodes);
      bool two = true;
      for (const auto* e : nodes)
        if (e->kind == ir::Expr::Kind::access && ir::is_plain(*e))
          two = two && ir::dtype_bytes(s.tensor(e->tensor).dtype) == 2;
      set(v.transpose, two && d.t.dma_transposes ? 1 : 2);
    }
    if (v.chunk >= 0) set(v.chunk, static_cast<int>(sp.gene(static_cast<std::size_t>(v.chunk)).values.size()) - 1);
  }
}

}  // namespace kevo::schedule::detail
