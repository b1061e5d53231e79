// The Lowerer's shared parts: the nest walk's driver, HBM and on-chip buffers, DMA and
// compute instructions, and the tile evaluation of map/reduce ops (vector nests, epilogues).
#include "lowerer.hpp"

#include <limits>

#include "issue.hpp"
#include "kevo/ir/analysis.hpp"

namespace kevo::lower::detail {

namespace {
// How many nodes the subtree of `e` holds in pre-order (schedule::preorder).
std::size_t subtree_size(const ir::Expr& e) {
  std::size_t n = 1;
  for (const auto& a : e.args) n += subtree_size(a);
  return n;
}
}  // namespace

void Lowerer::run(std::size_t exact) {
  // Reserve for the unrolled program up front: growth copies of ~100k instructions dominate otherwise.
  // Reserving more than is used costs address space, not memory: untouched pages are never
  // faulted in. Six per matmul covers loads, evictions and stores per tile.
  const std::size_t est = exact > 0 ? exact : std::min(64 + 6 * matmuls(plan_), detail::Builder::kMaxInstructions);
  prog_.instrs.reserve(est);
  prog_.dep_begin.reserve(est + 1);
  prog_.deps.reserve(est * 3);
  prog_.dep_kind.reserve(est * 3);
  b_.reserve(est);
  prog_.dep_begin.push_back(0);
  walk_nests();
  // vector, flash and online nests issued by an estimated schedule: each nest's instructions are
  // contiguous, marked by their group
  std::vector<IssueRange> reorder;
  for (std::size_t i = 0; i < prog_.instrs.size(); ++i) {
    const auto& np = plan_.nests[static_cast<std::size_t>(prog_.instrs[i].group)];
    const auto order = np.kind == NestKind::vector  ? np.v.issue
                       : np.kind == NestKind::flash ? np.f.issue
                       : np.kind == NestKind::online ? np.o.issue
                                                    : schedule::IssueOrder::steps;
    if (order == schedule::IssueOrder::steps) continue;
    if (reorder.empty() || reorder.back().end != i || prog_.instrs[i - 1].group != prog_.instrs[i].group)
      reorder.push_back({i, i, order});
    reorder.back().end = i + 1;
  }
  reorder_issue(prog_, reorder, t_);
}

void Lowerer::walk_nests() {
  hbm_.assign(k_.tensors.size(), -1);
  for (std::size_t i = 0; i < k_.tensors.size(); ++i) {
    const auto& t = k_.tensors[i];
    if (t.role == ir::Role::temp) continue;
    hbm_buffer(static_cast<int>(i));
  }
  // On-chip memory is one per core: nests run at once (one's loads while another computes) only
  // while their buffers fit together. A nest that would overflow what the nests since the last
  // barrier hold waits for all of them (Builder::begin_nest), as its buffers take their space; a
  // plan checks each nest alone (a swiglu's three 16 KiB PSUM accumulators ran at once on a 16 KiB
  // PSUM, and a two-matmul kernel prefetched into 408 KiB of a 224 KiB SBUF).
  std::int64_t live_sbuf = 0, live_psum = 0;
  prog_.stats.sbuf_bytes_per_partition = prog_.stats.psum_bytes_per_partition = 0;
  for (std::size_t n = 0; n < plan_.nests.size(); ++n) {
    nest_ = static_cast<int>(n);
    const auto& np = plan_.nests[n];
    const bool fits = live_sbuf + np.sbuf_bytes <= t_.sbuf_bytes_per_partition && live_psum + np.psum_bytes <= t_.psum_bytes_per_partition;
    if (!fits) live_sbuf = live_psum = 0;
    b_.begin_nest(!fits);
    live_sbuf += np.sbuf_bytes;
    live_psum += np.psum_bytes;
    prog_.stats.sbuf_bytes_per_partition = std::max(prog_.stats.sbuf_bytes_per_partition, live_sbuf);
    prog_.stats.psum_bytes_per_partition = std::max(prog_.stats.psum_bytes_per_partition, live_psum);
    prog_.group_names.push_back(np.name);
    bufmap_.clear();
    for (const auto& bs : np.buffers) bufmap_.push_back(onchip(np, bs));
    resident_.clear();
    cols_loaded_.clear();
    switch (np.kind) {  // each kind's walk: lib/nests/<kind>/lower.cpp
#define KEVO_LOWER_CASE(kind)  \
  case NestKind::kind:         \
    lower_##kind(np);          \
    break;
      KEVO_NEST_KINDS(KEVO_LOWER_CASE)
#undef KEVO_LOWER_CASE
    }
  }
}

std::uint32_t Lowerer::dma(const AccessPattern& dst, const AccessPattern& src, int queues, bool transpose) {
  release(-1);  // nothing held may end up behind this transfer in its queue
  return put_dma(dst, src, queues, transpose, take_queues(dst, queues, transpose));
}

std::uint32_t Lowerer::put_dma(const AccessPattern& dst, const AccessPattern& src, int queues, bool transpose, unsigned queue) {
  // split along partitions over `queues` DMA queues, from `queue` on: the first `extra` pieces
  // take one partition more than the others
  const int pieces = dma_pieces(dst.part_count, queues, transpose);
  const int base = dst.part_count / pieces, extra = dst.part_count % pieces;
  std::uint32_t last = 0;
  for (int i = 0, p0 = 0; i < pieces; p0 += base + (i < extra ? 1 : 0), ++i) {
    const int rows = base + (i < extra ? 1 : 0);
    Instr& in = b_.open();
    in.op = transpose ? Opcode::dma_transpose : Opcode::dma_copy;
    in.at.dma = true;
    in.at.queue = static_cast<std::uint8_t>(transpose && t_.dma_transposes_in_blocks() ? queue : queue++ % static_cast<unsigned>(t_.dma_queues));
    in.dst = dst;
    in.dst.offset += static_cast<std::int64_t>(p0) * dst.part_stride;
    in.dst.part_count = rows;
    in.src[0] = src;
    if (transpose) {
      // src is [F partitions, P free]: the destination's partitions are the source's innermost free dim
      in.src[0].offset += static_cast<std::int64_t>(p0) * src.free_stride[2];
      in.src[0].free_size[2] = rows;
    } else {
      in.src[0].offset += static_cast<std::int64_t>(p0) * src.part_stride;
      in.src[0].part_count = rows;
    }
    in.nsrc = 1;
    in.group = nest_;
    const auto& sb = B(src.buffer);
    const auto& db = B(dst.buffer);
    const std::int64_t bytes = in.dst.elems() * static_cast<std::int64_t>(ir::dtype_bytes(db.mem == Memory::hbm ? db.dtype : sb.dtype));
    if (sb.mem == Memory::hbm) prog_.stats.hbm_bytes_read += bytes;
    if (db.mem == Memory::hbm) prog_.stats.hbm_bytes_written += bytes;
    last = b_.commit();
  }
  return last;
}

Engine Lowerer::ts_engine(Engine e, ir::Fn fn, const ir::Fn* fn1) const {
  return target::runs_tensor_scalar(t_.engine(e), fn, fn1) ? e : Engine::vector;
}

void Lowerer::tensor_scalar(Engine e, const AccessPattern& dst, const AccessPattern& x, ir::Fn fn, const Val& s0, bool reverse,
                           const Val* s1, ir::Fn fn1) {
  if (s1 != nullptr && s0.imm && !s1->imm) throw std::logic_error("lower: tensor_scalar with an immediate op0 and a tile op1");
  // An engine that runs only multiply and add (the Scalar engine of trn1-trn3): x - k is x + (-k)
  // and k - x is x * -1 + k, both exact in fp32; what it cannot run moves to the Vector engine.
  const auto& spec = t_.engine(e);
  const ir::Fn add = ir::Fn::add;
  if (s1 == nullptr && fn == ir::Fn::sub && s0.imm && !target::runs_tensor_scalar(spec, fn, nullptr)) {
    if (!reverse && target::runs_tensor_scalar(spec, add, nullptr))
      return tensor_scalar(e, dst, x, add, Val{true, -s0.v, {}, false}, false);
    const Val k{true, s0.v, {}, false};
    if (reverse && target::runs_tensor_scalar(spec, ir::Fn::mul, &add))
      return tensor_scalar(e, dst, x, ir::Fn::mul, Val{true, -1.0, {}, false}, false, &k, add);
  }
  Instr& in = compute(Opcode::tensor_scalar, ts_engine(e, fn, s1 != nullptr ? &fn1 : nullptr), dst);
  in.src[0] = x;
  in.nsrc = 1;
  if (s0.imm) in.imm0 = s0.v;
  else {
    in.src[1] = s0.ap;
    in.nsrc = 2;
  }
  in.fn = fn;
  in.reverse0 = reverse;
  if (s1 != nullptr) {
    in.has_op1 = true;
    in.fn1 = fn1;
    if (s1->imm) in.imm1 = s1->v;
    else {
      in.src[2] = s1->ap;
      in.nsrc = 3;
    }
  }
  emit(in, dst.elems() * (s1 != nullptr ? 2 : 1));
}

Lowerer::ShiftedTile Lowerer::shifted_tile(const ir::Expr& acc, const Ctx& c, bool wide, const schedule::WindowGeom* win) {
  ShiftedTile r;
  r.p_hi = c.P;
  if (win) wide = true;
  r.j_hi = win ? win->elems : wide ? c.F : 1;
  AccessPattern& a = r.src;
  a.buffer = hbm_of(acc.tensor);
  const auto shape = k_.shape(s_.tensor(acc.tensor));
  const auto value = [&](const std::string& x) {
    return x.empty() ? 0 : x == c.pidx ? c.p0 : x == c.fidx ? c.f0 : c.fixed_value(x);
  };
  std::int64_t st = 1, ps = 0, fs = 0;
  for (std::size_t d = shape.size(); d-- > 0;) {
    const ir::IndexShift sh = d < acc.shifts.size() ? acc.shifts[d] : ir::IndexShift{};
    const std::string& x = acc.indices[d];
    const std::int64_t base = sh.stride * value(x) + value(sh.plus) + sh.offset;
    const auto coef = [&](const std::string& i) {
      return i.empty() ? 0 : (x == i ? sh.stride : 0) + (sh.plus == i ? 1 : 0);
    };
    const std::int64_t ap = coef(c.pidx), af = win ? (d == win->dim ? 1 : 0) : wide ? coef(c.fidx) : 0;
    if (ap > 0 && af > 0) throw std::logic_error("lower: a shifted index uses both the partition and the free index");
    // in range: 0 <= base + a*t < size, for t in [lo, hi)
    const auto clip = [&](std::int64_t a_, std::int64_t& lo, std::int64_t& hi) {
      if (a_ == 0) {
        if (base < 0 || base >= shape[d]) hi = lo;
        return;
      }
      const std::int64_t first = base >= 0 ? 0 : (-base + a_ - 1) / a_;
      const std::int64_t end = shape[d] - base <= 0 ? 0 : (shape[d] - base + a_ - 1) / a_;
      lo = std::max(lo, first);
      hi = std::min(hi, end);
    };
    if (af > 0) clip(af, r.j_lo, r.j_hi);
    else clip(ap, r.p_lo, r.p_hi);
    a.offset += base * st;
    ps += ap * st;
    fs += af * st;
    st *= shape[d];
  }
  if (r.p_hi < r.p_lo) r.p_hi = r.p_lo;
  if (r.j_hi < r.j_lo) r.j_hi = r.j_lo;
  a.part_stride = ps;
  a.part_count = c.P;
  a.free_stride = {0, 0, s32(wide ? fs : 1)};
  a.free_size = {1, 1, static_cast<std::int32_t>(win ? win->elems : wide ? c.F : 1)};
  return r;
}

void Lowerer::load_access(const AccessPattern& dst, const ir::Expr& e, const Ctx& c, bool wide, int queues, Engine eng,
                 const schedule::WindowGeom* win) {
  if (ir::is_plain(e) && !win) {
    dma(dst, hbm_tile(e, c, wide), queues);
    return;
  }
  const ShiftedTile t = shifted_tile(e, c, wide, win);
  const std::int64_t P = c.P, F = win ? win->elems : wide ? c.F : 1;
  const bool whole = t.p_lo == 0 && t.p_hi == P && t.j_lo == 0 && t.j_hi == F;
  // Zeroes partitions [p0, p1) x free positions [j0, j1) of the tile; the partition range widened
  // down to one a compute engine may start at (compute_start_ok, instr_check.hpp). Only the
  // rows below the in-range part can then overlap the DMA's rectangle (when p_hi is no legal
  // start): that memset is ordered before the DMA like the whole-tile one. A widened side strip
  // grows into rows the memset above the in-range part zeroes too: harmless.
  const auto zero = [&](std::int64_t p0, std::int64_t p1, std::int64_t j0, std::int64_t j1) {
    if (p1 <= p0 || j1 <= j0) return;
    p0 -= p0 % 32;
    while (!compute_start_ok(p0, p1 - p0)) p0 -= 32;  // ends at 0 at the latest
    AccessPattern z = dst;
    z.offset += p0 * dst.part_stride + j0 * dst.free_stride[2];
    z.part_count = static_cast<std::int32_t>(p1 - p0);
    z.free_size[2] = static_cast<std::int32_t>(j1 - j0);
    Instr& in = compute(Opcode::memset, tt_engine(eng), z);
    in.imm0 = 0;
    emit(in, 0);
  };
  const bool outside = t.p_hi <= t.p_lo || t.j_hi <= t.j_lo;
  if (!whole) {
    if (outside || !plan_.nests[static_cast<std::size_t>(nest_)].v.pad_halo) {
      zero(0, P, 0, F);
    } else {  // `pad halo`: the border only, around the DMA's rectangle
      zero(0, t.p_lo, 0, F);
      zero(t.p_hi, P, 0, F);
      zero(t.p_lo, t.p_hi, 0, t.j_lo);
      zero(t.p_lo, t.p_hi, t.j_hi, F);
    }
  }
  if (outside) return;
  AccessPattern d = dst, src = t.src;
  d.offset += t.p_lo * dst.part_stride + t.j_lo * dst.free_stride[2];
  src.offset += t.p_lo * src.part_stride + t.j_lo * src.free_stride[2];
  d.part_count = src.part_count = static_cast<int>(t.p_hi - t.p_lo);
  d.free_size[2] = src.free_size[2] = static_cast<std::int32_t>(t.j_hi - t.j_lo);
  dma(d, src, queues);
}

void Lowerer::load_transposed(const NestPlan& np, const AccessPattern& dst, const ir::Expr& e, const Ctx& c, int queues,
                              Engine eng) {
  const AccessPattern a = hbm_tile(e, c, true);  // P contiguous partitions, F strided free elements
  AccessPattern rows = a;                        // the same elements as F rows of P contiguous ones
  rows.part_stride = a.free_stride[2];
  rows.part_count = static_cast<std::int32_t>(c.F);
  rows.free_stride = {0, 0, s32(a.part_stride)};
  rows.free_size = {1, 1, c.P};
  if (np.v.transpose == Transpose::dma_transpose) {
    dma(dst, rows, queues, true);
    return;
  }
  const ir::DType dt = s_.tensor(e.tensor).dtype;
  const int nat = buf(np.v.buf_nat, dt);
  const int tps = buf(np.v.buf_tpsum, dt);
  if (nat < 0 || tps < 0) throw std::logic_error("lower: no PE-transpose staging tile for " + e.tensor);
  const std::int64_t pm = t_.pmax, bank = std::min(B(tps).free_elems, t_.psum_bank_bytes / 4);
  for (std::int64_t g0 = 0; g0 < c.F; g0 += bank) {
    // per PSUM bank: natural [<= 128, P] tiles, each transposed into its columns, then one copy
    const std::int64_t gn = std::min(bank, c.F - g0);
    const int slot = tr_slot_++;
    for (std::int64_t ch = 0; ch * pm < gn; ++ch) {
      const std::int64_t r = std::min(pm, gn - ch * pm);
      AccessPattern src = rows;
      src.offset += (g0 + ch * pm) * rows.part_stride;
      src.part_count = static_cast<std::int32_t>(r);
      const AccessPattern nd = tile_ap(nat, slot, static_cast<int>(r), ch * c.P, c.P);
      dma(nd, src, queues);
      pe_transpose(tile_ap(tps, slot, c.P, ch * pm, r), nd);
    }
    AccessPattern d = dst;
    d.offset += g0 * dst.free_stride[2];
    d.free_size[2] = static_cast<std::int32_t>(gn);
    copy(eng == Engine::gpsimd ? Engine::vector : eng, d, tile_ap(tps, slot, c.P, 0, gn));
  }
}

AccessPattern Lowerer::window(const ir::Expr& e, const std::string& key, int spec, const schedule::WindowGeom& geom, const Ctx& c,
                     const TileState& st, int queues, Engine eng) {
  for (const auto& [kk, ap] : win_)
    if (kk == key) return ap;
  const AccessPattern win = tile_ap(buf(spec), st.acc_slot, c.P, 0, geom.elems);
  Ctx c0 = c;
  for (auto& [n, v] : c0.fixed)
    if (n == plan_.nests[static_cast<std::size_t>(nest_)].v.inner[0]) v = 0;
  load_access(win, e, c0, true, queues, eng, &geom);
  win_.emplace_back(key, win);
  return win;
}

void Lowerer::fold_root(const NestPlan& np, const schedule::TileCompute& tc, std::size_t oi, const Ctx& c, TileState& st,
               int queues) {
  const auto& op = k_.ops[static_cast<std::size_t>(tc.ops[oi])];
  const Engine eng = plan_.op_engine[static_cast<std::size_t>(tc.ops[oi])];
  const std::string& r = np.v.inner[0];
  const std::int64_t T = np.v.inner_ext[0];
  const auto view3 = [&](const ir::Expr& e, bool hold) {
    const std::string key = schedule::access_key(e);
    int spec = -1;
    for (const auto& [kk, b] : tc.loads)
      if (kk == key) spec = b;
    const auto geom = schedule::window_geom(e, c.pidx, c.fidx, r, c.F, T);
    const bool wide = schedule::expr_uses(e, c.fidx);
    AccessPattern a;
    if (geom.ok) {
      a = window(e, key, spec, geom, c, st, queues, eng);
    } else {  // does not move with the taps: one tile, broadcast over them
      a = tile_ap(buf(spec), st.slot, c.P, 0, wide ? c.F : 1);
      load_access(a, e, c, wide, queues, eng);
    }
    if (hold) {  // `hold psum`: copied into PSUM once per output tile; the multiplies read it there
      const std::string pkey = "psum:" + key;
      const auto it = std::find_if(win_.begin(), win_.end(), [&](const auto& w) { return w.first == pkey; });
      if (it != win_.end()) {
        a = it->second;
      } else {
        const AccessPattern p = tile_ap(buf(np.v.buf_hold), st.acc_slot, c.P, 0, a.free_size[2]);
        copy(tt_engine(eng), p, a);
        win_.emplace_back(pkey, p);
        a = p;
      }
    }
    a.free_stride = geom.ok ? std::array<std::int32_t, 3>{0, s32(geom.a_f), s32(geom.a_r)}
                            : std::array<std::int32_t, 3>{0, wide ? 1 : 0, 0};
    a.free_size = {1, static_cast<std::int32_t>(c.F), static_cast<std::int32_t>(T)};
    return a;
  };
  const bool has_f = !c.fidx.empty() &&
                     std::find(op.out_indices.begin(), op.out_indices.end(), c.fidx) != op.out_indices.end();
  const AccessPattern acc = tile_ap(buf(tc.dst[oi]), st.acc_slot, c.P, 0, has_f ? c.F : 1);
  const bool prod = op.expr.kind != ir::Expr::Kind::access;
  std::array<AccessPattern, 2> x;
  x[0] = view3(prod ? op.expr.args[0] : op.expr, np.v.hold_psum && np.v.hold_arg == 0);
  if (prod) x[1] = view3(op.expr.args[1], np.v.hold_psum && np.v.hold_arg == 1);
  // The tile in chunks of output columns: one multiply and one reduce over the taps each. With
  // two or more product slots the multiply of the next chunk is issued before the reduce of this
  // one, as a list scheduler that starts whatever can start first orders them (the reduce waits
  // on its multiply's result; the next multiply does not). With three or more slots neither
  // waits on the instruction just before it; with two the multiply after a reduce overwrites
  // the product that reduce read (a write-after-read on the previous instruction), and with one
  // the next multiply would overwrite the product before the reduce reads it, so they alternate.
  const std::int64_t cw = std::min<std::int64_t>(np.v.chunk, c.F);
  const bool ahead = prod && np.v.bufs >= 2;
  std::vector<AccessPattern> products;  // per chunk, once its multiply is issued
  const auto nchunks = (c.F + cw - 1) / cw;
  const auto cols = [&](std::int64_t j) { return static_cast<std::int32_t>(std::min(cw, c.F - j * cw)); };
  const auto multiply = [&](std::int64_t j) {
    const auto n = cols(j);
    std::array<AccessPattern, 2> y = x;
    for (auto& a : y) {
      a.offset += j * cw * a.free_stride[1];
      a.free_size[1] = n;
    }
    if (!prod) {
      products.push_back(y[0]);
      return;
    }
    AccessPattern src = tile_ap(buf(tc.node_buf[oi][0]), fold_slot_++, c.P, 0, n * T);  // products rotate over the bufs slots
    src.free_stride = {0, s32(T), 1};
    src.free_size = {1, n, static_cast<std::int32_t>(T)};
    tensor_tensor(eng, src, y[0], y[1], ir::Fn::mul);
    products.push_back(src);
  };
  multiply(0);
  for (std::int64_t j = 0; j < nchunks; ++j) {
    if (ahead && j + 1 < nchunks) multiply(j + 1);
    const auto n = cols(j);
    AccessPattern d = acc;
    if (has_f) {
      d.offset += j * cw;
      d.free_size[2] = n;
    }
    const AccessPattern src = products[static_cast<std::size_t>(j)];
    Instr& in = compute(Opcode::tensor_reduce, Engine::vector, d);  // nki.isa.tensor_reduce: the Vector engine's
    in.src[0] = src;
    in.nsrc = 1;
    in.reduce = op.reduce == ir::ReduceOp::mean ? ir::ReduceOp::sum : op.reduce;
    in.reduce_free_dims = 1;
    emit(in, src.elems());
    if (!ahead && j + 1 < nchunks) multiply(j + 1);
  }
  if (op.reduce == ir::ReduceOp::mean)
    tensor_scalar(eng, acc, acc, ir::Fn::mul, Val{true, 1.0 / static_cast<double>(T), {}, false}, false);
  st.values.emplace_back(op.out, Val{false, 0, acc, has_f});
}

AccessPattern Lowerer::hbm_tile(const ir::Expr& acc, const Ctx& c, bool wide) {
  AccessPattern a;
  a.buffer = hbm_of(acc.tensor);
  const auto& t = s_.tensor(acc.tensor);
  const auto shape = k_.shape(t);
  std::int64_t st = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    const auto& x = acc.indices[d];
    if (x == c.pidx) a.offset += c.p0 * st;
    else if (x == c.fidx) a.offset += c.f0 * st;
    else a.offset += c.fixed_value(x) * st;
    st *= shape[d];
  }
  a.part_stride = c.pidx.empty() ? 0 : stride_of(acc.tensor, acc.indices, c.pidx);
  a.part_count = c.P;
  a.free_stride = {0, 0, s32(wide ? stride_of(acc.tensor, acc.indices, c.fidx) : 1)};
  a.free_size = {1, 1, static_cast<std::int32_t>(wide ? c.F : 1)};
  return a;
}

