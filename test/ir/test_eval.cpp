// The reference evaluator against independent hand-written loops (in double) at small shapes.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

#include "kevo/ir.hpp"

using namespace kevo::ir;

namespace {

struct Run {
  Kernel k;
  std::vector<std::vector<float>> in, out;
  const std::vector<float>& t(const std::string& name) const {
    for (std::size_t i = 0; i < k.tensors.size(); ++i)
      if (k.tensors[i].name == name) return k.tensors[i].role == Role::input ? in[i] : out[i];
    FAIL("no tensor " << name);
    return in[0];
  }
  double v(const std::string& name, std::size_t i) const { return t(name)[i]; }
};

Run run(const std::string& spec, EvalOptions opt = {}, std::uint64_t seed = 7) {
  auto k = workload(spec);
  if (!k) FAIL(k.error());
  Run r{*k, {}, {}};
  r.in = random_inputs(r.k, seed);
  r.out = evaluate(r.k, r.in, opt);
  return r;
}

// Compares an output against a double reference, allowing for its storage rounding.
void check_close(const std::vector<float>& got, const std::vector<double>& want, DType dt) {
  REQUIRE(got.size() == want.size());
  const double rel = dt == DType::fp32 ? 1e-5 : dt == DType::bf16 ? 1.0 / 64 : 1.0 / 512;
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << " of " << got.size());
    REQUIRE(std::isfinite(got[i]));
    CHECK(std::abs(got[i] - want[i]) <= rel * std::abs(want[i]) + rel * 0.05 * scale + 1e-6);
  }
}

double gelu_tanh(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
double gelu_erf(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double silu(double x) { return x / (1 + std::exp(-x)); }

std::vector<double> matmul_ref(const Run& r, int M, int N, int K, const std::string& layout) {
  std::vector<double> c(static_cast<std::size_t>(M * N));
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = 0;
      for (int k = 0; k < K; ++k) {
        const double a = layout == "tn" ? r.v("A", static_cast<std::size_t>(k * M + m)) : r.v("A", static_cast<std::size_t>(m * K + k));
        const double b = layout == "nt" ? r.v("B", static_cast<std::size_t>(n * K + k)) : r.v("B", static_cast<std::size_t>(k * N + n));
        s += a * b;
      }
      c[static_cast<std::size_t>(m * N + n)] = s;
    }
  return c;
}

}  // namespace

TEST_CASE("matmul matches hand loops in every layout") {
  for (std::string layout : {"nn", "tn", "nt"}) {
    INFO(layout);
    const Run r = run("matmul:M=13,N=7,K=19,layout=" + layout);
    check_close(r.t("C"), matmul_ref(r, 13, 7, 19, layout), DType::bf16);
  }
}

TEST_CASE("matmul in fp32 and fp16 matches hand loops at the tighter tolerance of its dtype") {
  const Run r = run("matmul:M=9,N=11,K=5,dtype=fp32");
  check_close(r.t("C"), matmul_ref(r, 9, 11, 5, "nn"), DType::fp32);
  const Run h = run("matmul:M=9,N=11,K=5,dtype=fp16");
  check_close(h.t("C"), matmul_ref(h, 9, 11, 5, "nn"), DType::fp16);
}

TEST_CASE("batched matmul matches hand loops") {
  const int B = 3, M = 5, N = 6, K = 7;
  const Run r = run("bmm:B=3,M=5,N=6,K=7");
  std::vector<double> c(B * M * N);
  for (int b = 0; b < B; ++b)
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        double s = 0;
        for (int k = 0; k < K; ++k)
          s += r.v("A", static_cast<std::size_t>((b * M + m) * K + k)) * r.v("W", static_cast<std::size_t>((b * K + k) * N + n));
        c[static_cast<std::size_t>((b * M + m) * N + n)] = s;
      }
  check_close(r.t("C"), c, DType::bf16);
}

TEST_CASE("matmul + bias + activation matches hand loops for every activation") {
  const int M = 6, N = 10, K = 12;
  for (std::string act : {"gelu", "gelu_erf", "relu", "silu", "none"}) {
    INFO(act);
    const Run r = run("matmul_bias_act:M=6,N=10,K=12,act=" + act);
    std::vector<double> c(M * N);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        double s = 0;
        for (int k = 0; k < K; ++k)
          s += r.v("A", static_cast<std::size_t>(m * K + k)) * r.v("W", static_cast<std::size_t>(k * N + n));
        const double x = s + r.v("bias", static_cast<std::size_t>(n));
        c[static_cast<std::size_t>(m * N + n)] = act == "gelu"     ? gelu_tanh(x)
                                                 : act == "gelu_erf" ? gelu_erf(x)
                                                 : act == "relu"     ? std::max(x, 0.0)
                                                 : act == "silu"     ? silu(x)
                                                                     : x;
      }
    check_close(r.t("C"), c, DType::bf16);
  }
}

