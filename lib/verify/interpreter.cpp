// The tile-program interpreter. The constructor validates every operand once and turns each
// instruction into a Plan (collapsed strided nests, matrix maps); execute() then runs plans
// without checks. Elementwise instructions run row by row: each operand row is either contiguous,
// a broadcast scalar (stride 0) or gathered into a thread-local scratch row, so the arithmetic
// loops are plain contiguous loops the compiler vectorises. nc_matmul maps its operands as Eigen
// matrices, which Eigen hands to OpenBLAS's sgemm when kevo is built with it.
#include "kevo/verify/interpreter.hpp"

#include <fmt/format.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <numeric>

#if defined(__SSE2__) || defined(KEVO_VERIFY_MVEC)
#include <immintrin.h>
#endif

#include "kevo/core/error.hpp"
#include "plan.hpp"
#include "scalar.hpp"

#ifdef KEVO_VERIFY_OPENBLAS
#include <cstdlib>
extern "C" {
void openblas_set_num_threads(int) __attribute__((weak));
int openblas_get_num_threads(void) __attribute__((weak));
char* openblas_get_corename(void) __attribute__((weak));
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}
#endif

namespace kevo::verify {

using lower::AccessPattern;
using lower::Instr;
using lower::Opcode;
using detail::Kind;
using detail::MatOperand;
using detail::Nest;
using detail::Plan;
using detail::Round;
using detail::Walk;

std::string_view opcode_name(Opcode op) noexcept {
  return lower::to_string(op);
}

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::int64_t buffer_elements(const lower::Buffer& b) {
  if (b.mem == lower::Memory::hbm) {
    std::int64_t n = 1;
    for (auto s : b.shape) n *= s;
    return n;
  }
  return std::int64_t{b.partitions} * b.free_elems * b.nbufs;
}

std::string ap_shape(const AccessPattern& a) {
  return fmt::format("[{} x {}x{}x{}]", a.part_count, a.free_size[0], a.free_size[1], a.free_size[2]);
}

bool same_shape(const AccessPattern& a, const AccessPattern& b) {
  return a.part_count == b.part_count && a.free_size == b.free_size;
}

// ---- construction-time helpers ---------------------------------------------------------------

struct Validator {
  const lower::TileProgram& p;
  const std::vector<std::int64_t>& elems;
  std::size_t i = 0;

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(fmt::format("instruction {} ({}): {}", i, opcode_name(p.instrs[i].op), what));
  }

  void check_ap(const AccessPattern& a, const char* operand) const {
    if (a.buffer < 0 || static_cast<std::size_t>(a.buffer) >= p.buffers.size())
      fail(fmt::format("{}: buffer index {} out of range (program has {} buffers)", operand, a.buffer, p.buffers.size()));
    if (a.part_count < 1 || a.free_size[0] < 1 || a.free_size[1] < 1 || a.free_size[2] < 1)
      fail(fmt::format("{}: empty access pattern {}", operand, ap_shape(a)));
    std::int64_t lo = a.offset, hi = a.offset;
    auto span = [&](std::int64_t stride, std::int64_t n) {
      const std::int64_t ext = stride * (n - 1);
      if (ext < 0) lo += ext; else hi += ext;
    };
    span(a.part_stride, a.part_count);
    for (int d = 0; d < 3; ++d) span(a.free_stride[d], a.free_size[d]);
    const auto& b = p.buffers[a.buffer];
    if (lo < 0 || hi >= elems[a.buffer])
      fail(fmt::format("{}: elements [{}, {}] of {} outside buffer {} '{}' ({} elements)", operand, lo, hi, ap_shape(a),
                       a.buffer, b.name, elems[a.buffer]));
  }

  void check_dst_not_broadcast(const AccessPattern& a) const {
    if ((a.part_count > 1 && a.part_stride == 0) || (a.free_size[0] > 1 && a.free_stride[0] == 0) ||
        (a.free_size[1] > 1 && a.free_stride[1] == 0) || (a.free_size[2] > 1 && a.free_stride[2] == 0))
      fail(fmt::format("dst: stride 0 along a dimension of size > 1 (several values to one element) {}", ap_shape(a)));
  }
};

// Collapses the (p, f0, f1, f2) space of `nops` operands sharing the shape of ops[0].
// `scalar[o]`: operand o is a [P,1] per-partition operand broadcast along the free dims.
Nest make_nest(const AccessPattern* const* ops, const bool* scalar, int nops) {
  const AccessPattern& s = *ops[0];
  std::int64_t n[4] = {s.part_count, s.free_size[0], s.free_size[1], s.free_size[2]};
  std::int64_t st[4][detail::kMaxOps] = {};
  for (int o = 0; o < nops; ++o) {
    st[0][o] = ops[o]->part_stride;
    for (int d = 0; d < 3; ++d) st[d + 1][o] = scalar[o] ? 0 : ops[o]->free_stride[d];
  }
  Nest nest;
  nest.nops = nops;
  for (int o = 0; o < nops; ++o) {
    nest.buf[o] = ops[o]->buffer;
    nest.off[o] = ops[o]->offset;
  }
  // keep dims of size > 1, outermost first
  int keep[4], nk = 0;
  for (int d = 0; d < 4; ++d)
    if (n[d] > 1) keep[nk++] = d;
  // merge from the inside out
  std::int64_t cn[4];
  std::int64_t cst[4][detail::kMaxOps];
  int nc = 0;
  for (int k = nk - 1; k >= 0; --k) {
    const int d = keep[k];
    if (nc > 0) {
      bool mergeable = true;
      for (int o = 0; o < nops; ++o)
        if (st[d][o] != cst[nc - 1][o] * cn[nc - 1]) mergeable = false;
      if (mergeable) {
        cn[nc - 1] *= n[d];
        continue;
      }
    }
    cn[nc] = n[d];
    for (int o = 0; o < nops; ++o) cst[nc][o] = st[d][o];
    ++nc;
  }
  nest.nd = nc;
  for (int k = 0; k < nc; ++k) {  // reverse into outermost-first order
    nest.n[k] = cn[nc - 1 - k];
    for (int o = 0; o < nops; ++o) nest.st[k][o] = cst[nc - 1 - k][o];
  }
  return nest;
}

Walk make_walk(const AccessPattern& a) {
  Walk w;
  w.buf = a.buffer;
  w.off = a.offset;
  w.n[0] = a.part_count;
  w.st[0] = a.part_stride;
  for (int d = 0; d < 3; ++d) {
    w.n[d + 1] = a.free_size[d];
    w.st[d + 1] = a.free_stride[d];
  }
  return w;
}

// The free dims of `a` as one strided run (n, stride) if they collapse, else false.
bool free_run(const AccessPattern& a, std::int64_t& n, std::int64_t& stride) {
  n = 1;
  stride = 1;
  bool have = false;
  for (int d = 2; d >= 0; --d) {
    if (a.free_size[d] == 1) continue;
    if (!have) {
      n = a.free_size[d];
      stride = a.free_stride[d];
      have = true;
    } else if (a.free_stride[d] == stride * n) {
      n *= a.free_size[d];
    } else {
      return false;
    }
  }
  return true;
}

MatOperand make_mat(const AccessPattern& a) {
  MatOperand m;
  m.buf = a.buffer;
  m.off = a.offset;
  m.rows = a.part_count;
  m.cols = a.free_elems();
  std::int64_t n = 0, stride = 0;
  m.outer = a.part_count > 1 ? a.part_stride : m.cols;
  m.direct = free_run(a, n, stride) && (stride == 1 || m.cols == 1) && m.outer >= m.cols;
  m.walk = make_walk(a);
  return m;
}

// ---- run-time helpers ------------------------------------------------------------------------

struct Scratch {
  std::vector<float> v;
  float* get(std::size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
  }
};
thread_local Scratch tls_rows;
thread_local Scratch tls_mats;

template <Round R>
inline float rnd(float x) noexcept {
  if constexpr (R == Round::none) return x;
  else if constexpr (R == Round::bf16) return detail::round_bf16(x);
  else if constexpr (R == Round::fp16) return detail::round_fp16(x);
  else if constexpr (R == Round::fp8_e4m3) return detail::round_fp8(x);
  else return detail::round_fp8fn(x);
}

template <class F>
inline void with_round(Round r, F&& f) {
  switch (r) {
    case Round::none: f(std::integral_constant<Round, Round::none>{}); break;
    case Round::bf16: f(std::integral_constant<Round, Round::bf16>{}); break;
    case Round::fp16: f(std::integral_constant<Round, Round::fp16>{}); break;
    case Round::fp8_e4m3: f(std::integral_constant<Round, Round::fp8_e4m3>{}); break;
    case Round::fp8_e4m3fn: f(std::integral_constant<Round, Round::fp8_e4m3fn>{}); break;
  }
}

