// FLOP and byte counts checked by hand.
#include <catch2/catch.hpp>

#include <algorithm>

#include "kevo/ir.hpp"

using namespace kevo::ir;

TEST_CASE("matmul costs 2MNK FLOPs and reads A, B and writes C once") {
  const Kernel k = *workload("matmul:M=64,N=32,K=16,dtype=bf16");
  const Analysis a = analyze(k);
  CHECK(a.flops == 2 * 64 * 32 * 16);
  CHECK(a.contraction_flops == a.flops);
  CHECK(a.op_flops == std::vector<std::int64_t>{65536});
  CHECK(a.min_hbm_bytes == (64 * 16 + 16 * 32 + 64 * 32) * 2);
  CHECK(a.intensity == Approx(65536.0 / 7168.0));
  CHECK(analyze(*workload("matmul:M=64,N=32,K=16,dtype=fp8_e4m3")).min_hbm_bytes == 64 * 16 + 16 * 32 + 64 * 32);
}

TEST_CASE("softmax costs 5 FLOPs per element: max, subtract, exp, sum, divide") {
  const std::int64_t R = 8, C = 100;
  const Analysis a = analyze(*workload("softmax:R=8,C=100"));
  CHECK(a.op_flops == std::vector<std::int64_t>{R * C, 2 * R * C, R * C, R * C});
  CHECK(a.flops == 5 * R * C);
  CHECK(a.contraction_flops == 0);
  CHECK(a.min_hbm_bytes == 2 * R * C * 4);
  CHECK(a.intensity == Approx(5.0 / 8.0));
}

TEST_CASE("attention costs 4BHS²D contraction FLOPs plus its softmax and normalisation") {
  const std::int64_t B = 2, H = 4, S = 128, D = 64;
  const Analysis a = analyze(*workload("attention:B=2,H=4,S=128,D=64,causal=0"));
  const std::int64_t ss = B * H * S * S, sd = B * H * S * D;
  // s = QKᵀ, p = s*scale, mx = max, e = exp(p - mx), l = sum, pb = cast<bf16>(e), o = pb V, O = o / l
  CHECK(a.op_flops == std::vector<std::int64_t>{2 * ss * D, ss, ss, 2 * ss, ss, ss, 2 * ss * D, sd});
  CHECK(a.contraction_flops == 4 * ss * D);
  CHECK(a.flops == 4 * ss * D + 6 * ss + sd);
  CHECK(a.min_hbm_bytes == 4 * sd * 2);
  // the causal mask adds a comparison and a select per score, and removes every score above the
  // diagonal: the scores, the mask, the max, the exp, the sum, the cast and PV count on the kept
  // share (S + 1) / 2S of the positions only; the normalisation stays whole
  const Analysis c = analyze(*workload("attention:B=2,H=4,S=128,D=64,causal=1"));
  const double kept = static_cast<double>(S + 1) / (2.0 * S);
  const auto on_kept = [&](std::int64_t f) { return static_cast<std::int64_t>(std::llround(static_cast<double>(f) * kept)); };
  CHECK(c.op_flops == std::vector<std::int64_t>{on_kept(2 * ss * D), on_kept(3 * ss), on_kept(ss), on_kept(2 * ss), on_kept(ss),
                                                on_kept(ss), on_kept(2 * ss * D), sd});
  CHECK(c.contraction_flops == 2 * on_kept(2 * ss * D));
  CHECK(c.min_hbm_bytes == a.min_hbm_bytes);
}