Val Lowerer::eval(const NestPlan& np, const schedule::TileCompute& tc, std::size_t oi, const std::vector<const ir::Expr*>& nodes,
         std::size_t& q, const Ctx& c, TileState& st, const AccessPattern* root_dst, Engine eng, int queues) {
  const std::size_t me = q++;
  const ir::Expr& e = *nodes[me];
  const auto temp = [&](bool wide) {
    const int spec = tc.node_buf[oi][me];
    if (me == 0 && root_dst) return *root_dst;
    return tile_ap(buf(spec), st.slot, c.P, 0, wide ? c.F : 1);
  };
  switch (e.kind) {
    case ir::Expr::Kind::constant: return Val{true, e.value, {}, false};
    case ir::Expr::Kind::index: {
      if (e.index != c.pidx && e.index != c.fidx) return Val{true, static_cast<double>(c.fixed_value(e.index)), {}, false};
      const bool wide = e.index == c.fidx;
      Val v{false, 0, temp(wide), wide};
      Instr& in = compute(Opcode::iota, Engine::gpsimd, v.ap);
      in.imm0 = static_cast<double>(wide ? c.f0 : c.p0);
      if (wide) in.iota_free_coef = {0, 0, 1};
      else in.iota_part_coef = 1;
      emit(in, 0);
      return v;
    }
    case ir::Expr::Kind::access: {
      for (const auto& [n, v] : st.values)
        if (n == e.tensor) return v;
      const std::string key = schedule::access_key(e);
      const bool wide = schedule::expr_uses(e, c.fidx);
      for (const auto& [kk, ap] : st.loaded)
        if (kk == key) return Val{false, 0, ap, wide};
      int spec = -1;
      for (const auto& [kk, b] : tc.loads)
        if (kk == key) spec = b;
      for (const auto& [kk, ap] : resident_)
        if (kk == key) {
          // loaded by an earlier step, on at least as many partitions (the first tile is the largest)
          AccessPattern view = ap;
          view.part_count = std::min(view.part_count, c.P);
          st.loaded.emplace_back(key, view);
          return Val{false, 0, view, wide};
        }
      if (np.kind == NestKind::contract &&
          std::find(np.c.resident_cols.begin(), np.c.resident_cols.end(), key) != np.c.resident_cols.end()) {
        // ContractPlan::resident_cols: this moving tile's columns of the one-slot buffer, loaded
        // at their first use on all of its partitions (a later output tile may have more rows)
        const int bid = buf(spec);
        const int rows = B(bid).partitions;
        if (std::find(cols_loaded_.begin(), cols_loaded_.end(), std::make_pair(key, c.f0)) == cols_loaded_.end()) {
          Ctx full = c;
          full.P = rows;
          load_access(tile_ap(bid, 0, rows, c.f0, c.F), e, full, wide, queues, eng);
          cols_loaded_.emplace_back(key, c.f0);
        }
        const AccessPattern view = tile_ap(bid, 0, c.P, c.f0, c.F);
        st.loaded.emplace_back(key, view);
        return Val{false, 0, view, wide};
      }
      if (np.kind == NestKind::vector && np.v.window) {
        // held over the reduction loop: loaded once per output tile (halo included), read
        // here through an offset view
        const std::string& r = np.v.inner[0];
        const auto geom = schedule::window_geom(e, c.pidx, c.fidx, r, c.F, np.v.inner_ext[0]);
        if (geom.ok) {
          const AccessPattern win = window(e, key, spec, geom, c, st, queues, eng);
          AccessPattern view = win;
          view.offset += geom.a_r * c.fixed_value(r);
          view.free_stride[2] = s32(geom.a_f > 0 ? geom.a_f : 1);
          view.free_size[2] = static_cast<std::int32_t>(geom.a_f > 0 ? c.F : 1);
          st.loaded.emplace_back(key, view);
          return Val{false, 0, view, geom.a_f > 0};
        }
      }
      const AccessPattern dst = tile_ap(buf(spec), st.slot, c.P, 0, wide ? c.F : 1);
      if (np.kind == NestKind::vector && np.v.transpose != Transpose::none && wide && c.F > 1 &&
          schedule::transposed_load(e, c.pidx, c.fidx))
        load_transposed(np, dst, e, c, queues, eng);
      else
        load_access(dst, e, c, wide, queues, eng);
      st.loaded.emplace_back(key, dst);
      if (np.kind == NestKind::vector && std::find(np.v.resident.begin(), np.v.resident.end(), key) != np.v.resident.end())
        resident_.emplace_back(key, dst);
      return Val{false, 0, dst, wide};
    }
    case ir::Expr::Kind::call: break;
  }
  // A comparison of indices that the tile decides (every element the same way: `j <= i` on a
  // tile wholly below a causal mask's diagonal) is that constant: no iota, no compare, and a
  // select on it picks its branch.
  if (e.fn == ir::Fn::lt || e.fn == ir::Fn::le || e.fn == ir::Fn::gt || e.fn == ir::Fn::ge) {
    const Range r = range_of(e, c, {});
    if (r.exact && r.lo == r.hi) {
      q = me + subtree_size(e);
      return Val{true, r.lo, {}, false};
    }
  }
  if (e.fn == ir::Fn::select) {
    // select(A cmp B, x, k) or select(A cmp B, k, x) with A and B affine in the indices and k a
    // constant: one affine_select (GpSimd) that computes the predicate from each position, where
    // the condition would take an iota, a compare, a fill and a predicated copy
    const ir::Expr& cond = e.args[0];
    const bool k_false = e.args[2].kind == ir::Expr::Kind::constant, k_true = e.args[1].kind == ir::Expr::Kind::constant;
    const auto lhs = cond.kind == ir::Expr::Kind::call && ir::is_comparison(cond.fn) ? affine_index(cond.args[0], c) : std::nullopt;
    const auto rhs = lhs ? affine_index(cond.args[1], c) : std::nullopt;
    const Range r = rhs ? range_of(cond, c, {}) : Range{};
    if (rhs && k_false != k_true && !(r.exact && r.lo == r.hi)) {
      const std::size_t q_cond = me + 1, q_a = q_cond + subtree_size(cond), q_b = q_a + subtree_size(e.args[1]);
      const std::size_t q_end = q_b + subtree_size(e.args[2]);
      q = k_false ? q_a : q_b;
      const Val x = eval(np, tc, oi, nodes, q, c, st, nullptr, eng, queues);
      const double k = (k_false ? e.args[2] : e.args[1]).value;
      const bool wide = (!x.imm && x.wide) || lhs->f != rhs->f;
      Val out{false, 0, temp(wide), wide};
      if (me == 0 && root_dst) out.wide = root_dst->free_size[2] > 1 || wide;
      const bool sbuf_src = x.imm || prog_.buffers[static_cast<std::size_t>(x.ap.buffer)].mem == Memory::sbuf;
      if (!x.imm && sbuf_src && out.ap.free_size[0] == 1 && out.ap.free_size[1] == 1) {
        Instr& in = compute(Opcode::affine_select, Engine::gpsimd, out.ap);
        in.src[0] = out.wide && !x.wide ? widen(x.ap, c.F) : x.ap;
        in.nsrc = 1;
        in.imm0 = lhs->k - rhs->k;
        in.iota_part_coef = static_cast<std::int32_t>(lhs->p - rhs->p);
        in.iota_free_coef = {0, 0, static_cast<std::int32_t>(lhs->f - rhs->f)};
        // keep x where the condition holds (x the true branch), else where it fails
        in.fn = k_false ? cond.fn : ir::negated_comparison(cond.fn);
        in.imm1 = k;
        emit(in, 0);
        q = q_end;
        return out;
      }
      // x in PSUM (GpSimd cannot read it), or an output of another shape: the general select
      q = q_cond;
      std::vector<Val> args(3);
      args[0] = eval(np, tc, oi, nodes, q, c, st, nullptr, eng, queues);
      args[k_false ? 1 : 2] = x;
      args[k_false ? 2 : 1] = Val{true, k, {}, false};
      q = q_end;
      return select(tc, oi, me, args, c, st, temp, eng, cond.kind == ir::Expr::Kind::call && ir::is_comparison(cond.fn));
    }
  }
  if (const auto aff = schedule::affine_arg(e, c.fidx, t_); aff != schedule::AffineArg::none) {
    // fn(x * scale + bias) in one activation (schedule::affine_arg); the argument's node is not
    // evaluated into a tile of its own
    const std::size_t ame = q++;
    const ir::Expr& a = *nodes[ame];
    const Val x = eval(np, tc, oi, nodes, q, c, st, nullptr, eng, queues);
    const Val y = eval(np, tc, oi, nodes, q, c, st, nullptr, eng, queues);
    if (x.imm && y.imm) return Val{true, fold(e.fn, fold(a.fn, x.v, y.v), 0), {}, false};
    // t moves (the non-constant operand, or the one along the free index); k is the other
    const bool t_left = aff == schedule::AffineArg::constant ? a.args[1].kind == ir::Expr::Kind::constant
                                                             : schedule::expr_uses(a.args[0], c.fidx);
    const Val& t = t_left ? x : y;
    const Val& k = t_left ? y : x;
    double scale = 1.0, imm = 0.0;
    AccessPattern bias;  // none: the immediate `imm`
    if (a.fn == ir::Fn::mul) {
      scale = k.v;  // a constant (affine_arg offers mul with constants only)
    } else if (a.fn == ir::Fn::add) {
      if (k.imm) imm = k.v;
      else bias = k.ap;
    } else if (t_left) {  // t - k: the bias is -k
      if (k.imm) {
        imm = -k.v;
      } else {
        bias = tile_ap(buf(tc.node_buf[oi][ame]), st.slot, c.P, 0, 1);
        tensor_scalar(eng, bias, k.ap, ir::Fn::mul, Val{true, -1.0, {}, false}, false);
      }
    } else {  // k - t
      scale = -1.0;
      if (k.imm) imm = k.v;
      else bias = k.ap;
    }
    Val out{false, 0, temp(t.wide), t.wide};
    if (me == 0 && root_dst) out.wide = root_dst->free_size[2] > 1 || t.wide;
    activation_at(out.ap, out.wide && !t.wide ? widen(t.ap, c.F) : t.ap, e.fn, scale, imm, bias, me == 0, c.F);
    return out;
  }
  const int pair_j = schedule::scalar_pair(e, c.fidx);
  const int stt_j = pair_j >= 0 ? -1 : schedule::scalar_tensor_pair(e, c.fidx);
  if (const int j = pair_j >= 0 ? pair_j : stt_j; j >= 0) {
    // (x op0 s0) op1 s1 as one two-operator tensor_scalar (schedule::scalar_pair), or with a tile
    // y for s1 one scalar_tensor_tensor on the Vector engine (schedule::scalar_tensor_pair); the
    // inner operator's node keeps its tile for the forms the instructions cannot take
    Val s1, a0, a1;
    if (j == 1) s1 = eval(np, tc, oi, nodes, q, c, st, nullptr, eng, queues);
    const std::size_t inner_q = q++;
    a0 = eval(np, tc, oi, nodes, q, c, st, nullptr, eng, queues);
    a1 = eval(np, tc, oi, nodes, q, c, st, nullptr, eng, queues);
    if (j == 0) s1 = eval(np, tc, oi, nodes, q, c, st, nullptr, eng, queues);
    const ir::Expr& inner = *nodes[inner_q];
    const bool x_left = schedule::expr_uses(inner.args[0], c.fidx);
    const Val& x = x_left ? a0 : a1;
    const Val& s0 = x_left ? a1 : a0;
    if (pair_j >= 0 && !x.imm && x.wide && (s0.imm || !s0.wide) && (s1.imm || !s1.wide) && !(s0.imm && !s1.imm)) {
      Val out{false, 0, temp(true), true};
      tensor_scalar(eng, out.ap, x.ap, inner.fn, s0, !x_left, &s1, e.fn);
      return out;
    }
    const auto in_psum = [&](const Val& v) { return !v.imm && B(v.ap.buffer).mem == Memory::psum; };
    if (stt_j >= 0 && eng == Engine::vector && !x.imm && x.wide && (s0.imm || !s0.wide) && !s1.imm && s1.wide &&
        !(in_psum(x) && in_psum(s1))) {
      // nki.isa.scalar_tensor_tensor: data and operand1 may not both lie in PSUM
      Val out{false, 0, temp(true), true};
      scalar_tensor_tensor(out.ap, x.ap, inner.fn, s0, !x_left, e.fn, s1.ap);
      return out;
    }
    Val iv;
    if (a0.imm && a1.imm) {
      iv = Val{true, fold(inner.fn, a0.v, a1.v), {}, false};
    } else {
      const bool iw = (!a0.imm && a0.wide) || (!a1.imm && a1.wide);
      iv = Val{false, 0, tile_ap(buf(tc.node_buf[oi][inner_q]), st.slot, c.P, 0, iw ? c.F : 1), iw};
      binop(eng, inner.fn, a0, a1, iv, c);
    }
    const Val& l = j == 0 ? iv : s1;
    const Val& r = j == 0 ? s1 : iv;
    if (l.imm && r.imm) return Val{true, fold(e.fn, l.v, r.v), {}, false};
    const bool wide = (!l.imm && l.wide) || (!r.imm && r.wide);
    Val out{false, 0, temp(wide), wide};
    if (me == 0 && root_dst) out.wide = root_dst->free_size[2] > 1 || wide;
    binop(eng, e.fn, l, r, out, c);
    return out;
  }
  std::vector<Val> args;
  for (std::size_t a = 0; a < e.args.size(); ++a) args.push_back(eval(np, tc, oi, nodes, q, c, st, nullptr, eng, queues));
  bool all_imm = true;
  for (const auto& a : args) all_imm = all_imm && a.imm;
  if (all_imm && e.fn != ir::Fn::select) {
    const double r = fold(e.fn, args[0].v, args.size() > 1 ? args[1].v : 0);
    return Val{true, r, {}, false};
  }
  if (e.fn == ir::Fn::select) {
    // a comparison evaluated here into its own node buffer is 0 or 1 already: the predicate itself
    const ir::Expr& ce = *nodes[me + 1];
    return select(tc, oi, me, args, c, st, temp, eng, ce.kind == ir::Expr::Kind::call && ir::is_comparison(ce.fn));
  }
  bool wide = false;
  for (const auto& a : args) wide = wide || (!a.imm && a.wide);
  Val out{false, 0, temp(wide), wide};
  if (me == 0 && root_dst) out.wide = root_dst->free_size[2] > 1 || wide;
  if (ir::fn_arity(e.fn) == 1) {
    const Val& x = args[0];
    AccessPattern src = x.ap;
    if (out.wide && !x.wide) src = widen(src, c.F);
    if (e.fn == ir::Fn::cast) {
      copy(eng == Engine::gpsimd ? Engine::gpsimd : Engine::vector, out.ap, src);
    } else if (e.fn == ir::Fn::neg) {
      // nl.negative is not an activation function (nki.api.shared, "Supported Activation
      // Functions"): -x is the identity activation scaled by -1, exact in fp32
      activation_at(out.ap, src, ir::Fn::cast, -1.0, 0.0, AccessPattern{}, me == 0, c.F);
    } else {
      activation_at(out.ap, src, e.fn, 1.0, 0.0, AccessPattern{}, me == 0, c.F);
    }
    return out;
  }
  // x - s on an engine whose tensor_scalar cannot subtract (trn1-trn3's Scalar engine): -s into its
  // [P, 1] tile (a multiply, which it runs), then the identity activation x + (-s), exact in fp32
  // as the subtraction is (schedule::sub_of_column; the planner gave the node its tile)
  if (const int ng = tc.neg_buf[oi][me]; ng >= 0 && eng == Engine::scalar && !args[0].imm && !args[1].imm && args[0].wide && !args[1].wide && out.wide) {
    const AccessPattern neg = tile_ap(buf(ng), st.slot, c.P, 0, 1);
    tensor_scalar(eng, neg, args[1].ap, ir::Fn::mul, Val{true, -1.0, {}, false}, false);
    activation_at(out.ap, args[0].ap, ir::Fn::cast, 1.0, 0.0, neg, me == 0, c.F);
    return out;
  }
  binop(eng, e.fn, args[0], args[1], out, c);
  return out;
}

