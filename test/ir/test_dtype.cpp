#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "kevo/ir.hpp"

using namespace kevo::ir;

TEST_CASE("bf16 rounds to nearest with ties to even") {
  CHECK(bf16_bits(1.0f) == 0x3f80);
  CHECK(bf16_bits(1.00390625f) == 0x3f80);  // 1 + 2^-8: halfway, even neighbour is 1.0
  CHECK(bf16_bits(1.01171875f) == 0x3f82);  // 1 + 3*2^-8: halfway, even neighbour is 1 + 2^-6
  CHECK(bf16_bits(std::nextafter(1.00390625f, 2.0f)) == 0x3f81);  // just above halfway rounds up
  CHECK(round_to(DType::bf16, 1.00390625f) == 1.0f);
  CHECK(bf16_bits(-2.0f) == 0xc000);
  CHECK(bf16_bits(3.0e38f) == 0x7f62);
  CHECK(bf16_bits(std::numeric_limits<float>::max()) == 0x7f80);  // overflows to +inf
  CHECK(std::isinf(round_to(DType::bf16, std::numeric_limits<float>::max())));
  CHECK(std::isnan(round_to(DType::bf16, std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("fp16 encodes normals, subnormals and overflow with ties to even") {
  CHECK(fp16_bits(1.0f) == 0x3c00);
  CHECK(fp16_bits(-2.0f) == 0xc000);
  CHECK(fp16_bits(65504.0f) == 0x7bff);              // largest finite
  CHECK(fp16_bits(65519.0f) == 0x7bff);              // below halfway to 65536
  CHECK(fp16_bits(65520.0f) == 0x7c00);              // halfway rounds to even = overflow to inf
  CHECK(fp16_bits(1e6f) == 0x7c00);
  CHECK(fp16_bits(-1e6f) == 0xfc00);
  CHECK(fp16_bits(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
  CHECK(fp16_bits(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(fp16_bits(std::ldexp(1.0f, -25)) == 0x0000);  // halfway between 0 and 2^-24: even is 0
  CHECK(fp16_bits(std::ldexp(3.0f, -25)) == 0x0002);  // halfway between 1 and 2 quanta: even is 2
  CHECK(fp16_bits(std::ldexp(1.5f, -24)) == 0x0002);
  CHECK(fp16_bits(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie to even
  CHECK(fp16_bits(1.0f + std::ldexp(3.0f, -11)) == 0x3c02);
  CHECK(fp16_value(0x3555) == Approx(0.333251953125));
  CHECK(round_to(DType::fp16, 0.1f) == fp16_value(0x2e66));
}

TEST_CASE("fp8_e4m3fn (OCP) saturates at 448 and keeps NaN") {
  CHECK(fp8_e4m3fn_bits(1.0f) == 0x38);
  CHECK(fp8_e4m3fn_bits(448.0f) == 0x7e);
  CHECK(fp8_e4m3fn_bits(464.0f) == 0x7e);   // halfway past the top: saturates, never the NaN code
  CHECK(fp8_e4m3fn_bits(1000.0f) == 0x7e);
  CHECK(fp8_e4m3fn_bits(-1000.0f) == 0xfe);
  CHECK(fp8_e4m3fn_bits(std::numeric_limits<float>::infinity()) == 0x7e);
  CHECK(fp8_e4m3fn_bits(std::numeric_limits<float>::quiet_NaN()) == 0x7f);
  CHECK(std::isnan(fp8_e4m3fn_value(0x7f)));
  CHECK(fp8_e4m3fn_value(0x7e) == 448.0f);
  CHECK(fp8_e4m3fn_value(0x78) == 256.0f);                // exponent 15 holds finite values
  CHECK(fp8_e4m3fn_bits(std::ldexp(1.0f, -9)) == 0x01);   // smallest subnormal
  CHECK(fp8_e4m3fn_bits(std::ldexp(1.0f, -10)) == 0x00);  // tie to even (zero)
  CHECK(fp8_e4m3fn_bits(std::ldexp(3.0f, -10)) == 0x02);  // tie to even (2 quanta)
  CHECK(fp8_e4m3fn_bits(1.0625f) == 0x38);                // 1 + 1/16: tie, even is 1.0
  CHECK(fp8_e4m3fn_bits(1.1875f) == 0x3a);                // 1 + 3/16: tie, even is 1.25
  CHECK(round_to(DType::fp8_e4m3fn, 300.0f) == 288.0f);
  CHECK(round_to(DType::fp8_e4m3fn, 1e9f) == 448.0f);
}

TEST_CASE("fp8_e4m3 (IEEE-style, NeuronCore-v2/v3) tops out at 240 and overflows to inf") {
  CHECK(fp8_e4m3_bits(1.0f) == 0x38);                 // the same bias and codes below exponent 15
  CHECK(fp8_e4m3_bits(240.0f) == 0x77);
  CHECK(fp8_e4m3_value(0x77) == 240.0f);
  CHECK(fp8_e4m3_bits(247.0f) == 0x77);               // below the halfway point to 256
  CHECK(fp8_e4m3_bits(248.0f) == 0x78);               // the tie goes to the even 256: inf
  CHECK(std::isinf(fp8_e4m3_value(0x78)));
  CHECK(fp8_e4m3_value(0xf8) == -std::numeric_limits<float>::infinity());
  CHECK(fp8_e4m3_bits(-1000.0f) == 0xf8);
  CHECK(fp8_e4m3_bits(std::numeric_limits<float>::infinity()) == 0x78);
  CHECK(fp8_e4m3_bits(std::numeric_limits<float>::quiet_NaN()) == 0x7f);
  for (int m = 1; m < 8; ++m) CHECK(std::isnan(fp8_e4m3_value(static_cast<std::uint8_t>(0x78 | m))));
  CHECK(fp8_e4m3_bits(std::ldexp(1.0f, -9)) == 0x01);  // subnormals as E4M3FN's
  CHECK(fp8_e4m3_bits(1.1875f) == 0x3a);
  CHECK(round_to(DType::fp8_e4m3, 200.0f) == 192.0f);
  CHECK(round_to(DType::fp8_e4m3, 300.0f) == std::numeric_limits<float>::infinity());  // 288 under E4M3FN
  CHECK(round_to(DType::fp8_e4m3, -1e9f) == -std::numeric_limits<float>::infinity());
  // the two agree on every value below 240's rounding boundary
  for (float x = -247.0f; x < 247.0f; x += 0.37f) REQUIRE(round_to(DType::fp8_e4m3, x) == round_to(DType::fp8_e4m3fn, x));
}

TEST_CASE("decoding every bf16, fp16 and fp8 code and encoding it again gives the same code") {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto c = static_cast<std::uint16_t>(b);
    if (!std::isnan(fp16_value(c))) REQUIRE(fp16_bits(fp16_value(c)) == c);
    if (!std::isnan(bf16_value(c))) REQUIRE(bf16_bits(bf16_value(c)) == c);
  }
  for (std::uint32_t b = 0; b < 0x100; ++b) {
    const auto c = static_cast<std::uint8_t>(b);
    if (!std::isnan(fp8_e4m3_value(c))) REQUIRE(fp8_e4m3_bits(fp8_e4m3_value(c)) == c);
    if (!std::isnan(fp8_e4m3fn_value(c))) REQUIRE(fp8_e4m3fn_bits(fp8_e4m3fn_value(c)) == c);
  }
}

TEST_CASE("fp32 rounding is the identity and dtype names round-trip") {
  CHECK(round_to(DType::fp32, 1.00390625f) == 1.00390625f);
  for (DType t : {DType::bf16, DType::fp16, DType::fp32, DType::fp8_e4m3, DType::fp8_e4m3fn}) CHECK(dtype_from_string(to_string(t)) == t);
  CHECK(dtype_bytes(DType::fp8_e4m3) == 1);
  CHECK(dtype_bytes(DType::fp8_e4m3fn) == 1);
  CHECK(dtype_names() == "bf16, fp16, fp32, fp8_e4m3, fp8_e4m3fn");
  CHECK(dtype_bytes(DType::bf16) == 2);
  CHECK(!dtype_from_string("int8"));
}