// Runs `row(ptr[], stride[], n)` over every innermost row of a nest.
template <class Row>
inline void run_nest(const Nest& ns, float* const* bufs, Row&& row) {
  float* base[detail::kMaxOps] = {};
  for (int o = 0; o < ns.nops; ++o) base[o] = bufs[ns.buf[o]] + ns.off[o];
  if (ns.nd == 0) {
    static constexpr std::int64_t zero[detail::kMaxOps] = {};
    row(base, zero, std::int64_t{1});
    return;
  }
  const int in = ns.nd - 1;
  // outer dims right-aligned into three loops
  std::int64_t on[3] = {1, 1, 1};
  std::int64_t ost[3][detail::kMaxOps] = {};
  for (int k = 0; k < in; ++k) {
    const int slot = 3 - in + k;
    on[slot] = ns.n[k];
    for (int o = 0; o < ns.nops; ++o) ost[slot][o] = ns.st[k][o];
  }
  float* ptr[detail::kMaxOps] = {};
  for (std::int64_t a = 0; a < on[0]; ++a)
    for (std::int64_t b = 0; b < on[1]; ++b)
      for (std::int64_t c = 0; c < on[2]; ++c) {
        for (int o = 0; o < ns.nops; ++o) ptr[o] = base[o] + a * ost[0][o] + b * ost[1][o] + c * ost[2][o];
        row(ptr, ns.st[in], ns.n[in]);
      }
}

// Visits every element offset of a walk in (p, f0, f1, f2) order.
template <class F>
inline void walk_each(const Walk& w, F&& f) {
  for (std::int64_t a = 0; a < w.n[0]; ++a)
    for (std::int64_t b = 0; b < w.n[1]; ++b)
      for (std::int64_t c = 0; c < w.n[2]; ++c) {
        const std::int64_t base = w.off + a * w.st[0] + b * w.st[1] + c * w.st[2];
        for (std::int64_t d = 0; d < w.n[3]; ++d) f(base + d * w.st[3]);
      }
}

// A source row seen as contiguous data or as one broadcast value.
struct Opd {
  const float* p = nullptr;  // null: scalar v
  float v = 0;
};
inline Opd view(const float* src, std::int64_t stride, std::int64_t n, float* tmp) {
  if (stride == 1 || n == 1) return {src, 0};
  if (stride == 0) return {nullptr, *src};
  for (std::int64_t i = 0; i < n; ++i) tmp[i] = src[i * stride];
  return {tmp, 0};
}

template <ir::Fn F>
inline void bin_loop(float* o, Opd a, Opd b, std::int64_t n) {
  if (a.p && b.p) {
    for (std::int64_t i = 0; i < n; ++i) o[i] = detail::apply_binary(F, a.p[i], b.p[i]);
  } else if (a.p) {
    const float y = b.v;
    for (std::int64_t i = 0; i < n; ++i) o[i] = detail::apply_binary(F, a.p[i], y);
  } else if (b.p) {
    const float x = a.v;
    for (std::int64_t i = 0; i < n; ++i) o[i] = detail::apply_binary(F, x, b.p[i]);
  } else {
    const float r = detail::apply_binary(F, a.v, b.v);
    std::fill(o, o + n, r);
  }
}

void binary_row(ir::Fn fn, float* o, Opd a, Opd b, std::int64_t n) {
  using ir::Fn;
  switch (fn) {
#define KEVO_BIN(F) \
  case Fn::F: bin_loop<Fn::F>(o, a, b, n); return;
    KEVO_BIN(add) KEVO_BIN(sub) KEVO_BIN(mul) KEVO_BIN(div) KEVO_BIN(max) KEVO_BIN(min)
    KEVO_BIN(lt) KEVO_BIN(le) KEVO_BIN(gt) KEVO_BIN(ge) KEVO_BIN(eq) KEVO_BIN(ne)
#undef KEVO_BIN
    default: std::fill(o, o + n, kNaN);
  }
}

template <ir::Fn F>
inline void un_loop(float* o, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) o[i] = detail::apply_unary(F, o[i]);
}

void unary_row(ir::Fn fn, float* o, std::int64_t n) {
  using ir::Fn;
  switch (fn) {
    case Fn::cast: return;
#define KEVO_UN(F) \
  case Fn::F: un_loop<Fn::F>(o, n); return;
    KEVO_UN(exp) KEVO_UN(log) KEVO_UN(tanh) KEVO_UN(gelu_tanh) KEVO_UN(gelu_erf) KEVO_UN(silu) KEVO_UN(relu)
    KEVO_UN(sigmoid) KEVO_UN(rsqrt) KEVO_UN(sqrt) KEVO_UN(square) KEVO_UN(abs) KEVO_UN(neg) KEVO_UN(reciprocal)
#undef KEVO_UN
    default: std::fill(o, o + n, kNaN);
  }
}

// out[i] = f(x[i] * scale + b): the affine step and the function in one loop (no switch per
// element; the function is a template argument). out may equal x.
template <ir::Fn F>
inline void act_loop(float* o, const float* x, float scale, float b, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) o[i] = detail::apply_unary(F, x[i] * scale + b);
}

#ifdef KEVO_VERIFY_MVEC
// glibc's libmvec (the SSE variants, 4 lanes, baseline x86-64): expf within 3 ulp and tanhf within
// 1.1 ulp of the exact result over the whole float range (scalar glibc: 0.5 and 2.1 ulp), 3-4x
// faster. NaN and infinities follow the scalar functions. Every element goes through the vector
// function (the tail row padded), so a value never depends on its position in the row.
extern "C" __m128 _ZGVbN4v_expf(__m128);   // NOLINT(bugprone-reserved-identifier)
extern "C" __m128 _ZGVbN4v_tanhf(__m128);  // NOLINT(bugprone-reserved-identifier)

// f(a[0..3]) with the formulas of ir/fn.hpp, exp and tanh taken from libmvec.
template <ir::Fn F>
inline void vec4(const float* a, float* out) noexcept {
  using ir::Fn;
  float t[4], r[4];
  if constexpr (F == Fn::exp || F == Fn::tanh) {
    _mm_storeu_ps(r, F == Fn::exp ? _ZGVbN4v_expf(_mm_loadu_ps(a)) : _ZGVbN4v_tanhf(_mm_loadu_ps(a)));
    for (int j = 0; j < 4; ++j) out[j] = r[j];
  } else if constexpr (F == Fn::gelu_tanh) {
    // x / (1 + exp(-2u)), as ir::fn_apply_unary (no 1 + tanh u to cancel for negative x)
    const float c = static_cast<float>(0.7978845608028654);  // sqrt(2/pi)
    for (int j = 0; j < 4; ++j) t[j] = -2.0f * c * (a[j] + 0.044715f * a[j] * a[j] * a[j]);
    _mm_storeu_ps(r, _ZGVbN4v_expf(_mm_loadu_ps(t)));
    for (int j = 0; j < 4; ++j) out[j] = a[j] / (1 + r[j]);
  } else {  // sigmoid, silu: exp(-x)
    for (int j = 0; j < 4; ++j) t[j] = -a[j];
    _mm_storeu_ps(r, _ZGVbN4v_expf(_mm_loadu_ps(t)));
    for (int j = 0; j < 4; ++j) out[j] = F == Fn::silu ? a[j] / (1 + r[j]) : 1 / (1 + r[j]);
  }
}

template <ir::Fn F>
void act_loop_vec(float* o, const float* x, float scale, float b, std::int64_t n) {
  std::int64_t i = 0;
  float a[4], r[4];
  for (; i + 4 <= n; i += 4) {
    for (int j = 0; j < 4; ++j) a[j] = x[i + j] * scale + b;
    vec4<F>(a, o + i);
  }
  if (i < n) {
    const int m = static_cast<int>(n - i);
    for (int j = 0; j < 4; ++j) a[j] = j < m ? x[i + j] * scale + b : 0.0f;
    vec4<F>(a, r);
    for (int j = 0; j < m; ++j) o[i + j] = r[j];
  }
}
#endif

