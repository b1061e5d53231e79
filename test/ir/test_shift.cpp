// Shifted and strided access indices (convolutions, stencils): parse, print, checks, the
// reference evaluator's zero padding, the builder and the conv1d_dw workload.
#include <catch2/catch.hpp>

#include <cmath>

#include "kevo/ir.hpp"

using namespace kevo::ir;

namespace {

Kernel parse_ok(const std::string& text) {
  auto k = parse_kernel(text, "shift.kir");
  if (!k) FAIL(k.error().str());
  return *k;
}

const std::vector<float>& tensor(const Kernel& k, const std::vector<std::vector<float>>& v, const std::string& name) {
  for (std::size_t i = 0; i < k.tensors.size(); ++i)
    if (k.tensors[i].name == name) return v[i];
  FAIL("no tensor " << name);
  return v[0];
}

}  // namespace

TEST_CASE("shifted and strided indices parse into stride, added index and offset, and print back") {
  const Kernel k = parse_ok(
      "kernel c(X: fp32[N=2, C=3, W=10], Wt: fp32[C, F=3]) -> (Y: fp32[N, C, V=4]) {\n"
      "  Y[n, c, v] = sum(f) X[n, c, f + v*2 - 1] * Wt[c, f]\n"
      "}\n");
  const Expr& x = k.ops[0].expr.args[0];
  REQUIRE(x.indices == std::vector<std::string>{"n", "c", "v"});  // the strided index is the main one
  REQUIRE(x.shifts.size() == 3);
  CHECK(x.shifts[0].plain());
  CHECK(x.shifts[2] == IndexShift{2, "f", -1});
  CHECK(k.ops[0].kind() == OpKind::reduce);  // a product with a shifted operand is not a matmul
  const std::string text = print_kernel(k);
  CHECK(text.find("X[n, c, 2*v + f - 1]") != std::string::npos);
  CHECK(parse_ok(text) == k);
  // plain spellings stay plain: no shifts are stored
  const Kernel p = parse_ok("kernel p(A: fp32[M=4]) -> (C: fp32[M]) {\n  C[i] = A[i + 0] + A[1*i]\n}\n");
  CHECK(p.ops[0].expr.args[0].shifts.empty());
  CHECK(p.ops[0].expr.args[1].shifts.empty());
  CHECK(print_kernel(p).find("A[i] + A[i]") != std::string::npos);
}

TEST_CASE("bad index expressions give located one-line errors") {
  struct Bad {
    const char* body;  // statement line under kernel k(A: fp32[M=8], B: fp32[K=3]) -> (C: fp32[M])
    int column;
    const char* message;
  };
  const std::vector<Bad> cases = {
      {"  C[i] = A[i - j] * B[j]", 16, "index 'j' is subtracted"},
      {"  C[i] = A[2*i + 3*j] * B[j]", 18, "at most one index of an index expression has a stride"},
      {"  C[i] = A[i + i] * B[i]", 16, "index 'i' appears twice in one index expression"},
      {"  C[i] = A[i + 1.5] * B[i]", 16, "expected an integer stride or offset"},
      {"  C[i] = A[0*i] * B[i]", 12, "the stride of index 'i' is 0"},
      {"  C[i] = A[3] * B[i]", 12, "an index expression needs an index name"},
      {"  C[i] = A[i + j + k] * B[j]", 20, "an index expression adds at most two indices"},
      {"  C[i] = A[i +] * B[i]", 15, "expected an index name such as 'i' or an index expression"},
      {"  C[i] = A[i * j] * B[j]", 16, "expected an integer stride"},
      {"  C[i] = A[2 * 3] * B[i]", 16, "expected an index name after '*'"},
  };
  for (const auto& c : cases) {
    const std::string text = std::string("kernel k(A: fp32[M=8], B: fp32[K=3]) -> (C: fp32[M]) {\n") + c.body + "\n}\n";
    INFO(text);
    auto k = parse_kernel(text, "bad.kir");
    REQUIRE_FALSE(k.has_value());
    INFO(k.error().str());
    CHECK(k.error().loc.line == 2);
    CHECK(k.error().loc.column == c.column);
    CHECK(k.error().message.find(c.message) != std::string::npos);
  }
}

