#include "kevo/search/verify_best.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <map>
#include <numeric>

#include "kevo/ir/analysis.hpp"
#include "kevo/ir/fn.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/lower/lower.hpp"
#include "kevo/schedule/detail/plan.hpp"
#include "kevo/schedule/detail/structure.hpp"
#include "kevo/verify/interpreter.hpp"

namespace kevo::search {

namespace {

// Kernel dimension bound to each index name of op `j` (through the tensors it writes and reads).
std::map<std::string, std::string> index_dims(const ir::Kernel& k, std::size_t j) {
  std::map<std::string, std::string> out;
  const auto& op = k.ops[j];
  auto bind = [&](const std::string& tensor, const std::vector<std::string>& idx) {
    const ir::Tensor* t = k.tensor(tensor);
    if (t == nullptr) return;
    for (std::size_t i = 0; i < idx.size() && i < t->dims.size(); ++i) out.emplace(idx[i], t->dims[i]);
  };
  bind(op.out, op.out_indices);
  std::vector<const ir::Expr*> stack{&op.expr};
  while (!stack.empty()) {
    const ir::Expr* e = stack.back();
    stack.pop_back();
    if (e->kind == ir::Expr::Kind::access) bind(e->tensor, e->indices);
    for (const auto& a : e->args) stack.push_back(&a);
  }
  return out;
}

// One tile gene of the space: the dimension it cuts, the index extent, and its block gene.
struct TileUse {
  int tile = -1, block = -1;
  std::string dim;
  std::int64_t ext = 1;
  // what the gene tiles: a contraction's op, a flash or online nest's slot (-1: a vector op's)
  enum class Of : std::uint8_t { contract, vector, flash, online } of = Of::vector;
  int id = -1;
};

std::vector<TileUse> tile_uses(const schedule::SpaceImpl& s) {
  std::vector<TileUse> out;
  const auto& k = s.kernel;
  for (const auto& c : s.contracts) {
    const auto dims = index_dims(k, static_cast<std::size_t>(c.op));
    for (int cl = 0; cl < 3; ++cl) {
      if (!c.present[cl] || c.tile[cl] < 0) continue;
      auto it = dims.find(c.idx[cl]);
      if (it == dims.end()) continue;
      out.push_back({c.tile[cl], c.block[cl], it->second, c.ext[cl], TileUse::Of::contract, c.op});
    }
  }
  for (const auto& v : s.vectors) {
    const auto dims = index_dims(k, static_cast<std::size_t>(v.op));
    for (std::size_t q = 0; q < v.dom.size(); ++q) {
      if (v.tile[q] < 0) continue;
      auto it = dims.find(v.dom[q]);
      if (it == dims.end()) continue;
      out.push_back({v.tile[q], -1, it->second, v.ext[q], TileUse::Of::vector, v.op});
    }
  }
  for (std::size_t fi = 0; fi < s.flashes.size(); ++fi) {
    const auto& f = s.flashes[fi];
    const auto dims = index_dims(k, static_cast<std::size_t>(f.qk));
    auto r = dims.find(f.row), kv = dims.find(f.kv);
    const int id = static_cast<int>(fi);
    if (f.tile_row >= 0 && r != dims.end()) out.push_back({f.tile_row, -1, r->second, f.ext_row, TileUse::Of::flash, id});
    if (f.tile_kv >= 0 && kv != dims.end()) out.push_back({f.tile_kv, -1, kv->second, f.ext_kv, TileUse::Of::flash, id});
  }
  for (std::size_t oi = 0; oi < s.onlines.size(); ++oi) {
    const auto& o = s.onlines[oi];
    const auto dims = index_dims(k, static_cast<std::size_t>(o.mx));
    auto r = dims.find(o.row), j = dims.find(o.j);
    const int id = static_cast<int>(oi);
    if (o.tile_row >= 0 && r != dims.end()) out.push_back({o.tile_row, -1, r->second, o.ext_row, TileUse::Of::online, id});
    if (o.tile_j >= 0 && j != dims.end()) out.push_back({o.tile_j, -1, j->second, o.ext_j, TileUse::Of::online, id});
  }
  return out;
}

std::int64_t value_of(const Space& sp, const Genome& g, int gene) {
  const Gene& G = sp.gene(static_cast<std::size_t>(gene));
  return G.values.at(static_cast<std::size_t>(sp.at(g, static_cast<std::size_t>(gene))));
}

// The bytes of every tensor of `k` at 4 bytes an element (what checking it holds, per copy).
std::int64_t tensor_bytes(const ir::Kernel& k) {
  std::int64_t b = 0;
  for (const auto& t : k.tensors) b += k.elements(t) * 4;
  return b;
}

std::string dims_text(const ir::Kernel& k) {
  std::string s;
  for (const auto& d : k.dims) s += fmt::format("{}{}={}", s.empty() ? "" : ",", d.name, d.size);
  return s;
}

// What must not change between the original and the reduced schedule: nests, their ops, their
// buffers and loop structure.
std::string structure_of(const schedule::Plan& p) {
  std::string s;
  for (const auto& n : p.nests) {
    s += fmt::format("[{} {} ops", static_cast<int>(n.kind), n.name);
    for (int o : n.ops) s += fmt::format(" {}", o);
    s += fmt::format("; {} buffers", n.buffers.size());
    if (n.kind == schedule::NestKind::contract) {
      s += "; loops";
      for (const auto& l : n.c.loops) s += fmt::format(" {}{}", l.cls, l.block ? "b" : "");
    } else if (n.kind == schedule::NestKind::vector) {
      s += fmt::format("; p={} f={} rows={} fred={}", n.v.pidx, n.v.fidx, n.v.complete_rows, n.v.f_reduced);
      for (const auto& x : n.v.outer) s += " o:" + x;
      for (const auto& x : n.v.inner) s += " i:" + x;
    }
    s += "]";
  }
  return s;
}

}  // namespace

Expected<ReducedShape, std::string> reduce_shape(const schedule::ScheduleSpace& space, const Genome& g, int blocks) {
  try {
    const auto& impl = space.impl();
    const Space& sp = space.genes();
    if (!sp.contains(g)) return unexpected(std::string("the genome is outside the schedule space"));
    // the kernel the genome schedules (its long indices split, if any): reduced and re-derived as is
    const ir::Kernel& k = space.scheduled_kernel();
    const auto uses = tile_uses(impl);
    auto p0 = schedule::make_plan(space, g);
    if (!p0) return unexpected("the schedule has no plan: " + p0.error().message);
    // A gene the plan does not use cuts nothing: a contraction's or a map's tiles when a flash or
    // online nest computes it, a flash nest's when the plan has none. Counting their steps made the unit
    // coarse enough (blocks of 4,096 rows) to leave nothing to reduce. They still map into the
    // reduced space (their value or the nearest one allowed), and the plans' structures must agree.
    const auto active = [&](const TileUse& u) {
      switch (u.of) {
        case TileUse::Of::vector:  // a map or reduction computed inside a flash or online nest is tiled by it
        case TileUse::Of::contract: {
          const auto& on = p0->op_nest;
          if (u.id < 0 || static_cast<std::size_t>(u.id) >= on.size() || on[static_cast<std::size_t>(u.id)] < 0) return true;
          const auto kind = p0->nests[static_cast<std::size_t>(on[static_cast<std::size_t>(u.id)])].kind;
          return kind != schedule::NestKind::flash && kind != schedule::NestKind::online;
        }
        case TileUse::Of::flash:
          return std::any_of(p0->nests.begin(), p0->nests.end(),
                             [&](const schedule::NestPlan& n) { return n.kind == schedule::NestKind::flash && n.f.slot == u.id; });
        case TileUse::Of::online:
          return std::any_of(p0->nests.begin(), p0->nests.end(),
                             [&](const schedule::NestPlan& n) { return n.kind == schedule::NestKind::online && n.o.slot == u.id; });
      }
      return true;
    };
    std::vector<bool> used(uses.size());
    for (std::size_t i = 0; i < uses.size(); ++i) used[i] = active(uses[i]);

    // Per dimension: the unit (lcm of the steps that cut it) and whether anything tiles it.
    std::map<std::string, std::int64_t> unit;
    std::map<std::string, bool> tiled;
    for (std::size_t ui = 0; ui < uses.size(); ++ui) {
      const auto& u = uses[ui];
      tiled[u.dim] = true;  // (an unused gene's dimension keeps the tiled floor: whatever tiles it now is unseen here)
      if (!used[ui]) continue;
      const std::int64_t t = value_of(sp, g, u.tile);
      if (t >= u.ext) continue;  // a whole-extent tile: whole at the reduced extent too
      std::int64_t step = t;
      if (u.block >= 0) {
        const std::int64_t b = value_of(sp, g, u.block);
        if (t * b < u.ext) step = t * b;  // a block covering the extent stays one block
      }
      auto& cur = unit.try_emplace(u.dim, 1).first->second;
      cur = std::lcm(cur, step);
    }
    // What ties the dimensions to each other, read from every op: an index that ranges over two
    // dimensions in one op (KIR lets dimensions of one size but different names share an index)
    // ties them, and they are reduced together; a shifted read's position (stride * v + f + offset)
    // derives its dimension's reduced extent from v's and f's; a comparison of an index with a
    // constant keeps the index's dimension past the constant.
    std::map<std::string, std::string> parent;  // union-find over dimension names
    const auto root = [&](std::string d) {
      while (parent.count(d) && parent[d] != d) d = parent[d];
      return d;
    };
    const auto unite = [&](const std::string& a, const std::string& b) {
      const auto ra = root(a), rb = root(b);
      if (ra != rb) parent[std::max(ra, rb)] = std::min(ra, rb);
    };
    struct Shifted {
      std::string dim, v, plus;  // the dimension read, the scaled index, the added one
      std::int64_t stride = 1, offset = 0;
      std::size_t op = 0;
    };
    std::vector<Shifted> shifted;
    std::vector<std::map<std::string, std::string>> idx_dim(k.ops.size());  // per op: index -> dimension (plain positions)
    std::map<std::string, std::int64_t> keep;  // dimension -> smallest extent that keeps every offset and constant
    const auto keep_at_least = [&](const std::string& dim, std::int64_t n) {
      auto& f = keep.try_emplace(dim, 0).first->second;
      f = std::max(f, n);
    };
    std::vector<std::pair<std::size_t, std::pair<std::string, double>>> compared;  // (op, (index, |constant|))
    for (std::size_t j = 0; j < k.ops.size(); ++j) {
      auto& bind = idx_dim[j];
      const auto bind_plain = [&](const std::string& index, const std::string& dim) {
        auto [it, fresh] = bind.emplace(index, dim);
        if (!fresh && it->second != dim) unite(it->second, dim);
      };
      const ir::Op& op = k.ops[j];
      if (const ir::Tensor* t = k.tensor(op.out))
        for (std::size_t d = 0; d < op.out_indices.size() && d < t->dims.size(); ++d) bind_plain(op.out_indices[d], t->dims[d]);
      std::vector<const ir::Expr*> stack{&op.expr};
      while (!stack.empty()) {
        const ir::Expr* e = stack.back();
        stack.pop_back();
        for (const auto& x : e->args) stack.push_back(&x);
        if (e->kind == ir::Expr::Kind::call && ir::is_comparison(e->fn) && e->args.size() == 2) {
          // `c < 30000` at C = 5184 is always true: the check would never reach the other side
          for (int side = 0; side < 2; ++side) {
            const ir::Expr& c = e->args[static_cast<std::size_t>(side)];
            const ir::Expr& x = e->args[static_cast<std::size_t>(1 - side)];
            if (c.kind != ir::Expr::Kind::constant || !std::isfinite(c.value)) continue;
            const double lim = std::abs(c.value);
            std::vector<const ir::Expr*> in{&x};
            while (!in.empty()) {
              const ir::Expr* y = in.back();
              in.pop_back();
              for (const auto& z : y->args) in.push_back(&z);
              if (y->kind == ir::Expr::Kind::index) compared.push_back({j, {y->index, lim}});
            }
          }
        }
        if (e->kind != ir::Expr::Kind::access) continue;
        const ir::Tensor* t = k.tensor(e->tensor);
        if (t == nullptr) continue;
        for (std::size_t d = 0; d < e->indices.size() && d < t->dims.size(); ++d) {
          if (e->shifts.empty() || e->shifts[d].plain()) {
            bind_plain(e->indices[d], t->dims[d]);
            continue;
          }
          const auto& sh = e->shifts[d];
          shifted.push_back({t->dims[d], e->indices[d], sh.plus, sh.stride, sh.offset, j});
          // A shifted read's offset must stay inside the reduced extent of the dim it is compared
          // with: X[r, c + 40000] at C = 4096 reads nothing in range, and the check would pass
          // vacuously. |offset| + 2: some positions in range and (past the border) some not.
          if (sh.offset != 0) keep_at_least(t->dims[d], (sh.offset < 0 ? -sh.offset : sh.offset) + 2);
        }
      }
    }
    for (const auto& [j, c] : compared) {
      const auto it = idx_dim[j].find(c.first);
      if (it == idx_dim[j].end()) continue;
      const ir::Dim* d = k.dim(it->second);
      // a constant inside the extent splits it: keep both sides (one past it, and the border);
      // one outside splits nothing at the whole extent either
      if (d != nullptr && c.second < static_cast<double>(d->size)) keep_at_least(it->second, static_cast<std::int64_t>(c.second) + 2);
    }

    // Per group of tied dimensions: one unit (the lcm of its members'), one floor, one reduced extent.
    struct Rule {
      std::int64_t n = 0, unit = 1, floor = 0, keep = 0;
    };
    std::map<std::string, Rule> rules;  // by group root
    for (const auto& d : k.dims) {
      const std::int64_t n = d.size;
      // a tiled extent keeps its remainder modulo the partition count too: the PE array's tiling
      // genes (`kedge`, `sedge`) are offered by the edge an extent leaves at 128-wide tiles
      const std::int64_t u = unit.count(d.name) ? std::lcm(unit[d.name], std::int64_t{space.target().pmax})
                             : tiled.count(d.name) ? std::int64_t{space.target().pmax} : 1;
      const std::int64_t floor = std::max(tiled.count(d.name) ? std::min<std::int64_t>(n, 128) : std::min<std::int64_t>(n, blocks),
                                          keep.count(d.name) ? keep[d.name] : 0);
      auto [it, fresh] = rules.try_emplace(root(d.name), Rule{n, u, floor, keep.count(d.name) ? keep[d.name] : 0});
      if (fresh) continue;
      Rule& g = it->second;
      if (g.n != n) return unexpected(fmt::format("dimensions {} and {} share an index but differ in size", root(d.name), d.name));
      g.unit = std::lcm(g.unit, u);
      g.floor = std::max(g.floor, floor);
      g.keep = std::max(g.keep, keep.count(d.name) ? keep[d.name] : 0);
    }
    // the smallest extent of the form m * unit + (n mod unit) at or above `at_least` (n at most)
    const auto fit = [&](const Rule& g, std::int64_t at_least) {
      if (g.keep >= g.n || g.unit >= g.n) return g.n;  // reducing it would leave an offset or a constant outside
      const std::int64_t rem = g.n % g.unit;
      std::int64_t m = blocks;
      const std::int64_t want = std::max(g.floor, at_least);
      if (m * g.unit + rem < want) m = (want - rem + g.unit - 1) / g.unit;
      return std::min(g.n, m * g.unit + rem);
    };
    std::map<std::string, std::int64_t> reduced;  // by group root
    for (const auto& [r, g] : rules) reduced[r] = fit(g, 0);
    // A shifted read's dimension keeps the border it had: stride * v + f + offset overhangs its
    // reduced extent by what it overhung the whole one (k38: X[n, c, 2*v + f - 3] with V = 10001
    // reduced to 273 kept W at 5, and all but 4 outputs read only the zero padding).
    const auto size_of = [&](const std::string& dim) -> std::pair<std::int64_t, std::int64_t> {  // (whole, reduced)
      const ir::Dim* d = k.dim(dim);
      if (d == nullptr) return {1, 1};
      return {d->size, reduced[root(dim)]};
    };
    std::map<std::string, std::int64_t> derived;  // by group root: the extent the shifted reads need
    for (const auto& sh : shifted) {
      std::int64_t shrink = 0;
      for (const auto* idx : {&sh.v, &sh.plus}) {
        if (idx->empty()) continue;
        const auto it = idx_dim[sh.op].find(*idx);
        if (it == idx_dim[sh.op].end()) continue;
        const auto [whole, red] = size_of(it->second);
        shrink += (idx == &sh.v ? sh.stride : 1) * (whole - red);
      }
      auto& want = derived.try_emplace(root(sh.dim), 0).first->second;
      want = std::max(want, size_of(sh.dim).first - shrink);
    }
    for (const auto& [r, want] : derived) reduced[r] = fit(rules[r], want);
    ir::Kernel rk = k;
    bool changed = false;
    for (auto& d : rk.dims) {
      const std::int64_t r = reduced[root(d.name)];
      if (r < d.size) {
        d.size = r;
        changed = true;
      }
    }
    auto valid = ir::validate(rk);
    if (!valid) return unexpected("the reduced kernel is invalid: " + valid.error().headline());
    rk = std::move(valid).value();
    ReducedShape out;
    out.detail = changed ? fmt::format("{} (from {})", dims_text(rk), dims_text(k)) : dims_text(rk) + " (not reduced)";
    // the reduced extents may no longer show the stationary waste that made the full-size space
    // offer `out=pe_transpose`: offer every orientation where the full-size space has one
    // (and every structure the full-size space offers)
    schedule::DeriveOptions dopt = space.options();
    dopt.split_long_indices = false;  // rk is the split view already
    for (const auto& c : impl.contracts) dopt.every_orientation = dopt.every_orientation || c.out_tr_operand >= 0;
    auto rspace = schedule::ScheduleSpace::try_derive(rk, space.target(), dopt);
    if (!rspace) return unexpected("the reduced kernel cannot be scheduled: " + rspace.error().str());
    out.space = std::move(rspace).value();
    const Space& rs = out.space.genes();
    if (rs.size() != sp.size()) return unexpected(fmt::format("the reduced space has {} genes, not {}", rs.size(), sp.size()));
    const auto ruses = tile_uses(out.space.impl());
    if (ruses.size() != uses.size()) return unexpected(std::string("the reduced space tiles other indices"));
    std::map<int, std::size_t> use_of_tile, use_of_block;
    for (std::size_t i = 0; i < uses.size(); ++i) {
      use_of_tile[uses[i].tile] = i;
      if (uses[i].block >= 0) use_of_block[uses[i].block] = i;
    }
    out.genome = rs.first();
    for (std::size_t i = 0; i < sp.size(); ++i) {
      const Gene& a = sp.gene(i);
      const Gene& b = rs.gene(i);
      if (a.name != b.name || a.kind != b.kind)
        return unexpected(fmt::format("gene {} is '{}' in the reduced space, not '{}'", i, b.name, a.name));
      auto dst = rs.slots(out.genome, i);
      const auto src = sp.slots(g, i);
      if (a.kind == GeneKind::permutation) {
        if (a.labels != b.labels) return unexpected(fmt::format("gene {} permutes other items at the reduced shape", a.name));
        std::copy(src.begin(), src.end(), dst.begin());
        continue;
      }
      std::string want = a.labels.at(static_cast<std::size_t>(src[0]));
      const int gi = static_cast<int>(i);
      if (auto it = use_of_tile.find(gi); it != use_of_tile.end()) {
        const auto& u = uses[it->second];
        const auto& ru = ruses[it->second];
        if (a.values.at(static_cast<std::size_t>(src[0])) >= u.ext) want = fmt::format("{}", ru.ext);
      } else if (auto jt = use_of_block.find(gi); jt != use_of_block.end()) {
        const auto& u = uses[jt->second];
        const auto& ru = ruses[jt->second];
        const std::int64_t t = value_of(sp, g, u.tile), bv = a.values.at(static_cast<std::size_t>(src[0]));
        if (t >= u.ext) {
          // a whole-extent tile makes the block moot: keep it where the reduced space allows it
          if (std::find(b.labels.begin(), b.labels.end(), want) == b.labels.end()) want = b.labels.back();
        } else if (t * bv >= u.ext) {
          // one block over the whole extent: the smallest reduced block that still covers it
          std::string pick;
          for (std::size_t v = 0; v < b.values.size(); ++v)
            if (t * b.values[v] >= ru.ext) {
              pick = b.labels[v];
              break;
            }
          if (pick.empty()) return unexpected(fmt::format("no block of {} covers the reduced extent {}", a.name, ru.ext));
          want = pick;
        }
      }
      auto pos = std::find(b.labels.begin(), b.labels.end(), want);
      if (pos == b.labels.end()) {
        // a gene the plan does not use: the allowed value nearest its own (the structures are compared below)
        const auto ti = use_of_tile.find(gi);
        const auto bi = use_of_block.find(gi);
        const bool unused = (ti != use_of_tile.end() && !used[ti->second]) || (bi != use_of_block.end() && !used[bi->second]);
        if (unused && !b.values.empty()) {
          const std::int64_t v = a.values.at(static_cast<std::size_t>(src[0]));
          std::size_t best = 0;
          for (std::size_t q = 1; q < b.values.size(); ++q)
            if (std::llabs(b.values[q] - v) < std::llabs(b.values[best] - v)) best = q;
          pos = b.labels.begin() + static_cast<std::ptrdiff_t>(best);
        } else {
          return unexpected(fmt::format("{}={} is not allowed at the reduced shape {}", a.name, want, dims_text(rk)));
        }
      }
      dst[0] = static_cast<std::int32_t>(pos - b.labels.begin());
    }
    auto p1 = schedule::make_plan(out.space, out.genome);
    if (!p1) return unexpected(fmt::format("at the reduced shape {}: {}", dims_text(rk), p1.error().message));
    if (structure_of(*p0) != structure_of(*p1))
      return unexpected(fmt::format("the schedule's structure changes at the reduced shape {}", dims_text(rk)));
    out.kernel = std::move(rk);
    return out;
  } catch (const std::exception& e) {
    return unexpected(std::string("reducing the shape failed: ") + e.what());
  }
}

Verification verify_schedule(const KernelProblem& problem, const Genome& g, const VerifyOptions& opt) {
  Verification v;
  try {
    auto prog = problem.lower(g);
    if (!prog) {
      v.message = "does not lower: " + prog.error().str();
      return v;
    }
    const auto& st = prog->stats;
    const std::int64_t bytes = tensor_bytes(problem.kernel());
    const bool cheap = !opt.force_reduced && st.flops <= opt.max_interpret_flops &&
                       st.instructions <= opt.max_interpret_instructions && bytes <= opt.max_interpret_bytes;
    if (cheap) {
      const auto chk = verify::check_program(problem.kernel(), *prog, opt.seed, opt.trials);
      v.method = "interpreter";
      v.shape = dims_text(problem.kernel());
      v.conclusive = true;
      v.ok = chk.ok;
      v.message = chk.message;
      v.detail = fmt::format("{} ({} instructions), {} trial(s), program and adversarial order", dims_text(problem.kernel()),
                             st.instructions, std::max(1, opt.trials));
      return v;
    }
    std::string why = opt.force_reduced ? std::string("reduced shape requested")
                                        : fmt::format("{:.3g} GFLOP, {} instructions, {:.3g} GB of tensors: too large to interpret whole",
                                                      static_cast<double>(st.flops) / 1e9, st.instructions,
                                                      static_cast<double>(bytes) / 1e9);
    std::string last;
    for (int blocks : {2, 4, 8}) {
      auto rs = reduce_shape(problem.schedule_space(), g, blocks);
      if (!rs) {
        last = rs.error();
        continue;
      }
      auto rp = lower::lower(rs->space, rs->genome);
      if (!rp) {
        last = fmt::format("at the reduced shape {}: {}", rs->detail, rp.error().str());
        continue;
      }
      const std::int64_t rbytes = tensor_bytes(rs->kernel);
      if (rp->stats.flops > opt.max_reduced_flops || rp->stats.instructions > lower::kMaxInstructions ||
          rbytes > opt.max_reduced_bytes) {
        last = fmt::format("the reduced shape {} is still too large ({:.3g} GFLOP, {} instructions, {:.3g} GB of tensors)",
                           rs->detail, static_cast<double>(rp->stats.flops) / 1e9, rp->stats.instructions,
                           static_cast<double>(rbytes) / 1e9);
        break;
      }
      const auto chk = verify::check_program(rs->kernel, *rp, opt.seed, opt.trials);
      v.method = "reduced_shape";
      v.shape = dims_text(rs->kernel);
      v.conclusive = true;
      v.ok = chk.ok;
      v.message = chk.message;
      v.detail = fmt::format("{} ({} instructions, {} blocks per dimension), {} trial(s), program and adversarial order; {}",
                             rs->detail, rp->stats.instructions, blocks, std::max(1, opt.trials), why);
      return v;
    }
    // No reduced shape: a runner that compared the outputs itself (the CpuRunner) is the last word.
    if (problem.runner_traits().checks_outputs) {
      auto m = problem.cached_measurement(g);
      if (!m) {
        auto rep = problem.measure_one(g);
        m = rep.measurement;
      }
      if (m && (m->status == Status::ok || m->status == Status::incorrect)) {
        v.method = "runner";
        v.conclusive = true;
        v.ok = m->status == Status::ok;
        v.message = v.ok ? std::string() : m->message;
        v.detail = fmt::format("{} compared the outputs of the whole program (program order); no reduced shape: {}",
                               problem.runner_traits().identity, last);
        return v;
      }
    }
    v.message = fmt::format("unverifiable: {}; no reduced shape: {}", why, last);
  } catch (const std::exception& e) {
    v = Verification{};
    v.message = std::string("verification failed to run: ") + e.what();
  }
  return v;
}

VerifiedBest first_verified(std::span<const Genome> best_first, std::size_t max_checks, const Verifier& verify,
                            const VerifyProgress& progress) {
  VerifiedBest out;
  const std::size_t n = std::min(best_first.size(), max_checks);
  for (std::size_t i = 0; i < n; ++i) {
    if (progress) progress(i, n);
    Verification v = verify(i, best_first[i]);
    ++out.checked;
    if (v.ok) {
      out.index = i;
      out.verification = std::move(v);
      return out;
    }
    out.verification = v;
    out.rejected.emplace_back(i, std::move(v));
  }
  return out;
}

VerifiedBest first_verified(const KernelProblem& problem, std::span<const Genome> best_first, std::size_t max_checks,
                            const VerifyOptions& opt, const VerifyProgress& progress) {
  return first_verified(
      best_first, max_checks, [&](std::size_t, const Genome& g) { return verify_schedule(problem, g, opt); }, progress);
}

}  // namespace kevo::search