std::optional<Lowerer::AffineIdx> Lowerer::affine_index(const ir::Expr& e, const Ctx& c) const {
  const auto a = ir::affine_index(e);
  if (!a) return std::nullopt;
  AffineIdx r{a->k, 0, 0};
  for (const auto& [x, coef] : a->coef) {
    if (coef == 0) continue;
    if (x != c.pidx && x != c.fidx) {
      r.k += coef * static_cast<double>(c.fixed_value(x));
      continue;
    }
    // a position's coefficient is an integer (an iota's), so the positions stay exact
    if (coef != std::floor(coef) || std::fabs(coef) > 1e6) return std::nullopt;
    const auto ci = static_cast<std::int64_t>(coef);
    (x == c.pidx ? r.p : r.f) += ci;
    r.k += coef * static_cast<double>(x == c.pidx ? c.p0 : c.f0);
  }
  return r;
}

void Lowerer::activation_at(const AccessPattern& dst, const AccessPattern& x, ir::Fn fn, double scale, double imm,
                            const AccessPattern& bias, bool root, std::int64_t F) {
  AccessPattern sums;
  if (root && row_sums_ && dst.free_elems() == F) {
    sums = *row_sums_;
    row_sums_ = nullptr;
    row_summed_ = true;
  }
  activation(fn, dst, x, bias, sums, scale, imm);
}