void activation_row(ir::Fn fn, float* o, const float* x, float scale, float b, std::int64_t n) {
  using ir::Fn;
#ifdef KEVO_VERIFY_MVEC
  switch (fn) {
    case Fn::exp: act_loop_vec<Fn::exp>(o, x, scale, b, n); return;
    case Fn::tanh: act_loop_vec<Fn::tanh>(o, x, scale, b, n); return;
    case Fn::gelu_tanh: act_loop_vec<Fn::gelu_tanh>(o, x, scale, b, n); return;
    case Fn::sigmoid: act_loop_vec<Fn::sigmoid>(o, x, scale, b, n); return;
    case Fn::silu: act_loop_vec<Fn::silu>(o, x, scale, b, n); return;
    default: break;
  }
#endif
  switch (fn) {
#define KEVO_ACT(F) \
  case Fn::F: act_loop<Fn::F>(o, x, scale, b, n); return;
    KEVO_ACT(cast) KEVO_ACT(exp) KEVO_ACT(log) KEVO_ACT(tanh) KEVO_ACT(gelu_tanh) KEVO_ACT(gelu_erf) KEVO_ACT(silu)
    KEVO_ACT(relu) KEVO_ACT(sigmoid) KEVO_ACT(rsqrt) KEVO_ACT(sqrt) KEVO_ACT(square) KEVO_ACT(abs) KEVO_ACT(neg)
    KEVO_ACT(reciprocal)
#undef KEVO_ACT
    default: std::fill(o, o + n, kNaN);
  }
}

// Writes the fp32 row `v` to dst (stride ds) with rounding. v may equal dst when ds == 1.
template <Round R>
inline void store_row(float* dst, std::int64_t ds, const float* v, std::int64_t n) {
  if (ds == 1) {
    if constexpr (R == Round::none) {
      if (dst != v) std::memmove(dst, v, static_cast<std::size_t>(n) * sizeof(float));
    } else {
      for (std::int64_t i = 0; i < n; ++i) dst[i] = rnd<R>(v[i]);
    }
  } else {
    for (std::int64_t i = 0; i < n; ++i) dst[i * ds] = rnd<R>(v[i]);
  }
}

void store_row_any(Round r, float* dst, std::int64_t ds, const float* v, std::int64_t n) {
  with_round(r, [&](auto R) { store_row<decltype(R)::value>(dst, ds, v, n); });
}

// ---- per-opcode execution --------------------------------------------------------------------

// dst[i][j] = src[j][i]-shaped copies (a strided "transposing" DMA: the destination runs
// contiguously where the source jumps rows) go through 16x16 blocks so both sides stay in cache.
template <Round r>
bool copy_transposing(const Nest& ns, float* const* bufs) {
  if (ns.nd != 2 || ns.st[1][0] != 1 || ns.st[0][1] != 1 || ns.st[1][1] == 1 || ns.n[0] < 16 || ns.n[1] < 16)
    return false;
  float* d = bufs[ns.buf[0]] + ns.off[0];
  const float* s = bufs[ns.buf[1]] + ns.off[1];
  const std::int64_t n0 = ns.n[0], n1 = ns.n[1], ds0 = ns.st[0][0], ss1 = ns.st[1][1];
  constexpr std::int64_t B = 16;
  for (std::int64_t i0 = 0; i0 < n0; i0 += B)
    for (std::int64_t j0 = 0; j0 < n1; j0 += B) {
      const std::int64_t ie = std::min(i0 + B, n0), je = std::min(j0 + B, n1);
      for (std::int64_t i = i0; i < ie; ++i)
        for (std::int64_t j = j0; j < je; ++j) d[i * ds0 + j] = rnd<r>(s[i + j * ss1]);
    }
  return true;
}

inline bool overlaps(const float* a, const float* b, std::int64_t n) noexcept {
  return a < b + n && b < a + n;
}

constexpr std::int64_t kStreamMin = 1024;  // elements per row worth streaming (4 KiB)

// d[0..n) = s[0..n) with non-temporal stores (SSE2, baseline x86-64); exact copy.
inline void stream_row(float* d, const float* s, std::int64_t n) noexcept {
#if defined(__SSE2__)
  std::int64_t i = 0;
  for (; i < n && (reinterpret_cast<std::uintptr_t>(d + i) & 15u) != 0; ++i) d[i] = s[i];
  for (; i + 4 <= n; i += 4) _mm_stream_ps(d + i, _mm_loadu_ps(s + i));
  for (; i < n; ++i) d[i] = s[i];
#else
  std::memmove(d, s, static_cast<std::size_t>(n) * sizeof(float));
#endif
}

void exec_copy(const Plan& pl, float* const* bufs) {
#if defined(__SSE2__)
  const bool stream = pl.stream_dst && pl.nest.nd >= 1 && pl.nest.n[pl.nest.nd - 1] >= kStreamMin;
#else
  const bool stream = false;
#endif
  with_round(pl.round, [&](auto R) {
    constexpr Round r = decltype(R)::value;
    if (copy_transposing<r>(pl.nest, bufs)) return;
    run_nest(pl.nest, bufs, [&](float* const* p, const std::int64_t* s, std::int64_t n) {
      float* d = p[0];
      const float* src = p[1];
      if constexpr (r == Round::none) {
        if (s[0] == 1 && s[1] == 1) {
          if (stream && !overlaps(d, src, n)) stream_row(d, src, n);
          else std::memmove(d, src, static_cast<std::size_t>(n) * sizeof(float));
          return;
        }
      }
      if (s[0] == 1 && s[1] == 1) {
        for (std::int64_t i = 0; i < n; ++i) d[i] = rnd<r>(src[i]);
      } else {
        const std::int64_t ds = s[0], ss = s[1];
        for (std::int64_t i = 0; i < n; ++i) d[i * ds] = rnd<r>(src[i * ss]);
      }
    });
  });
#if defined(__SSE2__)
  if (stream) _mm_sfence();
#endif
}

void exec_copy_walk(const Plan& pl, float* const* bufs) {
  // Shapes differ: gather the source in its own order, then scatter in the destination's.
  const std::int64_t total = pl.w_src.n[0] * pl.w_src.n[1] * pl.w_src.n[2] * pl.w_src.n[3];
  float* tmp = tls_mats.get(static_cast<std::size_t>(total));
  const float* src = bufs[pl.w_src.buf];
  std::int64_t k = 0;
  walk_each(pl.w_src, [&](std::int64_t off) { tmp[k++] = src[off]; });
  float* dst = bufs[pl.w_dst.buf];
  k = 0;
  with_round(pl.round, [&](auto R) {
    walk_each(pl.w_dst, [&](std::int64_t off) { dst[off] = rnd<decltype(R)::value>(tmp[k++]); });
  });
}

void exec_memset(const Plan& pl, const Instr& in, float* const* bufs) {
  const float v = detail::round_value(pl.round, static_cast<float>(in.imm0));
  run_nest(pl.nest, bufs, [&](float* const* p, const std::int64_t* s, std::int64_t n) {
    if (s[0] == 1) {
      std::fill(p[0], p[0] + n, v);
    } else {
      for (std::int64_t i = 0; i < n; ++i) p[0][i * s[0]] = v;
    }
  });
}

// dst = src[1] (or imm0) where the predicate src[0] is not zero; dst keeps its value elsewhere.
void exec_tensor_copy_predicated(const Plan& pl, const Instr& in, float* const* bufs) {
  const bool imm = in.nsrc < 2;
  const float v = detail::round_value(pl.round, static_cast<float>(in.imm0));
  run_nest(pl.nest, bufs, [&](float* const* p, const std::int64_t* s, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i)
      if (p[1][i * s[1]] != 0.0f) p[0][i * s[0]] = imm ? v : detail::round_value(pl.round, p[2][i * s[2]]);
  });
}

void exec_tensor_tensor(const Plan& pl, const Instr& in, float* const* bufs) {
  run_nest(pl.nest, bufs, [&](float* const* p, const std::int64_t* s, std::int64_t n) {
    float* t = tls_rows.get(static_cast<std::size_t>(3 * n));
    const Opd a = view(p[1], s[1], n, t);
    const Opd b = view(p[2], s[2], n, t + n);
    float* out = s[0] == 1 ? p[0] : t + 2 * n;
    binary_row(in.fn, out, a, b, n);
    store_row_any(pl.round, p[0], s[0], out, n);
  });
}

void exec_tensor_scalar(const Plan& pl, const Instr& in, float* const* bufs) {
  run_nest(pl.nest, bufs, [&](float* const* p, const std::int64_t* s, std::int64_t n) {
    float* t = tls_rows.get(static_cast<std::size_t>(4 * n));
    const Opd x = view(p[1], s[1], n, t);
    const Opd s0 = in.nsrc >= 2 ? view(p[2], s[2], n, t + n) : Opd{nullptr, static_cast<float>(in.imm0)};
    float* out = s[0] == 1 ? p[0] : t + 3 * n;
    if (in.reverse0) binary_row(in.fn, out, s0, x, n);
    else binary_row(in.fn, out, x, s0, n);
    if (in.has_op1) {
      const Opd s1 = in.nsrc >= 3 ? view(p[3], s[3], n, t + 2 * n) : Opd{nullptr, static_cast<float>(in.imm1)};
      binary_row(in.fn1, out, Opd{out, 0}, s1, n);
    }
    store_row_any(pl.round, p[0], s[0], out, n);
  });
}

