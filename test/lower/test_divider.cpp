// White-box test of the lowering's private row-width divider (lib/lower/builder.hpp): boxes() runs
// it for every access, so a wrong quotient would silently break dependency tracking.
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>

#include "../../lib/lower/builder.hpp"

using kevo::lower::detail::Divider;

TEST_CASE("Divider agrees with integer division for every divisor kind and dividend range", "[lower]") {
  std::mt19937_64 rng(7);
  const std::int64_t divisors[] = {1, 2, 3, 5, 7, 64, 96, 100, 511, 512, 1000, 2048, 4095, 50257, 65535, 65536, 3 * 4096 + 1,
                                   (std::int64_t{1} << 31) - 1, std::int64_t{1} << 32, (std::int64_t{1} << 32) + 3, std::int64_t{1} << 40};
  for (const std::int64_t d : divisors) {
    const Divider D(d);
    CAPTURE(d);
    // edges: around multiples of d, the 32-bit boundary where the reciprocal path ends, huge values
    std::vector<std::int64_t> xs = {0, 1, d - 1, d, d + 1, 2 * d - 1, 0xffffffffLL, 0x100000000LL, 0x100000001LL, (std::int64_t{1} << 62) + 12345};
    for (std::int64_t m = 1; m < 0xffffffffLL / d && xs.size() < 200; m = m * 3 + 1) xs.insert(xs.end(), {m * d - 1, m * d, m * d + 1});
    for (int i = 0; i < 20000; ++i) xs.push_back(static_cast<std::int64_t>(rng() >> (i % 2 ? 32 : 2)));
    for (const std::int64_t x : xs) {
      if (x < 0) continue;
      REQUIRE(D.div(x) == x / d);
    }
  }
}
