// Scalar semantics of the interpreter (library-private): storage rounding and the ir::Fn
// functions in fp32. Kept inline so the interpreter's row loops vectorise; the formulas are the
// ones docs/TILE_PROGRAM.md and ir's reference evaluator use (test_verify checks rounding
// bit-for-bit against ir::round_to).
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kevo/ir/fn.hpp"
#include "kevo/ir/kernel.hpp"

namespace kevo::verify::detail {

enum class Round : std::uint8_t { none, bf16, fp16, fp8_e4m3, fp8_e4m3fn };

inline Round round_mode(ir::DType t) noexcept {
  switch (t) {
    case ir::DType::bf16: return Round::bf16;
    case ir::DType::fp16: return Round::fp16;
    case ir::DType::fp8_e4m3: return Round::fp8_e4m3;
    case ir::DType::fp8_e4m3fn: return Round::fp8_e4m3fn;
    case ir::DType::fp32: break;
  }
  return Round::none;
}

// bf16: round-to-nearest-even on the top 16 bits (overflow carries into inf, as IEEE does).
inline float round_bf16(float x) noexcept {
  std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return std::bit_cast<float>(u & 0xffff0000u);
}

// Round-to-nearest-even onto `mbits` mantissa bits with normal exponents >= emin. Overflow past
// `max_finite` follows ir/dtype.hpp: IEEE inf for fp16 and fp8_e4m3; fp8_e4m3fn (no inf)
// saturates to +-448.
inline float round_small(float x, int mbits, int emin, float max_finite, bool saturate) noexcept {
  if (std::isnan(x)) return x;
  const float ax = std::fabs(x);
  if (std::isinf(x)) return saturate ? std::copysign(max_finite, x) : x;
  float r;
  if (ax < std::ldexp(1.0f, emin)) {
    // subnormal range: a fixed quantum; x / q is exact (power of two), nearbyint rounds to even.
    const float q = std::ldexp(1.0f, emin - mbits);
    r = std::nearbyint(x / q) * q;
  } else {
    const int shift = 23 - mbits;
    std::uint32_t u = std::bit_cast<std::uint32_t>(x);
    u += ((1u << (shift - 1)) - 1u) + ((u >> shift) & 1u);
    u &= ~((1u << shift) - 1u);
    r = std::bit_cast<float>(u);
  }
  if (std::fabs(r) > max_finite)
    return saturate ? std::copysign(max_finite, x) : std::copysign(std::numeric_limits<float>::infinity(), x);
  return r;
}

inline float round_fp16(float x) noexcept { return round_small(x, 10, -14, 65504.0f, false); }
inline float round_fp8(float x) noexcept { return round_small(x, 3, -6, 240.0f, false); }
inline float round_fp8fn(float x) noexcept { return round_small(x, 3, -6, 448.0f, true); }

inline float round_value(Round r, float x) noexcept {
  switch (r) {
    case Round::none: return x;
    case Round::bf16: return round_bf16(x);
    case Round::fp16: return round_fp16(x);
    case Round::fp8_e4m3: return round_fp8(x);
    case Round::fp8_e4m3fn: return round_fp8fn(x);
  }
  return x;
}

// NaN-propagating max/min: an uninitialised (NaN-poisoned) input must never vanish in a max.
inline float max_nan(float a, float b) noexcept { return (a != a || b != b) ? a + b : (a > b ? a : b); }
inline float min_nan(float a, float b) noexcept { return (a != a || b != b) ? a + b : (a < b ? a : b); }


// The formulas are ir's own (kevo/ir/fn.hpp), shared with the reference evaluator; Fn::cast is
// the identity here because the rounding happens on the write to the destination's dtype.
inline float apply_unary(ir::Fn f, float x) noexcept { return ir::fn_apply_unary(f, x); }
inline float apply_binary(ir::Fn f, float a, float b) noexcept { return ir::fn_apply_binary(f, a, b); }

inline bool is_unary(ir::Fn f) noexcept { return f >= ir::Fn::exp && f <= ir::Fn::cast; }
inline bool is_binary(ir::Fn f) noexcept { return f <= ir::Fn::ne; }

}  // namespace kevo::verify::detail