void exec_scalar_tensor_tensor(const Plan& pl, const Instr& in, float* const* bufs) {
  run_nest(pl.nest, bufs, [&](float* const* p, const std::int64_t* s, std::int64_t n) {
    float* t = tls_rows.get(static_cast<std::size_t>(4 * n));
    const Opd x = view(p[1], s[1], n, t);
    const Opd y = view(p[2], s[2], n, t + n);
    const Opd s0 = in.nsrc >= 3 ? view(p[3], s[3], n, t + 2 * n) : Opd{nullptr, static_cast<float>(in.imm0)};
    // the first operator's row is written before the second reads src[1]: not into src[1] itself
    float* out = s[0] == 1 && y.p != p[0] ? p[0] : t + 3 * n;
    if (in.reverse0) binary_row(in.fn, out, s0, x, n);
    else binary_row(in.fn, out, x, s0, n);
    binary_row(in.fn1, out, Opd{out, 0}, y, n);
    store_row_any(pl.round, p[0], s[0], out, n);
  });
}

void exec_activation(const Plan& pl, const Instr& in, float* const* bufs) {
  const float scale = static_cast<float>(in.scale);
  if (pl.red_op >= 0) {  // the row sums accumulate unrounded, over every row of a partition
    float* rr = bufs[pl.w_red.buf];
    walk_each(pl.w_red, [&](std::int64_t off) { rr[off] = 0.0f; });
  }
  run_nest(pl.nest, bufs, [&](float* const* p, const std::int64_t* s, std::int64_t n) {
    float* t = tls_rows.get(static_cast<std::size_t>(3 * n));
    const Opd x = view(p[1], s[1], n, t);
    const Opd bias = in.nsrc >= 2 ? view(p[2], s[2], n, t + n) : Opd{nullptr, static_cast<float>(in.imm0)};
    float* out = s[0] == 1 ? p[0] : t + 2 * n;
    const float* xp = x.p;
    if (!xp) {
      std::fill(out, out + n, x.v);
      xp = out;
    }
    // One pass f(x * scale + bias) per function when out and x are the same row or disjoint;
    // a partially overlapping in-place row keeps the two passes (affine, then f) it always had.
    if (!bias.p && (out == xp || out + n <= xp || xp + n <= out)) {
      activation_row(in.fn, out, xp, scale, bias.v, n);
    } else {
      if (bias.p) {
        for (std::int64_t i = 0; i < n; ++i) out[i] = xp[i] * scale + bias.p[i];
      } else {
        const float b = bias.v;
        for (std::int64_t i = 0; i < n; ++i) out[i] = xp[i] * scale + b;
      }
      unary_row(in.fn, out, n);
    }
    if (pl.red_op >= 0) {
      // the sums' stride along the row: 0 within one partition; else (no free dim left to
      // iterate) the row runs down the partitions, one element each
      const std::int64_t rs = s[pl.red_op];
      if (rs == 0) {
        float r = 0.0f;
        for (std::int64_t i = 0; i < n; ++i) r += out[i];
        *p[pl.red_op] += r;
      } else {
        for (std::int64_t i = 0; i < n; ++i) p[pl.red_op][i * rs] += out[i];
      }
    }
    store_row_any(pl.round, p[0], s[0], out, n);
  });
  if (pl.red_op >= 0) {
    float* rr = bufs[pl.w_red.buf];
    with_round(pl.red_round, [&](auto R) { walk_each(pl.w_red, [&](std::int64_t off) { rr[off] = rnd<decltype(R)::value>(rr[off]); }); });
  }
}

void exec_transpose(const Plan& pl, const std::vector<std::int64_t>& tables, float* const* bufs) {
  const float* src = bufs[pl.src_buf];
  float* dst = bufs[pl.w_dst.buf];
  const std::int64_t* stab = tables.data() + pl.table_at;
  const std::int64_t F = pl.dst_F;
  with_round(pl.round, [&](auto R) {
    constexpr Round r = decltype(R)::value;
    if (pl.tr_b > 1) {  // 3-D: dst (p, f = y * a + x) = src (row x, free y * c + p)
      const std::int64_t a = pl.tr_a, c = pl.dst_P;
      std::int64_t k = 0;
      walk_each(pl.w_dst, [&](std::int64_t off) {
        const std::int64_t p = k / F, f = k % F, y = f / a, x = f % a;
        dst[off] = rnd<r>(src[pl.src_off + x * pl.src_ps + stab[y * c + p]]);
        ++k;
      });
      return;
    }
    if (pl.inner_run) {  // dst free dims are one strided run: plain (p, f) loops
      for (std::int64_t p = 0; p < pl.dst_P; ++p) {
        float* d = dst + pl.w_dst.off + p * pl.w_dst.st[0];
        const float* s = src + pl.src_off + stab[p];
        for (std::int64_t f = 0; f < F; ++f) d[f * pl.inner_stride] = rnd<r>(s[f * pl.src_ps]);
      }
      return;
    }
    std::int64_t k = 0;  // flat index over dst (p, free)
    walk_each(pl.w_dst, [&](std::int64_t off) {
      const std::int64_t p = k / F, f = k % F;
      dst[off] = rnd<r>(src[pl.src_off + f * pl.src_ps + stab[p]]);
      ++k;
    });
  });
}

void gather_mat(const MatOperand& m, float* const* bufs, float* out) {
  const float* b = bufs[m.buf];
  std::int64_t k = 0;
  walk_each(m.walk, [&](std::int64_t off) { out[k++] = b[off]; });
}

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CMap = Eigen::Map<const RowMat, Eigen::Unaligned, Eigen::OuterStride<>>;
using MMap = Eigen::Map<RowMat, Eigen::Unaligned, Eigen::OuterStride<>>;

void exec_matmul(const Plan& pl, const Instr& in, float* const* bufs) {
  const MatOperand &st = pl.mat[0], &mv = pl.mat[1], &ds = pl.mat[2];
  const std::int64_t K = st.rows, M = st.cols, N = mv.cols;
  std::size_t need = 0;
  if (!st.direct) need += static_cast<std::size_t>(K * M);
  if (!mv.direct) need += static_cast<std::size_t>(K * N);
  if (!ds.direct) need += static_cast<std::size_t>(M * N);
  float* tmp = need ? tls_mats.get(need) : nullptr;
  const float* sp;
  const float* vp;
  float* dp;
  std::int64_t sld = M, vld = N, dld = N;
  if (st.direct) {
    sp = bufs[st.buf] + st.off;
    sld = st.outer;
  } else {
    gather_mat(st, bufs, tmp);
    sp = tmp;
    tmp += K * M;
  }
  if (mv.direct) {
    vp = bufs[mv.buf] + mv.off;
    vld = mv.outer;
  } else {
    gather_mat(mv, bufs, tmp);
    vp = tmp;
    tmp += K * N;
  }
  if (ds.direct) {
    dp = bufs[ds.buf] + ds.off;
    dld = ds.outer;
  } else {
    dp = tmp;
    if (in.accumulate) gather_mat(ds, bufs, dp);
  }
  const CMap S(sp, K, M, Eigen::OuterStride<>(sld));
  const CMap V(vp, K, N, Eigen::OuterStride<>(vld));
  MMap D(dp, M, N, Eigen::OuterStride<>(dld));
  if (in.accumulate) D.noalias() += S.transpose() * V;
  else D.noalias() = S.transpose() * V;
  if (ds.direct) {
    if (pl.round != Round::none)
      for (std::int64_t r = 0; r < M; ++r) store_row_any(pl.round, dp + r * dld, 1, dp + r * dld, N);
  } else {
    float* b = bufs[ds.buf];
    std::int64_t k = 0;
    with_round(pl.round, [&](auto R) {
      walk_each(ds.walk, [&](std::int64_t off) { b[off] = rnd<decltype(R)::value>(dp[k++]); });
    });
  }
}

template <class Op>
inline float reduce_run(const float* x, std::int64_t stride, std::int64_t n, float init, Op op) {
  if (stride == 1 && n >= 16) {
    float acc[8];
    for (float& a : acc) a = init;
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) acc[j] = op(acc[j], x[i + j]);
    float r = init;
    for (int j = 0; j < 8; ++j) r = op(r, acc[j]);
    for (; i < n; ++i) r = op(r, x[i]);
    return r;
  }
  float r = init;
  for (std::int64_t i = 0; i < n; ++i) r = op(r, x[i * stride]);
  return r;
}