TEST_CASE("softmax matches hand loops and rows sum to one") {
  const int R = 5, C = 37;
  const Run r = run("softmax:R=5,C=37");
  std::vector<double> y(R * C);
  for (int i = 0; i < R; ++i) {
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < C; ++j) mx = std::max(mx, r.v("X", static_cast<std::size_t>(i * C + j)));
    for (int j = 0; j < C; ++j) s += std::exp(r.v("X", static_cast<std::size_t>(i * C + j)) - mx);
    for (int j = 0; j < C; ++j) y[static_cast<std::size_t>(i * C + j)] = std::exp(r.v("X", static_cast<std::size_t>(i * C + j)) - mx) / s;
  }
  check_close(r.t("Y"), y, DType::fp32);
  double row = 0;
  for (int j = 0; j < C; ++j) row += r.v("Y", static_cast<std::size_t>(j));
  CHECK(row == Approx(1.0).epsilon(1e-5));
}

TEST_CASE("layernorm matches hand loops") {
  const int R = 4, C = 33;
  const double eps = 1e-5;
  const Run r = run("layernorm:R=4,C=33");
  std::vector<double> y(R * C);
  for (int i = 0; i < R; ++i) {
    double mu = 0, var = 0;
    for (int j = 0; j < C; ++j) mu += r.v("X", static_cast<std::size_t>(i * C + j));
    mu /= C;
    for (int j = 0; j < C; ++j) var += std::pow(r.v("X", static_cast<std::size_t>(i * C + j)) - mu, 2);
    var /= C;
    for (int j = 0; j < C; ++j)
      y[static_cast<std::size_t>(i * C + j)] = (r.v("X", static_cast<std::size_t>(i * C + j)) - mu) / std::sqrt(var + eps) *
                                                   r.v("gamma", static_cast<std::size_t>(j)) +
                                               r.v("beta", static_cast<std::size_t>(j));
  }
  check_close(r.t("Y"), y, DType::fp32);
}

TEST_CASE("rmsnorm matches hand loops") {
  const int R = 3, C = 40;
  const double eps = 1e-6;
  const Run r = run("rmsnorm:R=3,C=40");
  std::vector<double> y(R * C);
  for (int i = 0; i < R; ++i) {
    double ms = 0;
    for (int j = 0; j < C; ++j) ms += std::pow(r.v("X", static_cast<std::size_t>(i * C + j)), 2);
    ms /= C;
    for (int j = 0; j < C; ++j)
      y[static_cast<std::size_t>(i * C + j)] =
          r.v("X", static_cast<std::size_t>(i * C + j)) / std::sqrt(ms + eps) * r.v("gamma", static_cast<std::size_t>(j));
  }
  check_close(r.t("Y"), y, DType::fp32);
}

namespace {
std::vector<double> attention_ref(const Run& r, int B, int H, int S, int D, bool causal) {
  std::vector<double> o(static_cast<std::size_t>(B * H * S * D));
  auto at = [&](const char* t, int b, int h, int s, int d) {
    return r.v(t, static_cast<std::size_t>(((b * H + h) * S + s) * D + d));
  };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < S; ++i) {
        std::vector<double> p(static_cast<std::size_t>(S));
        double mx = -INFINITY;
        for (int j = 0; j < S; ++j) {
          double s = 0;
          for (int d = 0; d < D; ++d) s += at("Q", b, h, i, d) * at("K", b, h, j, d);
          p[static_cast<std::size_t>(j)] = (causal && j > i) ? -INFINITY : s / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, p[static_cast<std::size_t>(j)]);
        }
        double l = 0;
        for (auto& x : p) l += (x = std::exp(x - mx));
        for (int d = 0; d < D; ++d) {
          double acc = 0;
          for (int j = 0; j < S; ++j) acc += p[static_cast<std::size_t>(j)] * at("V", b, h, j, d);
          o[static_cast<std::size_t>(((b * H + h) * S + i) * D + d)] = acc / l;
        }
      }
  return o;
}
}  // namespace