TEST_CASE("a mask's kept share is counted exactly for any affine comparison of two indices") {
  // Y = select(cond, X * 2, -inf) over I x J: 4 calls per position on the kept ones (select,
  // compare, and the affine arithmetic), 1 on those of X * 2, whose only reader is the mask
  struct Case {
    const char* cond;
    bool (*keep)(long i, long j);
  };
  const Case cases[] = {
      {"j <= i", [](long i, long j) { return j <= i; }},
      {"j < i", [](long i, long j) { return j < i; }},
      {"2 * j > i + 3", [](long i, long j) { return 2 * j > i + 3; }},
      {"i - j >= 5", [](long i, long j) { return i - j >= 5; }},
      {"j == i", [](long i, long j) { return j == i; }},
      {"j != i + 1", [](long i, long j) { return j != i + 1; }},
  };
  const long I = 37, J = 53;
  for (const auto& c : cases) {
    INFO(c.cond);
    long kept = 0;
    for (long i = 0; i < I; ++i)
      for (long j = 0; j < J; ++j) kept += c.keep(i, j);
    const std::string text = std::string("kernel m(X: fp32[I=37, J=53]) -> (Y: fp32[I, J]) {\n  t[i, j] = X[i, j] * 2\n  Y[i, j] = select(") +
                             c.cond + ", t[i, j], -inf)\n}\n";
    auto k = parse_kernel(text);
    INFO((k ? std::string() : k.error().str()));
    REQUIRE(k);
    const Analysis a = analyze(*k);
    const Op& y = k->ops[1];
    std::int64_t calls = 0;
    std::vector<const Expr*> st{&y.expr};
    while (!st.empty()) {
      const Expr* e = st.back();
      st.pop_back();
      calls += e->kind == Expr::Kind::call;
      for (const auto& x : e->args) st.push_back(&x);
    }
    const double share = static_cast<double>(kept) / static_cast<double>(I * J);
    CHECK(a.op_flops[1] == std::llround(static_cast<double>(calls * I * J) * share));
    CHECK(a.op_flops[0] == std::llround(static_cast<double>(I * J) * share));  // t: read by the mask alone
  }
  // a masked value read elsewhere too is needed whole; a fill of 0 is not a mask here
  auto k = parse_kernel(
      "kernel m(X: fp32[I=8, J=8]) -> (Y: fp32[I, J], Z: fp32[I, J]) {\n  t[i, j] = X[i, j] * 2\n"
      "  Y[i, j] = select(j <= i, t[i, j], -inf)\n  Z[i, j] = t[i, j] + 1\n}\n");
  REQUIRE(k);
  CHECK(analyze(*k).op_flops[0] == 64);
  k = parse_kernel("kernel m(X: fp32[I=8, J=8]) -> (Y: fp32[I, J]) {\n  Y[i, j] = select(j <= i, X[i, j], 0)\n}\n");
  REQUIRE(k);
  CHECK(analyze(*k).op_flops[0] == 2 * 64);
}

TEST_CASE("layernorm counts its mean divisions and every elementwise call") {
  const std::int64_t R = 4, C = 8;
  const Analysis a = analyze(*workload("layernorm:R=4,C=8"));
  // mu: C adds + 1 divide per row; xc: sub; var: square + add, + divide; Y: mul rsqrt add mul add
  CHECK(a.op_flops == std::vector<std::int64_t>{R * C + R, R * C, 2 * R * C + R, 5 * R * C});
  CHECK(a.min_hbm_bytes == (2 * R * C + 2 * C) * 4);
}

TEST_CASE("the roofline's work counts take each operator over its own domain, and exp-like functions apart") {
  const std::int64_t R = 4, C = 8;
  // layernorm: rsqrt(var + eps) is a column (R each), not R·C; no activation-only function
  const Analysis ln = analyze(*workload("layernorm:R=4,C=8"));
  CHECK(ln.elementwise_ops == (R * C + R) + R * C + (2 * R * C + R) + (3 * R * C + 2 * R));
  CHECK(ln.activation_evals == 0);
  CHECK(ln.elementwise_ops < ln.flops);
  // softmax: max, subtract, exp, sum, divide over every element; the exp only an activation computes
  const Analysis sm = analyze(*workload("softmax:R=4,C=8"));
  CHECK(sm.elementwise_ops == 5 * R * C);
  CHECK(sm.activation_evals == R * C);
  // a matmul has no elementwise work
  CHECK(analyze(*workload("matmul:M=64,N=32,K=16")).elementwise_ops == 0);
  // operators on constants and index values alone, and casts, cost nothing; a reduction's
  // combining costs one per element it combines
  auto k = parse_kernel(
      "kernel m(X: fp32[I=8, J=16]) -> (Y: bf16[I, J], S: fp32[I]) {\n"
      "  Y[i, j] = cast<bf16>(select(j <= i + 1, tanh(X[i, j] * (2.0 * 3.0)), 0.0))\n"
      "  S[i] = sum(j) sigmoid(X[i, j])\n}\n");
  REQUIRE(k);
  const Analysis m = analyze(*k);
  CHECK(m.elementwise_ops == 3 * 8 * 16 + 2 * 8 * 16);  // mul, tanh, select; sigmoid, the sum
  CHECK(m.activation_evals == 2 * 8 * 16);
  // the causal mask: the scores' work on the kept share only, the normalisation whole
  const std::int64_t B = 2, H = 4, S = 128, D = 64;
  const std::int64_t ss = B * H * S * S, sd = B * H * S * D;
  const Analysis att = analyze(*workload("attention:B=2,H=4,S=128,D=64,causal=0"));
  CHECK(att.elementwise_ops == 5 * ss + sd);  // scale, max, subtract, exp, sum; the division
  CHECK(att.activation_evals == ss);
  const Analysis cau = analyze(*workload("attention:B=2,H=4,S=128,D=64,causal=1"));
  const double kept = static_cast<double>(S + 1) / (2.0 * S);
  const auto on_kept = [&](std::int64_t f) { return static_cast<std::int64_t>(std::llround(static_cast<double>(f) * kept)); };
  CHECK(cau.activation_evals == on_kept(ss));
  // p: scale and select (the comparison of indices is free); mx; e: subtract and exp; l; O whole
  CHECK(cau.elementwise_ops == on_kept(2 * ss) + on_kept(ss) + on_kept(2 * ss) + on_kept(ss) + sd);
}

