// Comparison of interpreter results with reference values: tolerances by storage dtype and
// reduction depth, and located mismatch messages.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <unordered_map>

#include "kevo/core/error.hpp"
#include "kevo/ir/kernel.hpp"
#include "kevo/verify/interpreter.hpp"

namespace kevo::verify {

namespace {
// One ulp at 1 of a storage dtype (0 for fp32, whose rounding the accumulation term covers):
// the tolerance's unit and the order of coarseness of rounding_dtypes.
double ulp_of(ir::DType dtype) { return dtype == ir::DType::fp32 ? 0 : 2 * ir::unit_roundoff(dtype); }

Tolerance tolerance_stages(ir::DType dtype, std::int64_t depth, int stages) {
  // Storage rounding: results may differ from the reference by a couple of ulps of the storage
  // type (the reference and the program round at different points: PSUM eviction, SBUF
  // intermediates, re-associated sums). Accumulation error of fp32 sums grows ~ sqrt(depth).
  const double d = std::sqrt(static_cast<double>(std::max<std::int64_t>(depth, 1)));
  const double acc = 16.0 * 0x1p-23 * d;  // fp32 accumulation in a different order
  // fp8 counts as bf16: the term is for roundings a program makes and the reference does not
  // (partial sums kept in C's dtype, 2-byte dtypes only); the roundings both make are each
  // element's allowance (reference_with_allowance). With fp8's own 3 ulps (37.5% relative plus
  // 37.5% of the rms) outputs 1.6x the reference verified.
  const double unit = std::min(ulp_of(dtype), ulp_of(ir::DType::bf16));
  const double round = 3.0 * unit * std::sqrt(static_cast<double>(std::max(stages, 1)));
  Tolerance t;
  t.rel = round + acc + 1e-6;
  t.abs = round + acc + 1e-6;
  return t;
}

Tolerance scaled(Tolerance t, std::span<const float> reference) {
  double ss = 0;
  for (float w : reference) ss += std::isfinite(w) ? double{w} * w : 0.0;
  const double rms = reference.empty() ? 0.0 : std::sqrt(ss / static_cast<double>(reference.size()));
  // The tensor's own scale, not max(1, rms): outputs of magnitude 1/C (a softmax's) were checked
  // with bf16's ulp at 1, so all zeros verified. fp32 arithmetic's error beyond that scale (values
  // that cancel from larger ones) is each element's allowance (reference_with_allowance).
  t.abs *= rms;
  return t;
}
}  // namespace

Tolerance tolerance_for(ir::DType dtype, std::int64_t depth) { return tolerance_stages(dtype, depth, 1); }

Tolerance tolerance_for(ir::DType dtype, std::int64_t depth, std::span<const float> reference) {
  return scaled(tolerance_for(dtype, depth), reference);
}

Tolerance tolerance_for(const Rounding& r, std::int64_t depth, std::span<const float> reference) {
  return scaled(tolerance_stages(r.dtype, depth, r.stages), reference);
}

namespace {

void collect_reads(const ir::Expr& e, std::vector<std::string>& out) {
  if (e.kind == ir::Expr::Kind::access) out.push_back(e.tensor);
  for (const auto& a : e.args) collect_reads(a, out);
}

std::string multi_index(const ir::Kernel& k, int tensor, std::size_t flat) {
  std::vector<std::int64_t> shape;
  if (tensor >= 0 && static_cast<std::size_t>(tensor) < k.tensors.size()) shape = k.shape(k.tensors[tensor]);
  std::vector<std::int64_t> idx(shape.size(), 0);
  auto rem = static_cast<std::int64_t>(flat);
  for (std::size_t d = shape.size(); d-- > 0;) {
    if (shape[d] <= 0) continue;
    idx[d] = rem % shape[d];
    rem /= shape[d];
  }
  return fmt::format("[{}]", fmt::join(idx, ", "));
}

std::string tensor_name(const ir::Kernel& k, int tensor) {
  if (tensor >= 0 && static_cast<std::size_t>(tensor) < k.tensors.size()) return k.tensors[tensor].name;
  return fmt::format("#{}", tensor);
}

}  // namespace

std::vector<std::int64_t> reduction_depths(const ir::Kernel& k) {
  std::unordered_map<std::string, std::size_t> index;
  for (std::size_t t = 0; t < k.tensors.size(); ++t) index.emplace(k.tensors[t].name, t);
  std::vector<std::int64_t> depth(k.tensors.size(), 0);
  for (std::size_t i = 0; i < k.ops.size(); ++i) {
    const auto& op = k.ops[i];
    std::vector<std::string> reads;
    collect_reads(op.expr, reads);
    std::int64_t d = 0;
    for (const auto& r : reads)
      if (auto it = index.find(r); it != index.end()) d = std::max(d, depth[it->second]);
    std::int64_t len = 1;
    for (const auto& [name, size] : k.op_indices(i))
      if (std::find(op.reduce_indices.begin(), op.reduce_indices.end(), name) != op.reduce_indices.end()) len *= size;
    if (auto it = index.find(op.out); it != index.end()) depth[it->second] = std::max(depth[it->second], d + len);
  }
  return depth;
}

namespace {
ir::DType coarser(ir::DType a, ir::DType b) { return ulp_of(b) > ulp_of(a) ? b : a; }
void collect_casts(const ir::Expr& e, ir::DType& d) {
  if (e.kind == ir::Expr::Kind::call && e.fn == ir::Fn::cast) d = coarser(d, e.dtype);
  for (const auto& a : e.args) collect_casts(a, d);
}
}  // namespace

std::vector<Rounding> rounding_dtypes(const ir::Kernel& k) {
  std::unordered_map<std::string, std::size_t> index;
  for (std::size_t t = 0; t < k.tensors.size(); ++t) index.emplace(k.tensors[t].name, t);
  std::vector<Rounding> out(k.tensors.size());
  for (const auto& op : k.ops) {
    const auto it = index.find(op.out);
    if (it == index.end()) continue;
    ir::DType own = k.tensors[it->second].dtype;
    collect_casts(op.expr, own);
    Rounding r;
    std::vector<std::string> reads;
    collect_reads(op.expr, reads);
    for (const auto& name : reads)
      if (auto jt = index.find(name); jt != index.end()) {
        r.dtype = coarser(r.dtype, out[jt->second].dtype);
        r.stages = std::max(r.stages, out[jt->second].stages);
      }
    if (own != ir::DType::fp32) ++r.stages;
    r.dtype = coarser(r.dtype, own);
    out[it->second] = r;  // a tensor is written by one statement
  }
  return out;
}

std::string_view to_string(CheckFailure f) noexcept {
  switch (f) {
    case CheckFailure::none: return "none";
    case CheckFailure::mismatch: return "mismatch";
    case CheckFailure::non_finite: return "non_finite";
    case CheckFailure::size: return "size";
    case CheckFailure::error: return "error";
  }
  return "?";
}

ir::ValuesWithError reference_with_allowance(const ir::Kernel& k, std::span<const std::vector<float>> inputs,
                                             const std::atomic<bool>* cancel) {
  auto r = ir::evaluate_with_error(k, inputs, cancel);
  for (auto& a : r.error)
    for (auto& x : a) x = static_cast<float>(kFp32Allowance * x);
  return r;
}

CheckResult compare(const ir::Kernel& k, int tensor, std::span<const float> got, std::span<const float> want,
                    Tolerance tol, std::span<const float> allowance_of) {
  CheckResult r;
  const std::string name = tensor_name(k, tensor);
  if (!allowance_of.empty() && allowance_of.size() != want.size())
    throw Error(fmt::format("{}: {} allowances for {} reference values", name, allowance_of.size(), want.size()));
  if (got.size() != want.size()) {
    r.ok = false;
    r.message = fmt::format("{}: got {} values, want {}", name, got.size(), want.size());
    r.failure = CheckFailure::size;
    return r;
  }
  const auto allowance = [&](std::size_t i) {
    return allowance_of.empty() || !std::isfinite(allowance_of[i]) ? 0.0 : std::fabs(double{allowance_of[i]});
  };
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    bool bad;
    if (!std::isfinite(w)) {
      // a non-finite reference must be matched exactly in kind (NaN with NaN, +inf with +inf), and
      // by a value the program wrote (not the poison an unwritten element still holds)
      bad = std::isnan(w) ? !std::isnan(g) || is_unwritten(static_cast<float>(g)) : g != w;
    } else if (!std::isfinite(g)) {
      bad = true;
    } else {
      const double err = std::fabs(g - w);
      r.max_abs_err = std::max(r.max_abs_err, err);
      if (w != 0) r.max_rel_err = std::max(r.max_rel_err, err / std::fabs(w));
      bad = !(err <= tol.abs + tol.rel * std::fabs(w) + allowance(i));
    }
    if (bad && r.ok) {
      r.ok = false;
      r.failure = std::isfinite(g) && std::isfinite(w) ? CheckFailure::mismatch : CheckFailure::non_finite;
      const char* what = is_unwritten(static_cast<float>(g)) ? "unwritten (or computed from unwritten memory) at "
                         : std::isnan(g) && std::isfinite(w) ? "NaN (invalid arithmetic) at "
                                                              : "";
      r.message = fmt::format("{}{} flat index {} {}: got {} want {} (tolerance {:.3g} + {:.3g}*|want|{})", what, name, i,
                              multi_index(k, tensor, i), g, w, tol.abs, tol.rel,
                              allowance(i) > 0 ? fmt::format(" + {:.3g} for fp32 arithmetic's own error here", allowance(i)) : "");
    }
  }
  return r;
}

}  // namespace kevo::verify