TEST_CASE("attention matches hand loops") {
  const Run r = run("attention:B=2,H=3,S=9,D=8,causal=0");
  check_close(r.t("O"), attention_ref(r, 2, 3, 9, 8, false), DType::bf16);
}

TEST_CASE("causal attention matches hand loops and its first row copies V's first row") {
  const Run r = run("attention:B=1,H=2,S=11,D=4,causal=1");
  check_close(r.t("O"), attention_ref(r, 1, 2, 11, 4, true), DType::bf16);
  for (int d = 0; d < 4; ++d) CHECK(r.v("O", static_cast<std::size_t>(d)) == r.v("V", static_cast<std::size_t>(d)));
}

TEST_CASE("swiglu matches hand loops") {
  const int M = 4, D = 6, F = 10;
  const Run r = run("swiglu:M=4,D=6,F=10");
  std::vector<double> y(M * D, 0.0);
  for (int m = 0; m < M; ++m)
    for (int f = 0; f < F; ++f) {
      double g = 0, u = 0;
      for (int d = 0; d < D; ++d) {
        g += r.v("X", static_cast<std::size_t>(m * D + d)) * r.v("Wg", static_cast<std::size_t>(d * F + f));
        u += r.v("X", static_cast<std::size_t>(m * D + d)) * r.v("Wu", static_cast<std::size_t>(d * F + f));
      }
      const double h = silu(g) * u;
      for (int d = 0; d < D; ++d) y[static_cast<std::size_t>(m * D + d)] += h * r.v("Wd", static_cast<std::size_t>(f * D + d));
    }
  check_close(r.t("Y"), y, DType::bf16);
}

TEST_CASE("an elementwise chain matches hand loops") {
  const Run r = run("eltwise:R=3,C=7,ops=exp+mul+tanh+sub+relu");
  std::vector<double> z(21);
  for (std::size_t i = 0; i < 21; ++i)
    z[i] = std::max(0.0, std::tanh(std::exp(r.v("X", i)) * r.v("Y", i)) - r.v("Y", i));
  check_close(r.t("Z"), z, DType::fp32);
}

TEST_CASE("contractions outside the matrix-product pattern use the generic loops and agree") {
  // A repeated index (a diagonal) and an output index that no operand uses (a broadcast).
  auto k = parse_kernel(R"(kernel odd(A: fp32[N=5, N], B: fp32[N, M=3]) -> (C: fp32[N, M, P=2], D: fp32[N, M]) {
    C[i, j, p] = sum(k) A[k, k] * B[i, j]
    D[i, j] = sum(k) A[i, k] * B[k, j]
  })");
  if (!k) FAIL(k.error().str());
  const auto in = random_inputs(*k, 3);
  const auto out = evaluate(*k, in);
  double tr = 0;
  for (int i = 0; i < 5; ++i) tr += in[0][static_cast<std::size_t>(i * 5 + i)];
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j) {
      for (int p = 0; p < 2; ++p)
        CHECK(out[2][static_cast<std::size_t>((i * 3 + j) * 2 + p)] ==
              Approx(5 * in[1][static_cast<std::size_t>(i * 3 + j)] * tr / 5).epsilon(1e-5));
      double s = 0;
      for (int kk = 0; kk < 5; ++kk) s += in[0][static_cast<std::size_t>(i * 5 + kk)] * in[1][static_cast<std::size_t>(kk * 3 + j)];
      CHECK(out[3][static_cast<std::size_t>(i * 3 + j)] == Approx(s).epsilon(1e-5).margin(1e-6));
    }
}

TEST_CASE("min, max and mean reductions over two indices match hand loops") {
  auto k = parse_kernel(R"(kernel red(X: fp32[A=3, B=4, C=5]) -> (mn: fp32[A], mx: fp32[A], av: fp32[A]) {
    mn[a] = min(b, c) X[a, b, c]
    mx[a] = max(b, c) X[a, b, c]
    av[a] = mean(b, c) X[a, b, c] * 2
  })");
  if (!k) FAIL(k.error().str());
  const auto in = random_inputs(*k, 5);
  const auto out = evaluate(*k, in);
  for (int a = 0; a < 3; ++a) {
    double lo = INFINITY, hi = -INFINITY, s = 0;
    for (int i = 0; i < 20; ++i) {
      const double x = in[0][static_cast<std::size_t>(a * 20 + i)];
      lo = std::min(lo, x);
      hi = std::max(hi, x);
      s += 2 * x;
    }
    CHECK(out[1][static_cast<std::size_t>(a)] == lo);
    CHECK(out[2][static_cast<std::size_t>(a)] == hi);
    CHECK(out[3][static_cast<std::size_t>(a)] == Approx(s / 20).epsilon(1e-6));
  }
}

