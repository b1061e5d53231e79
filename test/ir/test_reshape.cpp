// Row-major splits of tied dimensions: which classes may split, the rewritten kernel, and that the
// reference evaluator gives the same values over the same flat memory (random kernels included).
#include <catch2/catch.hpp>

#include <algorithm>

#include "kevo/core/error.hpp"
#include "kevo/ir.hpp"

using namespace kevo::ir;

namespace {

Kernel parse_ok(const std::string& text) {
  auto k = parse_kernel(text, "reshape.kir");
  if (!k) FAIL(k.error().str());
  return *k;
}

const DimClass& class_of(const std::vector<DimClass>& cs, const std::string& dim) {
  for (const auto& c : cs)
    if (std::find(c.dims.begin(), c.dims.end(), dim) != c.dims.end()) return c;
  FAIL("no class holds " << dim);
  return cs.front();
}

// The split kernel's values equal the original's element for element (same flat order), up to
// the fp64 reference's rounding to fp32 after a sum taken in another order.
void same_values(const Kernel& a, const Kernel& b, std::uint64_t seed) {
  REQUIRE(a.tensors.size() == b.tensors.size());
  const auto in = random_inputs(a, seed);
  const auto va = evaluate(a, in, {true});
  const auto vb = evaluate(b, in, {true});
  for (std::size_t t = 0; t < a.tensors.size(); ++t) {
    INFO(a.tensors[t].name);
    REQUIRE(va[t].size() == vb[t].size());
    for (std::size_t i = 0; i < va[t].size(); ++i) REQUIRE(vb[t][i] == Approx(va[t][i]).epsilon(1e-6).margin(1e-30));
  }
}

}  // namespace

TEST_CASE("a long index splits into outer and inner parts over the same memory") {
  const Kernel k = parse_ok(
      "kernel sm(X: fp32[N=4096], B: fp32[N]) -> (Y: fp32[N], S: fp32[]) {\n"
      "  S[] = sum(i) X[i]\n"
      "  Y[j] = X[j] * 2 + B[j] / S[]\n"
      "}\n");
  const auto cs = dim_classes(k);
  REQUIRE(cs.size() == 1);
  const DimClass& c = cs[0];
  CHECK(c.dims == std::vector<std::string>{"N"});
  CHECK(c.size == 4096);
  CHECK(c.splittable);
  CHECK(c.uses.size() == 2);  // i in the sum, j in the map
  Split what;
  const Kernel s = split_class(k, c, 128, &what);
  CHECK(what.outer == 128);
  CHECK(what.inner == 32);
  CHECK(s.dim_size("N_o") == 128);
  CHECK(s.dim_size("N_i") == 32);
  CHECK(s.tensor("X")->dims == std::vector<std::string>{"N_o", "N_i"});
  CHECK(s.ops[0].reduce_indices == std::vector<std::string>{"i_o", "i_i"});
  CHECK(s.ops[1].out_indices == std::vector<std::string>{"j_o", "j_i"});
  CHECK(print_kernel(s).find("Y[j_o, j_i] = X[j_o, j_i] * 2 + B[j_o, j_i] / S[]") != std::string::npos);
  for (std::uint64_t seed : {1u, 2u, 3u}) same_values(k, s, seed);
  // the split kernel round-trips through its text
  auto back = parse_kernel(print_kernel(s));
  REQUIRE(back);
  CHECK(*back == s);
}

TEST_CASE("dimensions tied by an index split together, other dimensions stay") {
  const Kernel k = parse_ok(
      "kernel t(X: fp32[R=6, C=256], W: fp32[D=256]) -> (Y: fp32[R, C]) {\n"
      "  Y[r, c] = X[r, c] * W[c]\n"
      "}\n");
  const auto cs = dim_classes(k);
  REQUIRE(cs.size() == 2);
  const DimClass& c = class_of(cs, "C");
  CHECK(c.dims == std::vector<std::string>{"C", "D"});
  CHECK(class_of(cs, "R").dims == std::vector<std::string>{"R"});
  const Kernel s = split_class(k, c, 64);
  CHECK(s.tensor("X")->dims == std::vector<std::string>{"R", "C_o", "C_i"});
  CHECK(s.tensor("W")->dims == std::vector<std::string>{"D_o", "D_i"});
  CHECK(s.dim_size("D_i") == 4);
  same_values(k, s, 7);
}