// max/min of a contiguous run in the same 8-lane order as reduce_run, but with a plain compare
// per lane (vectorises to compare + blend) and a NaN/inf detector (v - v is NaN exactly for NaN
// and +-inf). Without NaN or inf in the run every lane step equals max_nan/min_nan, so the result
// is bit-identical (signed zeros included); otherwise the NaN-propagating loop runs instead.
template <bool Max>
inline float minmax_run(const float* x, std::int64_t stride, std::int64_t n, float init) {
  const auto op = [](float a, float b) { return Max ? detail::max_nan(a, b) : detail::min_nan(a, b); };
  if (stride == 1 && n >= 16) {
    float acc[8], chk[8];
    for (int j = 0; j < 8; ++j) {
      acc[j] = init;
      chk[j] = 0.0f;
    }
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) {
        const float v = x[i + j];
        acc[j] = Max ? (acc[j] > v ? acc[j] : v) : (acc[j] < v ? acc[j] : v);
        chk[j] += v - v;
      }
    float c = 0.0f;
    for (int j = 0; j < 8; ++j) c += chk[j];
    if (c == 0.0f) {
      float r = init;
      for (int j = 0; j < 8; ++j) r = op(r, acc[j]);
      for (; i < n; ++i) r = op(r, x[i]);
      return r;
    }
  }
  return reduce_run(x, stride, n, init, op);
}

void exec_reduce(const Plan& pl, const Instr& in, float* const* bufs) {
  const float* src = bufs[pl.w_src.buf];
  float* dst = bufs[pl.w_dst.buf];
  const auto add = [](float a, float b) { return a + b; };
  const auto mx = [](float a, float b) { return detail::max_nan(a, b); };
  const auto mn = [](float a, float b) { return detail::min_nan(a, b); };
  const ir::ReduceOp op = in.reduce;
  auto reduce_at = [&](std::int64_t base) -> float {
    if (pl.inner_run) {
      const float* x = src + base;
      switch (op) {
        case ir::ReduceOp::max: return minmax_run<true>(x, pl.inner_stride, pl.inner_n, -std::numeric_limits<float>::infinity());
        case ir::ReduceOp::min: return minmax_run<false>(x, pl.inner_stride, pl.inner_n, std::numeric_limits<float>::infinity());
        case ir::ReduceOp::mean: return reduce_run(x, pl.inner_stride, pl.inner_n, 0.0f, add) / static_cast<float>(pl.inner_n);
        default: return reduce_run(x, pl.inner_stride, pl.inner_n, 0.0f, add);
      }
    }
    float r = op == ir::ReduceOp::max   ? -std::numeric_limits<float>::infinity()
              : op == ir::ReduceOp::min ? std::numeric_limits<float>::infinity()
                                        : 0.0f;
    Walk w = pl.w_inner;
    w.off += base;
    walk_each(w, [&](std::int64_t off) {
      const float v = src[off];
      r = op == ir::ReduceOp::max ? mx(r, v) : op == ir::ReduceOp::min ? mn(r, v) : r + v;
    });
    if (op == ir::ReduceOp::mean) r /= static_cast<float>(pl.inner_n);
    return r;
  };
  // Outer source positions in (p, outer) order pair up with destination elements in dst order.
  float* tmp = tls_mats.get(static_cast<std::size_t>(pl.w_dst.n[0] * pl.w_dst.n[1] * pl.w_dst.n[2] * pl.w_dst.n[3]));
  std::int64_t k = 0;
  walk_each(pl.w_src, [&](std::int64_t base) { tmp[k++] = reduce_at(base); });
  k = 0;
  with_round(pl.round, [&](auto R) {
    walk_each(pl.w_dst, [&](std::int64_t off) {
      float v = tmp[k++];
      if (in.accumulate) v = op == ir::ReduceOp::max ? mx(dst[off], v) : op == ir::ReduceOp::min ? mn(dst[off], v) : dst[off] + v;
      dst[off] = rnd<decltype(R)::value>(v);
    });
  });
}

// iota's (and affine_select's) value at position (p, a, b, c): exact in double, the coefficients
// and positions being integers and the offset an integer-valued double
inline double iota_value(const Instr& in, std::int64_t p, std::int64_t a, std::int64_t b, std::int64_t c) noexcept {
  return in.imm0 + static_cast<double>(in.iota_part_coef * p + in.iota_free_coef[0] * a + in.iota_free_coef[1] * b +
                                       in.iota_free_coef[2] * c);
}

void exec_iota(const Plan& pl, const Instr& in, float* const* bufs) {
  const Walk& w = pl.w_dst;
  float* dst = bufs[w.buf];
  for (std::int64_t p = 0; p < w.n[0]; ++p)
    for (std::int64_t a = 0; a < w.n[1]; ++a)
      for (std::int64_t b = 0; b < w.n[2]; ++b)
        for (std::int64_t c = 0; c < w.n[3]; ++c)
          dst[w.off + p * w.st[0] + a * w.st[1] + b * w.st[2] + c * w.st[3]] =
              detail::round_value(pl.round, static_cast<float>(iota_value(in, p, a, b, c)));
}

// affine_select: dst = fn(a, 0) ? src : imm1 with a the iota value of each position
void exec_affine_select(const Plan& pl, const Instr& in, float* const* bufs) {
  const Walk& w = pl.w_dst;
  const Walk& s = pl.w_src;
  float* dst = bufs[w.buf];
  const float* src = bufs[s.buf];
  const float off_value = detail::round_value(pl.round, static_cast<float>(in.imm1));
  for (std::int64_t p = 0; p < w.n[0]; ++p)
    for (std::int64_t a = 0; a < w.n[1]; ++a)
      for (std::int64_t b = 0; b < w.n[2]; ++b)
        for (std::int64_t c = 0; c < w.n[3]; ++c) {
          const bool keep = ir::fn_apply_binary(in.fn, iota_value(in, p, a, b, c), 0.0) != 0.0;
          const float x = keep ? detail::round_value(pl.round, src[s.off + p * s.st[0] + a * s.st[1] + b * s.st[2] + c * s.st[3]])
                                  : off_value;
          dst[w.off + p * w.st[0] + a * w.st[1] + b * w.st[2] + c * w.st[3]] = x;
        }
}

// bn_stats / bn_aggr, per partition in fp32 as the Vector engine computes them (statistics in
// double, rounded once): (count, mean, variance*count) of the even and of the odd free elements,
// and their aggregation into (mean, population variance) by the parallel-variance formula.
void exec_bn(const Plan& pl, const Instr& in, float* const* bufs) {
  const Walk& ws = pl.w_src;
  const Walk& wd = pl.w_dst;
  const float* src = bufs[ws.buf];
  float* dst = bufs[wd.buf];
  thread_local std::vector<double> row;  // reused across calls (the CPU runner executes many)
  for (std::int64_t p = 0; p < ws.n[0]; ++p) {
    row.clear();
    for (std::int64_t a = 0; a < ws.n[1]; ++a)
      for (std::int64_t b = 0; b < ws.n[2]; ++b)
        for (std::int64_t c = 0; c < ws.n[3]; ++c)
          row.push_back(src[ws.off + p * ws.st[0] + a * ws.st[1] + b * ws.st[2] + c * ws.st[3]]);
    double out[6] = {};
    int nout = 0;
    if (in.op == Opcode::bn_stats) {
      for (int parity = 0; parity < 2; ++parity) {
        double n = 0, sum = 0;
        for (std::size_t i = static_cast<std::size_t>(parity); i < row.size(); i += 2) n += 1, sum += row[i];
        const double mean = n > 0 ? sum / n : 0;
        double m2 = 0;
        for (std::size_t i = static_cast<std::size_t>(parity); i < row.size(); i += 2) m2 += (row[i] - mean) * (row[i] - mean);
        out[nout++] = n;
        out[nout++] = mean;
        out[nout++] = m2;
      }
    } else {
      double n = 0, mean = 0, m2 = 0;
      for (std::size_t i = 0; i + 2 < row.size(); i += 3) {
        const double nb = row[i], mb = row[i + 1], m2b = row[i + 2];
        if (nb <= 0) continue;
        const double nt = n + nb, delta = mb - mean;
        mean += delta * nb / nt;
        m2 += m2b + delta * delta * n * nb / nt;
        n = nt;
      }
      out[nout++] = mean;
      out[nout++] = n > 0 ? m2 / n : 0;
    }
    int k = 0;
    for (std::int64_t a = 0; a < wd.n[1]; ++a)
      for (std::int64_t b = 0; b < wd.n[2]; ++b)
        for (std::int64_t c = 0; c < wd.n[3] && k < nout; ++c)
          dst[wd.off + p * wd.st[0] + a * wd.st[1] + b * wd.st[2] + c * wd.st[3]] =
              detail::round_value(pl.round, static_cast<float>(out[k++]));
  }
}

}  // namespace