std::size_t Lowerer::summed_by_activation(const NestPlan& np, const schedule::TileCompute& tc, std::size_t oi, const Ctx& c,
                                          const TileState& st) const {
  constexpr auto npos = static_cast<std::size_t>(-1);
  if (np.kind != NestKind::vector || !st.first || !st.last || c.fidx.empty()) return npos;
  const auto& op = k_.ops[static_cast<std::size_t>(tc.ops[oi])];
  if (std::find(op.out_indices.begin(), op.out_indices.end(), c.fidx) == op.out_indices.end()) return npos;
  for (std::size_t j = oi + 1; j < tc.ops.size(); ++j) {
    const auto& r = k_.ops[static_cast<std::size_t>(tc.ops[j])];
    if ((r.reduce != ir::ReduceOp::sum && r.reduce != ir::ReduceOp::mean) || r.reduce_indices != std::vector<std::string>{c.fidx})
      continue;
    if (r.expr.kind != ir::Expr::Kind::access || r.expr.tensor != op.out || r.expr.indices != op.out_indices) continue;
    if (std::any_of(r.expr.shifts.begin(), r.expr.shifts.end(), [](const ir::IndexShift& sh) { return !sh.plain(); })) continue;
    if (std::any_of(tc.bn.begin(), tc.bn.end(), [&](const auto& bn) { return bn.mean == j || bn.var == j; })) continue;
    if (np.v.fold && tc.ops[j] == np.root_op) continue;
    return j;
  }
  return npos;
}

