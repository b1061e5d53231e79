#include "kevo/core/hash.hpp"

#include <cstring>

#include "kevo/core/genes.hpp"

namespace kevo {

StableHasher& StableHasher::f64(double v) noexcept {
  if (v == 0.0) v = 0.0;  // +0 and -0 hash alike
  std::uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return u64(bits);
}

std::string hex64(std::uint64_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i) {
    s[static_cast<std::size_t>(i)] = digits[v & 0xf];
    v >>= 4;
  }
  return s;
}

std::uint64_t genome_hash(std::span<const std::int32_t> g) noexcept {
  StableHasher h;
  h.u64(g.size());
  for (auto v : g) h.i64(v);
  return h.digest();
}

}  // namespace kevo
