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

TEST_CASE("workload specs with unknown names, keys or values say what is allowed") {
  auto a = workload("matmull:M=4");
  REQUIRE_FALSE(a.has_value());
  CHECK(a.error() ==
        "unknown workload 'matmull'; expected one of matmul, bmm, matmul_bias_act, softmax, layernorm, rmsnorm, "
        "attention, swiglu, eltwise, conv1d_dw, colsum");
  auto b = workload("matmul:M=4,Q=2");
  REQUIRE_FALSE(b.has_value());
  CHECK(b.error() == "workload 'matmul': unknown key 'Q'; allowed keys: M, N, K, dtype, layout");
  auto c = workload("matmul:layout=tt");
  REQUIRE_FALSE(c.has_value());
  CHECK(c.error() == "workload 'matmul': bad value 'tt' for layout: expected one of nn, tn, nt");
  auto d = workload("attention:S=-3");
  REQUIRE_FALSE(d.has_value());
  CHECK(d.error() == "workload 'attention': bad value '-3' for S: expected a positive integer");
  auto e = workload("softmax:dtype=int8");
  REQUIRE_FALSE(e.has_value());
  CHECK(e.error().find("expected one of bf16, fp16, fp32, fp8_e4m3") != std::string::npos);
  auto f = workload("matmul:M=4,M=8");
  REQUIRE_FALSE(f.has_value());
  CHECK(f.error() == "workload 'matmul': key 'M' is given twice");
  auto g = workload("matmul:M");
  REQUIRE_FALSE(g.has_value());
  CHECK(g.error() == "workload 'matmul': expected key=value, found 'M'");
  auto h = workload("eltwise:ops=exp+cast");
  REQUIRE_FALSE(h.has_value());
  CHECK(h.error().find("unknown op 'cast' in ops=exp+cast") != std::string::npos);
  auto i = workload("attention:causal=2");
  REQUIRE_FALSE(i.has_value());
  CHECK(i.error() == "workload 'attention': bad value '2' for causal: expected one of 0, 1");
}

TEST_CASE("workload shapes that exceed the tensor size limit are errors, not crashes") {
  auto k = workload("matmul:M=2147483648,N=2147483648,K=2");
  REQUIRE_FALSE(k.has_value());
  CHECK(k.error().find("more than") != std::string::npos);
}

TEST_CASE("matmul layouts store A and B as documented") {
  const Kernel tn = wl("matmul:M=4,N=5,K=6,layout=tn");
  CHECK(tn.tensor("A")->dims == std::vector<std::string>{"K", "M"});
  CHECK(tn.tensor("B")->dims == std::vector<std::string>{"K", "N"});
  const Kernel nt = wl("matmul:M=4,N=5,K=6,layout=nt");
  CHECK(nt.tensor("A")->dims == std::vector<std::string>{"M", "K"});
  CHECK(nt.tensor("B")->dims == std::vector<std::string>{"N", "K"});
  CHECK(nt.tensor("C")->dims == std::vector<std::string>{"M", "N"});
}

TEST_CASE("the dtype parameter sets the storage dtype of inputs and outputs") {
  const Kernel k = wl("attention:dtype=fp8_e4m3");
  // temps fp32, but P (pb = cast<dtype>(e)), which PV reads in the workload's dtype
  for (const auto& t : k.tensors) CHECK(t.dtype == (t.role == Role::temp && t.name != "pb" ? DType::fp32 : DType::fp8_e4m3));
  CHECK(wl("matmul_bias_act:dtype=fp16").tensor("bias")->dtype == DType::fp32);
  CHECK(wl("softmax").tensor("Y")->dtype == DType::fp32);
  CHECK(wl("matmul").tensor("C")->dtype == DType::bf16);
}

TEST_CASE("the causal attention kernel masks with select(j <= i, ..., -inf)") {
  const std::string text = print_kernel(wl("attention:B=1,H=1,S=4,D=16,causal=1"));
  CHECK(text.find("p[b, h, i, j] = select(j <= i, s[b, h, i, j] * 0.25, -inf)") != std::string::npos);
  const std::string plain = print_kernel(wl("attention:B=1,H=1,S=4,D=16,causal=0"));
  CHECK(plain.find("select") == std::string::npos);
}

TEST_CASE("the workload listing documents parameters and an example for each workload") {
  const auto ws = workloads();
  REQUIRE(ws.size() == 11);
  for (const auto& w : ws) {
    CHECK(!w.summary.empty());
    CHECK(w.example.rfind(w.name + ":", 0) == 0);
    CHECK(w.parameters.find("dtype=") != std::string::npos);
  }
  CHECK(ws[0].parameters == "M=512, N=512, K=512, dtype=bf16 (bf16|fp16|fp32|fp8_e4m3|fp8_e4m3fn), layout=nn (nn|tn|nt)");
}

TEST_CASE("spaces around workload names, keys and values are ignored") {
  CHECK(wl(" matmul: M=64 , N = 32,K=16 ") == wl("matmul:M=64,N=32,K=16"));
}