void configure_process_blas() {
#ifdef KEVO_VERIFY_OPENBLAS
  static std::once_flag once;
  std::call_once(once, [] {
    // OpenBLAS 0.3.21 (Debian 12) does not recognise recent Xeons behind a generic CPUID model and
    // falls back to its SSE3 "Prescott" kernels, 4x slower than its AVX-512 ones on this machine.
    // When the user has not chosen a core type and the CPU has the instructions, re-run OpenBLAS's
    // own dynamic-arch selection with OPENBLAS_CORETYPE set. This happens before any interpreter
    // exists, so no sgemm can be running.
    if (openblas_get_corename && gotoblas_dynamic_init && gotoblas_dynamic_quit && !std::getenv("OPENBLAS_CORETYPE")) {
      const std::string core = openblas_get_corename();
      if (core == "Prescott" || core == "Core2" || core == "Nehalem" || core == "Sandybridge") {
        const char* want = nullptr;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd"))
          want = "SkylakeX";
        else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
          want = "Haswell";
        if (want) {
          setenv("OPENBLAS_CORETYPE", want, 0);
          gotoblas_dynamic_quit();
          gotoblas_dynamic_init();
        }
      }
    }
    // The interpreter is timed as one CPU core's kernel and runs concurrently in several threads;
    // OpenBLAS's own thread pool would distort both.
    if (openblas_set_num_threads) openblas_set_num_threads(1);
  });
#endif
}

// ---- Interpreter -----------------------------------------------------------------------------

