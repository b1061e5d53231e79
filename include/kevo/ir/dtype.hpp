// Storage dtypes at the bit level: encoders/decoders for bf16, fp16, fp8_e4m3 (IEEE-754-style
// E4M3: bias 7, exponent 15 holds +-inf and NaN, largest finite 240) and fp8_e4m3fn (OCP E4M3FN:
// no inf, only S.1111.111 is NaN, largest finite 448), all round-to-nearest-even. round_to() in
// eval.hpp is decode(encode(x)). Overflow policy: bf16, fp16 and fp8_e4m3 overflow to +-inf, as
// IEEE rounding does (values from 248 up round past 240); fp8_e4m3fn has no inf and saturates
// finite overflow and +-inf to +-448.
#pragma once
#include <cstdint>

namespace kevo::ir {

std::uint16_t bf16_bits(float x) noexcept;
float bf16_value(std::uint16_t bits) noexcept;
std::uint16_t fp16_bits(float x) noexcept;
float fp16_value(std::uint16_t bits) noexcept;
std::uint8_t fp8_e4m3_bits(float x) noexcept;  // NaN -> 0x7f (or 0xff when negative); inf -> 0x78 / 0xf8
float fp8_e4m3_value(std::uint8_t bits) noexcept;
std::uint8_t fp8_e4m3fn_bits(float x) noexcept;  // NaN -> 0x7f (or 0xff when negative)
float fp8_e4m3fn_value(std::uint8_t bits) noexcept;

}  // namespace kevo::ir