AccessPattern Lowerer::online_softmax_step(Engine e_mx, Engine e_sum, bool first, const AccessPattern& x, const AccessPattern& m_old,
                                           const AccessPattern& m_new, const AccessPattern& rmax, const AccessPattern& negm,
                                           const AccessPattern& corr, const AccessPattern& e, const AccessPattern& l, double c) {
  if (first) {
    reduce(m_new, x, ir::ReduceOp::max, false);
  } else {
    reduce(rmax, x, ir::ReduceOp::max, false);
    tensor_tensor(e_mx, m_new, m_old, rmax, ir::Fn::max);
  }
  const Val minus_c{true, -c, {}, false};
  tensor_scalar(e_mx, negm, m_new, ir::Fn::max, Val{true, -static_cast<double>(std::numeric_limits<float>::max()), {}, false},
                false, &minus_c, ir::Fn::mul);
  if (!first) activation(ir::Fn::exp, corr, m_old, negm, {}, c);
  activation(ir::Fn::exp, e, x, negm, first ? l : rmax, c);
  if (first) return {};
  const ir::Fn add = ir::Fn::add;
  Instr& in = compute(Opcode::tensor_scalar, ts_engine(e_sum, ir::Fn::mul, &add), l);
  in.src[0] = l;
  in.src[1] = corr;
  in.src[2] = rmax;
  in.nsrc = 3;
  in.fn = ir::Fn::mul;
  in.has_op1 = true;
  in.fn1 = ir::Fn::add;
  emit(in, 2 * l.elems());
  return corr;
}