Interpreter::Interpreter(const lower::TileProgram& program) : program_(&program) {
  auto c = std::make_shared<detail::Compiled>();
  const auto& P = program;
  c->buffer_elems.reserve(P.buffers.size());
  for (const auto& b : P.buffers) {
    const std::int64_t n = buffer_elements(b);
    if (n < 0 || (b.mem != lower::Memory::hbm && (b.partitions < 1 || b.free_elems < 0 || b.nbufs < 1)))
      throw Error(fmt::format("buffer '{}': invalid geometry ({} partitions x {} free x {} slots)", b.name, b.partitions,
                              b.free_elems, b.nbufs));
    c->buffer_elems.push_back(n);
  }
  std::vector<std::uint8_t> written(P.buffers.size(), 0);
  Validator v{P, c->buffer_elems};
  c->plans.resize(P.instrs.size());
  for (std::size_t i = 0; i < P.instrs.size(); ++i) {
    v.i = i;
    const Instr& in = P.instrs[i];
    Plan& pl = c->plans[i];
    auto need_src = [&](int lo, int hi) {
      if (in.nsrc < lo || in.nsrc > hi)
        v.fail(lo == hi ? fmt::format("needs {} source operand(s), has {}", lo, in.nsrc)
                        : fmt::format("needs {}..{} source operands, has {}", lo, hi, in.nsrc));
    };
    switch (in.op) {
      case Opcode::dma_copy: case Opcode::dma_transpose: case Opcode::nc_transpose: case Opcode::tensor_copy:
      case Opcode::tensor_reduce: need_src(1, 1); break;
      case Opcode::nc_matmul: case Opcode::tensor_tensor: need_src(2, 2); break;
      case Opcode::activation: need_src(1, 2); break;
      case Opcode::tensor_scalar: need_src(1, 3); break;
      case Opcode::memset: case Opcode::iota: need_src(0, 0); break;
      case Opcode::bn_stats: case Opcode::bn_aggr: need_src(1, 1); break;
      case Opcode::tensor_copy_predicated: need_src(1, 2); break;
      case Opcode::affine_select: need_src(1, 1); break;
      case Opcode::scalar_tensor_tensor: need_src(2, 3); break;
      default: v.fail("unknown opcode");
    }
    v.check_ap(in.dst, "dst");
    v.check_dst_not_broadcast(in.dst);
    static constexpr const char* names[3] = {"src[0]", "src[1]", "src[2]"};
    for (int s = 0; s < in.nsrc; ++s) v.check_ap(in.src[s], names[s]);
    written[in.dst.buffer] = 1;
    pl.round = detail::round_mode(P.buffers[in.dst.buffer].dtype);
    const AccessPattern& d = in.dst;

    auto require_same = [&](int s) {
      if (!same_shape(d, in.src[s]))
        v.fail(fmt::format("{} shape {} differs from dst shape {}", names[s], ap_shape(in.src[s]), ap_shape(d)));
    };
    auto require_scalar = [&](int s) {
      if (in.src[s].part_count != d.part_count || in.src[s].free_elems() != 1)
        v.fail(fmt::format("{} must be a per-partition scalar [{} x 1], is {}", names[s], d.part_count, ap_shape(in.src[s])));
    };
    auto nest_of = [&](int nops, const bool* scalar) {
      const AccessPattern* ops[4] = {&d, &in.src[0], &in.src[1], &in.src[2]};
      pl.kind = Kind::nest;
      pl.nest = make_nest(ops, scalar, nops);
    };

    switch (in.op) {
      case Opcode::dma_copy:
      case Opcode::tensor_copy: {
        if (same_shape(d, in.src[0])) {
          const bool sc[2] = {false, false};
          nest_of(2, sc);
          pl.stream_dst = P.buffers[d.buffer].mem == lower::Memory::hbm;
        } else if (d.elems() == in.src[0].elems()) {
          pl.kind = Kind::copy_walk;
          pl.w_dst = make_walk(d);
          pl.w_src = make_walk(in.src[0]);
        } else {
          v.fail(fmt::format("src[0] {} and dst {} hold different element counts", ap_shape(in.src[0]), ap_shape(d)));
        }
        break;
      }
      case Opcode::memset: {
        const bool sc[1] = {false};
        nest_of(1, sc);
        break;
      }
      case Opcode::iota:
        pl.kind = Kind::iota;
        pl.w_dst = make_walk(d);
        break;
      case Opcode::bn_stats:
      case Opcode::bn_aggr: {
        const AccessPattern& s = in.src[0];
        const bool stats = in.op == Opcode::bn_stats;
        if (d.part_count != s.part_count)
          v.fail(fmt::format("dst {} and src[0] {} disagree on partitions", ap_shape(d), ap_shape(s)));
        if (d.free_elems() != (stats ? 6 : 2))
          v.fail(fmt::format("dst {} must hold {} elements per partition", ap_shape(d), stats ? 6 : 2));
        if (stats && s.free_elems() > lower::kBnStatsFmax)
          v.fail(fmt::format("src[0] {} has more than {} free elements", ap_shape(s), lower::kBnStatsFmax));
        if (!stats && (s.free_elems() == 0 || s.free_elems() % 3 != 0))
          v.fail(fmt::format("src[0] {} does not hold (count, mean, variance*count) triples", ap_shape(s)));
        pl.kind = Kind::bn;
        pl.w_dst = make_walk(d);
        pl.w_src = make_walk(s);
        break;
      }
      case Opcode::affine_select: {
        if (!ir::is_comparison(in.fn)) v.fail(fmt::format("affine_select compares with fn {}, not a comparison", static_cast<int>(in.fn)));
        require_same(0);
        if (d.buffer == in.src[0].buffer && d.offset != in.src[0].offset)
          v.fail("affine_select reads and writes one buffer at different offsets");
        pl.kind = Kind::affine_select;
        pl.w_dst = make_walk(d);
        pl.w_src = make_walk(in.src[0]);
        break;
      }
      case Opcode::tensor_copy_predicated: {
        for (int s = 0; s < in.nsrc; ++s) require_same(s);
        const bool sc[3] = {false, false, false};
        nest_of(1 + in.nsrc, sc);
        break;
      }
      case Opcode::tensor_tensor: {
        if (!detail::is_binary(in.fn)) v.fail(fmt::format("fn {} is not a binary function", static_cast<int>(in.fn)));
        require_same(0);
        require_same(1);
        const bool sc[3] = {false, false, false};
        nest_of(3, sc);
        break;
      }
      case Opcode::scalar_tensor_tensor: {
        if (!detail::is_binary(in.fn) || !detail::is_binary(in.fn1)) v.fail("scalar_tensor_tensor needs binary functions");
        require_same(0);
        require_same(1);
        if (in.nsrc >= 3) require_scalar(2);
        const bool sc[4] = {false, false, false, true};
        nest_of(1 + in.nsrc, sc);
        break;
      }
      case Opcode::tensor_scalar: {
        if (!detail::is_binary(in.fn) || (in.has_op1 && !detail::is_binary(in.fn1)))
          v.fail("tensor_scalar needs binary functions");
        if (in.nsrc >= 3 && !in.has_op1) v.fail("src[2] given without op1");
        require_same(0);
        for (int s = 1; s < in.nsrc; ++s) require_scalar(s);
        const bool sc[4] = {false, false, true, true};
        nest_of(1 + in.nsrc, sc);
        break;
      }
      case Opcode::activation: {
        if (!detail::is_unary(in.fn)) v.fail(fmt::format("fn {} is not a unary function", static_cast<int>(in.fn)));
        require_same(0);
        if (in.nsrc >= 2) require_scalar(1);
        const bool sc[4] = {false, false, true, true};
        nest_of(1 + in.nsrc, sc);
        if (in.reduce != ir::ReduceOp::none) {
          // reduce_res: a second destination, [P, 1] on dst's partitions, in the nest beside the sources
          const AccessPattern& rr = in.reduce_res();
          if (in.reduce != ir::ReduceOp::sum) v.fail("activation reduces only by sum");
          if (in.nsrc > 2) v.fail("activation with reduce_res has more than two sources");
          for (int s = 0; s < in.nsrc; ++s)
            if (rr.buffer == in.src[s].buffer) v.fail(fmt::format("reduce_res shares buffer {} with {}", rr.buffer, names[s]));
          if (rr.buffer == d.buffer) v.fail(fmt::format("reduce_res shares buffer {} with dst", rr.buffer));
          v.check_ap(rr, "reduce_res");
          v.check_dst_not_broadcast(rr);
          if (rr.part_count != d.part_count || rr.free_elems() != 1)
            v.fail(fmt::format("reduce_res must be a per-partition scalar [{} x 1], is {}", d.part_count, ap_shape(rr)));
          const AccessPattern* ops[4] = {&d, &in.src[0], &in.src[1], &in.src[2]};
          if (in.nsrc == 1) ops[2] = &rr;
          pl.nest = make_nest(ops, sc, 2 + in.nsrc);
          pl.red_op = 1 + in.nsrc;
          pl.red_round = detail::round_mode(P.buffers[rr.buffer].dtype);
          pl.w_red = make_walk(rr);
          written[rr.buffer] = 1;
        }
        break;
      }
      case Opcode::dma_transpose:
      case Opcode::nc_transpose: {
        const AccessPattern& s = in.src[0];
        // 2-D: dst[p][f] = src[f][p]. dma_transpose also takes the 3-D form (permutation
        // [2, 1, 0] of nki.isa.dma_transpose): src [a, b, c] (c = dst partitions, its free
        // elements read as b x c), dst [c, b, a]. The 4-D form ([a, b, c, d] -> [d, b, c, a],
        // permutation [3, 1, 2, 0]) is the same with the source's middle dims walked as one b.
        const std::int64_t c_dim = d.part_count;
        const std::int64_t b_dim = c_dim > 0 && s.free_elems() % c_dim == 0 ? s.free_elems() / c_dim : 0;
        const bool three_d = in.op == Opcode::dma_transpose && b_dim > 1;
        if (b_dim < 1 || (b_dim > 1 && !three_d) || d.free_elems() != s.part_count * b_dim)
          v.fail(fmt::format("src[0] {} is not the transpose of dst {}", ap_shape(s), ap_shape(d)));
        pl.tr_a = s.part_count;
        pl.tr_b = b_dim;
        pl.kind = Kind::transpose;
        pl.w_dst = make_walk(d);
        pl.dst_P = d.part_count;
        pl.dst_F = d.free_elems();
        pl.src_buf = s.buffer;
        pl.src_off = s.offset;
        pl.src_ps = s.part_stride;
        pl.table_at = static_cast<std::uint32_t>(c->tables.size());
        {
          std::int64_t n = 0;
          pl.inner_run = free_run(d, n, pl.inner_stride);
        }
        Walk sf = make_walk(s);
        sf.n[0] = 1;
        sf.off = 0;
        walk_each(sf, [&](std::int64_t off) { c->tables.push_back(off); });
        break;
      }
      case Opcode::nc_matmul: {
        const AccessPattern &st = in.src[0], &mv = in.src[1];
        if (st.part_count != mv.part_count)
          v.fail(fmt::format("stationary {} and moving {} disagree on K (partitions)", ap_shape(st), ap_shape(mv)));
        if (d.part_count != st.free_elems() || d.free_elems() != mv.free_elems())
          v.fail(fmt::format("dst {} is not [M={} x N={}] for stationary {} and moving {}", ap_shape(d),
                             st.free_elems(), mv.free_elems(), ap_shape(st), ap_shape(mv)));
        pl.kind = Kind::matmul;
        pl.mat[0] = make_mat(st);
        pl.mat[1] = make_mat(mv);
        pl.mat[2] = make_mat(d);
        break;
      }
      case Opcode::tensor_reduce: {
        const AccessPattern& s = in.src[0];
        const int r = in.reduce_free_dims;
        if (r < 1 || r > 3) v.fail(fmt::format("reduce_free_dims {} not in 1..3", r));
        if (in.reduce == ir::ReduceOp::none) v.fail("reduce op is none");
        if (in.reduce == ir::ReduceOp::mean && in.accumulate) v.fail("mean cannot accumulate");
        std::int64_t outer = 1, inner = 1;
        for (int k = 0; k < 3 - r; ++k) outer *= s.free_size[k];
        for (int k = 3 - r; k < 3; ++k) inner *= s.free_size[k];
        if (d.part_count != s.part_count || d.free_elems() != outer)
          v.fail(fmt::format("dst {} must hold {} partitions x {} outer elements of src[0] {}", ap_shape(d), s.part_count,
                             outer, ap_shape(s)));
        pl.kind = Kind::reduce;
        pl.w_dst = make_walk(d);
        pl.w_src = make_walk(s);  // walks p and the outer dims only
        pl.w_inner = Walk{};
        pl.w_inner.buf = s.buffer;
        for (int k = 0; k < 3; ++k) {
          if (k < 3 - r) {
            pl.w_inner.n[k + 1] = 1;
          } else {
            pl.w_src.n[k + 1] = 1;
            pl.w_inner.n[k + 1] = s.free_size[k];
            pl.w_inner.st[k + 1] = s.free_stride[k];
          }
        }
        pl.inner_n = inner;
        pl.outer_n = outer;
        AccessPattern red = s;
        for (int k = 0; k < 3 - r; ++k) red.free_size[k] = 1;
        pl.inner_run = free_run(red, pl.inner_n, pl.inner_stride);
        pl.inner_n = inner;
        break;
      }
    }
  }
  c->tensor_buffer.clear();
  c->buffer_is_input.assign(P.buffers.size(), 0);
  int max_tensor = -1;
  for (const auto& b : P.buffers) max_tensor = std::max(max_tensor, b.tensor);
  c->tensor_buffer.assign(static_cast<std::size_t>(max_tensor + 1), -1);
  for (std::size_t b = 0; b < P.buffers.size(); ++b) {
    const auto& buf = P.buffers[b];
    if (buf.mem != lower::Memory::hbm || buf.tensor < 0) continue;
    if (c->tensor_buffer[buf.tensor] < 0 || written[b]) c->tensor_buffer[buf.tensor] = static_cast<int>(b);
    if (!written[b]) {
      c->buffer_is_input[b] = 1;
      c->inputs.push_back(buf.tensor);
    } else {
      c->outputs.push_back(buf.tensor);
    }
  }
  compiled_ = std::move(c);
}

std::string matmul_backend() {
#ifdef KEVO_VERIFY_OPENBLAS
  const int threads = openblas_get_num_threads ? openblas_get_num_threads() : -1;
  return fmt::format("OpenBLAS sgemm ({} kernels, {} thread{})", openblas_get_corename ? openblas_get_corename() : "?", threads,
                     threads == 1 ? "" : "s");
#else
  return "Eigen GEMM (no BLAS)";
#endif
}

double measure_matmul_flops(double seconds) {
  using Clock = std::chrono::steady_clock;
  constexpr std::int64_t K = 128, M = 512, N = 512;
  RowMat s = RowMat::Constant(K, M, 0.5f), v = RowMat::Constant(K, N, 0.25f), d = RowMat::Zero(M, N);
  const CMap S(s.data(), K, M, Eigen::OuterStride<>(M));
  const CMap V(v.data(), K, N, Eigen::OuterStride<>(N));
  MMap D(d.data(), M, N, Eigen::OuterStride<>(N));
  D.noalias() += S.transpose() * V;  // warm-up: page in, pick kernels
  const double flops_per_call = 2.0 * K * M * N;
  const auto stop = Clock::now() + std::chrono::duration<double>(std::max(0.01, seconds));
  double best = 0;
  do {
    constexpr int kCalls = 8;
    const auto t0 = Clock::now();
    for (int c = 0; c < kCalls; ++c) D.noalias() += S.transpose() * V;
    const double s_elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s_elapsed > 0) best = std::max(best, kCalls * flops_per_call / s_elapsed);
  } while (Clock::now() < stop);
  // Keep the products observable so that the timed loop cannot be dropped.
  if (!std::isfinite(d(0, 0))) throw Error("measure_matmul_flops: the product is not finite");
  return best;
}

