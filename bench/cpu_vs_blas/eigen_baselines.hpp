// Eigen baselines for cpu_vs_blas: Eigen's own GEMM (never EIGEN_USE_BLAS) and the unfused Eigen
// expressions of softmax, layernorm and bias + gelu, each step materialised as a user writing
// them one statement at a time would. The .cpp is compiled twice, for this machine
// (-march=native, namespace native) and for baseline x86-64 as kevo's own code is (namespace generic).
#pragma once
#include <cstdint>

#define KEVO_BASELINE_API __attribute__((visibility("default")))

namespace kevo::bench::native {
KEVO_BASELINE_API void eigen_gemm(const float* a, const float* b, float* c, int m, int n, int k);  // row-major C = A·B
KEVO_BASELINE_API void unfused_softmax(const float* x, float* y, int rows, int cols);
KEVO_BASELINE_API void unfused_layernorm(const float* x, const float* gamma, const float* beta, float* y, int rows, int cols, float eps);
KEVO_BASELINE_API void unfused_bias_gelu(float* c, const float* bias, int rows, int cols);  // in place on a GEMM's output
KEVO_BASELINE_API const char* build_flags();
}  // namespace kevo::bench::native

namespace kevo::bench::generic {
KEVO_BASELINE_API void eigen_gemm(const float* a, const float* b, float* c, int m, int n, int k);
KEVO_BASELINE_API void unfused_softmax(const float* x, float* y, int rows, int cols);
KEVO_BASELINE_API void unfused_layernorm(const float* x, const float* gamma, const float* beta, float* y, int rows, int cols, float eps);
KEVO_BASELINE_API void unfused_bias_gelu(float* c, const float* bias, int rows, int cols);
KEVO_BASELINE_API const char* build_flags();
}  // namespace kevo::bench::generic
