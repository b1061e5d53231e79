#include <catch2/catch.hpp>

#include "kevo/ir.hpp"

using namespace kevo::ir;

namespace {
Kernel wl(const std::string& spec) {
  auto k = workload(spec);
  if (!k) FAIL(k.error());
  return *k;
}
}  // namespace

TEST_CASE("every listed workload builds from its example, round-trips through text and evaluates") {
  for (const auto& info : workloads()) {
    INFO(info.example);
    const Kernel k = wl(info.name);
    const Kernel k2 = wl(info.example);
    CHECK(k == k2);
    const std::string text = print_kernel(k);
    INFO(text);
    auto p = parse_kernel(text);
    if (!p) FAIL(p.error().str());
    CHECK(*p == k);
    CHECK(print_kernel(*p) == text);
  }
}
