// Bit-exact storage dtypes. Encoders round to nearest, ties to even, on the exact value (no
// double rounding): bf16 by the classic bias trick, fp16 and the fp8s by integer arithmetic on
// the float's significand.
#include "kevo/ir/dtype.hpp"

#include <bit>
#include <cmath>
#include <cstdint>

#include "kevo/ir/eval.hpp"

namespace kevo::ir {

namespace {

// Rounds the magnitude of a finite float into a format with `mbits` mantissa bits and minimum
// normal exponent `emin` (unbiased), returning (biased exponent, mantissa) where biased exponent
// 0 means subnormal; the biased exponent may exceed the format's range (caller handles overflow).
struct Enc {
  std::uint32_t exp;
  std::uint32_t man;
};
Enc encode_mag(float a, int mbits, int emin) {
  const std::uint32_t b = std::bit_cast<std::uint32_t>(a) & 0x7fffffffu;
  if (b == 0) return {0, 0};
  int e = static_cast<int>(b >> 23);
  std::uint64_t sig = b & 0x7fffffu;
  if (e == 0) {
    e = -126;  // float subnormal: value = sig * 2^-149
  } else {
    sig |= 0x800000u;
    e -= 127;
  }
  // value = sig * 2^(e-23). Target quantum: 2^(max(e', emin) - mbits) for the target exponent e'.
  // Use the float's exponent; when sig is subnormal the effective exponent is lower, but then the
  // value is far below any target's subnormal range (emin - mbits >= -133 > -149 for bf16 only).
  int eff = e;
  if ((b >> 23) == 0) {
    // normalise the subnormal to find its true exponent
    int lz = std::countl_zero(static_cast<std::uint32_t>(sig)) - 8;  // leading zeros within 24 bits
    eff = -126 - lz;
  }
  const int qexp = (eff < emin ? emin : eff) - mbits;  // quantum exponent
  // value / 2^qexp = sig * 2^(e-23-qexp)
  const int shift = qexp - (e - 23);  // right shift amount (>= 0 in all our formats)
  std::uint64_t q;
  if (shift <= 0) {
    q = sig << (-shift);
  } else if (shift >= 63) {
    q = 0;
  } else {
    const std::uint64_t kept = sig >> shift;
    const std::uint64_t rem = sig & ((std::uint64_t{1} << shift) - 1);
    const std::uint64_t half = std::uint64_t{1} << (shift - 1);
    q = kept + ((rem > half || (rem == half && (kept & 1))) ? 1 : 0);
  }
  // q is the integer count of quanta; q in [2^mbits, 2^(mbits+1)] for normals.
  if (eff < emin) {
    if (q >= (std::uint64_t{1} << mbits)) return {1, static_cast<std::uint32_t>(q - (std::uint64_t{1} << mbits))};
    return {0, static_cast<std::uint32_t>(q)};
  }
  int be = eff - emin + 1;  // biased exponent (emin maps to 1)
  if (q >= (std::uint64_t{2} << mbits)) {
    q >>= 1;
    ++be;
  }
  return {static_cast<std::uint32_t>(be), static_cast<std::uint32_t>(q - (std::uint64_t{1} << mbits))};
}

}  // namespace

std::uint16_t bf16_bits(float x) noexcept {
  std::uint32_t b = std::bit_cast<std::uint32_t>(x);
  if (std::isnan(x)) return static_cast<std::uint16_t>((b >> 16) | 0x40);  // keep sign, force quiet
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<std::uint16_t>(b >> 16);
}

float bf16_value(std::uint16_t bits) noexcept { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

std::uint16_t fp16_bits(float x) noexcept {
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return static_cast<std::uint16_t>(sign | 0x7e00);
  if (std::isinf(x)) return static_cast<std::uint16_t>(sign | 0x7c00);
  const Enc e = encode_mag(x, 10, -14);
  if (e.exp >= 31) return static_cast<std::uint16_t>(sign | 0x7c00);  // overflow -> inf
  return static_cast<std::uint16_t>(sign | (e.exp << 10) | e.man);
}

float fp16_value(std::uint16_t bits) noexcept {
  const bool neg = (bits & 0x8000) != 0;
  const int e = (bits >> 10) & 0x1f;
  const int m = bits & 0x3ff;
  float v;
  if (e == 31) {
    v = m ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else if (e == 0) {
    v = std::ldexp(static_cast<float>(m), -24);
  } else {
    v = std::ldexp(static_cast<float>(m | 0x400), e - 25);
  }
  return neg ? -v : v;
}

namespace {
// The two E4M3 formats share bias 7, subnormals and every code below exponent 15; they differ
// only there. IEEE-style (`fn` false): exponent 15 is inf (mantissa 0) or NaN, largest finite
// exp 14, man 7 = 240, overflow to inf. OCP E4M3FN (`fn`): exponent 15 is finite but for
// mantissa 7 (NaN), largest finite exp 15, man 6 = 448, overflow and inf saturate there.
std::uint8_t e4m3_bits(float x, bool fn) noexcept {
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const std::uint8_t top = fn ? 0x7e : 0x78;  // the code overflow and inf go to
  if (std::isnan(x)) return static_cast<std::uint8_t>(sign | 0x7f);
  if (std::isinf(x)) return static_cast<std::uint8_t>(sign | top);
  const Enc e = encode_mag(x, 3, -6);
  if (fn ? (e.exp > 15 || (e.exp == 15 && e.man == 7)) : e.exp >= 15) return static_cast<std::uint8_t>(sign | top);
  return static_cast<std::uint8_t>(sign | (e.exp << 3) | e.man);
}

float e4m3_value(std::uint8_t bits, bool fn) noexcept {
  const bool neg = (bits & 0x80) != 0;
  const int e = (bits >> 3) & 0xf;
  const int m = bits & 0x7;
  float v;
  if (e == 15 && (fn ? m == 7 : m != 0)) v = std::numeric_limits<float>::quiet_NaN();
  else if (e == 15 && !fn) v = std::numeric_limits<float>::infinity();
  else v = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(static_cast<float>(m | 8), e - 10);
  return neg ? -v : v;
}
}  // namespace

std::uint8_t fp8_e4m3_bits(float x) noexcept { return e4m3_bits(x, false); }
float fp8_e4m3_value(std::uint8_t bits) noexcept { return e4m3_value(bits, false); }
std::uint8_t fp8_e4m3fn_bits(float x) noexcept { return e4m3_bits(x, true); }
float fp8_e4m3fn_value(std::uint8_t bits) noexcept { return e4m3_value(bits, true); }

float round_to(DType t, float x) noexcept {
  switch (t) {
    case DType::fp32: return x;
    case DType::bf16: return bf16_value(bf16_bits(x));
    case DType::fp16: return fp16_value(fp16_bits(x));
    case DType::fp8_e4m3: return fp8_e4m3_value(fp8_e4m3_bits(x));
    case DType::fp8_e4m3fn: return fp8_e4m3fn_value(fp8_e4m3fn_bits(x));
  }
  return x;
}

}  // namespace kevo::ir