void Lowerer::binop(Engine eng, ir::Fn fn, const Val& x, const Val& y, const Val& out, const Ctx& c) {
  if (x.imm && y.imm) {
    Instr& in = compute(Opcode::memset, tt_engine(eng), out.ap);
    in.imm0 = fold(fn, x.v, y.v);
    emit(in, 0);
    return;
  }
  if (y.imm || (!x.imm && x.wide == out.wide && !y.wide && out.wide)) {
    AccessPattern src = x.ap;
    if (out.wide && !x.wide) src = widen(src, c.F);
    tensor_scalar(eng, out.ap, src, fn, y, false);
    return;
  }
  if (x.imm || (!y.imm && y.wide == out.wide && !x.wide && out.wide)) {
    AccessPattern src = y.ap;
    if (out.wide && !y.wide) src = widen(src, c.F);
    tensor_scalar(eng, out.ap, src, fn, x, true);
    return;
  }
  AccessPattern a = x.ap, b = y.ap;
  if (out.wide && !x.wide) a = widen(a, c.F);
  if (out.wide && !y.wide) b = widen(b, c.F);
  tensor_tensor(eng, out.ap, a, b, fn);
}

void Lowerer::eval_op(const NestPlan& np, const schedule::TileCompute& tc, std::size_t oi, const Ctx& c, TileState& st,
             int queues, const AccessPattern* dst_override, std::int64_t reduce_count) {
  const int op_index = tc.ops[oi];
  const auto& op = k_.ops[static_cast<std::size_t>(op_index)];
  const Engine eng = plan_.op_engine[static_cast<std::size_t>(op_index)];
  std::vector<const ir::Expr*> nodes;
  schedule::preorder(op.expr, nodes);
  const bool has_f = !c.fidx.empty() &&
                     std::find(op.out_indices.begin(), op.out_indices.end(), c.fidx) != op.out_indices.end();
  const std::int64_t w = has_f ? c.F : 1;
  std::size_t q = 0;
  for (const auto& bn : tc.bn) {
    // mean and variance of one row from bn_stats (per kBnStatsFmax chunk) and one bn_aggr; the
    // variance's body is not evaluated (its centred values are the mean's body minus the mean)
    if (bn.mean != oi && bn.var != oi) continue;
    const AccessPattern aggr = tile_ap(buf(bn.aggr), st.slot, c.P, 0, 2);
    if (bn.mean == oi) {
      const Val v = eval(np, tc, oi, nodes, q, c, st, nullptr, eng, queues);
      if (v.imm) throw std::logic_error("lower: bn_stats of a constant row");
      const AccessPattern src = v.wide ? v.ap : widen(v.ap, c.F);
      const std::int64_t chunks = (c.F + kBnStatsFmax - 1) / kBnStatsFmax;
      for (std::int64_t ch = 0; ch < chunks; ++ch) {
        Instr& in = compute(Opcode::bn_stats, Engine::vector, tile_ap(buf(bn.stats), st.slot, c.P, 6 * ch, 6));
        in.src[0] = src;
        in.src[0].offset += ch * kBnStatsFmax * src.free_stride[2];
        in.src[0].free_size[2] = static_cast<std::int32_t>(std::min(kBnStatsFmax, c.F - ch * kBnStatsFmax));
        in.nsrc = 1;
        emit(in, in.src[0].elems());
      }
      Instr& ag = compute(Opcode::bn_aggr, Engine::vector, aggr);
      ag.src[0] = tile_ap(buf(bn.stats), st.slot, c.P, 0, 6 * chunks);
      ag.nsrc = 1;
      emit(ag, ag.src[0].elems());
    }
    AccessPattern col = aggr;  // [P, 1]: the mean, or the variance beside it
    col.free_size[2] = 1;
    col.offset += bn.mean == oi ? 0 : 1;
    st.values.emplace_back(op.out, Val{false, 0, col, false});
    return;
  }
  if (op.reduce_indices.empty()) {
    const AccessPattern dst = dst_override ? *dst_override : tile_ap(buf(tc.dst[oi]), st.slot, c.P, 0, w);
    // a later sum of this value over the free index: its root activation writes the sums too
    const std::size_t sj = summed_by_activation(np, tc, oi, c, st);
    AccessPattern sums;
    if (sj != static_cast<std::size_t>(-1)) {
      sums = tile_ap(buf(tc.dst[sj]), st.acc_slot, c.P, 0, 1);
      row_sums_ = &sums;
    }
    Val v = eval(np, tc, oi, nodes, q, c, st, &dst, eng, queues);
    row_sums_ = nullptr;
    if (row_summed_) st.summed.push_back(sj);
    row_summed_ = false;
    if (v.imm) {
      Instr& in = compute(Opcode::memset, tt_engine(eng), dst);
      in.imm0 = v.v;
      emit(in, 0);
    } else if (v.ap.buffer != dst.buffer || v.ap.offset != dst.offset) {
      copy(tt_engine(eng), dst, has_f && !v.wide ? widen(v.ap, c.F) : v.ap);
    }
    st.values.emplace_back(op.out, Val{false, 0, dst, has_f});
    return;
  }
  if (np.kind == NestKind::vector && np.v.fold && tc.ops[oi] == np.root_op) {
    fold_root(np, tc, oi, c, st, queues);
    return;
  }
  // reduce: value tile, then fold into the accumulator
  const AccessPattern acc = tile_ap(buf(tc.dst[oi]), st.acc_slot, c.P, 0, w);
  const bool along_f = !c.fidx.empty() &&
                       std::find(op.reduce_indices.begin(), op.reduce_indices.end(), c.fidx) != op.reduce_indices.end();
  // summed already by the activation of the value it sums (summed_by_activation), or by its own
  // body's root activation: a sum or mean over the free index alone, in one step
  bool summed = std::find(st.summed.begin(), st.summed.end(), oi) != st.summed.end();
  if (!summed) {
    if (np.kind == NestKind::vector && along_f && st.first && st.last && op.reduce_indices.size() == 1 &&
        (op.reduce == ir::ReduceOp::sum || op.reduce == ir::ReduceOp::mean))
      row_sums_ = &acc;
    Val v = eval(np, tc, oi, nodes, q, c, st, nullptr, eng, queues);
    row_sums_ = nullptr;
    summed = row_summed_;
    row_summed_ = false;
    if (!summed) fold_into(eng, op, v, acc, along_f, has_f, tc, oi, c, st);
  }
  if (st.last) {
    if (op.reduce == ir::ReduceOp::mean)
      tensor_scalar(eng, acc, acc, ir::Fn::mul, Val{true, 1.0 / static_cast<double>(reduce_count), {}, false}, false);
    st.values.emplace_back(op.out, Val{false, 0, acc, has_f});
  }
}