TEST_CASE("a shifted, strided or valued index pins its class; names stay fresh") {
  const Kernel shifted = parse_ok(
      "kernel c(X: fp32[W=66], F: fp32[T=3]) -> (Y: fp32[V=64]) {\n"
      "  Y[v] = sum(f) X[v + f] * F[f]\n"
      "}\n");
  const auto cs = dim_classes(shifted);
  for (const auto& c : cs) {
    INFO(c.dims.front());
    if (c.dims.front() == "W" || c.dims.front() == "V" || c.dims.front() == "T") {
      CHECK_FALSE(c.splittable);
      CHECK(c.why_not.find("X[.., v + f, ..]") != std::string::npos);
    }
  }
  CHECK_THROWS_AS(split_class(shifted, cs.front(), 2), kevo::Error);

  const Kernel masked = parse_ok(
      "kernel m(X: fp32[N=256]) -> (Y: fp32[N]) {\n"
      "  Y[i] = select(i < 5, X[i], 0)\n"
      "}\n");
  const auto mc = dim_classes(masked);
  REQUIRE(mc.size() == 1);
  CHECK_FALSE(mc[0].splittable);
  CHECK(mc[0].why_not.find("value of index i") != std::string::npos);

  // new names never take a name the kernel uses (a tensor N_o, an index i_o)
  const Kernel clash = parse_ok(
      "kernel n(X: fp32[N=256], N_o: fp32[N]) -> (Y: fp32[N]) {\n"
      "  T[i] = X[i] + N_o[i]\n"
      "  Y[i_o] = T[i_o] * 2\n"
      "}\n");
  const auto nc = dim_classes(clash);
  REQUIRE(nc.size() == 1);
  const Kernel s = split_class(clash, nc[0], 16);
  CHECK(s.dim_size("N_o2") == 16);
  CHECK(s.ops[0].out_indices == std::vector<std::string>{"i_o2", "i_i"});
  CHECK(s.ops[1].out_indices == std::vector<std::string>{"i_o_o", "i_o_i"});
  same_values(clash, s, 5);
}

TEST_CASE("a split needs a divisor of the class's size") {
  const Kernel k = parse_ok("kernel v(X: fp32[N=100]) -> (Y: fp32[N]) {\n  Y[i] = X[i] * 2\n}\n");
  const auto cs = dim_classes(k);
  REQUIRE(cs.size() == 1);
  CHECK_THROWS_AS(split_class(k, cs[0], 3), kevo::Error);
  CHECK_THROWS_AS(split_class(k, cs[0], 0), kevo::Error);
  const Kernel s = split_class(k, cs[0], 100);  // inner 1 is still a reshape
  same_values(k, s, 3);
}

TEST_CASE("random kernels split at every splittable class compute the same values") {
  int split = 0;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    const Kernel k = random_kernel(seed);
    for (const auto& c : dim_classes(k)) {
      if (!c.splittable) continue;
      std::int64_t outer = 1;
      for (std::int64_t d = 2; d < c.size; ++d)
        if (c.size % d == 0) {
          outer = d;
          break;
        }
      INFO("seed " << seed << ", dims " << c.dims.front() << ", outer " << outer);
      const Kernel s = split_class(k, c, outer);
      same_values(k, s, seed);
      ++split;
    }
  }
  CHECK(split > 30);
}

TEST_CASE("two classes merge into one where every tensor and op holds them as an adjacent pair") {
  const Kernel k = parse_ok(
      "kernel m(X: bf16[R=6, C=40], Z: fp32[R, C]) -> (Y: fp32[R, C], S: fp32[]) {\n"
      "  T[r, c] = gelu(X[r, c]) + Z[r, c]\n"
      "  Y[i, j] = T[i, j] * 2\n"
      "  S[] = sum(a, b) T[a, b]\n"
      "}\n");
  const auto cs = dim_classes(k);
  const DimClass& r = class_of(cs, "R");
  const DimClass& c = class_of(cs, "C");
  CHECK(why_not_merge(k, r, c).empty());
  CHECK_FALSE(why_not_merge(k, c, r).empty());  // the order is the tensors'
  Merge what;
  const Kernel m = merge_classes(k, r, c, &what);
  CHECK(m.dim_size("RC") == 240);
  CHECK(m.tensor("X")->dims == std::vector<std::string>{"RC"});
  CHECK(m.ops[1].out_indices == std::vector<std::string>{"ij"});
  CHECK(m.ops[2].reduce_indices == std::vector<std::string>{"ab"});
  CHECK(what.outer == 6);
  CHECK(what.inner == 40);
  same_values(k, m, 1);
  same_values(k, m, 2);
  // then the merged class splits like any other
  const auto mc = dim_classes(m);
  REQUIRE(mc.size() == 1);
  same_values(k, split_class(m, mc[0], 120), 3);
}