TEST_CASE("checks of shifted accesses: only inputs, extents from plain uses, sums of sizes") {
  struct Bad {
    const char* text;
    const char* message;
  };
  const std::vector<Bad> cases = {
      {"kernel k(A: fp32[M=8]) -> (C: fp32[M]) {\n  t[i] = A[i] * 2\n  C[i] = t[i + 1]\n}\n",
       "reads temp 't' with a shifted or strided index; only inputs may be read so"},
      {"kernel k(A: fp32[M=8], B: fp32[K=3]) -> (C: fp32[M]) {\n  C[i] = sum(j) A[i + j]\n}\n",
       "index 'j' is used only in shifted positions (A[i + j])"},
      {"kernel k(A: fp32[M=8], B: fp32[K=3]) -> (C: fp32[M]) {\n  C[i] = sum(j) A[i + j] * A[2*j]\n}\n",
       "index 'j' is used only in shifted positions"},
      {"kernel k(A: fp32[M=8], B: fp32[K=3]) -> (C: fp32[M]) {\n  C[i] = A[i + q] * B[0 + i]\n}\n",
       "index 'q' in A[i + q] is not one of the output indices (i)"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    auto k = parse_kernel(c.text, "bad.kir");
    REQUIRE_FALSE(k.has_value());
    INFO(k.error().str());
    CHECK(k.error().loc.line >= 2);
    CHECK(k.error().message.find(c.message) != std::string::npos);
  }
  // an index inside a shift does not bind the dimension it reads: w (W=6) reads X[w + f] over
  // a dimension of size 8, and f ranges over Wt's F=3
  const Kernel ok = parse_ok(
      "kernel k(X: fp32[V=8], Wt: fp32[F=3]) -> (Y: fp32[W=6]) {\n  Y[w] = sum(f) X[w + f] * Wt[f]\n}\n");
  CHECK(ok.op_indices(0) == std::vector<std::pair<std::string, std::int64_t>>{{"w", 6}, {"f", 3}});
}

TEST_CASE("the reference evaluator reads zero outside a shifted input (conv1d_dw against hand loops)") {
  for (const char* spec : {"conv1d_dw:N=2,C=3,W=11,F=3,pad=1", "conv1d_dw:N=1,C=2,W=7,F=4,pad=0",
                           "conv1d_dw:N=1,C=2,W=5,F=5,pad=3"}) {
    INFO(spec);
    auto k = workload(spec);
    if (!k) FAIL(k.error());
    const auto in = random_inputs(*k, 3);
    const auto out = evaluate(*k, in);
    const auto& X = tensor(*k, in, "X");
    const auto& Wt = tensor(*k, in, "Wt");
    const auto& Y = tensor(*k, out, "Y");
    const std::int64_t N = k->dim_size("N"), C = k->dim_size("C"), W = k->dim_size("W"), F = k->dim_size("F");
    const std::int64_t pad = -k->ops[0].expr.args[0].shifts[2].offset;
    std::int64_t zeros_read = 0;
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t c = 0; c < C; ++c)
        for (std::int64_t w = 0; w < W; ++w) {
          double s = 0;
          for (std::int64_t f = 0; f < F; ++f) {
            const std::int64_t x = w + f - pad;
            if (x < 0 || x >= W) {
              ++zeros_read;
              continue;
            }
            s += static_cast<double>(X[static_cast<std::size_t>((n * C + c) * W + x)]) * Wt[static_cast<std::size_t>(c * F + f)];
          }
          CHECK(Y[static_cast<std::size_t>((n * C + c) * W + w)] == Approx(s).margin(1e-6));
        }
    CHECK(zeros_read > 0);  // every case reaches a border
  }
}

TEST_CASE("a strided, dilated read evaluates like hand loops, fp64 too") {
  // Y[v] = sum(f) X[2*v + f - 1] * Wt[f] and a dilated Z[w] = sum(f) X[w + 2*f] * Wt[f]
  const Kernel k = parse_ok(
      "kernel s(X: fp32[L=9], Wt: fp32[F=3]) -> (Y: fp32[V=5], Z: fp32[L]) {\n"
      "  Y[v] = sum(f) X[2*v + f - 1] * Wt[f]\n"
      "  Z[w] = sum(f) X[2*f + w] * Wt[f]\n"
      "}\n");
  CHECK(k.ops[1].expr.args[0].indices[0] == "f");  // the strided index is the main one
  const auto in = random_inputs(k, 5);
  for (bool fp64 : {false, true}) {
    const auto out = evaluate(k, in, {.fp64 = fp64});
    const auto& X = tensor(k, in, "X");
    const auto& Wt = tensor(k, in, "Wt");
    for (int v = 0; v < 5; ++v) {
      double s = 0;
      for (int f = 0; f < 3; ++f)
        if (2 * v + f - 1 >= 0 && 2 * v + f - 1 < 9) s += static_cast<double>(X[static_cast<std::size_t>(2 * v + f - 1)]) * Wt[static_cast<std::size_t>(f)];
      CHECK(tensor(k, out, "Y")[static_cast<std::size_t>(v)] == Approx(s).margin(1e-6));
    }
    for (int w = 0; w < 9; ++w) {
      double s = 0;
      for (int f = 0; f < 3; ++f)
        if (w + 2 * f < 9) s += static_cast<double>(X[static_cast<std::size_t>(w + 2 * f)]) * Wt[static_cast<std::size_t>(f)];
      CHECK(tensor(k, out, "Z")[static_cast<std::size_t>(w)] == Approx(s).margin(1e-6));
    }
  }
}