void Lowerer::fold_into(Engine eng, const ir::Op& op, const Val& v, const AccessPattern& acc, bool along_f, bool has_f,
                        const schedule::TileCompute& tc, std::size_t oi, const Ctx& c, const TileState& st) {
  const ir::Fn rf = op.reduce == ir::ReduceOp::max ? ir::Fn::max : op.reduce == ir::ReduceOp::min ? ir::Fn::min : ir::Fn::add;
  if (along_f) {
    AccessPattern src = v.imm ? AccessPattern{} : v.ap;
    if (v.imm) {
      src = tile_ap(buf(tc.node_buf[oi][0] >= 0 ? tc.node_buf[oi][0] : tc.dst[oi]), st.slot, c.P, 0, c.F);
      Instr& ms = compute(Opcode::memset, tt_engine(eng), src);
      ms.imm0 = v.v;
      emit(ms, 0);
    } else if (!v.wide) {
      src = widen(src, c.F);
    }
    // nki.isa.tensor_reduce is the Vector engine's and overwrites its destination: a later step
    // reduces into the op's partial tile and adds it to the accumulator, as the NKI kernel does
    const int pb = st.first || t_.host ? -1 : tc.partial[oi];  // (the host runs an accumulating reduce as it is)
    const AccessPattern dst = pb >= 0 ? tile_ap(buf(pb), st.slot, c.P, 0, 1) : acc;
    Instr& in = compute(Opcode::tensor_reduce, Engine::vector, dst);
    in.src[0] = src;
    in.nsrc = 1;
    in.reduce = op.reduce == ir::ReduceOp::mean ? ir::ReduceOp::sum : op.reduce;
    in.reduce_free_dims = 1;
    in.accumulate = !st.first && pb < 0;
    emit(in, src.elems());
    if (pb >= 0) tensor_tensor(Engine::vector, acc, acc, dst, rf);
  } else {
    AccessPattern src = v.ap;
    if (v.imm) {
      if (st.first) {  // only reached for constant bodies
        Instr& ms = compute(Opcode::memset, tt_engine(eng), acc);
        ms.imm0 = v.v;
        emit(ms, 0);
      } else {
        tensor_scalar(eng, acc, acc, rf, Val{true, v.v, {}, false}, false);
      }
    } else {
      if (has_f && !v.wide) src = widen(src, c.F);
      if (st.first) copy(tt_engine(eng), acc, src);
      else tensor_tensor(eng, acc, acc, src, rf);
    }
  }
}