TEST_CASE("cast rounds inside an expression and outputs are rounded to their dtype") {
  auto k = parse_kernel(R"(kernel c(X: fp32[N=2]) -> (Y: fp32[N], Z: bf16[N]) {
    Y[i] = cast<bf16>(X[i]) - X[i]
    Z[i] = X[i] + 0
  })");
  if (!k) FAIL(k.error().str());
  std::vector<std::vector<float>> in{{1.00390625f, 3.0f}, {}, {}};
  const auto out = evaluate(*k, in);
  CHECK(out[1][0] == -0.00390625f);
  CHECK(out[1][1] == 0.0f);
  CHECK(out[2][0] == 1.0f);
}

TEST_CASE("inputs are rounded to their storage dtype on the way in") {
  const Kernel k = *workload("matmul:M=1,N=1,K=1,dtype=bf16");
  std::vector<std::vector<float>> in{{1.00390625f}, {1.0f}, {}};
  const auto out = evaluate(k, in);
  CHECK(out[0][0] == 1.0f);
  CHECK(out[2][0] == 1.0f);
}

TEST_CASE("the fp64 option is at least as close to a double reference as fp32") {
  const int R = 2, C = 4096;
  const Run r32 = run("softmax:R=2,C=4096");
  const Run r64 = run("softmax:R=2,C=4096", EvalOptions{.fp64 = true});
  double e32 = 0, e64 = 0;
  for (int i = 0; i < R; ++i) {
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < C; ++j) mx = std::max(mx, r32.v("X", static_cast<std::size_t>(i * C + j)));
    for (int j = 0; j < C; ++j) s += std::exp(r32.v("X", static_cast<std::size_t>(i * C + j)) - mx);
    for (int j = 0; j < C; ++j) {
      const auto idx = static_cast<std::size_t>(i * C + j);
      const double y = std::exp(r32.v("X", idx) - mx) / s;
      e32 = std::max(e32, std::abs(r32.v("Y", idx) - y) / y);
      e64 = std::max(e64, std::abs(r64.v("Y", idx) - y) / y);
    }
  }
  CHECK(e64 <= e32);
  CHECK(e64 < 1e-7);
  CHECK(e32 < 1e-4);
}

TEST_CASE("evaluate rejects inputs of the wrong size") {
  const Kernel k = *workload("matmul:M=2,N=2,K=2");
  std::vector<std::vector<float>> in{{1, 2, 3}, {1, 2, 3, 4}, {}};
  CHECK_THROWS_AS(evaluate(k, in), kevo::Error);
}

TEST_CASE("random inputs are deterministic per seed and non-degenerate") {
  const Kernel k = *workload("layernorm:R=8,C=64,dtype=bf16");
  const auto a = random_inputs(k, 42), b = random_inputs(k, 42), c = random_inputs(k, 43);
  CHECK(a == b);
  CHECK(a != c);
  const auto& x = a[0];
  REQUIRE(x.size() == 512);
  int neg = 0;
  float lo = 1, hi = 0;
  for (float v : x) {
    CHECK(v != 0.0f);
    CHECK(std::abs(v) <= 1.0f);
    CHECK(round_to(DType::bf16, v) == v);
    neg += v < 0;
    lo = std::min(lo, std::abs(v));
    hi = std::max(hi, std::abs(v));
  }
  CHECK(neg > 100);
  CHECK(neg < 412);
  CHECK(hi / lo > 8);  // magnitudes spread over more than three binades
  for (float g : a[1]) {  // gamma
    CHECK(g > 0.7f);
    CHECK(g < 1.3f);
  }
  CHECK(a[3].empty());  // the output gets no values
}