TEST_CASE("an input read at a stride or an offset counts only the elements it reads toward the HBM bound") {
  // was all of X: the bound 5x the kernel's simulated time (561% of "peak")
  const auto sk = parse_kernel("kernel s(X: fp32[W=4194304], Wt: fp32[V=1024]) -> (Y: fp32[V]) {\n  Y[v] = X[4096*v] * Wt[v]\n}\n");
  REQUIRE(sk);
  CHECK(analyze(*sk).min_hbm_bytes == (1024 + 1024 + 1024) * 4);
  // windows that touch (stride 2, 7 taps): one range, clipped to the tensor: 2*v + f - 3 over
  // v < 100, f < 7 reaches -3 .. 201, of which 0 .. 199 lie in X
  const auto ck = parse_kernel("kernel c(X: fp32[C=8, W=200], Wt: fp32[C, F=7]) -> (Y: fp32[C, V=100]) {\n"
                               "  Y[c, v] = sum(f) X[c, 2*v + f - 3] * Wt[c, f]\n}\n");
  REQUIRE(ck);
  CHECK(analyze(*ck).min_hbm_bytes == (8 * 200 + 8 * 7 + 8 * 100) * 4);
  // disjoint windows (stride 8, 3 taps): 3 of every 8 elements, whole windows inside X
  const auto dk = parse_kernel("kernel d(X: fp32[W=800], Wt: fp32[F=3]) -> (Y: fp32[V=100]) {\n  Y[v] = sum(f) X[8*v + f] * Wt[f]\n}\n");
  REQUIRE(dk);
  CHECK(analyze(*dk).min_hbm_bytes == (100 * 3 + 3 + 100) * 4);
  // a diagonal reads N elements, not N^2
  const auto gk = parse_kernel("kernel g(X: fp32[N=64, N2=64]) -> (Y: fp32[N]) {\n  Y[i] = X[i, i] * 2.0\n}\n");
  REQUIRE(gk);
  CHECK(analyze(*gk).min_hbm_bytes == (64 + 64) * 4);
}

