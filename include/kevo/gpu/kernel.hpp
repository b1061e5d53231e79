// What a kernel is, for Triton: found from its structure (its ops, reductions and accesses),
// not from its name. A matmul (any of nn/tn/nt) optionally followed by a bias over N and one
// activation; a row kernel over the last dimension (softmax, RMSNorm, LayerNorm); scaled dot
// product attention over [B, H, S, D], optionally causal. Anything else is an error saying why.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/core/expected.hpp"
#include "kevo/ir/kernel.hpp"

namespace kevo::gpu {

enum class Family : std::uint8_t { matmul, row, attention };
enum class RowOp : std::uint8_t { softmax, rmsnorm, layernorm };
std::string_view to_string(Family) noexcept;
std::string_view to_string(RowOp) noexcept;

// One input or output of the kernel and the role the emitter and the worker give it:
// matmul A, B, bias, C; row X, gamma, beta, Y; attention Q, K, V, O.
struct TensorRole {
  std::string role;
  std::string name;  // the kernel's tensor name
  std::vector<std::int64_t> shape;
  ir::DType dtype = ir::DType::bf16;
  bool output = false;
};

struct GpuKernel {
  Family family = Family::matmul;
  std::string name;           // the kernel's name
  ir::DType dtype = ir::DType::bf16;  // storage dtype of the main inputs and output
  // matmul: C[M, N] = act(A·B + bias)
  std::int64_t M = 0, N = 0, K = 0;
  bool a_trans = false;       // A stored [K, M]
  bool b_trans = false;       // B stored [N, K]
  bool bias = false;          // + bias[N] (fp32 or the storage dtype, see bias_dtype)
  ir::DType bias_dtype = ir::DType::fp32;
  std::string act = "none";   // none, gelu (tanh form), gelu_erf, relu, silu
  // row kernels: Y[R, C] from X[R, C] (+ gamma[C], beta[C])
  RowOp row = RowOp::softmax;
  std::int64_t R = 0, C = 0;
  double eps = 0;
  // attention: O[B, H, S, D] = softmax(scale · Q·Kᵀ (+ causal mask)) · V
  std::int64_t B = 0, H = 0, S = 0, D = 0;
  bool causal = false;
  double scale = 0;
  std::vector<TensorRole> tensors;  // inputs then outputs, in the kernel's order

  [[nodiscard]] const TensorRole* role(std::string_view r) const noexcept;

  [[nodiscard]] bool has_epilogue() const noexcept { return bias || act != "none"; }
  // FLOPs counted the way the figures are (2·M·N·K; attention 4·B·H·S²·D, halved when causal).
  [[nodiscard]] double flops() const noexcept;
  // Minimum HBM bytes (inputs read once, output written once).
  [[nodiscard]] double min_bytes() const noexcept;
  // One line: "matmul 4096x4096x4096 bf16 nn + bias + gelu".
  [[nodiscard]] std::string describe() const;
  // The problem as a JSON object (the worker builds its inputs and PyTorch reference from it).
  [[nodiscard]] std::string to_json() const;
};

Expected<GpuKernel, std::string> classify(const ir::Kernel& k);

}  // namespace kevo::gpu