const std::vector<int>& Interpreter::input_tensors() const noexcept { return compiled_->inputs; }
const std::vector<int>& Interpreter::output_tensors() const noexcept { return compiled_->outputs; }

Memory Interpreter::allocate() const {
  Memory m;
  m.buffers.resize(compiled_->buffer_elems.size());
  for (std::size_t b = 0; b < m.buffers.size(); ++b)
    m.buffers[b].assign(static_cast<std::size_t>(compiled_->buffer_elems[b]), compiled_->buffer_is_input[b] ? 0.0f : kUnwritten);
  return m;
}

void Interpreter::bind_inputs(Memory& m, std::span<const std::vector<float>> tensor_values) const {
  const auto& c = *compiled_;
  if (m.buffers.size() != c.buffer_elems.size()) throw Error("bind_inputs: memory was not allocated for this program");
  for (std::size_t b = 0; b < c.buffer_elems.size(); ++b) {
    if (!c.buffer_is_input[b]) continue;
    const int t = program_->buffers[b].tensor;
    if (static_cast<std::size_t>(t) >= tensor_values.size() || tensor_values[t].empty())
      throw Error(fmt::format("bind_inputs: no values for input tensor {} (buffer '{}')", t, program_->buffers[b].name));
    const auto& vals = tensor_values[t];
    if (static_cast<std::int64_t>(vals.size()) != c.buffer_elems[b])
      throw Error(fmt::format("bind_inputs: tensor {} has {} values, buffer '{}' holds {}", t, vals.size(),
                              program_->buffers[b].name, c.buffer_elems[b]));
    std::copy(vals.begin(), vals.end(), m.buffers[b].begin());
  }
}

void Interpreter::poison_outputs(Memory& m) const {
  const auto& c = *compiled_;
  if (m.buffers.size() != c.buffer_elems.size()) throw Error("poison_outputs: memory was not allocated for this program");
  for (std::size_t b = 0; b < c.buffer_elems.size(); ++b)
    if (!c.buffer_is_input[b]) std::fill(m.buffers[b].begin(), m.buffers[b].end(), kUnwritten);
}

namespace {

void check_memory(const detail::Compiled& c, const Memory& m) {
  if (m.buffers.size() != c.buffer_elems.size())
    throw Error(fmt::format("execute: memory has {} buffers, program {}", m.buffers.size(), c.buffer_elems.size()));
  for (std::size_t b = 0; b < c.buffer_elems.size(); ++b)
    if (static_cast<std::int64_t>(m.buffers[b].size()) != c.buffer_elems[b])
      throw Error(fmt::format("execute: buffer {} has {} elements, program needs {}", b, m.buffers[b].size(),
                              c.buffer_elems[b]));
}

void run_one(const detail::Compiled& c, const Instr& in, const Plan& pl, float* const* bufs) {
  switch (in.op) {
    case Opcode::dma_copy:
    case Opcode::tensor_copy:
      if (pl.kind == Kind::nest) exec_copy(pl, bufs);
      else exec_copy_walk(pl, bufs);
      break;
    case Opcode::memset: exec_memset(pl, in, bufs); break;
    case Opcode::iota: exec_iota(pl, in, bufs); break;
    case Opcode::tensor_tensor: exec_tensor_tensor(pl, in, bufs); break;
    case Opcode::tensor_scalar: exec_tensor_scalar(pl, in, bufs); break;
    case Opcode::activation: exec_activation(pl, in, bufs); break;
    case Opcode::dma_transpose:
    case Opcode::nc_transpose: exec_transpose(pl, c.tables, bufs); break;
    case Opcode::nc_matmul: exec_matmul(pl, in, bufs); break;
    case Opcode::tensor_reduce: exec_reduce(pl, in, bufs); break;
    case Opcode::bn_stats:
    case Opcode::bn_aggr: exec_bn(pl, in, bufs); break;
    case Opcode::tensor_copy_predicated: exec_tensor_copy_predicated(pl, in, bufs); break;
    case Opcode::affine_select: exec_affine_select(pl, in, bufs); break;
    case Opcode::scalar_tensor_tensor: exec_scalar_tensor_tensor(pl, in, bufs); break;
  }
}

thread_local std::vector<float*> tls_bufs;

float* const* buffer_pointers(Memory& m) {
  tls_bufs.resize(m.buffers.size());
  for (std::size_t b = 0; b < m.buffers.size(); ++b) tls_bufs[b] = m.buffers[b].data();
  return tls_bufs.data();
}

}  // namespace

void Interpreter::execute(Memory& m, const std::atomic<bool>* cancel) const {
  const auto& c = *compiled_;
  check_memory(c, m);
  float* const* bufs = buffer_pointers(m);
  const auto& instrs = program_->instrs;
  for (std::size_t i = 0; i < instrs.size(); ++i) {
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) throw Error("execute: cancelled");
    run_one(c, instrs[i], c.plans[i], bufs);
  }
}

void Interpreter::execute_in_order(Memory& m, std::span<const std::uint32_t> order) const {
  const auto& c = *compiled_;
  check_memory(c, m);
  const auto& instrs = program_->instrs;
  if (order.size() != instrs.size())
    throw Error(fmt::format("execute_in_order: order has {} entries, program {} instructions", order.size(), instrs.size()));
  std::vector<std::uint8_t> seen(instrs.size(), 0);
  for (auto i : order) {
    if (i >= instrs.size() || seen[i]) throw Error(fmt::format("execute_in_order: order is not a permutation (entry {})", i));
    seen[i] = 1;
  }
  float* const* bufs = buffer_pointers(m);
  for (auto i : order) run_one(c, instrs[i], c.plans[i], bufs);
}

std::vector<float> Interpreter::output(const Memory& m, int tensor) const {
  const auto& c = *compiled_;
  if (tensor < 0 || static_cast<std::size_t>(tensor) >= c.tensor_buffer.size() || c.tensor_buffer[tensor] < 0)
    throw Error(fmt::format("output: tensor {} has no HBM buffer in program '{}'", tensor, program_->kernel_name));
  const auto b = static_cast<std::size_t>(c.tensor_buffer[tensor]);
  if (b >= m.buffers.size()) throw Error("output: memory was not allocated for this program");
  return m.buffers[b];
}

std::vector<std::uint32_t> adversarial_order(const lower::TileProgram& p) {
  const std::size_t n = p.instrs.size();
  if (n == 0) return {};
  if (p.dep_begin.size() != n + 1 || p.dep_begin.back() != p.deps.size())
    throw Error(fmt::format("program '{}': dependency table has {} row starts for {} instructions", p.kernel_name,
                            p.dep_begin.size(), n));
  std::vector<std::uint32_t> indeg(n, 0), succ_begin(n + 1, 0);
  for (std::size_t i = 0; i < n; ++i) {
    if (p.dep_begin[i] > p.dep_begin[i + 1]) throw Error("dependency table rows are not ordered");
    for (auto d : p.preds(i)) {
      if (d >= i) throw Error(fmt::format("instruction {} depends on {}, which does not precede it", i, d));
      ++succ_begin[d + 1];
      ++indeg[i];
    }
  }
  std::partial_sum(succ_begin.begin(), succ_begin.end(), succ_begin.begin());
  std::vector<std::uint32_t> succ(p.deps.size()), fill(succ_begin.begin(), succ_begin.end() - 1);
  for (std::size_t i = 0; i < n; ++i)  // ascending i: each successor list ends up ascending
    for (auto d : p.preds(i)) succ[fill[d]++] = static_cast<std::uint32_t>(i);
  std::vector<std::uint32_t> stack, order;
  order.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    if (indeg[i] == 0) stack.push_back(static_cast<std::uint32_t>(i));
  while (!stack.empty()) {
    const std::uint32_t i = stack.back();
    stack.pop_back();
    order.push_back(i);
    for (std::uint32_t k = succ_begin[i]; k < succ_begin[i + 1]; ++k) {
      const std::uint32_t s = succ[k];
      // duplicate edges appear once per copy in both indeg and succ, so counts stay consistent
      if (--indeg[s] == 0) stack.push_back(s);
    }
  }
  if (order.size() != n) throw Error("dependency edges do not form a DAG");
  return order;
}

}  // namespace kevo::verify