void Lowerer::store_tile(const std::string& tensor, const std::vector<std::string>& out_idx, const AccessPattern& src, const Ctx& c,
                int queues) {
  ir::Expr acc;
  acc.kind = ir::Expr::Kind::access;
  acc.tensor = tensor;
  acc.indices = out_idx;
  const auto& np = plan_.nests[static_cast<std::size_t>(nest_)];
  if (np.kind == NestKind::vector && !np.v.buf_opsum.empty() && src.free_size[2] > 1 && c.F > 1 &&
      schedule::transposed_load(acc, c.pidx, c.fidx)) {
    // VectorPlan::buf_ost: per <= 128 free elements, through the PE array, then rows of P
    const ir::DType dt = s_.tensor(tensor).dtype;
    const int ost = buf(np.v.buf_ost, dt);
    if (ost < 0) throw std::logic_error("lower: no transposed-store staging tile for " + tensor);
    const int ops = buf(np.v.buf_opsum, B(src.buffer).dtype);
    if (ops < 0) throw std::logic_error("lower: no transposed-store PSUM tile for " + tensor);
    const AccessPattern h = hbm_tile(acc, c, true);  // P contiguous partitions, F strided free elements
    const std::int64_t pm = t_.pmax;
    for (std::int64_t j0 = 0; j0 < c.F; j0 += pm) {
      const std::int64_t r = std::min(pm, c.F - j0);
      const int slot = tr_slot_++;
      AccessPattern part = src;
      part.offset += j0 * src.free_stride[2];
      part.free_size[2] = static_cast<std::int32_t>(r);
      const AccessPattern tp = tile_ap(ops, slot, static_cast<int>(r), 0, c.P);
      pe_transpose(tp, part);
      const AccessPattern sb = tile_ap(ost, slot, static_cast<int>(r), 0, c.P);
      copy(Engine::vector, sb, tp);
      AccessPattern rows = h;  // r rows (the free index's stride) of P contiguous elements
      rows.offset += j0 * h.free_stride[2];
      rows.part_stride = h.free_stride[2];
      rows.part_count = static_cast<std::int32_t>(r);
      rows.free_stride = {0, 0, s32(h.part_stride)};
      rows.free_size = {1, 1, c.P};
      dma(rows, sb, queues);
    }
    return;
  }
  const bool wide = src.free_size[2] > 1 || (!c.fidx.empty() && std::find(out_idx.begin(), out_idx.end(), c.fidx) != out_idx.end());
  AccessPattern dst = hbm_tile(acc, c, wide);
  dst.free_size[2] = src.free_size[2];
  dma(dst, src, queues);
}

}  // namespace kevo::lower::detail
