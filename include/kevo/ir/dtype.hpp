// Storage dtypes at the bit level: encoders/decoders for bf16, fp16 and fp8_e4m3 (OCP E4M3FN),
// all round-to-nearest-even. round_to() in eval.hpp is decode(encode(x)). Overflow policy:
// bf16/fp16 overflow to +-inf; fp8_e4m3 has no inf and saturates finite overflow and +-inf to +-448.
#pragma once
#include <cstdint>

namespace kevo::ir {

std::uint16_t bf16_bits(float x) noexcept;
float bf16_value(std::uint16_t bits) noexcept;
std::uint16_t fp16_bits(float x) noexcept;
float fp16_value(std::uint16_t bits) noexcept;
std::uint8_t fp8_e4m3_bits(float x) noexcept;  // NaN -> 0x7f (or 0xff when negative)
float fp8_e4m3_value(std::uint8_t bits) noexcept;

}  // namespace kevo::ir