TEST_CASE("classes do not merge across a broadcast, a reduction over one of them, or another order") {
  for (const char* text : {
           "kernel b(X: fp32[R=6, C=40], B: fp32[C]) -> (Y: fp32[R, C]) {\n  Y[r, c] = X[r, c] + B[c]\n}\n",
           "kernel s(X: fp32[R=6, C=40]) -> (S: fp32[R]) {\n  S[r] = sum(c) X[r, c]\n}\n",
           "kernel t(X: fp32[R=6, C=40]) -> (Y: fp32[C, R]) {\n  Y[c, r] = X[r, c]\n}\n"}) {
    const Kernel k = parse_ok(text);
    const auto cs = dim_classes(k);
    INFO(text);
    CHECK_FALSE(why_not_merge(k, class_of(cs, "R"), class_of(cs, "C")).empty());
    CHECK_THROWS_AS(merge_classes(k, class_of(cs, "R"), class_of(cs, "C")), kevo::Error);
  }
}

TEST_CASE("random kernels merged at every mergeable pair of classes compute the same values") {
  int merged = 0;
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    const Kernel k = random_kernel(seed);
    const auto cs = dim_classes(k);
    for (const auto& a : cs)
      for (const auto& b : cs) {
        if (&a == &b || !why_not_merge(k, a, b).empty()) continue;
        INFO("seed " << seed << ", dims " << a.dims.front() << " and " << b.dims.front() << "\n" << print_kernel(k));
        const Kernel m = merge_classes(k, a, b);
        same_values(k, m, seed);
        ++merged;
      }
  }
  CHECK(merged > 10);
}

TEST_CASE("divisions become products with a reciprocal; values agree up to its rounding") {
  const Kernel k = parse_ok(
      "kernel d(X: fp32[R=4, C=8], S: fp32[R]) -> (Y: fp32[R, C]) {\n"
      "  T[r, c] = X[r, c] / S[r] + X[r, c] / 4 + 6 / 3\n"
      "  Y[r, c] = 2 / T[r, c]\n"
      "}\n");
  const Kernel p = divisions_as_products(k);
  REQUIRE(p.ops.size() == k.ops.size());
  const auto count = [](const Expr& e, Fn fn, auto&& self) -> int {
    int n = e.kind == Expr::Kind::call && e.fn == fn ? 1 : 0;
    for (const auto& a : e.args) n += self(a, fn, self);
    return n;
  };
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    CHECK(count(p.ops[i].expr, Fn::div, count) == 0);
    CHECK(p.ops[i].out == k.ops[i].out);
  }
  CHECK(count(p.ops[0].expr, Fn::reciprocal, count) == 1);  // of S; X / 4 is X * 0.25, 6 / 3 folds to 2
  CHECK(count(p.ops[1].expr, Fn::reciprocal, count) == 1);
  CHECK(p.tensors == k.tensors);
  same_values(k, p, 3);
  // without divisions: unchanged
  const Kernel plain = parse_ok("kernel e(X: fp32[N=8]) -> (Y: fp32[N]) {\n  Y[i] = X[i] * 2 + 1\n}\n");
  CHECK(divisions_as_products(plain).ops == plain.ops);
}

TEST_CASE("random kernels with their divisions as products compute the same values, to the reciprocal's rounding") {
  int with_div = 0;
  for (std::uint64_t seed = 1; seed <= 80; ++seed) {
    const Kernel k = random_kernel(seed);
    const Kernel p = divisions_as_products(k);
    if (p.ops == k.ops) continue;
    ++with_div;
    INFO("seed " << seed << "\n" << print_kernel(k));
    const auto in = random_inputs(k, seed);
    const auto va = evaluate(k, in, {true});
    const auto vb = evaluate(p, in, {true});
    for (std::size_t t = 0; t < k.tensors.size(); ++t) {
      if (k.tensors[t].role != Role::output) continue;
      INFO(k.tensors[t].name);
      // one rounding of 1/y in fp64 may move a value across a rounding boundary of a 16-bit temp
      for (std::size_t i = 0; i < va[t].size(); ++i) REQUIRE(vb[t][i] == Approx(va[t][i]).epsilon(2e-2).margin(1e-3));
    }
  }
  CHECK(with_div > 10);
}
