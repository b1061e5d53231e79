// See eigen_baselines.hpp. Compiled with KEVO_BASELINE_NS = native | generic.
#ifdef EIGEN_USE_BLAS
#error "the Eigen baseline must measure Eigen's own GEMM: compile without EIGEN_USE_BLAS"
#endif
#include "eigen_baselines.hpp"

#include <Eigen/Core>
#include <cmath>

namespace kevo::bench::KEVO_BASELINE_NS {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CMap = Eigen::Map<const RowMat>;
using Map = Eigen::Map<RowMat>;

// The unfused baselines materialise every intermediate, but into buffers kept from call to call:
// the timing is their arithmetic and memory traffic, not the allocator and the page faults of a
// fresh 32 MB temporary per call (which varied 27-55 ms on the 2-core VM). kevo's interpreter
// likewise allocates its buffers once.
RowMat& scratch(int which, int rows, int cols) {
  static thread_local RowMat bufs[3];
  RowMat& m = bufs[which];
  if (m.rows() != rows || m.cols() != cols) m.resize(rows, cols);
  return m;
}

void eigen_gemm(const float* a, const float* b, float* c, int m, int n, int k) {
  Eigen::setNbThreads(1);
  Map(c, m, n).noalias() = CMap(a, m, k) * CMap(b, k, n);
}

void unfused_softmax(const float* x, float* y, int rows, int cols) {
  CMap X(x, rows, cols);
  Eigen::VectorXf mx = X.rowwise().maxCoeff();
  RowMat& e = scratch(0, rows, cols);
  e = (X.colwise() - mx).array().exp().matrix();
  Eigen::VectorXf s = e.rowwise().sum();
  Map(y, rows, cols) = (e.array().colwise() / s.array()).matrix();
}

void unfused_layernorm(const float* x, const float* gamma, const float* beta, float* y, int rows, int cols,
                       float eps) {
  CMap X(x, rows, cols);
  Eigen::Map<const Eigen::RowVectorXf> g(gamma, cols), bt(beta, cols);
  Eigen::VectorXf mu = X.rowwise().mean();
  RowMat& xc = scratch(0, rows, cols);
  xc = X.colwise() - mu;
  Eigen::VectorXf var = xc.array().square().rowwise().mean().matrix();
  Eigen::VectorXf inv = (var.array() + eps).rsqrt().matrix();
  RowMat& xn = scratch(1, rows, cols);
  xn = (xc.array().colwise() * inv.array()).matrix();
  Map(y, rows, cols) = ((xn.array().rowwise() * g.array()).rowwise() + bt.array()).matrix();
}

void unfused_bias_gelu(float* c, const float* bias, int rows, int cols) {
  Map C(c, rows, cols);
  Eigen::Map<const Eigen::RowVectorXf> b(bias, cols);
  C.rowwise() += b;
  // tanh approximation, as kevo's gelu
  RowMat& inner = scratch(0, rows, cols);
  inner = (0.7978845608f * (C.array() + 0.044715f * C.array().cube())).matrix();
  RowMat& t = scratch(1, rows, cols);
  t = inner.array().tanh().matrix();
  C = (0.5f * C.array() * (1.0f + t.array())).matrix();
}

const char* build_flags() { return KEVO_BASELINE_FLAGS; }

}  // namespace kevo::bench::KEVO_BASELINE_NS
