// The reference evaluator. Contractions whose indices split cleanly into batch / row / column /
// reduction groups go through Eigen matrix products; every other statement is interpreted one
// innermost-index row at a time (each expression node computes a whole row), which keeps the
// interpretive overhead per element small.
#include "kevo/ir/eval.hpp"
#include "kevo/ir/fn.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "kevo/core/error.hpp"
#include "kevo/core/hash.hpp"
#include "kevo/core/rng.hpp"

namespace kevo::ir {

namespace {

std::vector<std::int64_t> strides_of(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> s(shape.size(), 1);
  for (std::size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

// Offsets of every combination (row-major) of `vars` for a tensor whose per-var strides are `vs`.
std::vector<std::int64_t> combo_offsets(const std::vector<int>& vars, const std::vector<std::int64_t>& extent,
                                        const std::vector<std::int64_t>& vs) {
  std::vector<std::int64_t> r{0};
  for (int v : vars) {
    std::vector<std::int64_t> n;
    n.reserve(r.size() * static_cast<std::size_t>(extent[static_cast<std::size_t>(v)]));
    for (auto base : r)
      for (std::int64_t i = 0; i < extent[static_cast<std::size_t>(v)]; ++i)
        n.push_back(base + i * vs[static_cast<std::size_t>(v)]);
    r = std::move(n);
  }
  return r;
}

template <typename T>
T apply1(Fn f, T x, DType dt) {
  if (f == Fn::cast) return static_cast<T>(round_to(dt, static_cast<float>(x)));
  return fn_apply_unary(f, x);
}

template <typename T>
T apply2(Fn f, T a, T b) {
  return fn_apply_binary(f, a, b);
}

// fp32's range on values the double evaluator keeps unrounded (fused nodes, fp32 temps): every
// engine computes in fp32, so a value that rounds past fp32's largest is infinite on all of them
// (exp(100 x) * 1e-10 is inf for x = 1, whatever the schedule), though double would carry it.
template <typename T>
void fp32_range(T* v, std::int64_t n) {
  if constexpr (std::is_same_v<T, double>) {
    for (std::int64_t l = 0; l < n; ++l)
      if (std::isinf(static_cast<float>(v[l])) && std::isfinite(v[l])) v[l] = std::copysign(std::numeric_limits<double>::infinity(), v[l]);
  }
}

// Element loops that look at a cancel flag do so once per this many + 1 elements (about 10 ms).
constexpr std::size_t kCancelEvery = (std::size_t{1} << 18) - 1;

// fp32's unit roundoff: the relative error of one rounded operation.
constexpr double kU32 = unit_roundoff(DType::fp32);

template <typename T>
class Evaluator {
 public:
  // `track`: also estimate each value's fp32 rounding error (evaluate_with_error; T = double).
  Evaluator(const Kernel& k, std::span<const std::vector<float>> in, bool track = false, const std::atomic<bool>* cancel = nullptr)
      : k_(k), track_(track), cancel_(cancel) {
    vals_.resize(k.tensors.size());
    if (track_) err_.resize(k.tensors.size());
    for (std::size_t t = 0; t < k.tensors.size(); ++t) {
      const Tensor& ten = k.tensors[t];
      const auto n = static_cast<std::size_t>(k.elements(ten));
      if (ten.role == Role::input) {
        if (t >= in.size() || in[t].size() != n)
          throw Error("evaluate: input '" + ten.name + "' needs " + std::to_string(n) + " values, got " +
                      std::to_string(t < in.size() ? in[t].size() : 0));
        // copied (and zeroed below) a chunk at a time, looking at `cancel` between chunks: at 4096^2
        // the three tensors' first touch of fresh memory took 0.2 s, before any check
        vals_[t].reserve(n);
        for (std::size_t i = 0; i < n; ++i) {
          if ((i & kCancelEvery) == 0) check_cancel();
          vals_[t].push_back(static_cast<T>(round_to(ten.dtype, in[t][i])));
        }
      } else {
        vals_[t].reserve(n);
        for (std::size_t i = 0; i < n; i += kCancelEvery + 1) {
          check_cancel();
          vals_[t].resize(std::min(n, i + kCancelEvery + 1), T(0));
        }
      }
      if (track_) err_[t].assign(n, 0.0f);  // inputs are exact: the program reads the same values
      shapes_.push_back(k.shape(ten));
      strides_.push_back(strides_of(shapes_.back()));
    }
  }

  std::vector<std::vector<float>> run() {
    for (std::size_t i = 0; i < k_.ops.size(); ++i) {
      check_cancel();
      run_op(i);
    }
    std::vector<std::vector<float>> out(vals_.size());
    for (std::size_t t = 0; t < vals_.size(); ++t) out[t].assign(vals_[t].begin(), vals_[t].end());
    return out;
  }
  void check_cancel() const {
    if (cancel_ != nullptr && cancel_->load(std::memory_order_relaxed)) throw Error("evaluate: cancelled");
  }
  // After run(): the error estimates (track; finite, never NaN: see saturate).
  std::vector<std::vector<float>> take_errors() { return std::move(err_); }

 private:
  std::size_t tindex(const std::string& n) const {
    for (std::size_t i = 0; i < k_.tensors.size(); ++i)
      if (k_.tensors[i].name == n) return i;
    throw Error("evaluate: unknown tensor '" + n + "'");
  }

  // per-var strides of an access into tensor t (an index repeated in the access adds its strides)
  std::vector<std::int64_t> access_strides(const Expr& e, std::size_t t) const {
    std::vector<std::int64_t> s(vars_.size(), 0);
    for (std::size_t p = 0; p < e.indices.size(); ++p) s[static_cast<std::size_t>(var(e.indices[p]))] += strides_[t][p];
    return s;
  }
  int var(const std::string& n) const {
    for (std::size_t i = 0; i < vars_.size(); ++i)
      if (vars_[i] == n) return static_cast<int>(i);
    throw Error("evaluate: unknown index '" + n + "'");
  }

  struct Node {
    Expr::Kind kind;
    Fn fn = Fn::add;
    DType dt = DType::fp32;
    T value = 0;
    int var = -1;
    const T* data = nullptr;
    int tensor = -1;  // an access's tensor
    std::vector<std::int64_t> strides;
    int args[3] = {-1, -1, -1};
    // a shifted access: per tensor dim, position = stride * var + var(plus) + offset, zero outside
    struct Dim {
      int var = -1, plus = -1;
      std::int64_t stride = 1, offset = 0, size = 1, tstride = 1;
    };
    std::vector<Dim> dims;
  };

  int compile(const Expr& e) {
    Node n;
    n.kind = e.kind;
    switch (e.kind) {
      case Expr::Kind::constant: n.value = static_cast<T>(e.value); break;
      case Expr::Kind::index: n.var = var(e.index); break;
      case Expr::Kind::access: {
        const std::size_t t = tindex(e.tensor);
        n.data = vals_[t].data();
        n.tensor = static_cast<int>(t);
        n.strides = access_strides(e, t);
        if (!is_plain(e))
          for (std::size_t d = 0; d < e.indices.size(); ++d) {
            const IndexShift& sh = e.shifts[d];
            n.dims.push_back({var(e.indices[d]), sh.plus.empty() ? -1 : var(sh.plus), sh.stride, sh.offset,
                              shapes_[t][d], strides_[t][d]});
          }
        break;
      }
      case Expr::Kind::call:
        n.fn = e.fn;
        n.dt = e.dtype;
        for (std::size_t a = 0; a < e.args.size() && a < 3; ++a) n.args[a] = compile(e.args[a]);
        break;
    }
    nodes_.push_back(std::move(n));
    return static_cast<int>(nodes_.size() - 1);
  }

  bool try_contract(const Op& op, std::size_t out_t) {
    if (op.kind() != OpKind::contract) return false;
    const Expr& ea = op.expr.args[0];
    const Expr& eb = op.expr.args[1];
    auto has = [](const Expr& e, const std::string& i) {
      return std::count(e.indices.begin(), e.indices.end(), i);
    };
    std::vector<int> batch, mv, nv, kv;
    for (std::size_t v = 0; v < vars_.size(); ++v) {
      const auto ca = has(ea, vars_[v]), cb = has(eb, vars_[v]);
      if (ca > 1 || cb > 1) return false;
      const bool out = v < op.out_indices.size();
      if (out && ca && cb) batch.push_back(static_cast<int>(v));
      else if (out && ca) mv.push_back(static_cast<int>(v));
      else if (out && cb) nv.push_back(static_cast<int>(v));
      else if (!out && ca && cb) kv.push_back(static_cast<int>(v));
      else return false;
    }
    const std::size_t ta = tindex(ea.tensor), tb = tindex(eb.tensor);
    const auto sa = access_strides(ea, ta), sb = access_strides(eb, tb);
    std::vector<std::int64_t> sc(vars_.size(), 0);
    for (std::size_t p = 0; p < op.out_indices.size(); ++p) sc[p] = strides_[out_t][p];
    const auto ab = combo_offsets(batch, ext_, sa), bb = combo_offsets(batch, ext_, sb), cb = combo_offsets(batch, ext_, sc);
    const auto am = combo_offsets(mv, ext_, sa), ak = combo_offsets(kv, ext_, sa);
    const auto bk = combo_offsets(kv, ext_, sb), bn = combo_offsets(nv, ext_, sb);
    const auto cm = combo_offsets(mv, ext_, sc), cn = combo_offsets(nv, ext_, sc);
    using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const auto M = static_cast<Eigen::Index>(am.size()), N = static_cast<Eigen::Index>(bn.size()),
               K = static_cast<Eigen::Index>(ak.size());
    Mat A(M, K), B(K, N), C(M, N);
    const T* pa = vals_[ta].data();
    const T* pb = vals_[tb].data();
    T* pc = vals_[out_t].data();
    const DType dt = k_.tensors[out_t].dtype;
    for (std::size_t b = 0; b < ab.size(); ++b) {
      // the gathers and the write-back below look at `cancel` every 256 rows too: at 4096^3 each
      // moves 16M values, about 0.3 s, before the product's first block
      for (Eigen::Index i = 0; i < M; ++i) {
        if ((i & 255) == 0) check_cancel();
        for (Eigen::Index j = 0; j < K; ++j) A(i, j) = pa[ab[b] + am[static_cast<std::size_t>(i)] + ak[static_cast<std::size_t>(j)]];
      }
      for (Eigen::Index i = 0; i < K; ++i) {
        if ((i & 255) == 0) check_cancel();
        for (Eigen::Index j = 0; j < N; ++j) B(i, j) = pb[bb[b] + bk[static_cast<std::size_t>(i)] + bn[static_cast<std::size_t>(j)]];
      }
      // in blocks of rows, so that a cancel is seen within one block's time
      for (Eigen::Index r0 = 0; r0 < M; r0 += 256) {
        check_cancel();
        const Eigen::Index rows = std::min<Eigen::Index>(256, M - r0);
        C.middleRows(r0, rows).noalias() = A.middleRows(r0, rows) * B;
      }
      // track: sqrt(A^2 err(B)^2 + err(A)^2 B^2) + u sqrt(K) |A||B|, elementwise squares: the
      // incoming errors of K products add as independent errors do (a random walk, not K times
      // the worst case, which over a chain of contractions would allow anything)
      Mat E;
      if (track_) {
        const float* ea = err_[ta].data();
        const float* eb = err_[tb].data();
        Mat EA(M, K), EB(K, N);
        for (Eigen::Index i = 0; i < M; ++i)
          for (Eigen::Index j = 0; j < K; ++j) EA(i, j) = static_cast<T>(ea[ab[b] + am[static_cast<std::size_t>(i)] + ak[static_cast<std::size_t>(j)]]);
        for (Eigen::Index i = 0; i < K; ++i)
          for (Eigen::Index j = 0; j < N; ++j) EB(i, j) = static_cast<T>(eb[bb[b] + bk[static_cast<std::size_t>(i)] + bn[static_cast<std::size_t>(j)]]);
        E.noalias() = A.cwiseAbs() * B.cwiseAbs();
        E *= static_cast<T>(kU32 * std::sqrt(static_cast<double>(std::max<Eigen::Index>(K, 1))));
        // (an operand read from an input is exact: its term is zero and its product skipped)
        const bool ea0 = EA.isZero(0), eb0 = EB.isZero(0);
        if (!ea0 || !eb0) {
          Mat E2 = Mat::Zero(M, N);
          if (!eb0) E2.noalias() += A.cwiseAbs2() * EB.cwiseAbs2();
          if (!ea0) E2.noalias() += EA.cwiseAbs2() * B.cwiseAbs2();
          E += E2.cwiseSqrt();
        }
      }
      for (Eigen::Index i = 0; i < M; ++i) {
        if ((i & 255) == 0) check_cancel();
        for (Eigen::Index j = 0; j < N; ++j) {
          const T exact = C(i, j);
          T v = exact;
          if (dt != DType::fp32) v = static_cast<T>(round_to(dt, static_cast<float>(v)));
          else if constexpr (std::is_same_v<T, double>) {
            if (k_.tensors[out_t].role != Role::temp) v = static_cast<T>(static_cast<float>(v));
            else fp32_range(&v, 1);
          }
          const std::int64_t at = cb[b] + cm[static_cast<std::size_t>(i)] + cn[static_cast<std::size_t>(j)];
          pc[at] = v;
          if (track_) err_[out_t][static_cast<std::size_t>(at)] = saturate(static_cast<double>(E(i, j)) + stored_rounding(exact, dt));
        }
      }
    }
    return true;
  }

  // An error estimate as stored: finite (an overflowing estimate allows nothing, compare), never NaN.
  static float saturate(double e) {
    return std::isfinite(e) && e <= std::numeric_limits<float>::max() ? static_cast<float>(e) : 0.0f;
  }

  // The rounding a stored value takes: fp32's half ulp; to a narrower dtype its own rounding
  // plus half an ulp more, since a program's value a little off may round to the neighbour.
  static double stored_rounding(T exact, DType dt) {
    const double x = static_cast<double>(exact);
    const double r = std::fabs(static_cast<double>(round_to(dt, static_cast<float>(x))) - x);
    if (!std::isfinite(r)) return 0.0;
    return dt == DType::fp32 ? std::max(r, kU32 * std::fabs(x)) : r + unit_roundoff(dt) * std::fabs(x);
  }

  // The error row of node `id` (its value row already computed by eval_row), from its
  // arguments' error rows: first-order propagation plus this operation's own rounding.
  void err_row(int id, std::int64_t L, int inner) {
    const Node& n = nodes_[static_cast<std::size_t>(id)];
    const auto row = [&](int node) { return &ebuf_[static_cast<std::size_t>(node) * static_cast<std::size_t>(L)]; };
    const auto vrow = [&](int node) { return &buf_[static_cast<std::size_t>(node) * static_cast<std::size_t>(L)]; };
    double* out = row(id);
    const T* v = vrow(id);
    switch (n.kind) {
      case Expr::Kind::constant:  // a constant is rounded to fp32 once (10000.0 exactly, 0.1 not)
        for (std::int64_t l = 0; l < L; ++l)
          out[l] = std::fabs(static_cast<double>(static_cast<float>(v[l])) - static_cast<double>(v[l]));
        return;
      case Expr::Kind::index: std::fill(out, out + L, 0.0); return;
      case Expr::Kind::access: {
        const float* e = err_[static_cast<std::size_t>(n.tensor)].data();
        const std::int64_t base = row_base(n, inner);
        const std::int64_t s = inner >= 0 ? n.strides[static_cast<std::size_t>(inner)] : 0;
        for (std::int64_t l = 0; l < L; ++l) {
          if (n.dims.empty()) {
            out[l] = e[base + l * s];
          } else {
            std::int64_t off = 0;
            out[l] = shifted_offset(n, l, inner, off) ? e[off] : 0.0;
          }
        }
        return;
      }
      case Expr::Kind::call: break;
    }
    for (int a : n.args)
      if (a >= 0) err_row(a, L, inner);
    const int ar = fn_arity(n.fn);
    const T* x = vrow(n.args[0]);
    const double* ex = row(n.args[0]);
    // the largest finite |f(corner) - value| over the corners; 0 where none is finite
    const auto spread = [](double value, std::initializer_list<double> corners) {
      double m = 0;
      for (double c : corners)
        if (std::isfinite(c - value)) m = std::max(m, std::fabs(c - value));
      return m;
    };
    if (ar == 1) {
      for (std::int64_t l = 0; l < L; ++l) {
        const double xv = static_cast<double>(x[l]), val = static_cast<double>(v[l]);
        double e;
        if (ex[l] == 0 && n.fn != Fn::cast) e = 0;  // an exact argument: only the result's own rounding
        else if (n.fn == Fn::cast) e = ex[l] + std::fabs(static_cast<double>(round_to(n.dt, static_cast<float>(xv))) - xv);
        else if (n.fn == Fn::neg || n.fn == Fn::abs) e = ex[l];
        else if (n.fn == Fn::square) e = 2 * std::fabs(xv) * ex[l] + ex[l] * ex[l];
        else if (n.fn == Fn::exp && ex[l] < 0.5) e = std::fabs(val) * 2 * ex[l];  // e^(x±d) - e^x within 2d e^x for d < 1/2
        else e = spread(val, {fn_apply_unary<double>(n.fn, xv + ex[l]), fn_apply_unary<double>(n.fn, xv - ex[l])});
        out[l] = e + kU32 * std::fabs(val);
      }
      return;
    }
    const T* y = vrow(n.args[1]);
    const double* ey = row(n.args[1]);
    if (ar == 2) {
      const bool compare = n.fn == Fn::lt || n.fn == Fn::le || n.fn == Fn::gt || n.fn == Fn::ge || n.fn == Fn::eq || n.fn == Fn::ne;
      for (std::int64_t l = 0; l < L; ++l) {
        const double a = static_cast<double>(x[l]), b = static_cast<double>(y[l]), val = static_cast<double>(v[l]);
        double e;
        switch (n.fn) {
          case Fn::add:
          case Fn::sub: e = ex[l] + ey[l]; break;
          case Fn::mul: e = std::fabs(a) * ey[l] + std::fabs(b) * ex[l] + ex[l] * ey[l]; break;
          case Fn::max:
          case Fn::min: e = std::max(ex[l], ey[l]); break;
          default:
            // a comparison is taken as exact (a flip needs a near tie, which random inputs do not make)
            e = compare ? 0.0
                        : spread(val, {fn_apply_binary<double>(n.fn, a + ex[l], b + ey[l]), fn_apply_binary<double>(n.fn, a + ex[l], b - ey[l]),
                                       fn_apply_binary<double>(n.fn, a - ex[l], b + ey[l]), fn_apply_binary<double>(n.fn, a - ex[l], b - ey[l])});
        }
        out[l] = e + (compare ? 0.0 : kU32 * std::fabs(val));
      }
      return;
    }
    const double* ez = row(n.args[2]);
    for (std::int64_t l = 0; l < L; ++l) out[l] = x[l] != T(0) ? ey[l] : ez[l];
  }

  // An access node's offset for the row's first element (every index but the inner one).
  std::int64_t row_base(const Node& n, int inner) const {
    std::int64_t base = 0;
    for (std::size_t v = 0; v < vars_.size(); ++v)
      if (static_cast<int>(v) != inner) base += pos_[v] * n.strides[v];
    return base;
  }
  // A shifted access node's flat offset at element l of the row; false where it lies outside
  // the tensor (the read is zero there).
  bool shifted_offset(const Node& n, std::int64_t l, int inner, std::int64_t& off) const {
    const auto at = [&](int v) { return v < 0 ? 0 : v == inner ? l : pos_[static_cast<std::size_t>(v)]; };
    off = 0;
    bool in = true;
    for (const auto& dm : n.dims) {
      const std::int64_t x = dm.stride * at(dm.var) + at(dm.plus) + dm.offset;
      in = in && x >= 0 && x < dm.size;
      off += x * dm.tstride;
    }
    return in;
  }

  void eval_row(int id, std::int64_t L, int inner) {
    Node& n = nodes_[static_cast<std::size_t>(id)];
    T* out = &buf_[static_cast<std::size_t>(id) * static_cast<std::size_t>(L)];
    switch (n.kind) {
      case Expr::Kind::constant: return;  // filled once per op
      case Expr::Kind::index:
        if (n.var == inner) {
          for (std::int64_t l = 0; l < L; ++l) out[l] = static_cast<T>(l);
        } else {
          std::fill(out, out + L, static_cast<T>(pos_[static_cast<std::size_t>(n.var)]));
        }
        return;
      case Expr::Kind::access: {
        const std::int64_t base = row_base(n, inner);
        const std::int64_t s = inner >= 0 ? n.strides[static_cast<std::size_t>(inner)] : 0;
        if (!n.dims.empty()) {  // shifted: element by element, zero outside the tensor
          for (std::int64_t l = 0; l < L; ++l) {
            std::int64_t off = 0;
            out[l] = shifted_offset(n, l, inner, off) ? n.data[off] : T(0);
          }
          return;
        }
        const T* d = n.data + base;
        if (s == 1) {
          std::copy(d, d + L, out);
        } else {
          for (std::int64_t l = 0; l < L; ++l) out[l] = d[l * s];
        }
        return;
      }
      case Expr::Kind::call: break;
    }
    for (int a : n.args)
      if (a >= 0) eval_row(a, L, inner);
    const T* x = &buf_[static_cast<std::size_t>(n.args[0]) * static_cast<std::size_t>(L)];
    const int ar = fn_arity(n.fn);
    if (ar == 1) {
      const Fn f = n.fn;
      const DType dt = n.dt;
      switch (f) {  // the common ones inline, so that the loop vectorises
        case Fn::neg: for (std::int64_t l = 0; l < L; ++l) out[l] = -x[l]; break;
        case Fn::square: for (std::int64_t l = 0; l < L; ++l) out[l] = x[l] * x[l]; break;
        case Fn::exp: for (std::int64_t l = 0; l < L; ++l) out[l] = std::exp(x[l]); break;
        default: for (std::int64_t l = 0; l < L; ++l) out[l] = apply1<T>(f, x[l], dt);
      }
      fp32_range(out, L);
      return;
    }
    const T* y = &buf_[static_cast<std::size_t>(n.args[1]) * static_cast<std::size_t>(L)];
    if (ar == 2) {
      switch (n.fn) {
        case Fn::add: for (std::int64_t l = 0; l < L; ++l) out[l] = x[l] + y[l]; break;
        case Fn::sub: for (std::int64_t l = 0; l < L; ++l) out[l] = x[l] - y[l]; break;
        case Fn::mul: for (std::int64_t l = 0; l < L; ++l) out[l] = x[l] * y[l]; break;
        case Fn::div: for (std::int64_t l = 0; l < L; ++l) out[l] = x[l] / y[l]; break;
        default: for (std::int64_t l = 0; l < L; ++l) out[l] = apply2<T>(n.fn, x[l], y[l]);
      }
      fp32_range(out, L);
      return;
    }
    const T* z = &buf_[static_cast<std::size_t>(n.args[2]) * static_cast<std::size_t>(L)];
    for (std::int64_t l = 0; l < L; ++l) out[l] = x[l] != T(0) ? y[l] : z[l];
  }

  void run_op(std::size_t i) {
    const Op& op = k_.ops[i];
    const auto idx = k_.op_indices(i);
    vars_.clear();
    ext_.clear();
    for (const auto& [n, s] : idx) {
      vars_.push_back(n);
      ext_.push_back(s);
    }
    const std::size_t out_t = tindex(op.out);
    if (try_contract(op, out_t)) return;

    nodes_.clear();
    const int root = compile(op.expr);
    const int nv = static_cast<int>(vars_.size());
    const int inner = nv - 1;  // -1: a scalar statement
    const std::int64_t L = inner >= 0 ? ext_[static_cast<std::size_t>(inner)] : 1;
    buf_.assign(nodes_.size() * static_cast<std::size_t>(L), T(0));
    if (track_) ebuf_.assign(nodes_.size() * static_cast<std::size_t>(L), 0.0);
    for (std::size_t n = 0; n < nodes_.size(); ++n)
      if (nodes_[n].kind == Expr::Kind::constant)
        std::fill(buf_.begin() + static_cast<std::ptrdiff_t>(n * static_cast<std::size_t>(L)),
                  buf_.begin() + static_cast<std::ptrdiff_t>((n + 1) * static_cast<std::size_t>(L)), nodes_[n].value);
    std::vector<std::int64_t> so(vars_.size(), 0);
    for (std::size_t p = 0; p < op.out_indices.size(); ++p) so[p] = strides_[out_t][p];
    T* out = vals_[out_t].data();
    const std::size_t nout = vals_[out_t].size();
    const ReduceOp red = op.reduce;
    if (red != ReduceOp::none) {
      const T init = red == ReduceOp::max   ? -std::numeric_limits<T>::infinity()
                     : red == ReduceOp::min ? std::numeric_limits<T>::infinity()
                                            : T(0);
      std::fill(out, out + nout, init);
    }
    pos_.assign(vars_.size(), 0);
    const T* r = &buf_[static_cast<std::size_t>(root) * static_cast<std::size_t>(L)];
    if (track_) {  // accumulated in double, stored as float below
      eacc_.assign(nout, 0.0);
      abs_sum_.assign(nout, 0.0);
    }
    double* eout = track_ ? eacc_.data() : nullptr;
    const double* er = track_ ? &ebuf_[static_cast<std::size_t>(root) * static_cast<std::size_t>(L)] : nullptr;
    std::uint32_t rows_done = 0;
    while (true) {
      if ((++rows_done & 63u) == 0) check_cancel();
      eval_row(root, L, inner);
      if (track_) err_row(root, L, inner);
      std::int64_t base = 0;
      for (int v = 0; v < inner; ++v) base += pos_[static_cast<std::size_t>(v)] * so[static_cast<std::size_t>(v)];
      if (track_ && red == ReduceOp::none) {
        const std::int64_t s = inner >= 0 ? so[static_cast<std::size_t>(inner)] : 0;
        for (std::int64_t l = 0; l < L; ++l) eout[base + l * s] = er[l];
      } else if (track_) {
        double& e = eout[base];
        double& a = abs_sum_[static_cast<std::size_t>(base)];
        for (std::int64_t l = 0; l < L; ++l) {
          e = red == ReduceOp::max || red == ReduceOp::min ? std::max(e, er[l]) : e + er[l] * er[l];  // (squares: summed below)
          a += std::fabs(static_cast<double>(r[l]));
        }
      }
      if (red == ReduceOp::none) {
        const std::int64_t s = inner >= 0 ? so[static_cast<std::size_t>(inner)] : 0;
        for (std::int64_t l = 0; l < L; ++l) out[base + l * s] = r[l];
      } else {
        // the inner index is a reduction index (reduction indices come last)
        T& acc = out[base];
        if (red == ReduceOp::max) {
          for (std::int64_t l = 0; l < L; ++l) acc = (acc < r[l] || r[l] != r[l]) ? r[l] : acc;
        } else if (red == ReduceOp::min) {
          for (std::int64_t l = 0; l < L; ++l) acc = (r[l] < acc || r[l] != r[l]) ? r[l] : acc;
        } else {
          T sum = 0;
          for (std::int64_t l = 0; l < L; ++l) sum += r[l];
          acc += sum;
        }
      }
      // odometer over the outer indices
      int v = inner - 1;
      for (; v >= 0; --v) {
        auto& p = pos_[static_cast<std::size_t>(v)];
        if (++p < ext_[static_cast<std::size_t>(v)]) break;
        p = 0;
      }
      if (v < 0) break;
    }
    std::int64_t count = 1;  // the terms of each reduced element
    for (std::size_t v = op.out_indices.size(); v < ext_.size(); ++v) count *= ext_[v];
    if (track_ && (red == ReduceOp::sum || red == ReduceOp::mean)) {
      // the terms' own errors as independent ones (root of the sum of squares), then the fp32
      // accumulation of `count` terms in whatever order the program sums them
      const double acc = kU32 * std::sqrt(static_cast<double>(std::max<std::int64_t>(count, 1)));
      for (std::size_t e = 0; e < nout; ++e) eout[e] = std::sqrt(eout[e]) + acc * abs_sum_[e];
    }
    if (red == ReduceOp::mean) {
      for (std::size_t e = 0; e < nout; ++e) out[e] /= static_cast<T>(count);
      if (track_)
        for (std::size_t e = 0; e < nout; ++e) eout[e] = eout[e] / static_cast<double>(count) + kU32 * std::fabs(static_cast<double>(out[e]));
    }
    const Tensor& ot = k_.tensors[out_t];
    if (track_)
      for (std::size_t e = 0; e < nout; ++e) err_[out_t][e] = saturate(eout[e] + stored_rounding(out[e], ot.dtype));
    if (ot.dtype != DType::fp32) {
      for (std::size_t e = 0; e < nout; ++e) out[e] = static_cast<T>(round_to(ot.dtype, static_cast<float>(out[e])));
    } else if constexpr (std::is_same_v<T, double>) {
      if (ot.role != Role::temp)
        for (std::size_t e = 0; e < nout; ++e) out[e] = static_cast<T>(static_cast<float>(out[e]));
      else
        fp32_range(out, static_cast<std::int64_t>(nout));
    }
  }

  const Kernel& k_;
  bool track_ = false;
  const std::atomic<bool>* cancel_ = nullptr;
  std::vector<std::vector<float>> err_;   // track: per tensor, per element
  std::vector<double> ebuf_, abs_sum_, eacc_;  // track: node error rows; per output element, sum |term| and its error
  std::vector<std::vector<T>> vals_;
  std::vector<std::vector<std::int64_t>> shapes_, strides_;
  std::vector<std::string> vars_;
  std::vector<std::int64_t> ext_, pos_;
  std::vector<Node> nodes_;
  std::vector<T> buf_;
};

bool name_is(const std::string& n, std::initializer_list<std::string_view> names) {
  std::string lower = n;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return std::find(names.begin(), names.end(), lower) != names.end();
}

}  // namespace

ValuesWithError evaluate_with_error(const Kernel& k, std::span<const std::vector<float>> tensors, const std::atomic<bool>* cancel) {
  Evaluator<double> ev(k, tensors, true, cancel);
  ValuesWithError r;
  r.values = ev.run();
  r.error = ev.take_errors();
  return r;
}

std::vector<std::vector<float>> evaluate(const Kernel& k, std::span<const std::vector<float>> tensors, EvalOptions opt) {
  if (opt.fp64) return Evaluator<double>(k, tensors, false, opt.cancel).run();
  return Evaluator<float>(k, tensors, false, opt.cancel).run();
}

std::vector<std::vector<float>> random_inputs(const Kernel& k, std::uint64_t seed, const std::atomic<bool>* cancel) {
  std::vector<std::vector<float>> r(k.tensors.size());
  for (std::size_t t = 0; t < k.tensors.size(); ++t) {
    const Tensor& ten = k.tensors[t];
    if (ten.role != Role::input) continue;
    // one stream per tensor name: adding a tensor does not change the others' values
    Rng rng(seed, stable_hash(ten.name));
    const auto n = static_cast<std::size_t>(k.elements(ten));
    r[t].resize(n);
    const bool scale = name_is(ten.name, {"gamma", "scale", "weight", "g"});
    const bool shift = name_is(ten.name, {"beta", "bias", "shift"});
    for (std::size_t i = 0; i < n; ++i) {
      if ((i & kCancelEvery) == 0 && cancel != nullptr && cancel->load(std::memory_order_relaxed))
        throw Error("random_inputs: cancelled");
      float v;
      if (scale) {
        v = static_cast<float>(1.0 + 0.25 * (2 * rng.uniform() - 1));
      } else {
        // uniform sign, magnitude spread over [1/16, 1] so that rounding and cancellation show up
        // the exponent drawn first, in its own statement: as two arguments of one call the draws'
        // order was the compiler's (GCC took the exponent first, clang the mantissa), so the same
        // seed gave other inputs under clang
        const int down = static_cast<int>(rng.below(5));
        const double mag = std::ldexp(0.5 + 0.5 * rng.uniform(), -down);
        v = static_cast<float>((rng.below(2) ? -1.0 : 1.0) * mag * (shift ? 0.5 : 1.0));
      }
      v = round_to(ten.dtype, v);
      if (v == 0.0f) v = round_to(ten.dtype, 0.0625f);
      r[t][i] = v;
    }
  }
  return r;
}

}  // namespace kevo::ir