TEST_CASE("a mask is counted alike however it is written: scaled after the select, in its own statement, over three indices") {
  const std::string head =
      "kernel a(Q: bf16[B=1, H=2, S=256, D=64], K: bf16[B, H, S, D], V: bf16[B, H, S, D]) -> (O: bf16[B, H, S, D]) {\n"
      "  s[b, h, i, j] = sum(d) Q[b, h, i, d] * K[b, h, j, d]\n";
  const std::string tail =
      "  mx[b, h, i] = max(j) p[b, h, i, j]\n"
      "  e[b, h, i, j] = exp(p[b, h, i, j] - mx[b, h, i])\n"
      "  l[b, h, i] = sum(j) e[b, h, i, j]\n"
      "  pb[b, h, i, j] = cast<bf16>(e[b, h, i, j])\n"
      "  o[b, h, i, d] = sum(j) pb[b, h, i, j] * V[b, h, j, d]\n"
      "  O[b, h, i, d] = o[b, h, i, d] / l[b, h, i]\n}\n";
  const auto analysed = [&](const std::string& mask) {
    const auto k = parse_kernel(head + mask + tail);
    REQUIRE(k);
    return analyze(*k);
  };
  const Analysis ref = analysed("  p[b, h, i, j] = select(j <= i, s[b, h, i, j] * 0.125, -inf)\n");
  const double S = 256, B = 1, H = 2, D = 64;
  const double kept = (S * (S + 1) / 2) / (S * S);
  // both contractions on the kept share only
  CHECK(static_cast<double>(ref.contraction_flops) == Approx(2 * 2 * B * H * S * S * D * kept).epsilon(1e-6));
  for (const char* mask : {"  p[b, h, i, j] = select(j <= i, s[b, h, i, j], -inf) * 0.125\n",
                           "  p[b, h, i, j] = 0.125 * select(j <= i, s[b, h, i, j], -inf)\n",
                           "  t[b, h, i, j] = s[b, h, i, j] * 0.125\n  p[b, h, i, j] = select(j <= i, t[b, h, i, j], -inf)\n",
                           "  p[b, h, i, j] = select(j <= i + 0*h, s[b, h, i, j] * 0.125, -inf)\n"}) {
    INFO(mask);
    const Analysis a = analysed(mask);
    CHECK(a.contraction_flops == ref.contraction_flops);
    CHECK(a.activation_evals == ref.activation_evals);
  }
  // a condition over three indices: kept where j <= i + h
  double kept3 = 0;
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 256; ++i) kept3 += std::min(256, i + h + 1);
  CHECK(static_cast<double>(analysed("  p[b, h, i, j] = select(j <= i + h, s[b, h, i, j] * 0.125, -inf)\n").contraction_flops) ==
        Approx(2 * 2 * B * D * kept3).epsilon(1e-6));
  // a negative scale turns -inf into +inf: no longer a mask
  CHECK(analysed("  p[b, h, i, j] = select(j <= i, s[b, h, i, j], -inf) * -0.125\n").contraction_flops >
        ref.contraction_flops);
}

TEST_CASE("an input a mask leaves unread counts only the elements some kept position reads") {
  // a query keeps only the first 128 of 16,384 keys: K's and V's other rows need never be read
  // (counting them made the bound 13.6x a searched kernel's simulated time)
  const auto analysed = [](const std::string& mask, const std::string& T = "16384") {
    const auto k = parse_kernel("kernel a(Q: bf16[H=4, S=128, D=128], K: bf16[H, T=" + T +
                                ", D], V: bf16[H, T, D]) -> (O: bf16[H, S, D]) {\n"
                                "  s[h, i, j] = sum(d) Q[h, i, d] * K[h, j, d]\n" + mask +
                                "  mx[h, i] = max(j) p[h, i, j]\n  e[h, i, j] = exp(p[h, i, j] - mx[h, i])\n"
                                "  l[h, i] = sum(j) e[h, i, j]\n  pb[h, i, j] = cast<bf16>(e[h, i, j])\n"
                                "  o[h, i, d] = sum(j) pb[h, i, j] * V[h, j, d]\n  O[h, i, d] = o[h, i, d] / l[h, i]\n}\n");
    REQUIRE(k);
    return analyze(*k).min_hbm_bytes;
  };
  const std::int64_t tile = 4 * 128 * 128 * 2;  // Q, O, and 128 rows of K or V, in bf16
  CHECK(analysed("  p[h, i, j] = select(j < 128, s[h, i, j], -inf) * 0.125\n") == 4 * tile);
  // the same mask written the other way round, and in its own statement
  CHECK(analysed("  p[h, i, j] = select(j >= 128, -inf, s[h, i, j])\n") == 4 * tile);
  CHECK(analysed("  t[h, i, j] = s[h, i, j] * 0.125\n  p[h, i, j] = select(128 > j, t[h, i, j], -inf)\n") == 4 * tile);
  // a band that reaches further for later queries: key j is read when j <= i + 1000 for some i < 128
  CHECK(analysed("  p[h, i, j] = select(j <= i + 1000, s[h, i, j], -inf)\n") == 2 * tile + 2 * (4 * 1128 * 128 * 2));
  // a causal mask over a square: the last query reads every key, so K and V count whole
  CHECK(analysed("  p[h, i, j] = select(j <= i, s[h, i, j], -inf)\n", "128") == 4 * tile);
  // one key only (an equality is not projected; kept positions over the queries reading a key)
  CHECK(analysed("  p[h, i, j] = select(j == 5, s[h, i, j], -inf)\n") == 2 * tile + 2 * (4 * 1 * 128 * 2));
  // no mask: everything
  CHECK(analysed("  p[h, i, j] = s[h, i, j] * 0.125\n") == 2 * tile + 2 * (4 * 16384 * 128 * 2));
}
