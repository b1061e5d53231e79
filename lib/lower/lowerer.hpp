// Private to the lower module: the Lowerer, which unrolls a plan (kevo/schedule/detail/plan.hpp)
// into a tile program. Its shared state, buffers, instruction helpers and the tile evaluation of
// map/reduce ops are defined here and in lowerer.cpp; each nest kind's walk (lower_<kind>) is
// defined in that kind's folder, lib/nests/<kind>/lower.cpp, and dispatched by walk_nests through
// the kind list of lib/nests/kinds.hpp.
#pragma once
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>

#include "builder.hpp"
#include "kevo/ir/fn.hpp"
#include "kevo/lower/lower.hpp"
#include "kevo/schedule/detail/plan.hpp"
#include "nests/kinds.hpp"

namespace kevo::lower::detail {

using schedule::BufSpec;
using schedule::ContractPlan;
using schedule::DmaGran;
using schedule::NestKind;
using schedule::NestPlan;
using schedule::Transpose;
using target::Engine;

inline constexpr double kInf = std::numeric_limits<double>::infinity();

inline double fold(ir::Fn f, double a, double b) {
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
      : sp_(sp),
        s_(sp.impl()),
        k_(sp.scheduled_kernel()),
        t_(sp.target()),
        plan_(plan),
        prog_(prog),
        b_(prog, sp.target()),
        qload_(static_cast<std::size_t>(std::max(0, sp.target().dma_queues)), 0.0) {}

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
  void run(std::size_t exact = 0);

 private:
  void walk_nests();
  // One walk per nest kind (lib/nests/kinds.hpp): lower_<kind>, defined in lib/nests/<kind>/lower.cpp.
#define KEVO_LOWER_DECL(kind) void lower_##kind(const NestPlan& np);
  KEVO_NEST_KINDS(KEVO_LOWER_DECL)
#undef KEVO_LOWER_DECL

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
    b.dtype = bs.dtype;  // PSUM: fp32, but a PE transpose's tile has its input's dtype (nki.isa.nc_transpose)
    b.partitions = bs.partitions;
    b.free_elems = bs.free_elems;
    b.nbufs = bs.nbufs;
    b.shape = {bs.partitions, bs.free_elems};
    return b_.add_buffer(std::move(b));
  }
  int buf(int spec) const { return bufmap_[static_cast<std::size_t>(spec)]; }
  // the program buffer of a plan's per-dtype staging list for dt (schedule::buf_for), or -1
  int buf(const std::vector<std::pair<ir::DType, int>>& per_dtype, ir::DType dt) const {
    const int spec = schedule::buf_for(per_dtype, dt);
    return spec < 0 ? -1 : buf(spec);
  }
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
  // A transfer, split along partitions over `queues` consecutive DMA queues (take_queues); anything
  // the prologue still holds (held_) is issued first.
  std::uint32_t dma(const AccessPattern& dst, const AccessPattern& src, int queues, bool transpose = false);
  // The instructions of one transfer, its pieces on the queues from `queue` on.
  std::uint32_t put_dma(const AccessPattern& dst, const AccessPattern& src, int queues, bool transpose, unsigned queue);
  // How many pieces a transfer of `parts` partitions splits into over `queues` queues; their
  // partition counts differ by at most one (put_dma), so no piece is a runt of the others (72 rows
  // over 16 queues: 8 of 5 and 8 of 4). A transpose's piece keeps two partitions or more where
  // the transfer has them: its partitions are the source's contiguous run along each source row,
  // and a one-partition piece reads every source element alone (docs/SIMULATOR.md, "DMA"). Where
  // the DMA engines transpose in blocks (Target::dma_transpose_block_elems: all of them write one
  // [128, 16] block of the destination together), a transpose is one piece: split by partitions,
  // every piece would pay whole blocks for a share of their partitions.
  int dma_pieces(int parts, int queues, bool transpose) const {
    if (transpose && t_.dma_transposes_in_blocks()) return 1;
    int q = std::max(1, std::min(queues, parts));
    if (transpose && parts >= 2) q = std::min(q, parts / 2);
    return q;
  }
  // The first of the consecutive queues a transfer's pieces take: the window whose busiest queue has
  // the fewest bytes placed so far, the first such from the round-robin pointer on, so transfers of
  // equal size still take turns and unequal ones leave the queues evenly loaded. On hardware the
  // runtime spreads an instruction's descriptors over the engines itself (docs/SIMULATOR.md, "DMA
  // queue placement"); taking queues strictly in turn put up to 1.6x the mean bytes on one queue
  // of a narrow matmul's, and the model then paced the kernel by that queue. Where the engines
  // transpose in blocks, all of them work on one transpose at a time, so every transpose takes
  // the transposes' own queue (Target::dma_transpose_queue, after the copies' dma_queues): they
  // run one after another, in program order where they are ready (docs/SIMULATOR.md, "DMA
  // transposes"), and no copy waits in that queue's order for a transpose it does not read (with
  // the transposes on queue 0, a held prologue piece of B placed there before A's transposes were
  // made waited for them: 1536x1536x660's first matmul 3.3 us late).
  unsigned take_queues(const AccessPattern& dst, int queues, bool transpose) {
    if (transpose && t_.dma_transposes_in_blocks()) return static_cast<unsigned>(t_.dma_transpose_queue());
    const int p = dma_pieces(dst.part_count, queues, transpose);
    const auto nq = static_cast<unsigned>(t_.dma_queues);
    const double per = static_cast<double>(dst.elems() * static_cast<std::int64_t>(ir::dtype_bytes(B(dst.buffer).dtype))) / p;
    unsigned best = queue_ % nq;
    double best_load = std::numeric_limits<double>::infinity();
    for (unsigned o = 0; o < nq; ++o) {
      const unsigned s = (queue_ + o) % nq;
      double l = 0;
      for (unsigned i = 0; i < static_cast<unsigned>(p); ++i) l = std::max(l, qload_[(s + i) % nq]);
      if (l < best_load) {
        best_load = l;
        best = s;
      }
    }
    for (unsigned i = 0; i < static_cast<unsigned>(p); ++i) qload_[(best + i) % nq] += per;
    queue_ = best + static_cast<unsigned>(p);
    return best;
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
  // The engine a tensor_scalar of `fn` (then `fn1`, unless null) given to `e` runs on: `e` where
  // the target's engine runs those operators (target::runs_tensor_scalar), else the Vector engine.
  Engine ts_engine(Engine e, ir::Fn fn, const ir::Fn* fn1) const;

  void tensor_tensor(Engine e, const AccessPattern& dst, const AccessPattern& a, const AccessPattern& b, ir::Fn fn) {
    Instr& in = compute(Opcode::tensor_tensor, tt_engine(e), dst);
    in.src[0] = a;
    in.src[1] = b;
    in.nsrc = 2;
    in.fn = fn;
    emit(in, dst.elems());
  }
  // dst = fn1(x fn s0, y) (nki.isa.scalar_tensor_tensor, the Vector engine's; s0 fn x with reverse)
  void scalar_tensor_tensor(const AccessPattern& dst, const AccessPattern& x, ir::Fn fn, const Val& s0, bool reverse,
                            ir::Fn fn1, const AccessPattern& y) {
    Instr& in = compute(Opcode::scalar_tensor_tensor, Engine::vector, dst);
    in.src[0] = x;
    in.src[1] = y;
    in.nsrc = 2;
    if (s0.imm) in.imm0 = s0.v;
    else {
      in.src[2] = s0.ap;
      in.nsrc = 3;
    }
    in.fn = fn;
    in.reverse0 = reverse;
    in.fn1 = fn1;
    emit(in, 2 * dst.elems());
  }
  // dst = (x fn s0) [fn1 s1]; with s1 (nki.isa.tensor_scalar's op1 and operand1), s0 must be a
  // [P, 1] value wherever s1 is one (the instruction's operands are src[1] then src[2])
  void tensor_scalar(Engine e, const AccessPattern& dst, const AccessPattern& x, ir::Fn fn, const Val& s0, bool reverse,
                     const Val* s1 = nullptr, ir::Fn fn1 = ir::Fn::add);
  // dst[f][p] = src[p][f] through the PE array (nc_transpose on the Tensor engine, into PSUM)
  void pe_transpose(const AccessPattern& dst, const AccessPattern& src) {
    Instr& in = compute(Opcode::nc_transpose, Engine::tensor, dst);
    in.src[0] = src;
    in.nsrc = 1;
    emit(in, 0);
  }
  void copy(Engine e, const AccessPattern& dst, const AccessPattern& src) {
    if (!t_.engine(e).tensor_copy) {  // NeuronCore-v2's Scalar engine: an identity activation (nl.copy)
      activation(ir::Fn::cast, dst, src, AccessPattern{});
      return;
    }
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
    std::vector<std::size_t> summed;  // reduce ops (tc indices) whose sums an earlier op's activation wrote
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
  ShiftedTile shifted_tile(const ir::Expr& acc, const Ctx& c, bool wide, const schedule::WindowGeom* win = nullptr);
  // Loads access `e` into the tile `dst`: one DMA, or for a shifted access a memset of the
  // tile to zero (`pad halo`: of its out-of-range border only) and one DMA of its in-range part
  // (none when all of it lies outside).
  // A vector nest's load of a plain input whose innermost index is the partition index
  // (schedule::transposed_load), by the nest's `transpose` gene: one DMA transpose, or natural
  // [F, P] loads through the PE array into PSUM and a copy into dst (VectorPlan::transpose).
  void load_transposed(const NestPlan& np, const AccessPattern& dst, const ir::Expr& e, const Ctx& c, int queues, Engine eng);
  // A vector nest whose partition index is reduced (VectorPlan::p_reduced), and the combination
  // of one output tile's partials across the partitions (lib/nests/vector/lower.cpp).
  void lower_vector_partials(const NestPlan& np);
  void combine_partials(const NestPlan& np, std::size_t oi, const Ctx& c, int acc_slot, std::int64_t reduce_count);
  void load_access(const AccessPattern& dst, const ir::Expr& e, const Ctx& c, bool wide, int queues, Engine eng,
                   const schedule::WindowGeom* win = nullptr);

  // The window of access `e` for the current output tile (VectorPlan::window), loaded at its
  // first use in the tile with the reduce index at 0.
  AccessPattern window(const ir::Expr& e, const std::string& key, int spec, const schedule::WindowGeom& geom, const Ctx& c,
                       const TileState& st, int queues, Engine eng);

  // `window fold` (VectorPlan::fold): the root reduction of one access or a product of two, on
  // [P, F, taps] views of the windows: one multiply and one tensor_reduce over the taps per chunk
  // of columns, the next chunk's multiply issued ahead of this chunk's reduce when the products
  // rotate over two or more slots; `hold psum` copies the filter into PSUM first.
  void fold_root(const NestPlan& np, const schedule::TileCompute& tc, std::size_t oi, const Ctx& c, TileState& st,
                 int queues);

  AccessPattern hbm_tile(const ir::Expr& acc, const Ctx& c, bool wide);

  Val eval(const NestPlan& np, const schedule::TileCompute& tc, std::size_t oi, const std::vector<const ir::Expr*>& nodes,
           std::size_t& q, const Ctx& c, TileState& st, const AccessPattern* root_dst, Engine eng, int queues);

  void binop(Engine eng, ir::Fn fn, const Val& x, const Val& y, const Val& out, const Ctx& c);

  // An expression of the indices that is affine on a tile: k + p * (partition position) + f * (free
  // position), from index values, constants, +, -, and products with a constant; nullopt otherwise.
  struct AffineIdx {
    double k = 0;
    std::int64_t p = 0, f = 0;
  };
  std::optional<AffineIdx> affine_index(const ir::Expr& e, const Ctx& c) const;

  // An activation dst = fn(x * scale + bias) (bias: the [P, 1] tile `bias` when valid, else
  // `imm`). When it is an op's root, covers a whole tile's free extent `F` and row_sums_ is set,
  // it also writes the row sums there (reduce_res) and sets row_summed_.
  void activation_at(const AccessPattern& dst, const AccessPattern& x, ir::Fn fn, double scale, double imm,
                     const AccessPattern& bias, bool root, std::int64_t F);
  // The reduce op (tc index) after `oi` whose body is op `oi`'s value and that one activation's
  // row sums can compute (a sum or mean over the free index alone, in one step), or npos.
  std::size_t summed_by_activation(const NestPlan& np, const schedule::TileCompute& tc, std::size_t oi, const Ctx& c,
                                   const TileState& st) const;
  // A reduce op's body value `v` folded into its accumulator `acc` (tensor_reduce along the free
  // index, elementwise otherwise; the first step copies or overwrites)
  void fold_into(Engine eng, const ir::Op& op, const Val& v, const AccessPattern& acc, bool along_f, bool has_f,
                 const schedule::TileCompute& tc, std::size_t oi, const Ctx& c, const TileState& st);

  template <class Temp>
  Val select(const schedule::TileCompute& tc, std::size_t oi, std::size_t me, std::vector<Val>& args, const Ctx& c,
             TileState& st, Temp&& temp, Engine eng, bool cond_01) {
    const Val& cond = args[0];
    const Val& a = args[1];
    const Val& bv = args[2];
    bool wide = false;
    for (const auto& v : args) wide = wide || (!v.imm && v.wide);
    Val out{false, 0, temp(wide), wide};
    if (cond.imm) {  // constant condition: pick a branch
      const Val& pick = cond.v != 0 ? a : bv;
      if (pick.imm) binop(eng, ir::Fn::add, pick, Val{true, 0, {}, false}, out, c);
      else copy(tt_engine(eng), out.ap, out.wide && !pick.wide ? widen(pick.ap, c.F) : pick.ap);
      return out;
    }
    AccessPattern cw = out.wide && !cond.wide ? widen(cond.ap, c.F) : cond.ap;
    // A select picks, it does not blend: out = b, then a copied over it where the condition is
    // not zero (nki.isa.tensor_copy_predicated), so a NaN or infinity in the branch not taken
    // never reaches the result (select(x > 0, log(x), 0) is 0 at x = -1, as the reference says;
    // a*c + b*(1-c) made it NaN). The predicate is 0 or 1: a comparison's own result (`cond_01`:
    // the compare node's buffer, read by nothing else), else the condition compared with zero.
    AccessPattern pred = cw;
    if (!cond_01) {
      pred = tile_ap(buf(tc.sel_buf[oi][me]), st.slot, c.P, 0, wide ? c.F : 1);
      tensor_scalar(eng, pred, cw, ir::Fn::ne, Val{true, 0.0, {}, false}, false);
    }
    if (bv.imm) binop(eng, ir::Fn::add, bv, Val{true, 0, {}, false}, out, c);
    else copy(tt_engine(eng), out.ap, out.wide && !bv.wide ? widen(bv.ap, c.F) : bv.ap);
    AccessPattern av;
    if (!a.imm) {
      av = out.wide && !a.wide ? widen(a.ap, c.F) : a.ap;
      // "src and dst must share the same data type" (nki.isa.tensor_copy_predicated): a branch
      // of another dtype is converted into the select's dtype first (the planner's conv_buf)
      if (const int cv = tc.conv_buf[oi][me]; cv >= 0 && B(av.buffer).dtype != B(out.ap.buffer).dtype &&
                                              B(buf(cv)).dtype == B(out.ap.buffer).dtype) {
        const AccessPattern conv = tile_ap(buf(cv), st.slot, c.P, 0, out.wide ? c.F : 1);
        copy(tt_engine(eng), conv, av);
        av = conv;
      }
    }
    Instr& in = compute(Opcode::tensor_copy_predicated, Engine::vector, out.ap);
    in.src[0] = pred;
    in.nsrc = 1;
    if (a.imm) {
      in.imm0 = a.v;
    } else {
      in.src[1] = av;
      in.nsrc = 2;
    }
    emit(in, 0);
    return out;
  }

  // Evaluates one op of a tile computation into its destination; `store_dst` is where a stored
  // map value goes (a staging footprint for epilogues), or nullptr for the op's own rotating tile.
  void eval_op(const NestPlan& np, const schedule::TileCompute& tc, std::size_t oi, const Ctx& c, TileState& st,
               int queues, const AccessPattern* dst_override, std::int64_t reduce_count);

  void store_tile(const std::string& tensor, const std::vector<std::string>& out_idx, const AccessPattern& src, const Ctx& c,
                  int queues);

  // ---- vector nests ----
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
    int evictions = 0;  // PSUM -> SBUF copies so far (evict alternate: even ones on Vector, odd on Scalar)
    std::vector<std::pair<std::string, std::int64_t>> fixed;
    bool first_outer = false;  // the first iteration of the nest's outer (batch) indices
    bool stored = false;       // the current block ran tile by tile (rest tiles) and is stored already
  };
  // The engine of the nest's next PSUM -> SBUF copy.
  static target::Engine evict_engine(const ContractPlan& c, CState& st) {
    if (!c.evict_alternate) return c.evict;
    return st.evictions++ % 2 == 0 ? target::Engine::vector : target::Engine::scalar;
  }

  // Per-nest constants of a contraction, computed once (the walk is hot).
  struct CCache {
    std::array<int, 3> pb{-1, -1, -1}, pt{-1, -1, -1};
    std::array<std::array<std::int64_t, 3>, 2> fp_load{};
    std::array<std::int64_t, 3> fp_psum{}, fp_store{};
    std::array<int, 2> hb{-1, -1};
    std::array<std::int64_t, 2> sk{0, 0}, sq{0, 0};
    std::array<std::vector<std::int64_t>, 2> outer_stride;
    // a convolution (ContractSlot::taps): each operand's access and HBM shape (tap_place)
    std::array<const ir::Expr*, 2> acc{nullptr, nullptr};
    std::array<std::vector<std::int64_t>, 2> shape;
    // an operand that no outer (batch) index moves: loaded at the root, it is loaded once, by the
    // nest's first outer iteration, and read there by the others (weights of a convolution whose
    // output rows loop outside the nest; a matrix shared by a batch)
    std::array<bool, 2> shared{false, false};
    // rows interleave_out|_all where the stationary operand's free index is contiguous in HBM
    // (A stored [K, M], layout=tn) and loaded without a transpose a block at a time: an
    // interleaved block lands on chip in its natural order, one run per k row, and the matmul
    // reads output tile t of the block as every J-th column from column t (a strided stationary
    // view) instead of the load gathering every J-th element, a DMA descriptor per element
    bool s_natural = false;
    // kedge slices (ContractPlan::kedge_slices): the partial last k tile `kedge` (-1: none) of
    // `kedge_rows` rows runs in row tiles of `kslice` PE rows, `kslices` of them over the k
    // tile's partitions; every load of its rows is copied into each row tile's partitions
    std::int64_t kedge = -1;
    std::int64_t kedge_rows = 0;
    int kslice = 0, kslices = 0;
    // sedge slices (ContractPlan::sedge_slices): the stationary's partial last tile `sedge` (-1:
    // none) runs in column tiles of `scol` PE columns, `scols` of them over the tile's partitions
    std::int64_t sedge = -1;
    int scol = 0, scols = 0;
  } cc_;
  // The partition output tile (gs, gm) starts at in PSUM and in its SBUF staging tile: 0, or under
  // sedge slices for the stationary's edge tile, the first partition of its column tile (moving
  // tile gm's, in turn).
  std::int64_t scol0(std::int64_t gs, std::int64_t gm) const {
    return cc_.scols > 1 && gs == cc_.sedge ? gm % cc_.scols * cc_.scol : 0;
  }
  int kslice_next_ = 0;  // the row tile the next edge matmul takes (in turn, so that neighbours overlap)
  void cache_contract(const NestPlan& np);

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


  void level_begin(const NestPlan& np, CState& st, int level);
  void level_end(const NestPlan& np, CState& st, int level) {
    if (np.c.load_level[0] == level || np.c.load_level[1] == level) release(-1);
    if (np.c.store_level == level) {
      if (!st.stored) store(np, st);
      st.stored = false;
    }
  }
  // rest tiles (ContractPlan::rest_tiles): one block, one output tile at a time, each over every
  // k block and stored as it finishes
  void by_tiles(const NestPlan& np, CState& st, int pos);

  // The prologue in order of first use. The DMA transfers of each operand's first load of a nest
  // (its first rotation slot: no compute is running yet that they could overlap) are held here
  // and issued just before the first matmul that reads them, so the queues fetch what the first
  // matmuls need before the rest of a large hoisted footprint (docs/SCHEDULE.md, "Prologue").
  // A held transfer keeps the queue it would have had, and every other DMA (a store, a later
  // load, which may wait on compute) first releases everything still held: held transfers move
  // only past compute instructions, never behind a transfer that could block their queue. Later
  // instances are issued whole at their level, where they prefetch under the previous slot's
  // compute. The emitter writes the program in this order, so the NKI kernel asks the hardware
  // for exactly what kevo simulates.
  struct HeldDma {
    AccessPattern dst, src;
    int queues = 1;
    bool transpose = false;
    int operand = 0;
    std::int64_t k0 = 0, kn = 0, q0 = 0, qn = 0;  // the k tiles and operand tiles it covers
    unsigned queue = 0;                            // its first DMA queue, taken when it was made
  };
  std::vector<HeldDma> held_;
  bool hold_ = false;  // set by load() while it emits a first instance
  int hold_queues_ = 0;  // > 0 (prologue spread): the queues each held transfer is split over
  // Emits operand q's transfer covering k tiles [k0, k0+kn) and q tiles [q0, q0+qn), or holds it.
  void load_dma(int q, const AccessPattern& dst, const AccessPattern& src, int queues, bool transpose, std::int64_t k0,
                std::int64_t kn, std::int64_t q0, std::int64_t qn) {
    if (hold_ && hold_queues_ > 0) queues = hold_queues_;
    // the edge k tile under kedge slices: a copy of its rows at the start of every row tile
    const int copies = cc_.kslices > 1 && kn == 1 && k0 == cc_.kedge && dst.part_count == cc_.kedge_rows ? cc_.kslices : 1;
    for (int j = 0; j < copies; ++j) {
      AccessPattern d = dst;
      d.offset += static_cast<std::int64_t>(j) * cc_.kslice * dst.part_stride;
      if (hold_) held_.push_back({d, src, queues, transpose, q, k0, kn, q0, qn, take_queues(d, queues, transpose)});
      else dma(d, src, queues, transpose);
    }
  }
  // Issues the held transfers that cover tile (kt, tq) of operand q — or, with q < 0, all of
  // them — in the order they were made.
  void release(int q, std::int64_t kt = -1, std::int64_t tq = -1) {
    std::size_t keep = 0;
    for (std::size_t i = 0; i < held_.size(); ++i) {
      const HeldDma& d = held_[i];
      if (q < 0 || (d.operand == q && kt >= d.k0 && kt < d.k0 + d.kn && tq >= d.q0 && tq < d.q0 + d.qn))
        put_dma(d.dst, d.src, d.queues, d.transpose, d.queue);
      else
        held_[keep++] = d;
    }
    held_.resize(keep);
  }

  void walk(const NestPlan& np, CState& st, int pos);

  // Loads operand q's footprint at its level into the next rotation slot.
  void load(const NestPlan& np, CState& st, int q);
  // A convolution's operand q at k tile kt (ContractSlot::taps): the HBM offset of the tile's first
  // k row at q element 0, and the q elements [lo, hi) whose positions lie inside every dim of the
  // operand (the rest read as zero; lo >= hi: none).
  struct TapPlace {
    std::int64_t offset = 0, lo = 0, hi = 0;
  };
  TapPlace tap_place(const ContractPlan& c, const schedule::ContractSlot& sl, const CState& st, int q, std::int64_t kt) const;
  // load() for a convolution: per k tile, its tap's rows, zeroes where the operand reads outside.
  void load_taps(const NestPlan& np, CState& st, int q, int slot);

  void body(const NestPlan& np, CState& st);

  AccessPattern c_tile(const NestPlan& np, CState& st, int spec, std::int64_t gs, std::int64_t gm, std::int64_t ssz,
                       std::int64_t msz, bool footprint);

  void evict(const NestPlan& np, CState& st, const AccessPattern& ps, std::int64_t gs, std::int64_t gm, std::int64_t ssz,
             std::int64_t msz);

  // Stores the footprint at the store level, or with `only_s`/`only_m` >= 0 one output tile of it
  // (rest tiles).
  void store(const NestPlan& np, CState& st, std::int64_t only_s = -1, std::int64_t only_m = -1);
  bool stored_c(const NestPlan& np) const;

  // ---- flash nests: QKᵀ, softmax and PV as one online-softmax loop (FlashAttention-2) ----
  // Per batch index and query-row tile: Qᵀ on chip, a running max m, running sum l and an fp32
  // accumulator; per kv tile: S = Q·Kᵀ into PSUM, the maps on the scores, m_new = max(m, rowmax),
  // corr = exp(m - m_new), e = exp(p - m_new), l = l·corr + rowsum(e), eᵀ through the PE array,
  // PV into PSUM, acc = acc·corr + PV; at the end the maps on PV's output (O = o / l) and the store.

  // Operand r of qk (0: the row operand Q, 1: the kv operand K), transposed to [d partitions, rows]
  // for each tile of qk's contracted index, into slot `slot` of its buffer (as contractions load).
  void flash_load_t(const NestPlan& np, int r, int slot, std::int64_t row0, std::int64_t rows,
                    const std::vector<std::pair<std::string, std::int64_t>>& fixed, int& nat_inst);
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
  // on the Vector engine, whatever engine the op was given: "Apply a reduction operation to the
  // free axes of an input data tile using Vector Engine" (nki.isa.tensor_reduce takes no engine)
  void reduce(const AccessPattern& dst, const AccessPattern& src, ir::ReduceOp op, bool accumulate) {
    Instr& in = compute(Opcode::tensor_reduce, Engine::vector, dst);
    in.src[0] = src;
    in.nsrc = 1;
    in.reduce = op;
    in.reduce_free_dims = 1;
    in.accumulate = accumulate;
    emit(in, src.elems());
  }
  // dst = fn(x * scale + bias), the bias the [P, 1] tile `bias` when valid, else `imm`; with a
  // valid `sums`, also the row sums of dst there (reduce_res)
  void activation(ir::Fn fn, const AccessPattern& dst, const AccessPattern& x, const AccessPattern& bias,
                  const AccessPattern& sums = {}, double scale = 1.0, double imm = 0.0) {
    Instr& in = compute(Opcode::activation, Engine::scalar, dst);
    in.src[0] = x;
    in.nsrc = 1;
    if (bias.valid()) {
      in.src[1] = bias;
      in.nsrc = 2;
    } else {
      in.imm0 = imm;
    }
    in.scale = scale;
    in.fn = fn;
    if (sums.valid()) {
      in.reduce = ir::ReduceOp::sum;
      in.reduce_res() = sums;
    }
    emit(in, dst.elems() * (sums.valid() ? 2 : 1));
  }

  // One tile of an online softmax (flash and online nests), on the tile's rows `x`:
  // m_new = max(m_old, rowmax(x)) (the first tile: m_new = rowmax(x)); negm = -max(m_new, -FLT_MAX)
  // (a row with no finite value yet gets e = corr = 0, not exp(-inf + inf) = NaN); corr =
  // exp(m_old - m_new); e = exp(x - m_new) with its row sums from the same activation (landing in
  // `rmax` after m_new has read it); l = those sums (first tile) or l·corr + them, one
  // two-operation tensor_scalar. `rmax` and `corr` are [P, 1] work tiles; returns corr (invalid on
  // the first tile). With `c` (> 0) the exponent is scaled after the subtraction, e = exp((x -
  // m_new)·c) (FlashSlot::exp_scale): negm = -c·max(m_new, -FLT_MAX), and both activations take
  // scale c (nki.isa.activation computes fn(data·scale + bias)).
  AccessPattern online_softmax_step(Engine e_mx, Engine e_sum, bool first, const AccessPattern& x, const AccessPattern& m_old,
                                    const AccessPattern& m_new, const AccessPattern& rmax, const AccessPattern& negm,
                                    const AccessPattern& corr, const AccessPattern& e, const AccessPattern& l, double c = 1.0);

  // Value ranges over a tile, to find kv tiles that the maps on the scores (a causal mask) set to
  // -inf for every row: such a tile adds exp(-inf) = 0 to l and nothing to the accumulator, and
  // leaves the running max alone, so it is skipped. Unknown values are [-inf, +inf], not exact.
  struct Range {
    double lo = -kInf, hi = kInf;
    bool exact = false;  // lo and hi are attained bounds (only then may they decide anything)
  };
  static Range exact_range(double lo, double hi) { return Range{lo, hi, true}; }
  Range range_of(const ir::Expr& e, const Ctx& c, const std::vector<std::pair<std::string, Range>>& vals) const;
  bool flash_tile_masked(const NestPlan& np, const Ctx& c) const;


  int fold_slot_ = 0;  // rotation of fold's product tiles
  // where the next root activation writes its row sums (reduce_res), and whether one did
  const AccessPattern* row_sums_ = nullptr;
  bool row_summed_ = false;
  int tr_slot_ = 0;    // rotation of a vector nest's PE-transpose staging and PSUM tiles (load_transposed)
  std::vector<std::pair<std::string, AccessPattern>> resident_;  // the current nest's resident loads (VectorPlan::resident)
  std::vector<std::pair<std::string, std::int64_t>> cols_loaded_;  // (key, first column) of ContractPlan::resident_cols loaded
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
  unsigned queue_ = 0;            // round-robin pointer: where the last transfer's queues ended
  std::vector<double> qload_;     // bytes placed on each DMA queue so far (take_queues)
  int epi_iter_ = 0;
  const NestPlan* cur_ = nullptr;
};

}  // namespace kevo::lower::detail
