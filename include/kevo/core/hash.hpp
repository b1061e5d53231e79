// Stable hashing: the same bytes give the same 64-bit hash on every run and machine
// (FNV-1a over explicit little-endian encodings; never std::hash, which is unspecified).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kevo {

class StableHasher {
 public:
  StableHasher& bytes(const void* data, std::size_t n) noexcept {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) {
      h_ ^= p[i];
      h_ *= 0x100000001b3ULL;
    }
    return *this;
  }
  StableHasher& u64(std::uint64_t v) noexcept {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    return bytes(b, 8);
  }
  StableHasher& i64(std::int64_t v) noexcept { return u64(static_cast<std::uint64_t>(v)); }
  StableHasher& str(std::string_view s) noexcept {
    u64(s.size());
    return bytes(s.data(), s.size());
  }
  StableHasher& f64(double v) noexcept;
  [[nodiscard]] std::uint64_t digest() const noexcept {
    // final avalanche (splitmix64 finaliser) so that similar inputs spread
    std::uint64_t z = h_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  std::uint64_t h_ = 0xcbf29ce484222325ULL;
};

inline std::uint64_t stable_hash(std::string_view s) noexcept { return StableHasher{}.str(s).digest(); }

// 16 lowercase hex digits.
std::string hex64(std::uint64_t v);

}  // namespace kevo