TEST_CASE("the builder writes shifted accesses; the conv1d_dw workload is that kernel") {
  KernelBuilder b("conv1d_dw");
  b.dim("N", 8).dim("C", 512).dim("W", 2048).dim("F", 3);
  b.input("X", DType::fp32, {"N", "C", "W"}).input("Wt", DType::fp32, {"C", "F"}).output("Y", DType::fp32, {"N", "C", "W"});
  b.reduce(ReduceOp::sum, "Y", {"n", "c", "w"}, {"f"},
           access("X", {"n", "c", "w"}, {{}, {}, IndexShift{1, "f", -1}}) * access("Wt", {"c", "f"}));
  const auto built = b.build();
  if (!built) FAIL(built.error().str());
  const auto wl = workload("conv1d_dw");
  if (!wl) FAIL(wl.error());
  CHECK(*built == *wl);
  CHECK(print_kernel(*wl).find("sum(f) X[n, c, w + f - 1] * Wt[c, f]") != std::string::npos);
  // all-plain shifts from the builder are dropped, so the kernel equals its plain spelling
  const Expr e = access("A", {"m"}, {IndexShift{}});
  CHECK(e.shifts.empty());
  CHECK(!workload("conv1d_dw:pad=-1").has_value());
  CHECK(workload("conv1d_dw:pad=0").has_value());
  // FLOPs: one multiply and one add per (n, c, w, f)
  CHECK(analyze(*wl).flops == 2.0 * 8 * 512 * 2048 * 3);
}

TEST_CASE("a convolution written as a product names its taps; other shifted sums do not") {
  const auto taps = [](const std::string& text) { return conv_taps(parse_ok(text).ops[0]); };
  // conv2d, OIHW weights, padded: the channel c is contracted plainly, r and s shift X
  CHECK(taps("kernel a(X: fp32[C=4, H=8, W=8], Wt: fp32[O=6, C, R=3, S=3]) -> (Y: fp32[O, H, W]) {\n"
             "  Y[o, h, w] = sum(c, r, s) X[c, h + r - 1, w + s - 1] * Wt[o, c, r, s]\n}\n") ==
        std::vector<std::string>{"r", "s"});
  // strided, the shifted operand second, a tap on one dim only
  CHECK(taps("kernel b(Wt: fp32[O=6, C=4, F=3], X: fp32[C, W=17]) -> (Y: fp32[O, V=8]) {\n"
             "  Y[o, v] = sum(c, f) Wt[o, c, f] * X[c, 2*v + f]\n}\n") == std::vector<std::string>{"f"});
  // depthwise (no contracted channel), a plain contraction, a tap added to the channel, a shift
  // with no tap, a tap the plain operand lacks: none is a convolution product
  for (const char* text : {"kernel d(X: fp32[C=4, W=10], Wt: fp32[C, F=3]) -> (Y: fp32[C, V=8]) {\n"
                           "  Y[c, v] = sum(f) X[c, v + f] * Wt[c, f]\n}\n",
                           "kernel m(A: fp32[M=4, K=5], B: fp32[K, N=6]) -> (C: fp32[M, N]) {\n"
                           "  C[m, n] = sum(k) A[m, k] * B[k, n]\n}\n",
                           "kernel e(X: fp32[C=8, W=10], Wt: fp32[O=3, C, F=2]) -> (Y: fp32[O, W]) {\n"
                           "  Y[o, w] = sum(c, f) X[c + f, w] * Wt[o, c, f]\n}\n",
                           "kernel g(X: fp32[C=4, W=10], Wt: fp32[O=3, C]) -> (Y: fp32[O, V=9]) {\n"
                           "  Y[o, v] = sum(c) X[c, v + 1] * Wt[o, c]\n}\n"}) {
    INFO(text);
    CHECK(taps(text).empty());
  }
  // the roofline counts a convolution's multiply-adds as Tensor-engine work
  const Kernel k = parse_ok("kernel a(X: fp32[C=4, H=8, W=8], Wt: fp32[O=6, C, R=3, S=3]) -> (Y: fp32[O, H, W]) {\n"
                            "  Y[o, h, w] = sum(c, r, s) X[c, h + r - 1, w + s - 1] * Wt[o, c, r, s]\n}\n");
  const Analysis a = analyze(k);
  CHECK(a.contraction_flops == 2 * 6 * 8 * 8 * 4 * 3 * 3);
  CHECK(a.elementwise_ops == 0);
}
