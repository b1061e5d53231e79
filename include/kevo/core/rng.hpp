// Counter-based random streams. A stream is identified by (seed, stream id); draws are a pure
// function of (seed, stream, counter), so the same individual gets the same random numbers
// whichever thread or order evaluates it. This is what makes searches bit-identical across
// thread counts.
#pragma once
#include <cstdint>
#include <limits>

namespace kevo {

// splitmix64 mixing function: a bijection with good avalanche.
constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class Rng {
 public:
  using result_type = std::uint64_t;
  constexpr Rng(std::uint64_t seed = 0, std::uint64_t stream = 0) noexcept
      : key_(mix64(seed ^ mix64(stream + 0x632be59bd9b4e019ULL))) {}

  // Derive an independent child stream (e.g. per individual or per generation).
  [[nodiscard]] constexpr Rng fork(std::uint64_t stream) const noexcept {
    Rng r;
    r.key_ = mix64(key_ ^ mix64(stream ^ 0xd1b54a32d192ed03ULL));
    return r;
  }

  constexpr std::uint64_t operator()() noexcept { return mix64(key_ + 0x9e3779b97f4a7c15ULL * ++ctr_); }
  static constexpr std::uint64_t min() noexcept { return 0; }
  static constexpr std::uint64_t max() noexcept { return std::numeric_limits<std::uint64_t>::max(); }

  // Uniform integer in [0, n); n > 0. Lemire's multiply-shift with rejection.
  std::uint64_t below(std::uint64_t n) noexcept {
    if (n <= 1) return 0;
    while (true) {
      const std::uint64_t x = (*this)();
      const __uint128_t m = static_cast<__uint128_t>(x) * n;
      const auto lo = static_cast<std::uint64_t>(m);
      if (lo >= n || lo >= (-n) % n) return static_cast<std::uint64_t>(m >> 64);
    }
  }
  // Uniform double in [0, 1).
  double uniform() noexcept { return static_cast<double>((*this)() >> 11) * 0x1.0p-53; }
  bool chance(double p) noexcept { return uniform() < p; }
  [[nodiscard]] std::uint64_t counter() const noexcept { return ctr_; }

 private:
  std::uint64_t key_ = 0;
  std::uint64_t ctr_ = 0;
};

}  // namespace kevo
