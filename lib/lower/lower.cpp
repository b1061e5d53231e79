// Lowering: a plan (schedule/plan.hpp) becomes an unrolled tile program. Contraction nests walk
// their block and tile loops in the genome's order, placing loads, matmuls, PSUM evictions,
// SBUF accumulation, epilogues and stores where the plan says; vector nests walk row tiles and
// evaluate their fused map/reduce ops on [P, F] tiles.
#include "kevo/lower/lower.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <limits>

#include "builder.hpp"
#include "kevo/schedule/detail/plan.hpp"

namespace kevo::lower {

namespace {

using schedule::BufSpec;
using schedule::ContractPlan;
using schedule::DmaGran;
using schedule::NestKind;
using schedule::NestPlan;
using schedule::Transpose;
using target::Engine;

constexpr double kInf = std::numeric_limits<double>::infinity();

double fold(ir::Fn f, double a, double b) {
  switch (f) {
    case ir::Fn::add: return a + b;
    case ir::Fn::sub: return a - b;
    case ir::Fn::mul: return a * b;
    case ir::Fn::div: return a / b;
    case ir::Fn::max: return std::max(a, b);
    case ir::Fn::min: return std::min(a, b);
    case ir::Fn::lt: return a < b;
    case ir::Fn::le: return a <= b;
    case ir::Fn::gt: return a > b;
    case ir::Fn::ge: return a >= b;
    case ir::Fn::eq: return a == b;
    case ir::Fn::ne: return a != b;
    case ir::Fn::exp: return std::exp(a);
    case ir::Fn::log: return std::log(a);
    case ir::Fn::tanh: return std::tanh(a);
    case ir::Fn::gelu_tanh: return 0.5 * a * (1 + std::tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)));
    case ir::Fn::gelu_erf: return 0.5 * a * (1 + std::erf(a / std::sqrt(2.0)));
    case ir::Fn::silu: return a / (1 + std::exp(-a));
    case ir::Fn::relu: return std::max(a, 0.0);
    case ir::Fn::sigmoid: return 1 / (1 + std::exp(-a));
    case ir::Fn::rsqrt: return 1 / std::sqrt(a);
    case ir::Fn::sqrt: return std::sqrt(a);
    case ir::Fn::square: return a * a;
    case ir::Fn::abs: return std::abs(a);
    case ir::Fn::neg: return -a;
    case ir::Fn::reciprocal: return 1 / a;
    case ir::Fn::cast: return a;
    case ir::Fn::select: return a;
  }
  return a;
}

// A value during tile evaluation: an immediate, or a tile [P, 1 or F] in a buffer.
struct Val {
  bool imm = false;
  double v = 0;
  AccessPattern ap;
  bool wide = false;
};

// Index placement for a tile context.
struct Ctx {
  std::string pidx, fidx;
  std::int64_t p0 = 0, f0 = 0;
  int P = 1;
  std::int64_t F = 1;
  std::vector<std::pair<std::string, std::int64_t>> fixed;
  [[nodiscard]] std::int64_t fixed_value(const std::string& x) const {
    for (const auto& [n, v] : fixed)
      if (n == x) return v;
    return 0;
  }
};

class Lowerer {
 public:
  Lowerer(const schedule::ScheduleSpace& sp, const schedule::Plan& plan, TileProgram& prog)
      : sp_(sp), s_(sp.impl()), k_(sp.kernel()), t_(sp.target()), plan_(plan), prog_(prog), b_(prog, sp.target()) {}

  // Matmul instructions of the plan's contraction nests (one per tile iteration).
  static std::size_t matmuls(const schedule::Plan& plan) {
    std::size_t n = 0;
    for (const auto& np : plan.nests)
      if (np.kind == NestKind::contract) n += static_cast<std::size_t>(np.c.ntiles[0] * np.c.ntiles[1] * np.c.ntiles[2]);
      else if (np.kind == NestKind::flash)
        n += static_cast<std::size_t>(np.f.outer * np.f.nq * np.f.nkv * (np.f.nk + np.f.chunks));
    return n;
  }
  // Walks the loops without building anything, only counting instructions (throws
  // Builder::TooLarge past the limit).
  std::size_t count() {
    b_.count_only();
    walk_nests();
    return b_.counted();
  }

  // `exact`: the instruction count when known (count()), else 0.
  void run(std::size_t exact = 0) {
    // Reserve for the unrolled program up front: growth copies of ~100k instructions dominate otherwise.
    // Reserving more than is used costs address space, not memory: untouched pages are never
    // faulted in. Six per matmul covers loads, evictions and stores per tile.
    const std::size_t est = exact > 0 ? exact : std::min(64 + 6 * matmuls(plan_), detail::Builder::kMaxInstructions);
    prog_.instrs.reserve(est);
    prog_.dep_begin.reserve(est + 1);
    prog_.deps.reserve(est * 3);
    b_.reserve(est);
    prog_.dep_begin.push_back(0);
    walk_nests();
  }

 private:
  void walk_nests() {
    hbm_.assign(k_.tensors.size(), -1);
    for (std::size_t i = 0; i < k_.tensors.size(); ++i) {
      const auto& t = k_.tensors[i];
      if (t.role == ir::Role::temp) continue;
      hbm_buffer(static_cast<int>(i));
    }
    for (std::size_t n = 0; n < plan_.nests.size(); ++n) {
      nest_ = static_cast<int>(n);
      const auto& np = plan_.nests[n];
      prog_.group_names.push_back(np.name);
      bufmap_.clear();
      for (const auto& bs : np.buffers) bufmap_.push_back(onchip(np, bs));
      if (np.kind == NestKind::contract) contract(np);
      else if (np.kind == NestKind::flash) flash_nest(np);
      else vector_nest(np);
    }
  }

  // ---- buffers ----
  int hbm_buffer(int ti) {
    auto& h = hbm_[static_cast<std::size_t>(ti)];
    if (h >= 0) return h;
    const auto& t = k_.tensors[static_cast<std::size_t>(ti)];
    Buffer b;
    b.name = t.name;
    b.mem = Memory::hbm;
    b.dtype = t.dtype;
    b.shape = k_.shape(t);
    b.tensor = ti;
    h = b_.add_buffer(std::move(b));
    if (t.role == ir::Role::input) b_.set_read_only(h);
    return h;
  }
  int hbm_of(const std::string& name) { return hbm_buffer(s_.tensor_index(name)); }
  int onchip(const NestPlan& np, const BufSpec& bs) {
    Buffer b;
    // identifier-friendly (the NKI emitter turns buffer names into Python variables)
    b.name = np.name + "_" + bs.name;
    for (auto& ch : b.name)
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_') ch = '_';
    b.mem = bs.psum ? Memory::psum : Memory::sbuf;
    b.dtype = bs.psum ? ir::DType::fp32 : bs.dtype;
    b.partitions = bs.partitions;
    b.free_elems = bs.free_elems;
    b.nbufs = bs.nbufs;
    b.shape = {bs.partitions, bs.free_elems};
    return b_.add_buffer(std::move(b));
  }
  int buf(int spec) const { return bufmap_[static_cast<std::size_t>(spec)]; }
  const Buffer& B(int id) const { return prog_.buffers[static_cast<std::size_t>(id)]; }

