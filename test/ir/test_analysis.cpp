// FLOP and byte counts checked by hand.
#include <catch2/catch.hpp>

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
  // the causal mask adds a comparison and a select per score
  const Analysis c = analyze(*workload("attention:B=2,H=4,S=128,D=64,causal=1"));
  CHECK(c.flops == a.flops + 2 * ss);
}

TEST_CASE("layernorm counts its mean divisions and every elementwise call") {
  const std::int64_t R = 4, C = 8;
  const Analysis a = analyze(*workload("layernorm:R=4,C=8"));
  // mu: C adds + 1 divide per row; xc: sub; var: square + add, + divide; Y: mul rsqrt add mul add
  CHECK(a.op_flops == std::vector<std::int64_t>{R * C + R, R * C, 2 * R * C + R, 5 * R * C});
  CHECK(a.min_hbm_bytes == (2 * R * C + 2 * C) * 4);
}