TEST_CASE("NaN propagates through max, min, relu and max/min reductions") {
  auto k = parse_kernel(R"(kernel n(X: fp32[N=3], Y: fp32[N]) -> (A: fp32[N], B: fp32[N], C: fp32[N], D: fp32[], E: fp32[]) {
    A[i] = max(X[i], Y[i])
    B[i] = min(Y[i], X[i])
    C[i] = relu(X[i])
    D[] = max(i) X[i]
    E[] = min(i) X[i]
  })");
  if (!k) FAIL(k.error().str());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::vector<float>> in{{1, nan, -1}, {2, 0, -3}, {}, {}, {}, {}, {}};
  const auto out = evaluate(*k, in);
  CHECK(out[2][0] == 2.0f);
  CHECK(std::isnan(out[2][1]));
  CHECK(out[3][2] == -3.0f);
  CHECK(std::isnan(out[3][1]));
  CHECK(std::isnan(out[4][1]));
  CHECK(out[4][2] == 0.0f);
  CHECK(std::isnan(out[5][0]));
  CHECK(std::isnan(out[6][0]));
}

TEST_CASE("evaluate_with_error: fp32's own error, large where the algebra cancels and covering an fp32 evaluation") {
  // (x + 1e4) - 1e4: every fp32 program rounds x + 1e4 to an ulp of 1e4 (2^-10); x * 2 is exact
  // but for its own rounding.
  auto k = parse_kernel(
      "kernel c(X: fp32[R=8, C=64]) -> (Y: fp32[R, C], Z: fp32[R, C]) {\n  Y[r, c] = (X[r, c] + 10000.0) - 10000.0\n"
      "  Z[r, c] = X[r, c] * 2.0\n}\n");
  REQUIRE(k);
  const auto in = random_inputs(*k, 3);
  const auto r = evaluate_with_error(*k, in);
  const auto fp64 = evaluate(*k, in, {.fp64 = true});
  CHECK(r.values == fp64);  // the same values as the fp64 evaluation
  for (std::size_t i = 0; i < r.error[1].size(); ++i) {
    INFO(i);
    CHECK(r.error[1][i] >= 0x1p-11);           // half an ulp of 1e4: what x + 1e4's rounding may cost
    CHECK(r.error[1][i] <= 0x1p-24 * 1.1e4);  // (1e4 itself is exact in fp32)
    CHECK(r.error[2][i] <= 0x1p-24 * 4 * std::fabs(r.values[2][i]) + 1e-30);
  }
  CHECK(r.error[0] == std::vector<float>(in[0].size(), 0.0f));  // inputs are exact
  // Over the workload library, the fp32 evaluation (Eigen's blocked sums, another order than
  // fp64's) lands within twice the estimate, plus a few ulps of the value, at every element.
  for (const char* spec : {"matmul:M=64,N=96,K=700,dtype=fp32", "matmul:M=32,N=48,K=256,dtype=bf16", "softmax:R=16,C=1000",
                           "layernorm:R=16,C=900", "rmsnorm:R=16,C=512", "attention:B=1,H=2,S=64,D=32,causal=1",
                           "matmul_bias_act:M=32,N=64,K=300,act=gelu", "swiglu:M=16,D=128,F=256", "conv1d_dw:N=2,C=32,W=100,F=3,pad=1"}) {
    INFO(spec);
    auto w = workload(spec);
    REQUIRE(w);
    const auto x = random_inputs(*w, 11);
    const auto e = evaluate_with_error(*w, x);
    const auto f32 = evaluate(*w, x);
    std::size_t checked = 0, worst_at = 0;
    double worst = 0;
    for (std::size_t t = 0; t < w->tensors.size(); ++t) {
      if (w->tensors[t].role != Role::output) continue;
      for (std::size_t i = 0; i < f32[t].size(); ++i, ++checked) {
        const double d = std::fabs(double{f32[t][i]} - double{e.values[t][i]});
        const double ulps = 4 * 0x1p-24 * std::fabs(double{e.values[t][i]}) + (w->tensors[t].dtype == DType::fp32 ? 0 : 0x1p-7 * std::fabs(double{e.values[t][i]}));
        const double ratio = d / (2 * double{e.error[t][i]} + ulps + 1e-6);  // (the verifier's absolute floor)
        if (ratio > worst) worst = ratio, worst_at = i;
      }
    }
    INFO("worst ratio " << worst << " at " << worst_at << " of " << checked);
    CHECK(checked > 0);
    CHECK(worst <= 1.0);
  }
}