  // A stride for an AccessPattern: every buffer holds fewer than 2^31 elements (Builder::add_buffer
  // rejects larger ones), so strides within a buffer fit.
  static std::int32_t s32(std::int64_t v) noexcept { return static_cast<std::int32_t>(v); }
  // On-chip AP: `rows` partitions from slot `slot`, free elements starting at `f` (contiguous, `n` of them).
  AccessPattern tile_ap(int bid, int slot, int rows, std::int64_t f, std::int64_t n) const {
    const Buffer& b = B(bid);
    AccessPattern a;
    a.buffer = bid;
    a.offset = (b.nbufs == 1 ? 0 : static_cast<std::int64_t>(slot % b.nbufs) * b.partitions * b.free_elems) + f;
    a.part_stride = b.free_elems;
    a.part_count = rows;
    a.free_stride = {0, 0, 1};
    a.free_size = {1, 1, static_cast<std::int32_t>(n)};
    return a;
  }
  // Strides of an access's indices in its tensor (row-major), summed over repeated indices.
  std::int64_t stride_of(const std::string& tensor, const std::vector<std::string>& idx, const std::string& x) const {
    const auto& t = s_.tensor(tensor);
    const auto shape = k_.shape(t);
    std::int64_t st = 1, r = 0;
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (idx[d] == x) r += st;
      st *= shape[d];
    }
    return r;
  }

  // ---- instructions ----
  std::uint32_t dma(const AccessPattern& dst, const AccessPattern& src, int queues, bool transpose = false) {
    // split along partitions over `queues` DMA queues
    const int q = std::max(1, std::min(queues, dst.part_count));
    const int per = (dst.part_count + q - 1) / q;
    std::uint32_t last = 0;
    for (int p0 = 0; p0 < dst.part_count; p0 += per) {
      const int rows = std::min(per, dst.part_count - p0);
      Instr& in = b_.open();
      in.op = transpose ? Opcode::dma_transpose : Opcode::dma_copy;
      in.at.dma = true;
      in.at.queue = static_cast<std::uint8_t>(queue_++ % static_cast<unsigned>(t_.dma_queues));
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
  // Opens the next instruction in place (Builder::open): fill it, then emit() it.
  Instr& compute(Opcode op, Engine e, const AccessPattern& dst) {
    Instr& in = b_.open();
    in.op = op;
    in.at.engine = e;
    in.dst = dst;
    in.group = nest_;
    return in;
  }
  void emit(Instr& in, std::int64_t flops) {  // `in` is what compute() opened
    in.flops = flops;
    prog_.stats.flops += flops;
    b_.commit();
  }
  static AccessPattern widen(AccessPattern a, std::int64_t F) {
    // a [P,1] operand broadcast along the free dim
    a.free_stride[2] = 0;
    a.free_size[2] = static_cast<std::int32_t>(F);
    return a;
  }
  Engine tt_engine(Engine e) const { return e == Engine::gpsimd ? Engine::gpsimd : Engine::vector; }

  void tensor_tensor(Engine e, const AccessPattern& dst, const AccessPattern& a, const AccessPattern& b, ir::Fn fn) {
    Instr& in = compute(Opcode::tensor_tensor, tt_engine(e), dst);
    in.src[0] = a;
    in.src[1] = b;
    in.nsrc = 2;
    in.fn = fn;
    emit(in, dst.elems());
  }
  void tensor_scalar(Engine e, const AccessPattern& dst, const AccessPattern& x, ir::Fn fn, const Val& s0, bool reverse,
                     bool has1 = false, ir::Fn fn1 = ir::Fn::add, double imm1 = 0) {
    Instr& in = compute(Opcode::tensor_scalar, e, dst);
    in.src[0] = x;
    in.nsrc = 1;
    if (s0.imm) in.imm0 = s0.v;
    else {
      in.src[1] = s0.ap;
      in.nsrc = 2;
    }
    in.fn = fn;
    in.reverse0 = reverse;
    in.has_op1 = has1;
    in.fn1 = fn1;
    in.imm1 = imm1;
    emit(in, dst.elems() * (has1 ? 2 : 1));
  }
  void copy(Engine e, const AccessPattern& dst, const AccessPattern& src) {
    Instr& in = compute(Opcode::tensor_copy, e, dst);
    in.src[0] = src;
    in.nsrc = 1;
    emit(in, 0);
  }

  // ---- tile evaluation of map/reduce ops (vector nests, contraction epilogues) ----
  struct TileState {
    int slot = 0;        // rotation slot for loads, temps, map values
    int acc_slot = 0;    // rotation slot for reduce accumulators
    bool first = true;   // first reduction step of the current accumulation
    bool last = true;    // last reduction step
    std::vector<std::pair<std::string, AccessPattern>> loaded;  // this iteration's loads
    std::vector<std::pair<std::string, Val>> values;            // tensor values held on chip
  };

  // The tile of a shifted access (ir::IndexShift): per tensor dim, position = base + ap*p + af*j
  // for partition p < P and free j < F; reads outside the tensor are zero. The plan keeps the
  // partition and free index out of one shifted dim, so the in-range part is a rectangle
  // [p_lo, p_hi) x [j_lo, j_hi): it is loaded by one DMA after a memset of the tile.
  struct ShiftedTile {
    AccessPattern src;
    std::int64_t p_lo = 0, p_hi = 0, j_lo = 0, j_hi = 0;
  };
  // With `win` (a window, schedule::window_geom), the free axis runs over win->elems consecutive
  // positions of dim win->dim instead of the free index.
  ShiftedTile shifted_tile(const ir::Expr& acc, const Ctx& c, bool wide, const schedule::WindowGeom* win = nullptr) {
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
  // Loads access `e` into the tile `dst`: one DMA, or for a shifted access a memset of the
  // tile to zero and one DMA of its in-range part (none when all of it lies outside).
  void load_access(const AccessPattern& dst, const ir::Expr& e, const Ctx& c, bool wide, int queues, Engine eng,
                   const schedule::WindowGeom* win = nullptr) {
    if (ir::is_plain(e) && !win) {
      dma(dst, hbm_tile(e, c, wide), queues);
      return;
    }
    const ShiftedTile t = shifted_tile(e, c, wide, win);
    const std::int64_t P = c.P, F = win ? win->elems : wide ? c.F : 1;
    const bool whole = t.p_lo == 0 && t.p_hi == P && t.j_lo == 0 && t.j_hi == F;
    if (!whole) {
      Instr& in = compute(Opcode::memset, tt_engine(eng), dst);
      in.imm0 = 0;
      emit(in, 0);
    }
    if (t.p_hi <= t.p_lo || t.j_hi <= t.j_lo) return;
    AccessPattern d = dst, src = t.src;
    d.offset += t.p_lo * dst.part_stride + t.j_lo * dst.free_stride[2];
    src.offset += t.p_lo * src.part_stride + t.j_lo * src.free_stride[2];
    d.part_count = src.part_count = static_cast<int>(t.p_hi - t.p_lo);
    d.free_size[2] = src.free_size[2] = static_cast<std::int32_t>(t.j_hi - t.j_lo);
    dma(d, src, queues);
  }

  // The window of access `e` for the current output tile (VectorPlan::window), loaded at its
  // first use in the tile with the reduce index at 0.
  AccessPattern window(const ir::Expr& e, const std::string& key, int spec, const schedule::WindowGeom& geom, const Ctx& c,
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

  // `window fold` (VectorPlan::fold): the root reduction of one access or a product of two, on
  // [P, F, taps] views of the windows: one multiply and one tensor_reduce over the taps.
  void fold_root(const NestPlan& np, const schedule::TileCompute& tc, std::size_t oi, const Ctx& c, TileState& st,
                 int queues) {
    const auto& op = k_.ops[static_cast<std::size_t>(tc.ops[oi])];
    const Engine eng = plan_.op_engine[static_cast<std::size_t>(tc.ops[oi])];
    const std::string& r = np.v.inner[0];
    const std::int64_t T = np.v.inner_ext[0];
    const auto view3 = [&](const ir::Expr& e) {
      const std::string key = schedule::access_key(e);
      int spec = -1;
      for (const auto& [kk, b] : tc.loads)
        if (kk == key) spec = b;
      const auto geom = schedule::window_geom(e, c.pidx, c.fidx, r, c.F, T);
      AccessPattern a;
      if (geom.ok) {
        a = window(e, key, spec, geom, c, st, queues, eng);
        a.free_stride = {0, s32(geom.a_f), s32(geom.a_r)};
      } else {  // does not move with the taps: one tile, broadcast over them
        const bool wide = schedule::expr_uses(e, c.fidx);
        a = tile_ap(buf(spec), st.slot, c.P, 0, wide ? c.F : 1);
        load_access(a, e, c, wide, queues, eng);
        a.free_stride = {0, wide ? 1 : 0, 0};
      }
      a.free_size = {1, static_cast<std::int32_t>(c.F), static_cast<std::int32_t>(T)};
      return a;
    };
    const bool has_f = !c.fidx.empty() &&
                       std::find(op.out_indices.begin(), op.out_indices.end(), c.fidx) != op.out_indices.end();
    const AccessPattern acc = tile_ap(buf(tc.dst[oi]), st.acc_slot, c.P, 0, has_f ? c.F : 1);
    const bool prod = op.expr.kind != ir::Expr::Kind::access;
    std::array<AccessPattern, 2> x;
    x[0] = view3(prod ? op.expr.args[0] : op.expr);
    if (prod) x[1] = view3(op.expr.args[1]);
    // the tile in chunks of output columns: one multiply and one reduce over the taps each
    const std::int64_t cw = std::min<std::int64_t>(np.v.chunk, c.F);
    for (std::int64_t j0 = 0; j0 < c.F; j0 += cw) {
      const auto n = static_cast<std::int32_t>(std::min(cw, c.F - j0));
      std::array<AccessPattern, 2> y = x;
      for (auto& a : y) {
        a.offset += j0 * a.free_stride[1];
        a.free_size[1] = n;
      }
      AccessPattern src = y[0];
      if (prod) {
        src = tile_ap(buf(tc.node_buf[oi][0]), fold_slot_++, c.P, 0, n * T);  // products rotate over the bufs slots
        src.free_stride = {0, s32(T), 1};
        src.free_size = {1, n, static_cast<std::int32_t>(T)};
        tensor_tensor(eng, src, y[0], y[1], ir::Fn::mul);
      }
      AccessPattern d = acc;
      if (has_f) {
        d.offset += j0;
        d.free_size[2] = n;
      }
      Instr& in = compute(Opcode::tensor_reduce, tt_engine(eng), d);
      in.src[0] = src;
      in.nsrc = 1;
      in.reduce = op.reduce == ir::ReduceOp::mean ? ir::ReduceOp::sum : op.reduce;
      in.reduce_free_dims = 1;
      emit(in, src.elems());
    }
    if (op.reduce == ir::ReduceOp::mean)
      tensor_scalar(eng, acc, acc, ir::Fn::mul, Val{true, 1.0 / static_cast<double>(T), {}, false}, false);
    st.values.emplace_back(op.out, Val{false, 0, acc, has_f});
  }

  AccessPattern hbm_tile(const ir::Expr& acc, const Ctx& c, bool wide) {
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

  Val eval(const NestPlan& np, const schedule::TileCompute& tc, std::size_t oi, const std::vector<const ir::Expr*>& nodes,
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
        load_access(dst, e, c, wide, queues, eng);
        st.loaded.emplace_back(key, dst);
        return Val{false, 0, dst, wide};
      }
      case ir::Expr::Kind::call: break;
    }
    std::vector<Val> args;
    for (std::size_t a = 0; a < e.args.size(); ++a) args.push_back(eval(np, tc, oi, nodes, q, c, st, nullptr, eng, queues));
    bool all_imm = true;
    for (const auto& a : args) all_imm = all_imm && a.imm;
    if (all_imm && e.fn != ir::Fn::select) {
      const double r = fold(e.fn, args[0].v, args.size() > 1 ? args[1].v : 0);
      return Val{true, r, {}, false};
    }
    if (e.fn == ir::Fn::select) return select(tc, oi, me, args, c, st, temp, eng);
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
      } else {
        Instr& in = compute(Opcode::activation, Engine::scalar, out.ap);
        in.src[0] = src;
        in.nsrc = 1;
        in.fn = e.fn;
        emit(in, out.ap.elems());
      }
      return out;
    }
    binop(eng, e.fn, args[0], args[1], out, c);
    return out;
  }

  void binop(Engine eng, ir::Fn fn, const Val& x, const Val& y, const Val& out, const Ctx& c) {
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

  template <class Temp>
  Val select(const schedule::TileCompute& tc, std::size_t oi, std::size_t me, std::vector<Val>& args, const Ctx& c,
             TileState& st, Temp&& temp, Engine eng) {
    const Val& cond = args[0];
    const Val& a = args[1];
    const Val& bv = args[2];
    bool wide = false;
    for (const auto& v : args) wide = wide || (!v.imm && v.wide);
    Val out{false, 0, temp(wide), wide};
    const auto s0 = tile_ap(buf(tc.sel_buf[oi][me][0]), st.slot, c.P, 0, wide ? c.F : 1);
    const auto s1 = tile_ap(buf(tc.sel_buf[oi][me][1]), st.slot, c.P, 0, wide ? c.F : 1);
    if (cond.imm) {  // constant condition: pick a branch
      const Val& pick = cond.v != 0 ? a : bv;
      if (pick.imm) binop(eng, ir::Fn::add, pick, Val{true, 0, {}, false}, out, c);
      else copy(tt_engine(eng), out.ap, out.wide && !pick.wide ? widen(pick.ap, c.F) : pick.ap);
      return out;
    }
    AccessPattern cw = out.wide && !cond.wide ? widen(cond.ap, c.F) : cond.ap;
    // Infinite constants cannot pass through a*c + b*(1-c) (inf * 0 = NaN): use a min/max with a
    // +-inf mask instead, m = (c - 0.5) * (+-inf).
    const bool b_inf = bv.imm && std::isinf(bv.v), a_inf = a.imm && std::isinf(a.v);
    if ((b_inf && !a.imm) || (a_inf && !bv.imm)) {
      const Val& other = b_inf ? a : bv;
      const double inf = b_inf ? bv.v : a.v;
      // b = -inf: min(a, m) with m(c=1)=+inf, m(c=0)=-inf. a = -inf: min(b, m) with m(c=1)=-inf, m(c=0)=+inf.
      const double scale = (b_inf ? -inf : inf);
      const Val m{false, 0, s0, out.wide};
      tensor_scalar(eng, s0, cw, ir::Fn::sub, Val{true, 0.5, {}, false}, false, true, ir::Fn::mul, scale);
      binop(eng, inf < 0 ? ir::Fn::min : ir::Fn::max, other, m, out, c);
      return out;
    }
    // out = a*c + b*(1-c): each product is exact (c is 0 or 1), and one of them is zero.
    const Val t1{false, 0, s0, out.wide};
    const Val cv{false, 0, cw, out.wide};
    binop(eng, ir::Fn::mul, a, cv, t1, c);
    const Val t2{false, 0, s1, out.wide};
    if (bv.imm) {
      tensor_scalar(eng, s1, cw, ir::Fn::sub, Val{true, 1.0, {}, false}, true, true, ir::Fn::mul, bv.v);
    } else {
      tensor_scalar(eng, s1, cw, ir::Fn::sub, Val{true, 1.0, {}, false}, true);
      binop(eng, ir::Fn::mul, bv, t2, t2, c);
    }
    binop(eng, ir::Fn::add, t1, t2, out, c);
    return out;
  }

  // Evaluates one op of a tile computation into its destination; `store_dst` is where a stored
  // map value goes (a staging footprint for epilogues), or nullptr for the op's own rotating tile.
  void eval_op(const NestPlan& np, const schedule::TileCompute& tc, std::size_t oi, const Ctx& c, TileState& st,
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
    if (op.kind() != ir::OpKind::reduce) {
      const AccessPattern dst = dst_override ? *dst_override : tile_ap(buf(tc.dst[oi]), st.slot, c.P, 0, w);
      Val v = eval(np, tc, oi, nodes, q, c, st, &dst, eng, queues);
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
    Val v = eval(np, tc, oi, nodes, q, c, st, nullptr, eng, queues);
    const AccessPattern acc = tile_ap(buf(tc.dst[oi]), st.acc_slot, c.P, 0, w);
    const ir::Fn rf = op.reduce == ir::ReduceOp::max ? ir::Fn::max : op.reduce == ir::ReduceOp::min ? ir::Fn::min : ir::Fn::add;
    const bool along_f = !c.fidx.empty() &&
                         std::find(op.reduce_indices.begin(), op.reduce_indices.end(), c.fidx) != op.reduce_indices.end();
    if (v.imm) {  // constant body: materialise it
      const AccessPattern t = tile_ap(buf(tc.dst[oi]), st.acc_slot, c.P, 0, w);
      (void)t;
    }
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
      Instr& in = compute(Opcode::tensor_reduce, tt_engine(eng), acc);
      in.src[0] = src;
      in.nsrc = 1;
      in.reduce = op.reduce == ir::ReduceOp::mean ? ir::ReduceOp::sum : op.reduce;
      in.reduce_free_dims = 1;
      in.accumulate = !st.first;
      emit(in, src.elems());
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
    if (st.last) {
      if (op.reduce == ir::ReduceOp::mean)
        tensor_scalar(eng, acc, acc, ir::Fn::mul, Val{true, 1.0 / static_cast<double>(reduce_count), {}, false}, false);
      st.values.emplace_back(op.out, Val{false, 0, acc, has_f});
    }
  }

  void store_tile(const std::string& tensor, const std::vector<std::string>& out_idx, const AccessPattern& src, const Ctx& c,
                  int queues) {
    ir::Expr acc;
    acc.kind = ir::Expr::Kind::access;
    acc.tensor = tensor;
    acc.indices = out_idx;
    const bool wide = src.free_size[2] > 1 || (!c.fidx.empty() && std::find(out_idx.begin(), out_idx.end(), c.fidx) != out_idx.end());
    AccessPattern dst = hbm_tile(acc, c, wide);
    dst.free_size[2] = src.free_size[2];
    dma(dst, src, queues);
  }

  // ---- vector nests ----
  void vector_nest(const NestPlan& np) {
    const auto& v = np.v;
    const auto& tc = np.tc;
    std::int64_t rcount = 1;
    for (const auto& x : v.reduce_set) {
      const auto& os = s_.ops[static_cast<std::size_t>(np.root_op)];
      for (std::size_t q = 0; q < os.idx.size(); ++q)
        if (os.idx[q] == x) rcount *= os.ext[q];
    }
    const std::int64_t np_tiles = (v.pext + v.ptile - 1) / v.ptile;
    const std::int64_t nf_tiles = v.fidx.empty() ? 1 : (v.fext + v.ftile - 1) / v.ftile;
    std::vector<std::int64_t> oc(v.outer.size(), 0);
    int iter = 0, otile = 0;
    while (true) {
      for (std::int64_t pt = 0; pt < np_tiles; ++pt) {
        const std::int64_t nfo = v.f_reduced ? 1 : nf_tiles;
        for (std::int64_t fo = 0; fo < nfo; ++fo) {
          win_.clear();
          // one output tile: iterate the reduction (inner looped indices, then f tiles when reduced)
          std::vector<std::int64_t> ic(v.inner.size(), 0);
          const std::int64_t nfi = v.f_reduced ? nf_tiles : 1;
          std::int64_t inner_total = nfi;
          for (auto e : v.inner_ext) inner_total *= e;
          if (v.fold) inner_total = 1;  // the taps run inside one instruction
          std::int64_t step = 0;
          while (true) {
            for (std::int64_t fi = 0; fi < nfi; ++fi, ++step) {
              Ctx c;
              c.pidx = v.pidx;
              c.fidx = v.fidx;
              c.p0 = pt * v.ptile;
              c.P = static_cast<int>(std::min(v.ptile, v.pext - c.p0));
              const std::int64_t ft = v.f_reduced ? fi : fo;
              c.f0 = ft * v.ftile;
              c.F = v.fidx.empty() ? 1 : std::min(v.ftile, v.fext - c.f0);
              for (std::size_t q = 0; q < v.outer.size(); ++q) c.fixed.emplace_back(v.outer[q], oc[q]);
              for (std::size_t q = 0; q < v.inner.size(); ++q) c.fixed.emplace_back(v.inner[q], ic[q]);
              TileState st;
              st.slot = iter++;
              st.acc_slot = otile;
              st.first = step == 0;
              st.last = step + 1 == inner_total;
              for (std::size_t oi = 0; oi < tc.ops.size(); ++oi) {
                eval_op(np, tc, oi, c, st, v.queues, nullptr, rcount);
                const auto& op = k_.ops[static_cast<std::size_t>(tc.ops[oi])];
                const bool is_reduce = op.kind() == ir::OpKind::reduce;
                if (tc.store[oi] && (!is_reduce || st.last)) store_tile(op.out, op.out_indices, st.values.back().second.ap, c, v.queues);
              }
            }
            if (v.fold || !next(ic, v.inner_ext)) break;
          }
          ++otile;
        }
      }
      if (!next(oc, v.outer_ext)) break;
    }
  }
  static bool next(std::vector<std::int64_t>& c, const std::vector<std::int64_t>& ext) {
    for (std::size_t q = c.size(); q-- > 0;) {
      if (++c[q] < ext[q]) return true;
      c[q] = 0;
    }
    return false;
  }

  // ---- contraction nests ----
  struct CState {
    std::array<std::int64_t, 3> blk{0, 0, 0}, til{0, 0, 0};
    std::array<int, 2> load_inst{-1, -1};
    int psum_inst = -1, store_inst = -1, tile_inst = 0, nat_inst = 0, otr_inst = 0, ostage_inst = 0;
    std::vector<std::pair<std::string, std::int64_t>> fixed;
  };

  // Per-nest constants of a contraction, computed once (the walk is hot).
  struct CCache {
    std::array<int, 3> pb{-1, -1, -1}, pt{-1, -1, -1};
    std::array<std::array<std::int64_t, 3>, 2> fp_load{};
    std::array<std::int64_t, 3> fp_psum{}, fp_store{};
    std::array<int, 2> hb{-1, -1};
    std::array<std::int64_t, 2> sk{0, 0}, sq{0, 0};
    std::array<std::vector<std::int64_t>, 2> outer_stride;
  } cc_;
  void cache_contract(const NestPlan& np) {
    const auto& c = np.c;
    const auto& sl = s_.contracts[static_cast<std::size_t>(c.slot)];
    const auto& op = k_.ops[static_cast<std::size_t>(np.root_op)];
    for (int cl = 0; cl < 3; ++cl) {
      cc_.pb[static_cast<std::size_t>(cl)] = c.pos_of(cl, true);
      cc_.pt[static_cast<std::size_t>(cl)] = c.pos_of(cl, false);
    }
    for (std::size_t q = 0; q < 2; ++q) {
      cc_.fp_load[q] = c.footprint(c.load_level[q]);
      const ir::Expr& acc = op.expr.args[q];
      cc_.hb[q] = hbm_of(acc.tensor);
      cc_.sk[q] = stride_of(acc.tensor, acc.indices, sl.idx[2]);
      cc_.sq[q] = sl.present[q] ? stride_of(acc.tensor, acc.indices, sl.idx[q]) : 0;
      cc_.outer_stride[q].clear();
      for (const auto& x : sl.outer) cc_.outer_stride[q].push_back(stride_of(acc.tensor, acc.indices, x));
    }
    cc_.fp_psum = c.footprint(c.scope - 1);
    cc_.fp_store = c.footprint(c.store_level);
  }

  std::int64_t gtile(const CState& st, const ContractPlan& c, int cl) const {
    const auto u = static_cast<std::size_t>(cl);
    return st.blk[u] * c.bf[u] + st.til[u];
  }
  // First tile and tile count of class cl in the footprint at `level` for the current iteration.
  std::pair<std::int64_t, std::int64_t> fp_range(const CState& st, const ContractPlan& c, int cl, int level) const {
    const auto u = static_cast<std::size_t>(cl);
    const int pb = cc_.pb[u], pt = cc_.pt[u];
    if (pt < 0) return {0, 1};
    if (pt <= level) return {gtile(st, c, cl), 1};
    if (pb <= level) return {st.blk[u] * c.bf[u], std::min(c.bf[u], c.ntiles[u] - st.blk[u] * c.bf[u])};
    return {0, c.ntiles[u]};
  }
  std::int64_t tsize(const ContractPlan& c, const schedule::ContractSlot& sl, int cl, std::int64_t g) const {
    const auto u = static_cast<std::size_t>(cl);
    return std::min(c.tile[u], sl.ext[u] - g * c.tile[u]);
  }

  void contract(const NestPlan& np) {
    const auto& c = np.c;
    const auto& sl = s_.contracts[static_cast<std::size_t>(c.slot)];
    const auto& op = k_.ops[static_cast<std::size_t>(np.root_op)];
    std::vector<std::int64_t> oext;
    for (const auto& x : sl.outer) {
      const auto& os = s_.ops[static_cast<std::size_t>(np.root_op)];
      for (std::size_t q = 0; q < os.idx.size(); ++q)
        if (os.idx[q] == x) oext.push_back(os.ext[q]);
    }
    std::vector<std::int64_t> oc(sl.outer.size(), 0);
    CState st;
    cur_ = &np;
    cache_contract(np);
    while (true) {
      st.fixed.clear();
      for (std::size_t q = 0; q < sl.outer.size(); ++q) st.fixed.emplace_back(sl.outer[q], oc[q]);
      st.blk = {0, 0, 0};
      st.til = {0, 0, 0};
      level_begin(np, st, -1);
      walk(np, st, 0);
      level_end(np, st, -1);
      if (!next(oc, oext)) break;
    }
    (void)op;
  }

  void level_begin(const NestPlan& np, CState& st, int level) {
    const auto& c = np.c;
    for (int q = 0; q < 2; ++q)
      if (c.load_level[static_cast<std::size_t>(q)] == level) load(np, st, q);
    if (c.store_level == level) ++st.store_inst;
    if (c.scope == level + 1) ++st.psum_inst;
  }
  void level_end(const NestPlan& np, CState& st, int level) {
    if (np.c.store_level == level) store(np, st);
  }

  void walk(const NestPlan& np, CState& st, int pos) {
    const auto& c = np.c;
    if (pos == static_cast<int>(c.loops.size())) {
      body(np, st);
      return;
    }
    const auto& L = c.loops[static_cast<std::size_t>(pos)];
    const auto u = static_cast<std::size_t>(L.cls);
    const std::int64_t trip = L.block ? c.nblocks[u] : std::min(c.bf[u], c.ntiles[u] - st.blk[u] * c.bf[u]);
    for (std::int64_t i = 0; i < trip; ++i) {
      (L.block ? st.blk : st.til)[u] = i;
      if (L.block) st.til[u] = 0;
      level_begin(np, st, pos);
      walk(np, st, pos + 1);
      level_end(np, st, pos);
    }
    (L.block ? st.blk : st.til)[u] = 0;
  }

  // Loads operand q's footprint at its level into the next rotation slot.
  void load(const NestPlan& np, CState& st, int q) {
    const auto& c = np.c;
    const auto& sl = s_.contracts[static_cast<std::size_t>(c.slot)];
    const auto uq = static_cast<std::size_t>(q);
    const int level = c.load_level[uq];
    const int slot = ++st.load_inst[uq];
    const auto& fpmax = cc_.fp_load[uq];
    const std::int64_t Lq = fpmax[uq] * c.tile[uq];
    const auto [k0, kn] = fp_range(st, c, 2, level);
    const auto [q0, qn] = fp_range(st, c, q, level);
    const int bid = buf(c.buf_load[uq]);
    const std::int64_t sk = cc_.sk[uq], sq = cc_.sq[uq];
    std::int64_t base = 0;
    for (std::size_t x = 0; x < st.fixed.size(); ++x) base += st.fixed[x].second * cc_.outer_stride[uq][x];
    const int hb = cc_.hb[uq];
    const std::int64_t qelems_end = std::min((q0 + qn) * c.tile[uq], sl.ext[uq]);
    const std::int64_t qlen = qelems_end - q0 * c.tile[uq];  // elements of q in the footprint
    const auto hbm_ap = [&](std::int64_t kt, std::int64_t krows, std::int64_t qstart, std::int64_t qcount) {
      AccessPattern a;
      a.buffer = hb;
      a.offset = base + kt * c.tile[2] * sk + qstart * sq;
      a.part_stride = sk;
      a.part_count = static_cast<std::int32_t>(krows);
      a.free_stride = {0, 0, s32(sq)};
      a.free_size = {1, 1, static_cast<std::int32_t>(qcount)};
      return a;
    };
    // The source of a DMA transpose: [rows of q from element qstart, krows of k] in the operand's
    // natural layout.
    const auto natural_ap = [&](std::int64_t kt, std::int64_t krows, std::int64_t qstart, std::int64_t rows) {
      AccessPattern a;
      a.buffer = hb;
      a.offset = base + kt * c.tile[2] * sk + qstart * sq;
      a.part_stride = sq;
      a.part_count = static_cast<std::int32_t>(rows);
      a.free_stride = {0, 0, s32(sk)};
      a.free_size = {1, 1, static_cast<std::int32_t>(krows)};
      return a;
    };
    const Transpose tr = c.tr[uq];
    for (std::int64_t kk = 0; kk < kn; ++kk) {
      const std::int64_t kt = k0 + kk;
      const auto krows = tsize(c, sl, 2, kt);
      if (tr == Transpose::none || tr == Transpose::strided) {
        const DmaGran g = c.load_dma[uq];
        if (g == DmaGran::region && krows == c.tile[2] && kn > 1) {
          // all full k tiles of the footprint in one 3-D transfer (the partial last tile separately)
          std::int64_t full = 0;
          while (full < kn && tsize(c, sl, 2, k0 + full) == c.tile[2]) ++full;
          AccessPattern d = tile_ap(bid, slot, static_cast<int>(c.tile[2]), 0, qlen);
          d.free_stride = {0, s32(Lq), 1};
          d.free_size = {1, static_cast<std::int32_t>(full), static_cast<std::int32_t>(qlen)};
          AccessPattern s = hbm_ap(kt, c.tile[2], q0 * c.tile[uq], qlen);
          s.free_stride = {0, s32(c.tile[2] * sk), s32(sq)};
          s.free_size = {1, static_cast<std::int32_t>(full), static_cast<std::int32_t>(qlen)};
          dma(d, s, c.load_q[uq]);
          kk += full - 1;
          continue;
        }
        if (g == DmaGran::tile) {
          for (std::int64_t qq = 0; qq < qn; ++qq) {
            const std::int64_t qt = q0 + qq;
            const auto qc = tsize(c, sl, q, qt);
            dma(tile_ap(bid, slot, static_cast<int>(krows), kk * Lq + qq * c.tile[uq], qc), hbm_ap(kt, krows, qt * c.tile[uq], qc),
                c.load_q[uq]);
          }
        } else {
          dma(tile_ap(bid, slot, static_cast<int>(krows), kk * Lq, qlen), hbm_ap(kt, krows, q0 * c.tile[uq], qlen), c.load_q[uq]);
        }
        continue;
      }
      for (std::int64_t qq = 0; qq < qn; ++qq) {
        const std::int64_t qt = q0 + qq;
        const auto qc = tsize(c, sl, q, qt);
        const AccessPattern dst = tile_ap(bid, slot, static_cast<int>(krows), kk * Lq + qq * c.tile[uq], qc);
        if (tr == Transpose::dma_transpose && c.tr_gran[uq] == schedule::TransposeGran::block) {
          // one transpose per k tile of the footprint, all its q tiles at once: [qlen rows, krows]
          // into [krows partitions, qlen]
          dma(tile_ap(bid, slot, static_cast<int>(krows), kk * Lq, qlen), natural_ap(kt, krows, q0 * c.tile[uq], qlen), c.load_q[uq],
              true);
          break;
        }
        if (tr == Transpose::dma_transpose) {
          dma(dst, natural_ap(kt, krows, qt * c.tile[uq], qc), c.load_q[uq], true);
          continue;
        }
        // PE transpose: natural tile -> nc_transpose into PSUM -> copy into the stationary/moving layout
        const int nat = buf(c.buf_nat[uq]), tps = buf(c.buf_tpsum[uq]);
        const int ns = st.nat_inst++;
        const std::int64_t pm = t_.pmax;
        for (std::int64_t ch = 0; ch * pm < qc; ++ch) {
          const std::int64_t rows = std::min(pm, qc - ch * pm);
          AccessPattern s;
          s.buffer = hb;
          s.offset = base + kt * c.tile[2] * sk + (qt * c.tile[uq] + ch * pm) * sq;
          s.part_stride = sq;
          s.part_count = static_cast<std::int32_t>(rows);
          s.free_stride = {0, 0, s32(sk)};
          s.free_size = {1, 1, static_cast<std::int32_t>(krows)};
          const AccessPattern nd = tile_ap(nat, ns, static_cast<int>(rows), ch * c.tile[2], krows);
          dma(nd, s, c.load_q[uq]);
          Instr& in = compute(Opcode::nc_transpose, Engine::tensor, tile_ap(tps, ns, static_cast<int>(krows), ch * pm, rows));
          in.src[0] = nd;
          in.nsrc = 1;
          emit(in, 0);
        }
        copy(Engine::vector, dst, tile_ap(tps, ns, static_cast<int>(krows), 0, qc));
      }
    }
  }

  void body(const NestPlan& np, CState& st) {
    const auto& c = np.c;
    const auto& sl = s_.contracts[static_cast<std::size_t>(c.slot)];
    const int S = c.stat, M = 1 - c.stat;
    const auto uM = static_cast<std::size_t>(M);
    const std::int64_t gk = gtile(st, c, 2), gs = gtile(st, c, S), gm = gtile(st, c, M);
    const auto krows = tsize(c, sl, 2, gk), ssz = tsize(c, sl, S, gs), msz = tsize(c, sl, M, gm);
    const auto operand_ap = [&](int q, std::int64_t qt, std::int64_t qsz) {
      const auto uq = static_cast<std::size_t>(q);
      const int level = c.load_level[uq];
      const std::int64_t Lq = cc_.fp_load[uq][uq] * c.tile[uq];
      const auto [k0, kn] = fp_range(st, c, 2, level);
      const auto [q0, qn] = fp_range(st, c, q, level);
      (void)kn;
      (void)qn;
      return tile_ap(buf(c.buf_load[uq]), st.load_inst[uq], static_cast<int>(krows), (gk - k0) * Lq + (qt - q0) * c.tile[uq], qsz);
    };
    // PSUM group of this output tile
    const auto& pfp = cc_.fp_psum;
    const auto [ps0, psn] = fp_range(st, c, S, c.scope - 1);
    const auto [pm0, pmn] = fp_range(st, c, M, c.scope - 1);
    (void)psn;
    (void)pmn;
    const std::int64_t group = (gs - ps0) * pfp[uM] + (gm - pm0);
    const AccessPattern ps = tile_ap(buf(c.buf_psum), st.psum_inst, static_cast<int>(ssz), group * (t_.psum_bank_bytes / 4), msz);
    const int pkb = c.pos_of(2, true);
    const bool scope_is_kb = c.scope == pkb;
    const std::int64_t ktrip = std::min(c.bf[2], c.ntiles[2] - st.blk[2] * c.bf[2]);
    const bool first = scope_is_kb ? gk == 0 : st.til[2] == 0;
    const bool last = scope_is_kb ? gk == c.ntiles[2] - 1 : st.til[2] == ktrip - 1;
    // acc.zero=memset: the accumulator spanning k is zeroed by a Vector-engine memset (GpSimd
    // cannot write PSUM) instead of the first matmul's start flag; every matmul then accumulates
    const bool zero_memset = c.acc_zero == schedule::AccZero::memset;
    if (zero_memset && first && !c.acc_sbuf) {
      Instr& z = compute(Opcode::memset, Engine::vector, ps);
      z.imm0 = 0.0;
      emit(z, 0);
    }
    if (zero_memset && first && c.acc_sbuf && st.blk[2] == 0) {
      Instr& z = compute(Opcode::memset, Engine::vector, c_tile(np, st, c.buf_c, gs, gm, ssz, msz, c.c_footprint));
      z.imm0 = 0.0;
      emit(z, 0);
    }
    Instr& in = compute(Opcode::nc_matmul, Engine::tensor, ps);
    in.src[0] = operand_ap(S, gs, ssz);
    in.src[1] = operand_ap(M, gm, msz);
    in.nsrc = 2;
    in.accumulate = !first || (zero_memset && !c.acc_sbuf);
    const std::int64_t fl = 2 * krows * ssz * msz;
    prog_.stats.matmul_flops += fl;
    emit(in, fl);
    if (last) evict(np, st, ps, gs, gm, ssz, msz);
  }

  AccessPattern c_tile(const NestPlan& np, CState& st, int spec, std::int64_t gs, std::int64_t gm, std::int64_t ssz,
                       std::int64_t msz, bool footprint) {
    const auto& c = np.c;
    const int S = c.stat, M = 1 - c.stat;
    if (!footprint) return tile_ap(buf(spec), st.tile_inst, static_cast<int>(ssz), 0, msz);
    const std::int64_t Lm = cc_.fp_store[static_cast<std::size_t>(M)] * c.tile[static_cast<std::size_t>(M)];
    const auto [s0, sn] = fp_range(st, c, S, c.store_level);
    const auto [m0, mn] = fp_range(st, c, M, c.store_level);
    (void)sn;
    (void)mn;
    const std::int64_t f = (gs - s0) * Lm + (gm - m0) * c.tile[static_cast<std::size_t>(M)];
    return tile_ap(buf(spec), st.store_inst, static_cast<int>(ssz), f, msz);
  }

  void evict(const NestPlan& np, CState& st, const AccessPattern& ps, std::int64_t gs, std::int64_t gm, std::int64_t ssz,
             std::int64_t msz) {
    const auto& c = np.c;
    const auto& sl = s_.contracts[static_cast<std::size_t>(c.slot)];
    const AccessPattern cdst = c_tile(np, st, c.buf_c, gs, gm, ssz, msz, c.c_footprint);
    bool final_value = true;
    if (c.acc_sbuf) {
      final_value = st.blk[2] == c.nblocks[2] - 1;
      // the first k block initialises the SBUF accumulator by a copy, unless a memset zeroed it
      // (acc.zero=memset: every k block adds, as the NKI tutorial's kernel does)
      if (st.blk[2] == 0 && c.acc_zero == schedule::AccZero::start) copy(c.evict, cdst, ps);
      else tensor_tensor(Engine::vector, cdst, cdst, ps, ir::Fn::add);
    } else {
      copy(c.evict, cdst, ps);
    }
    if (!c.c_footprint) ++st.tile_inst;
    if (!final_value || np.tc.ops.empty()) return;
    // Epilogue on the finished tile.
    const auto& op = k_.ops[static_cast<std::size_t>(np.root_op)];
    const int S = c.stat, M = 1 - c.stat;
    Ctx cx;
    cx.pidx = sl.idx[static_cast<std::size_t>(S)];
    cx.fidx = sl.idx[static_cast<std::size_t>(M)];
    cx.p0 = gs * c.tile[static_cast<std::size_t>(S)];
    cx.f0 = gm * c.tile[static_cast<std::size_t>(M)];
    cx.P = static_cast<int>(ssz);
    cx.F = msz;
    cx.fixed = st.fixed;
    TileState ts;
    ts.slot = epi_iter_++;
    ts.values.emplace_back(op.out, Val{false, 0, cdst, true});
    for (std::size_t oi = 0; oi < np.tc.ops.size(); ++oi) {
      if (np.tc.store[oi]) {
        const AccessPattern d = c_tile(np, st, np.tc.dst[oi], gs, gm, ssz, msz, true);
        eval_op(np, np.tc, oi, cx, ts, c.store_q, &d, 1);
      } else {
        eval_op(np, np.tc, oi, cx, ts, c.store_q, nullptr, 1);
      }
    }
  }

  void store(const NestPlan& np, CState& st) {
    const auto& c = np.c;
    const auto& sl = s_.contracts[static_cast<std::size_t>(c.slot)];
    const auto& op = k_.ops[static_cast<std::size_t>(np.root_op)];
    std::vector<std::pair<int, int>> outs;  // (buffer spec, op index)
    if (c.c_footprint && (s_.tensor(op.out).role == ir::Role::output || stored_c(np)))
      outs.emplace_back(c.buf_c, np.root_op);
    for (std::size_t oi = 0; oi < np.tc.ops.size(); ++oi)
      if (np.tc.store[oi]) outs.emplace_back(np.tc.dst[oi], np.tc.ops[oi]);
    const int S = c.stat, M = 1 - c.stat;
    const auto uS = static_cast<std::size_t>(S), uM = static_cast<std::size_t>(M);
    const std::int64_t Lm = cc_.fp_store[uM] * c.tile[uM];
    const auto [s0, sn] = fp_range(st, c, S, c.store_level);
    const auto [m0, mn] = fp_range(st, c, M, c.store_level);
    const std::int64_t mstart = m0 * c.tile[uM];
    const std::int64_t mlen = std::min((m0 + mn) * c.tile[uM], sl.ext[uM]) - mstart;
    for (const auto& [spec, oi] : outs) {
      const auto& o = k_.ops[static_cast<std::size_t>(oi)];
      const int hb = hbm_of(o.out);
      const std::int64_t ss = stride_of(o.out, o.out_indices, sl.idx[uS]);
      const std::int64_t sm = sl.present[uM] ? stride_of(o.out, o.out_indices, sl.idx[uM]) : 0;
      std::int64_t base = 0;
      for (const auto& [x, v] : st.fixed) base += v * stride_of(o.out, o.out_indices, x);
      const int bid = buf(spec);
      const auto hap = [&](std::int64_t srow, std::int64_t rows, std::int64_t mst, std::int64_t mcount) {
        AccessPattern a;
        a.buffer = hb;
        a.offset = base + srow * ss + mst * sm;
        a.part_stride = ss;
        a.part_count = static_cast<std::int32_t>(rows);
        a.free_stride = {0, 0, s32(sm)};
        a.free_size = {1, 1, static_cast<std::int32_t>(mcount)};
        return a;
      };
      if (c.store_tr) {
        // stationary ... out=pe_transpose: per <= 128 columns of the moving index, every S tile of
        // the footprint goes through the PE array (nc_transpose into PSUM: [columns, rows]) and is
        // copied into a staging tile [columns, S rows of the footprint], which one DMA stores with
        // S, the output's contiguous index, along the free dim
        const std::int64_t slen = std::min((s0 + sn) * c.tile[uS], sl.ext[uS]) - s0 * c.tile[uS];
        const int tps = buf(c.buf_otpsum), stg = buf(c.buf_ostage);
        const std::int64_t pm = t_.pmax;
        for (std::int64_t ch = 0; ch * pm < mlen; ++ch) {
          const std::int64_t cols = std::min(pm, mlen - ch * pm);
          const int sslot = st.ostage_inst++;
          for (std::int64_t si = 0; si < sn; ++si) {
            const auto rows = tsize(c, sl, S, s0 + si);
            const int ps = st.otr_inst++;
            const AccessPattern tp = tile_ap(tps, ps, static_cast<int>(cols), 0, rows);
            Instr& in = compute(Opcode::nc_transpose, Engine::tensor, tp);
            in.src[0] = tile_ap(bid, st.store_inst, static_cast<int>(rows), si * Lm + ch * pm, cols);
            in.nsrc = 1;
            emit(in, 0);
            copy(c.evict, tile_ap(stg, sslot, static_cast<int>(cols), si * c.tile[uS], rows), tp);
          }
          AccessPattern d;
          d.buffer = hb;
          d.offset = base + (mstart + ch * pm) * sm + s0 * c.tile[uS] * ss;
          d.part_stride = sm;
          d.part_count = static_cast<std::int32_t>(cols);
          d.free_stride = {0, 0, s32(ss)};
          d.free_size = {1, 1, static_cast<std::int32_t>(slen)};
          dma(d, tile_ap(stg, sslot, static_cast<int>(cols), 0, slen), c.store_q);
        }
        continue;
      }
      for (std::int64_t si = 0; si < sn; ++si) {
        const std::int64_t stl = s0 + si;
        const auto rows = tsize(c, sl, S, stl);
        if (c.store_dma == DmaGran::region && rows == c.tile[uS] && sn > 1) {
          std::int64_t full = 0;
          while (si + full < sn && tsize(c, sl, S, s0 + si + full) == c.tile[uS]) ++full;
          AccessPattern d = hap(stl * c.tile[uS], rows, mstart, mlen);
          d.free_stride = {0, s32(c.tile[uS] * ss), s32(sm)};
          d.free_size = {1, static_cast<std::int32_t>(full), static_cast<std::int32_t>(mlen)};
          AccessPattern s = tile_ap(bid, st.store_inst, static_cast<int>(rows), si * Lm, mlen);
          s.free_stride = {0, s32(Lm), 1};
          s.free_size = {1, static_cast<std::int32_t>(full), static_cast<std::int32_t>(mlen)};
          dma(d, s, c.store_q);
          si += full - 1;
          continue;
        }
        if (c.store_dma == DmaGran::tile) {
          for (std::int64_t mi = 0; mi < mn; ++mi) {
            const auto mc = tsize(c, sl, M, m0 + mi);
            dma(hap(stl * c.tile[uS], rows, (m0 + mi) * c.tile[uM], mc),
                tile_ap(bid, st.store_inst, static_cast<int>(rows), si * Lm + mi * c.tile[uM], mc), c.store_q);
          }
        } else {
          dma(hap(stl * c.tile[uS], rows, mstart, mlen), tile_ap(bid, st.store_inst, static_cast<int>(rows), si * Lm, mlen),
              c.store_q);
        }
      }
    }
  }
  bool stored_c(const NestPlan& np) const {
    const auto& op = k_.ops[static_cast<std::size_t>(np.root_op)];
    for (std::size_t i = 0; i < k_.ops.size(); ++i) {
      if (std::find(np.ops.begin(), np.ops.end(), static_cast<int>(i)) != np.ops.end()) continue;
      std::vector<const ir::Expr*> nodes;
      schedule::preorder(k_.ops[i].expr, nodes);
      for (const auto* e : nodes)
        if (e->kind == ir::Expr::Kind::access && e->tensor == op.out) return true;
    }
    return false;
  }

  // ---- flash nests: QKᵀ, softmax and PV as one online-softmax loop (FlashAttention-2) ----
  // Per batch index and query-row tile: Qᵀ on chip, a running max m, running sum l and an fp32
  // accumulator; per kv tile: S = Q·Kᵀ into PSUM, the maps on the scores, m_new = max(m, rowmax),
  // corr = exp(m - m_new), e = exp(p - m_new), l = l·corr + rowsum(e), eᵀ through the PE array,
  // PV into PSUM, acc = acc·corr + PV; at the end the maps on PV's output (O = o / l) and the store.

  // Operand r of qk (0: the row operand Q, 1: the kv operand K), transposed to [d partitions, rows]
  // for each tile of qk's contracted index, into slot `slot` of its buffer (as contractions load).
  void flash_load_t(const NestPlan& np, int r, int slot, std::int64_t row0, std::int64_t rows,
                    const std::vector<std::pair<std::string, std::int64_t>>& fixed, int& nat_inst) {
    const auto& f = np.f;
    const auto& fs = s_.flashes[static_cast<std::size_t>(f.slot)];
    const auto ur = static_cast<std::size_t>(r);
    const int q = r == 0 ? fs.q_operand : 1 - fs.q_operand;
    const ir::Expr& acc = k_.ops[static_cast<std::size_t>(fs.qk)].expr.args[static_cast<std::size_t>(q)];
    const int hb = hbm_of(acc.tensor);
    const std::int64_t sk = stride_of(acc.tensor, acc.indices, fs.hd);
    const std::int64_t sr = stride_of(acc.tensor, acc.indices, r == 0 ? fs.row : fs.kv);
    std::int64_t base = 0;
    for (const auto& [x, v] : fixed) base += v * stride_of(acc.tensor, acc.indices, x);
    const std::int64_t tile = r == 0 ? f.tq : f.tkv;
    const int bid = buf(f.buf_t[ur]);
    const int queues = f.queues[ur];
    const std::int64_t pm = t_.pmax;
    for (std::int64_t dt = 0; dt < f.nk; ++dt) {
      const std::int64_t d0 = dt * f.tk, kr = std::min(f.tk, fs.ext_hd - d0);
      const AccessPattern dst = tile_ap(bid, slot, static_cast<int>(kr), dt * tile, rows);
      const auto hbm = [&](std::int64_t r0, std::int64_t n, bool natural) {
        AccessPattern a;
        a.buffer = hb;
        a.offset = base + d0 * sk + r0 * sr;
        a.part_stride = s32(natural ? sr : sk);
        a.part_count = static_cast<std::int32_t>(natural ? n : kr);
        a.free_stride = {0, 0, s32(natural ? sk : sr)};
        a.free_size = {1, 1, static_cast<std::int32_t>(natural ? kr : n)};
        return a;
      };
      const Transpose tr = f.tr[ur];
      if (tr == Transpose::none || tr == Transpose::strided) {
        dma(dst, hbm(row0, rows, false), queues);
      } else if (tr == Transpose::dma_transpose) {
        dma(dst, hbm(row0, rows, true), queues, true);
      } else {  // natural tile -> nc_transpose into PSUM (128 rows at a time) -> copy
        const int nat = buf(f.buf_nat[ur]), tps = buf(f.buf_tpsum[ur]);
        const int ns = nat_inst++;
        for (std::int64_t ch = 0; ch * pm < rows; ++ch) {
          const std::int64_t crow = std::min(pm, rows - ch * pm);
          const AccessPattern nd = tile_ap(nat, ns, static_cast<int>(crow), ch * f.tk, kr);
          dma(nd, hbm(row0 + ch * pm, crow, true), queues);
          Instr& in = compute(Opcode::nc_transpose, Engine::tensor, tile_ap(tps, ns, static_cast<int>(kr), ch * pm, crow));
          in.src[0] = nd;
          in.nsrc = 1;
          emit(in, 0);
        }
        copy(Engine::vector, dst, tile_ap(tps, ns, static_cast<int>(kr), 0, rows));
      }
    }
  }
  void matmul(const AccessPattern& dst, const AccessPattern& stat, const AccessPattern& mov, bool accumulate) {
    Instr& in = compute(Opcode::nc_matmul, Engine::tensor, dst);
    in.src[0] = stat;
    in.src[1] = mov;
    in.nsrc = 2;
    in.accumulate = accumulate;
    const std::int64_t fl = 2 * stat.part_count * stat.free_elems() * mov.free_elems();
    prog_.stats.matmul_flops += fl;
    emit(in, fl);
  }
  void reduce(Engine e, const AccessPattern& dst, const AccessPattern& src, ir::ReduceOp op, bool accumulate) {
    Instr& in = compute(Opcode::tensor_reduce, tt_engine(e), dst);
    in.src[0] = src;
    in.nsrc = 1;
    in.reduce = op;
    in.reduce_free_dims = 1;
    in.accumulate = accumulate;
    emit(in, src.elems());
  }
  void activation(ir::Fn fn, const AccessPattern& dst, const AccessPattern& x, const AccessPattern& bias) {
    Instr& in = compute(Opcode::activation, Engine::scalar, dst);
    in.src[0] = x;
    in.src[1] = bias;
    in.nsrc = 2;
    in.fn = fn;
    emit(in, dst.elems());
  }

  // Value ranges over a tile, to find kv tiles that the maps on the scores (a causal mask) set to
  // -inf for every row: such a tile adds exp(-inf) = 0 to l and nothing to the accumulator, and
  // leaves the running max alone, so it is skipped. Unknown values are [-inf, +inf], not exact.
  struct Range {
    double lo = -kInf, hi = kInf;
    bool exact = false;  // lo and hi are attained bounds (only then may they decide anything)
  };
  static Range exact_range(double lo, double hi) { return Range{lo, hi, true}; }
  Range range_of(const ir::Expr& e, const Ctx& c, const std::vector<std::pair<std::string, Range>>& vals) const {
    switch (e.kind) {
      case ir::Expr::Kind::constant: return exact_range(e.value, e.value);
      case ir::Expr::Kind::index:
        if (e.index == c.pidx) return exact_range(static_cast<double>(c.p0), static_cast<double>(c.p0 + c.P - 1));
        if (e.index == c.fidx) return exact_range(static_cast<double>(c.f0), static_cast<double>(c.f0 + c.F - 1));
        for (const auto& [n, v] : c.fixed)
          if (n == e.index) return exact_range(static_cast<double>(v), static_cast<double>(v));
        return Range{};
      case ir::Expr::Kind::access:
        for (const auto& [n, r] : vals)
          if (n == e.tensor) return r;
        return Range{};
      case ir::Expr::Kind::call: break;
    }
    std::vector<Range> a;
    for (const auto& x : e.args) a.push_back(range_of(x, c, vals));
    for (const auto& r : a)
      if (!r.exact) {
        if (e.fn == ir::Fn::select) break;  // a decided condition still picks one branch
        return Range{};
      }
    const auto cmp = [&](bool always, bool never) { return always ? exact_range(1, 1) : never ? exact_range(0, 0) : exact_range(0, 1); };
    switch (e.fn) {
      case ir::Fn::lt: return cmp(a[0].hi < a[1].lo, a[0].lo >= a[1].hi);
      case ir::Fn::le: return cmp(a[0].hi <= a[1].lo, a[0].lo > a[1].hi);
      case ir::Fn::gt: return cmp(a[0].lo > a[1].hi, a[0].hi <= a[1].lo);
      case ir::Fn::ge: return cmp(a[0].lo >= a[1].hi, a[0].hi < a[1].lo);
      case ir::Fn::select: {
        if (!a[0].exact) return Range{};
        if (a[0].lo == 0 && a[0].hi == 0) return a[2];
        if (a[0].lo > 0 || a[0].hi < 0) return a[1];
        if (!a[1].exact || !a[2].exact) return Range{};
        return exact_range(std::min(a[1].lo, a[2].lo), std::max(a[1].hi, a[2].hi));
      }
      default: break;
    }
    // other functions: only single values fold (e.g. -inf * scale = -inf)
    for (const auto& r : a)
      if (r.lo != r.hi) return Range{};
    const double v = fold(e.fn, a[0].lo, a.size() > 1 ? a[1].lo : 0);
    if (std::isnan(v)) return Range{};
    return exact_range(v, v);
  }
  bool flash_tile_masked(const NestPlan& np, const Ctx& c) const {
    if (np.tc.ops.empty()) return false;
    std::vector<std::pair<std::string, Range>> vals;
    for (int oi : np.tc.ops) {
      const auto& op = k_.ops[static_cast<std::size_t>(oi)];
      vals.emplace_back(op.out, range_of(op.expr, c, vals));
    }
    const Range& r = vals.back().second;
    return r.exact && r.hi == -kInf;
  }

  void flash_nest(const NestPlan& np) {
    const auto& f = np.f;
    const auto& fs = s_.flashes[static_cast<std::size_t>(f.slot)];
    const auto& qkop = k_.ops[static_cast<std::size_t>(fs.qk)];
    const auto& pvop = k_.ops[static_cast<std::size_t>(fs.pv)];
    const auto& os = s_.ops[static_cast<std::size_t>(fs.qk)];
    std::vector<std::int64_t> oext;
    for (const auto& x : fs.outer)
      for (std::size_t q = 0; q < os.idx.size(); ++q)
        if (os.idx[q] == x) oext.push_back(os.ext[q]);
    std::vector<std::int64_t> oc(fs.outer.size(), 0);
    const Engine e_mx = plan_.op_engine[static_cast<std::size_t>(fs.mx)];
    const Engine e_sum = plan_.op_engine[static_cast<std::size_t>(fs.sum)];
    const ir::Expr& vacc = pvop.expr.args[static_cast<std::size_t>(1 - fs.e_operand)];
    const int vhb = hbm_of(vacc.tensor);
    const std::int64_t sj = stride_of(vacc.tensor, vacc.indices, fs.kv), svd = stride_of(vacc.tensor, vacc.indices, fs.vd);
    const std::int64_t vd = fs.ext_vd, pm = t_.pmax;
    int it = 0, qi = 0, mslot = 0, tcount = 0;
    std::array<int, 2> nat{0, 0};
    while (true) {
      std::vector<std::pair<std::string, std::int64_t>> fixed;
      std::int64_t vbase = 0;
      for (std::size_t q = 0; q < fs.outer.size(); ++q) {
        fixed.emplace_back(fs.outer[q], oc[q]);
        vbase += oc[q] * stride_of(vacc.tensor, vacc.indices, fs.outer[q]);
      }
      for (std::int64_t qt = 0; qt < f.nq; ++qt, ++qi) {
        const std::int64_t i0 = qt * f.tq;
        const int P = static_cast<int>(std::min(f.tq, fs.ext_row - i0));
        flash_load_t(np, 0, qi, i0, P, fixed, nat[0]);
        const AccessPattern lap = tile_ap(buf(f.buf_l), qi, P, 0, 1);
        const AccessPattern acc = tile_ap(buf(f.buf_acc), qi, P, 0, vd);
        AccessPattern m_old, corr;
        bool started = false;
        for (std::int64_t kt = 0; kt < f.nkv; ++kt, ++it) {
          const std::int64_t j0 = kt * f.tkv, J = std::min(f.tkv, fs.ext_kv - j0);
          Ctx mc;
          mc.pidx = fs.row;
          mc.fidx = fs.kv;
          mc.p0 = i0;
          mc.f0 = j0;
          mc.P = P;
          mc.F = J;
          mc.fixed = fixed;
          // a tile masked out for every row is skipped (not the last one of a row tile none of
          // whose tiles ran: that row's softmax is then the reference's 0/0)
          if (flash_tile_masked(np, mc) && (started || kt + 1 < f.nkv)) continue;
          const bool first = !started;
          started = true;
          flash_load_t(np, 1, it, j0, J, fixed, nat[1]);
          for (std::int64_t ch = 0; ch * pm < J; ++ch) {  // V, kv rows on partitions
            const std::int64_t crow = std::min(pm, J - ch * pm);
            AccessPattern src;
            src.buffer = vhb;
            src.offset = vbase + (j0 + ch * pm) * sj;
            src.part_stride = s32(sj);
            src.part_count = static_cast<std::int32_t>(crow);
            src.free_stride = {0, 0, s32(svd)};
            src.free_size = {1, 1, static_cast<std::int32_t>(vd)};
            dma(tile_ap(buf(f.buf_v), it, static_cast<int>(crow), ch * vd, vd), src, f.queues[2]);
          }
          // S = Q·Kᵀ over the tiles of the contracted index
          const AccessPattern sps = tile_ap(buf(f.buf_spsum), it, P, 0, J);
          for (std::int64_t dt = 0; dt < f.nk; ++dt) {
            const int kr = static_cast<int>(std::min(f.tk, fs.ext_hd - dt * f.tk));
            matmul(sps, tile_ap(buf(f.buf_t[0]), qi, kr, dt * f.tq, P), tile_ap(buf(f.buf_t[1]), it, kr, dt * f.tkv, J), dt > 0);
          }
          // the maps on the scores (scale, mask) on the [rows, kv] tile read S straight from PSUM
          // unless one of them runs on GpSimd (which cannot access PSUM); else S is evicted first
          const bool from_psum = f.s_in_psum;
          const AccessPattern ssb = from_psum ? sps : tile_ap(buf(f.buf_s), it, P, 0, J);
          if (!from_psum) copy(f.evict, ssb, sps);
          AccessPattern pap = ssb;
          if (!np.tc.ops.empty()) {
            const Ctx& c = mc;  // the same [rows, kv] tile the mask test saw
            TileState ts;
            ts.slot = it;
            ts.values.emplace_back(qkop.out, Val{false, 0, ssb, true});
            for (std::size_t oi = 0; oi < np.tc.ops.size(); ++oi) eval_op(np, np.tc, oi, c, ts, f.queues[0], nullptr, 1);
            pap = ts.values.back().second.ap;
          }
          // running max: m_new = max(m_old, rowmax(p)); corr = exp(m_old - m_new)
          const AccessPattern m_new = tile_ap(buf(f.buf_m), mslot++, P, 0, 1);
          if (first) {
            reduce(e_mx, m_new, pap, ir::ReduceOp::max, false);
          } else {
            const AccessPattern rmax = tile_ap(buf(f.buf_rmax), it, P, 0, 1);
            reduce(e_mx, rmax, pap, ir::ReduceOp::max, false);
            tensor_tensor(e_mx, m_new, m_old, rmax, ir::Fn::max);
          }
          // negm = -max(m_new, -FLT_MAX): a row with no visible key yet (its max still -inf, in a
          // tile other rows keep from being skipped) gets e = corr = 0, not exp(-inf + inf) = NaN
          const AccessPattern negm = tile_ap(buf(f.buf_negm), it, P, 0, 1);
          tensor_scalar(e_mx, negm, m_new, ir::Fn::max, Val{true, -static_cast<double>(std::numeric_limits<float>::max()), {}, false},
                        false, true, ir::Fn::mul, -1.0);
          if (!first) {
            corr = tile_ap(buf(f.buf_corr), it, P, 0, 1);
            activation(ir::Fn::exp, corr, m_old, negm);
          }
          // e = exp(p - m_new); l = l·corr + rowsum(e)
          const AccessPattern eap = tile_ap(buf(f.buf_e), it, P, 0, J);
          activation(ir::Fn::exp, eap, pap, negm);
          if (!first) tensor_scalar(e_sum, lap, lap, ir::Fn::mul, Val{false, 0, corr, false}, false);
          reduce(e_sum, lap, eap, ir::ReduceOp::sum, !first);
          // eᵀ (kv on partitions, 128 rows at a time) and PV into PSUM
          const AccessPattern pvps = tile_ap(buf(f.buf_pvpsum), it, P, 0, vd);
          for (std::int64_t ch = 0; ch * pm < J; ++ch) {
            const int crow = static_cast<int>(std::min(pm, J - ch * pm));
            const AccessPattern tp = tile_ap(buf(f.buf_etpsum), tcount++, crow, 0, P);
            Instr& in = compute(Opcode::nc_transpose, Engine::tensor, tp);
            in.src[0] = tile_ap(buf(f.buf_e), it, P, ch * pm, crow);
            in.nsrc = 1;
            emit(in, 0);
            const AccessPattern et = tile_ap(buf(f.buf_et), it, crow, ch * f.tq, P);
            copy(Engine::vector, et, tp);
            matmul(pvps, et, tile_ap(buf(f.buf_v), it, crow, ch * vd, vd), ch > 0);
          }
          // acc = acc·corr + PV
          if (first) {
            copy(Engine::vector, acc, pvps);
          } else {
            tensor_scalar(Engine::vector, acc, acc, ir::Fn::mul, Val{false, 0, corr, false}, false);
            tensor_tensor(Engine::vector, acc, acc, pvps, ir::Fn::add);
          }
          m_old = m_new;
        }
        // the delayed division (the maps on PV's output), cast and store
        Ctx c;
        c.pidx = fs.row;
        c.fidx = fs.vd;
        c.p0 = i0;
        c.f0 = 0;
        c.P = P;
        c.F = vd;
        c.fixed = fixed;
        // pv's output and the row statistics, when they leave the nest: cast, then stored
        const auto leave = [&](int spec, const AccessPattern& src, int op) {
          if (spec < 0) return;
          const auto& o = k_.ops[static_cast<std::size_t>(op)];
          const AccessPattern out = tile_ap(buf(spec), qi, P, 0, src.free_size[2]);
          copy(Engine::vector, out, src);
          store_tile(o.out, o.out_indices, out, c, f.queues[0]);
        };
        leave(f.buf_out, acc, fs.pv);
        leave(f.buf_mx_out, m_old, fs.mx);
        leave(f.buf_l_out, lap, fs.sum);
        {
          TileState ts;
          ts.slot = qi;
          ts.values.emplace_back(pvop.out, Val{false, 0, acc, true});
          ts.values.emplace_back(k_.ops[static_cast<std::size_t>(fs.mx)].out, Val{false, 0, m_old, false});
          ts.values.emplace_back(k_.ops[static_cast<std::size_t>(fs.sum)].out, Val{false, 0, lap, false});
          for (std::size_t oi = 0; oi < f.post.ops.size(); ++oi) {
            eval_op(np, f.post, oi, c, ts, f.queues[0], nullptr, 1);
            const auto& op = k_.ops[static_cast<std::size_t>(f.post.ops[oi])];
            if (f.post.store[oi]) store_tile(op.out, op.out_indices, ts.values.back().second.ap, c, f.queues[0]);
          }
        }
      }
      if (!next(oc, oext)) break;
    }
  }

  int fold_slot_ = 0;  // rotation of fold's product tiles
  std::vector<std::pair<std::string, AccessPattern>> win_;  // windows loaded for the current output tile (VectorPlan::window)
  const schedule::ScheduleSpace& sp_;
  const schedule::SpaceImpl& s_;
  const ir::Kernel& k_;
  const target::Target& t_;
  const schedule::Plan& plan_;
  TileProgram& prog_;
  detail::Builder b_;
  std::vector<int> hbm_;
  std::vector<int> bufmap_;
  int nest_ = 0;
  unsigned queue_ = 0;
  int epi_iter_ = 0;
  const NestPlan* cur_ = nullptr;
};

}  // namespace

Expected<void, Invalid> lower_into(const schedule::ScheduleSpace& space, const Genome& g, TileProgram& p) {
  // Start from an empty program but keep the vectors' capacity: a caller that lowers many genomes
  // into one program object allocates (and page-faults) its instruction storage once.
  p.buffers.clear();
  p.instrs.clear();
  p.dep_begin.clear();
  p.deps.clear();
  p.group_names.clear();
  p.stats = {};
  auto plan = schedule::make_plan(space, g);
  if (!plan) return unexpected(std::move(plan.error()));
  p.kernel_name = space.kernel().name;
  p.target_name = space.target().name;
  p.schedule_text = space.print(g);
  try {
    // A program that may outgrow the instruction limit is counted first, without checks or
    // dependency tracking: a too-large schedule is then rejected at a fraction of the cost.
    const std::size_t mm = Lowerer::matmuls(*plan);
    if (mm >= detail::Builder::kMaxInstructions) throw detail::Builder::TooLarge{false};
    std::size_t exact = 0;
    if (4 * mm > detail::Builder::kMaxInstructions) {
      TileProgram scratch;
      exact = Lowerer(space, *plan, scratch).count();
    }
    Lowerer lw(space, *plan, p);
    lw.run(exact);
  } catch (const detail::Builder::TooLarge& t) {
    // NKI unrolls every loop: such a program is not a usable kernel
    if (t.readers)
      return unexpected(Invalid{"too_large", fmt::format("the program exceeds {} reader records after {} instructions (many small "
                                                         "reads of large regions; use larger tiles or coarser DMA)",
                                                         detail::Builder::kMaxReaderRecords, p.instrs.size())});
    if (t.edges)
      return unexpected(Invalid{"too_large", fmt::format("the program exceeds {} dependency edges after {} instructions (many small "
                                                         "transfers each waiting on many readers; use larger tiles or coarser DMA)",
                                                         detail::Builder::kMaxDependencies, p.instrs.size())});
    return unexpected(Invalid{"too_large", fmt::format("the program exceeds {} instructions (every loop is unrolled; use larger tiles "
                                                       "or coarser DMA)",
                                                       detail::Builder::kMaxInstructions)});
  } catch (detail::Builder::Rejected& r) {
    // every instruction is checked against the target's rules as it is emitted (check_instr)
    return unexpected(std::move(r.why));
  }
  p.stats.sbuf_bytes_per_partition = plan->sbuf_peak;
  p.stats.psum_bytes_per_partition = plan->psum_peak;
  p.stats.instructions = p.instrs.size();
  return {};
}

Expected<std::size_t, Invalid> count_instructions(const schedule::ScheduleSpace& space, const Genome& g) {
  auto plan = schedule::make_plan(space, g);
  if (!plan) return unexpected(std::move(plan.error()));
  const std::size_t mm = Lowerer::matmuls(*plan);
  if (mm > kMaxInstructions) return kMaxInstructions + 1;
  TileProgram scratch;
  try {
    return Lowerer(space, *plan, scratch).count();
  } catch (const detail::Builder::TooLarge&) {
    return kMaxInstructions + 1;
  }
}

Expected<TileProgram, Invalid> lower(const schedule::ScheduleSpace& space, const Genome& g) {
  TileProgram p;
  if (auto done = lower_into(space, g, p); !done) return unexpected(std::move(done.error()));
  return p;
}

}  // namespace kevo::lower