// Every engine computes in fp32: a value past fp32's range is infinite whatever the schedule,
// fused or in a temp, though the double evaluator could carry it (the fp64 reference said
// 7.8e30 where every program gives inf, and every schedule failed verification).
TEST_CASE("the fp64 reference overflows where fp32 does, in a fused node and in a temp", "[ir][eval]") {
  for (const char* text :
       {"kernel a(X: fp32[R=2, C=3]) -> (Y: fp32[R, C]) {\n  Y[r, c] = exp(X[r, c] * 100.0) * 0.0000000001\n}\n",
        "kernel b(X: fp32[R=2, C=3]) -> (Y: fp32[R, C]) {\n  t[r, c] = exp(X[r, c] * 100.0)\n  Y[r, c] = t[r, c] * 0.0000000001\n}\n",
        "kernel c(X: fp32[R=2, C=3]) -> (Y: fp32[R]) {\n  t[r] = sum(c) exp(X[r, c] * 100.0)\n  Y[r] = t[r] * 0.0000000001\n}\n"}) {
    auto k = parse_kernel(text);
    REQUIRE(k);
    INFO(text);
    std::vector<std::vector<float>> in(k->tensors.size());
    in[0] = {1.0f, 0.5f, -1.0f, 0.9f, -0.5f, 0.1f};  // exp(100) and exp(90) overflow fp32, exp(50) does not
    const auto f32 = evaluate(*k, in);
    const auto f64 = evaluate_with_error(*k, in);
    const std::size_t y = k->tensors.size() - 1;
    REQUIRE(f64.values[y].size() == f32[y].size());
    for (std::size_t i = 0; i < f32[y].size(); ++i) {
      INFO("element " << i);
      CHECK(std::isinf(f64.values[y][i]) == std::isinf(f32[y][i]));
    }
    CHECK(std::isinf(f64.values[y][0]));
  }
  // within range the double reference keeps its precision: exp(50) * 1e-10 is finite
  auto k = parse_kernel("kernel d(X: fp32[N=1]) -> (Y: fp32[N]) {\n  Y[n] = exp(X[n] * 100.0) * 0.0000000001\n}\n");
  REQUIRE(k);
  std::vector<std::vector<float>> in(k->tensors.size());
  in[0] = {0.5f};
  CHECK(evaluate_with_error(*k, in).values[1][0] == Approx(std::exp(50.0) * 1e-10).epsilon(1e-6));
}

TEST_CASE("a cancel flag stops random_inputs and evaluate in their copies and gathers as in their products") {
  // kevo.Kernel.reference's Ctrl-C at 4096^3 took 1.5 s to land (3.1 s on a loaded machine): the
  // inputs' draw and the contraction's gathers did not look at the flag
  const Kernel small = *workload("matmul:M=64,N=48,K=32,dtype=fp32");
  std::atomic<bool> cancel{false};
  CHECK(random_inputs(small, 5, &cancel) == random_inputs(small, 5));  // an unset flag changes nothing
  cancel = true;
  CHECK_THROWS_WITH(random_inputs(small, 5, &cancel), "random_inputs: cancelled");
  EvalOptions eo;
  eo.cancel = &cancel;
  const auto in = random_inputs(small, 5);
  CHECK_THROWS_WITH(evaluate(small, in, eo), "evaluate: cancelled");
  cancel = false;
  CHECK(evaluate(small, in, eo) == evaluate(small, in));

  // set from another thread while a 4096^3 product runs (seconds whole): it stops
  const Kernel big = *workload("matmul:M=4096,N=4096,K=4096,dtype=fp32");
  std::vector<std::vector<float>> ones(big.tensors.size());
  for (std::size_t t = 0; t < big.tensors.size(); ++t)
    if (big.tensors[t].role == Role::input) ones[t].assign(static_cast<std::size_t>(big.elements(big.tensors[t])), 1.0f);
  // within a fraction of a second of the flag: it lands while the inputs are copied in, and before
  // this change the copy and both gathers ran on (0.8 s here, more on a loaded machine); now the
  // flag is looked at every 2^18 values (milliseconds)
  using Clock = std::chrono::steady_clock;
  std::atomic<Clock::rep> set_at{0};
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    set_at = Clock::now().time_since_epoch().count();
    cancel = true;
  });
  CHECK_THROWS_WITH(evaluate(big, ones, eo), "evaluate: cancelled");
  const auto stopped = Clock::now();
  setter.join();
  const double late = std::chrono::duration<double>(stopped - Clock::time_point(Clock::duration(set_at.load()))).count();
  INFO("stopped " << late << " s after the flag was set");
  CHECK(late < 0.5);
  cancel = false;
  std::thread setter2([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    cancel = true;
  });
  CHECK_THROWS_WITH(random_inputs(big, 5, &cancel), "random_inputs: cancelled");
  setter2.join();
}
