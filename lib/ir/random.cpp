// Random valid kernels. A kernel is grown motif by motif (a map, a reduction, a contraction with
// an optional epilogue, an rmsnorm, a softmax, a layernorm) over a pool of values: inputs made
// on demand with fresh or shared dimensions, and the results of earlier statements. Each motif
// reads a primary value (mostly a result nobody has read yet, sometimes an older one, so temps get
// several readers) plus new inputs (weights, gains, biases, full-shape operands in permuted
// orders). At the end every result nobody reads becomes an output and the others temps, so every
// temp reaches an output and every input is read by construction.
//
// Numerics: each value carries a typical magnitude; before a nonlinearity, a square or a product
// that would grow large the operand is multiplied by a power of two that brings it to O(1).
// Singular functions only see arguments bounded away from their singularity (rsqrt(x*x + 1),
// log(abs(x) + 1), a / (abs(b) + 1), rsqrt(mean(x*x) + eps), e / sum(e) with sum(e) >= 1), exp
// only sees bounded arguments (x - max, tanh(x), -square(x)), and a difference of two values with
// a common input ancestor is avoided (cancellation).
#include "kevo/ir/random.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "kevo/core/error.hpp"
#include "kevo/ir/builder.hpp"

namespace kevo::ir {

namespace {

struct Val {
  std::string name;         // inputs: final name; results: a placeholder renamed at the end
  std::vector<int> dims;    // storage order
  double scale = 0.5;       // typical magnitude
  bool nonneg = false;
  bool input = false;
  DType dtype = DType::fp32;
  std::uint64_t roots = 0;  // inputs it depends on (one bit per input, modulo 64)
  int reads = 0;
  std::string base;         // temp name stem (acc, ms, inv, ...)
  int zero_sum_dim = -1;    // a dim along which the value sums to exactly 0 (a centred x - mean(x))
  bool rounded = false;     // a temp held in bf16/fp16 (cast<T> statement)
};

constexpr const char* kDimNames = "MNKRCBHPQSTUVLJDFAWZXY";

class Gen {
 public:
  Gen(Rng& rng, const RandomKernelOptions& o) : r_(rng), o_(o) {}

  Kernel run() {
    const int n = o_.min_statements + static_cast<int>(r_.below(static_cast<std::uint64_t>(o_.max_statements - o_.min_statements + 1)));
    while (static_cast<int>(ops_.size()) < n) motif(n - static_cast<int>(ops_.size()));
    return assemble();
  }

 private:
  Rng& r_;
  const RandomKernelOptions& o_;
  std::vector<Dim> dims_;
  std::vector<Val> vals_;
  std::vector<Op> ops_;
  int n_inputs_ = 0, n_gain_ = 0, n_shift_ = 0;

  // ---- draws ------------------------------------------------------------------------------
  template <typename T>
  const T& pick(const std::vector<T>& v) { return v[r_.below(v.size())]; }
  int weighted(std::initializer_list<double> w) {
    double total = 0;
    for (double x : w) total += x;
    double u = r_.uniform() * total;
    int i = 0;
    for (double x : w) {
      if (u < x) return i;
      u -= x;
      ++i;
    }
    return i - 1;
  }
  // An output's dtype: as dtype(), but bf16 in place of an fp8 that would overflow (fp8_e4m3's
  // largest finite value is 240; a value's extreme runs to ~8x its typical magnitude). Until
  // 2026-12-06 fp8 saturated at 448 here, and such outputs were 448 everywhere, checking nothing.
  DType output_dtype(const Val& v) {
    const DType d = dtype();
    return d == DType::fp8_e4m3 && v.scale * 8 > 240 ? DType::bf16 : d;
  }
  DType dtype() {
    if (!o_.low_precision) return DType::fp32;
    switch (weighted({0.3, 0.2, 0.3, 0.2})) {
      case 0: return DType::bf16;
      case 1: return DType::fp16;
      case 2: return DType::fp32;
      default: return DType::fp8_e4m3;
    }
  }

  // ---- dimensions -------------------------------------------------------------------------
  std::int64_t size(int d) const { return dims_[static_cast<std::size_t>(d)].size; }
  std::int64_t elems(const std::vector<int>& ds) const {
    std::int64_t e = 1;
    for (int d : ds) e *= size(d);
    return e;
  }
  std::string index(int d) const {
    std::string s = dims_[static_cast<std::size_t>(d)].name;
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }
  std::vector<std::string> indices(const std::vector<int>& ds) const {
    std::vector<std::string> v;
    for (int d : ds) v.push_back(index(d));
    return v;
  }
  // A size in [lo, cap] (cap clamped to max_extent): powers of two, sizes they do not divide, or
  // anything; below lo only when nothing in [lo, cap] exists.
  std::int64_t draw_size(std::int64_t cap, std::int64_t lo) {
    cap = std::min(cap, o_.max_extent);
    if (cap <= 1) return 1;
    lo = std::clamp<std::int64_t>(lo, 2, cap);
    static const std::vector<std::int64_t> pow2 = {2, 4, 8, 16, 32, 64, 128, 256, 512};
    static const std::vector<std::int64_t> odd = {3, 5, 6, 7, 12, 17, 20, 24, 33, 48, 65, 96, 100, 127, 130, 150, 257};
    const int kind = weighted({0.45, 0.4, 0.15});
    if (kind < 2) {
      std::vector<std::int64_t> c;
      for (auto s : kind == 0 ? pow2 : odd)
        if (s >= lo && s <= cap) c.push_back(s);
      if (!c.empty()) return pick(c);
    }
    return lo + static_cast<std::int64_t>(r_.below(static_cast<std::uint64_t>(cap - lo + 1)));
  }
  int new_dim(std::int64_t cap, std::int64_t lo = 16) {
    const std::size_t i = dims_.size();
    const std::size_t nl = std::char_traits<char>::length(kDimNames);
    std::string name(1, kDimNames[i % nl]);
    if (i >= nl) name += std::to_string(i / nl);
    dims_.push_back({std::move(name), draw_size(cap, lo)});
    return static_cast<int>(i);
  }
  // `rank` dimensions for a new tensor of at most max_tensor_elements, each fresh or (sometimes)
  // an existing one so that unrelated inputs share extents.
  std::vector<int> new_shape(int rank) {
    std::vector<int> ds;
    std::int64_t prod = 1;
    // skewed (RandomKernelOptions::long_dims): a few short rows beside one long last dimension
    if (o_.long_dims > 0 && o_.max_tensor_elements >= 2048 && r_.chance(o_.long_dims)) {
      for (int i = 0; i + 1 < rank; ++i) {
        ds.push_back(new_dim(4, 2));
        prod *= size(ds.back());
      }
      ds.push_back(new_dim(o_.max_tensor_elements / prod, 1024));
      return ds;
    }
    for (int i = 0; i < rank; ++i) {
      const int left = rank - i;
      const auto cap = static_cast<std::int64_t>(
          std::floor(std::pow(static_cast<double>(o_.max_tensor_elements / prod), 1.0 / left) + 1e-9));
      int d = -1;
      if (!dims_.empty() && r_.chance(0.25)) {
        const int e = static_cast<int>(r_.below(dims_.size()));
        if (size(e) <= cap && std::find(ds.begin(), ds.end(), e) == ds.end()) d = e;
      }
      if (d < 0) d = new_dim(cap, rank >= 3 ? 4 : 16);
      ds.push_back(d);
      prod *= size(d);
    }
    return ds;
  }
  void shuffle(std::vector<int>& v) {
    for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[r_.below(i)]);
  }
  // A different order of v (v itself when it has fewer than two elements).
  std::vector<int> permuted(std::vector<int> v) {
    if (v.size() < 2) return v;
    const auto orig = v;
    while (v == orig) shuffle(v);
    return v;
  }

  // ---- values -----------------------------------------------------------------------------
  enum class InputKind { plain, gain, shift };
  int new_input(std::vector<int> ds, InputKind kind = InputKind::plain) {
    Val v;
    v.input = true;
    v.dims = std::move(ds);
    v.dtype = dtype();
    const int id = n_inputs_++;
    static const std::vector<std::string> gains = {"g", "gamma", "scale", "weight"};
    static const std::vector<std::string> shifts = {"bias", "beta", "shift"};
    if (kind == InputKind::gain && n_gain_ < static_cast<int>(gains.size())) {
      v.name = gains[static_cast<std::size_t>(n_gain_++)];
      v.scale = 1.0;
      v.nonneg = true;
    } else if (kind == InputKind::shift && n_shift_ < static_cast<int>(shifts.size())) {
      v.name = shifts[static_cast<std::size_t>(n_shift_++)];
      v.scale = 0.3;
    } else {
      v.name = fmt::format("{}{}", v.dims.size() >= 2 ? (id % 2 ? "W" : "X") : "v", id);
      v.scale = 0.55;
    }
    v.roots = std::uint64_t{1} << (id % 64);
    vals_.push_back(std::move(v));
    return static_cast<int>(vals_.size()) - 1;
  }
  Val& val(int v) { return vals_[static_cast<std::size_t>(v)]; }
  Expr read(int v) {
    val(v).reads++;
    return access(val(v).name, indices(val(v).dims));
  }
  // Appends `out[out_dims] = reduce(red) expr` writing a new value; returns it.
  int emit(std::vector<int> out_dims, ReduceOp reduce, const std::vector<int>& red, Expr expr, double scale,
           bool nonneg, std::uint64_t roots, std::string base) {
    Val v;
    v.name = fmt::format("%{}", vals_.size());
    v.dims = std::move(out_dims);
    v.scale = scale;
    v.nonneg = nonneg;
    v.roots = roots;
    v.base = std::move(base);
    Op op;
    op.out = v.name;
    op.out_indices = indices(v.dims);
    op.reduce = reduce;
    op.reduce_indices = indices(red);
    op.expr = std::move(expr);
    ops_.push_back(std::move(op));
    vals_.push_back(std::move(v));
    return static_cast<int>(vals_.size()) - 1;
  }

  // The value a motif works on: mostly a result nobody reads yet (the chain goes on), sometimes
  // any earlier result (a temp with several readers; the unread one becomes another output),
  // sometimes an input, else a fresh input (-1 instead when !fresh: the caller makes its own).
  // `min_rank` bounds the rank from below.
  int primary(std::size_t min_rank, bool fresh = true) {
    std::vector<int> unread, results, inputs;
    for (int i = 0; i < static_cast<int>(vals_.size()); ++i) {
      const Val& v = vals_[static_cast<std::size_t>(i)];
      if (v.dims.size() < min_rank) continue;
      (v.input ? inputs : results).push_back(i);
      if (!v.input && v.reads == 0) unread.push_back(i);
    }
    if (!unread.empty() && r_.chance(0.75)) return r_.chance(0.7) ? unread.back() : pick(unread);
    if (!results.empty() && r_.chance(0.5)) return pick(results);
    if (!inputs.empty() && r_.chance(0.2)) return pick(inputs);
    if (!fresh) return -1;
    const int rank = std::max<int>(static_cast<int>(min_rank), weighted({0.1, 0.65, 0.25}) + 1);
    return new_input(new_shape(rank));
  }

  // ---- expressions ------------------------------------------------------------------------
  // Scales e (typical magnitude s) by a power of two so that it is at most `to`.
  Expr norm(Expr e, double& s, double to = 2.0) {
    if (s <= to) return e;
    const int k = static_cast<int>(std::ceil(std::log2(s / to)));
    s = std::ldexp(s, -k);
    return std::move(e) * std::ldexp(1.0, -k);
  }
  // A random elementwise function of e; updates s and nonneg.
  Expr unary_fn(Expr e, double& s, bool& nonneg) {
    switch (r_.below(14)) {
      case 0: nonneg = false; s = std::min(s, 1.0); return unary(Fn::tanh, norm(std::move(e), s));
      case 1: e = norm(std::move(e), s); nonneg = false; return unary(Fn::gelu_tanh, std::move(e));
      case 2: e = norm(std::move(e), s); nonneg = false; return unary(Fn::gelu_erf, std::move(e));
      case 3: e = norm(std::move(e), s); nonneg = false; return unary(Fn::silu, std::move(e));
      case 4: nonneg = true; return unary(Fn::relu, std::move(e));
      case 5: e = norm(std::move(e), s); nonneg = true; s = 0.6; return unary(Fn::sigmoid, std::move(e));
      case 6: e = norm(std::move(e), s); nonneg = true; s = s * s; return unary(Fn::square, std::move(e));
      case 7: nonneg = true; return unary(Fn::abs, std::move(e));
      case 8: return unary(Fn::neg, std::move(e));
      case 9: e = norm(std::move(e), s); nonneg = true; s = 1.3; return unary(Fn::exp, unary(Fn::tanh, std::move(e)));
      case 10: nonneg = true; s = std::log1p(s); return unary(Fn::log, unary(Fn::abs, std::move(e)) + 1.0);
      case 11:
        e = norm(std::move(e), s);
        nonneg = true;
        s = 0.8;
        return unary(Fn::rsqrt, unary(Fn::square, std::move(e)) + 1.0);
      case 12: nonneg = true; s = 0.7; return unary(Fn::reciprocal, unary(Fn::abs, std::move(e)) + 1.0);
      default:
        e = norm(std::move(e), s);
        nonneg = true;
        s = 0.6;
        return unary(Fn::exp, -unary(Fn::square, std::move(e)));
    }
  }
  // a (op) b for two values; `related` when they share an input (no differences then).
  Expr binary_fn(Expr a, double& sa, bool& na, Expr b, double sb, bool nb, bool related) {
    int k = weighted({0.3, related ? 0.0 : 0.15, 0.25, 0.1, 0.08, 0.12});
    switch (k) {
      case 0: sa = std::hypot(sa, sb); na = na && nb; return std::move(a) + std::move(b);
      case 1: sa = std::hypot(sa, sb); na = false; return std::move(a) - std::move(b);
      case 2:
        if (sa * sb > 16) {
          a = norm(std::move(a), sa);
          b = norm(std::move(b), sb);
        }
        sa = sa * sb;
        na = na && nb;
        return std::move(a) * std::move(b);
      case 3: sa = std::max(sa, sb); na = na || nb; return call(Fn::max, {std::move(a), std::move(b)});
      case 4: sa = std::max(sa, sb); na = na && nb; return call(Fn::min, {std::move(a), std::move(b)});
      default: sa = sa * 0.7; return std::move(a) / (unary(Fn::abs, std::move(b)) + 1.0);
    }
  }
  bool subset(const std::vector<int>& a, const std::vector<int>& b) const {
    return std::all_of(a.begin(), a.end(), [&](int d) { return std::find(b.begin(), b.end(), d) != b.end(); });
  }
  // A nonempty strict subset of ds (in ds's order, or reversed), or all of ds when it has one element.
  std::vector<int> some_of(const std::vector<int>& ds) {
    if (ds.size() == 1) return ds;
    std::vector<int> s;
    while (s.empty() || s.size() == ds.size()) {
      s.clear();
      for (int d : ds)
        if (r_.chance(0.5)) s.push_back(d);
    }
    if (r_.chance(0.2)) std::reverse(s.begin(), s.end());
    return s;
  }

  // ---- motifs -----------------------------------------------------------------------------
  void motif(int budget) {
    const int m = weighted({0.22, 0.2, 0.26, budget >= 2 ? 0.1 : 0.0, budget >= 3 ? 0.11 : 0.0, budget >= 3 ? 0.08 : 0.0});
    switch (m) {
      case 0: map_motif(primary(1)); break;
      case 1: reduce_motif(primary(2)); break;
      case 2: contract_motif(primary(1, false), budget >= 2 && r_.chance(0.5)); break;
      case 3: rmsnorm_motif(primary(2), budget); break;
      case 4: softmax_motif(unrounded(primary(2)), budget); break;
      default: layernorm_motif(unrounded(primary(2)), budget); break;
    }
  }

  // Y = f(x) (op) operands, over x's dims (maybe permuted, maybe one new broadcast dim).
  void map_motif(int x) {
    std::vector<int> od = val(x).dims;
    if (od.size() >= 2 && r_.chance(0.25)) od = permuted(od);
    Expr e = read(x);
    double s = val(x).scale;
    bool nn = val(x).nonneg;
    std::uint64_t roots = val(x).roots;
    int extras = weighted({0.3, 0.5, 0.2});
    // a new dimension that only a new input carries: out[r, n] = x[r] * w[n]
    if (r_.chance(0.12) && elems(od) * 16 <= o_.max_tensor_elements && od.size() < 4) {
      const int nd = new_dim(o_.max_tensor_elements / elems(od));
      od.insert(od.begin() + static_cast<std::ptrdiff_t>(r_.below(od.size() + 1)), nd);
      const int w = new_input({nd}, r_.chance(0.5) ? InputKind::gain : InputKind::plain);
      if (r_.chance(0.5)) e = unary_fn(std::move(e), s, nn);
      e = std::move(e) * read(w);
      s *= val(w).scale;
      nn = nn && val(w).nonneg;
      roots |= val(w).roots;
      extras = std::min(extras, 1);
    } else if (extras == 0 || r_.chance(0.5)) {
      e = unary_fn(std::move(e), s, nn);
    }
    for (int i = 0; i < extras; ++i) {
      std::vector<int> cands;
      for (int v = 0; v < static_cast<int>(vals_.size()); ++v)
        if (v != x && !val(v).input && subset(val(v).dims, od)) cands.push_back(v);
      const int kind = weighted({cands.empty() ? 0.0 : 0.35, 0.3, 0.35});
      if (kind == 2) {  // broadcast gain or shift over some of the dims
        const bool gain = r_.chance(0.5);
        const int w = new_input(some_of(od), gain ? InputKind::gain : InputKind::shift);
        roots |= val(w).roots;
        if (gain) {
          e = std::move(e) * read(w);
        } else {
          e = std::move(e) + read(w);
          s = std::hypot(s, val(w).scale);
          nn = false;
        }
        continue;
      }
      const int y = kind == 0 ? pick(cands) : new_input(r_.chance(0.3) ? permuted(od) : od);
      const bool related = (val(y).roots & roots) != 0;
      roots |= val(y).roots;
      Expr b = read(y);
      double sb = val(y).scale;
      bool nb = val(y).nonneg;
      if (r_.chance(0.3)) b = unary_fn(std::move(b), sb, nb);
      e = binary_fn(std::move(e), s, nn, std::move(b), sb, nb, related);
    }
    if (s > 256) e = norm(std::move(e), s, 16);
    // a temp held in bf16 or fp16 (its whole right-hand side a cast): what hand kernels keep
    // between matmuls, and a rounding stage for the oracle. Only values of magnitude <= 1, whose
    // ulp is small in absolute terms, as an exp's argument must be; a centring (x - mean(x))
    // would amplify it, so layernorm and softmax never take such a value (unrounded()).
    const bool round = o_.low_precision && s <= 1.0 && r_.chance(0.25);
    if (round) e = cast(r_.chance(0.5) ? DType::bf16 : DType::fp16, std::move(e));
    const int t = emit(od, ReduceOp::none, {}, std::move(e), s, nn, roots, "t");
    vals_[static_cast<std::size_t>(t)].rounded = round;
  }

  // x, or a fresh input of x's rank in its place when x is held in low precision.
  int unrounded(int x) {
    if (!val(x).rounded) return x;
    return new_input(new_shape(static_cast<int>(val(x).dims.size())));
  }

  // Row (last dim), column (another dim) or two-dim reductions: sum, max, min, mean.
  void reduce_motif(int x) {
    const std::vector<int> xd = val(x).dims;
    std::vector<int> red;
    const int k = weighted({0.5, 0.35, xd.size() >= 3 ? 0.15 : 0.0});
    if (k == 0) red = {xd.back()};
    else if (k == 1) red = {xd[r_.below(xd.size() - 1)]};
    else {
      std::vector<int> c = permuted(xd);
      red = {c[0], c[1]};
    }
    std::vector<int> od;
    for (int d : xd)
      if (std::find(red.begin(), red.end(), d) == red.end()) od.push_back(d);
    if (od.size() >= 2 && r_.chance(0.1)) od = permuted(od);
    Expr e = read(x);
    double s = val(x).scale;
    bool nn = val(x).nonneg;
    switch (weighted({0.5, 0.15, 0.15, 0.2})) {
      case 0: break;
      case 1: e = unary(Fn::square, norm(std::move(e), s)); s *= s; nn = true; break;
      case 2: e = unary(Fn::abs, std::move(e)); nn = true; break;
      default: e = unary_fn(std::move(e), s, nn); break;
    }
    const double n = static_cast<double>(elems(red));
    ReduceOp op = std::array{ReduceOp::sum, ReduceOp::max, ReduceOp::min, ReduceOp::mean}[static_cast<std::size_t>(
        weighted({0.35, 0.2, 0.15, 0.3}))];
    // A sum or mean of a centred value (or its negation or another elementwise function that may be
    // odd) along its centring dim is 0 up to rounding, plus the shift's sum for a layernorm: the
    // result is cancellation, its fp32 error set by the terms' magnitude, not the result's (seed
    // 20261201, case 37403: -sum(c) of a layernorm without gain or shift; case 225443: sum(c) of
    // one with a shift). No user computes that; take the max instead (no extra draw, so every
    // other kernel is unchanged).
    if ((op == ReduceOp::sum || op == ReduceOp::mean) && val(x).zero_sum_dim >= 0 && !nn &&
        std::find(red.begin(), red.end(), val(x).zero_sum_dim) != red.end())
      op = ReduceOp::max;
    const double scale = op == ReduceOp::sum ? s * (nn ? n : std::sqrt(n)) : op == ReduceOp::mean ? s : 2 * s;
    emit(od, op, red, std::move(e), scale, nn && op != ReduceOp::min, val(x).roots,
         op == ReduceOp::max ? "mx" : op == ReduceOp::min ? "mn" : op == ReduceOp::sum ? "s" : "mu");
  }

  // out[batch, rows, cols] = sum(red) X[...] * W[...] with 1-3 reduction indices; X stored with
  // its reduction dims last or first (transposed), W [batch, red, cols] or [batch, cols, red].
  void contract_motif(int x, bool epilogue) {
    const std::int64_t depth = std::min(o_.max_contraction_depth, o_.max_tensor_elements);
    int nred = std::min(weighted({0.6, 0.25, 0.15}) + 1, o_.max_contracted_indices);
    std::vector<int> red, batch, rows;
    if (x >= 0) {
      const std::vector<int> xd = val(x).dims;
      nred = std::min<int>(nred, static_cast<int>(xd.size()));
      for (int attempt = 0; attempt < 8 && red.empty(); ++attempt) {
        std::vector<int> c = xd;
        if (attempt == 0 && nred == 1 && r_.chance(0.6)) c = {xd.back()};  // the usual A[m, k]
        else shuffle(c);
        c.resize(static_cast<std::size_t>(std::max(1, nred - attempt / 3)));
        if (elems(c) <= depth) red = c;
      }
      if (red.empty()) x = -1;
      else
        for (int d : xd)
          if (std::find(red.begin(), red.end(), d) == red.end()) rows.push_back(d);
    }
    if (x < 0) {  // a fresh left operand
      const auto per = static_cast<std::int64_t>(std::floor(std::pow(static_cast<double>(depth), 1.0 / nred) + 1e-9));
      for (int i = 0; i < nred; ++i) red.push_back(new_dim(std::min(per, depth / elems(red)), nred == 1 ? 16 : 2));
      const bool has_batch = nred <= 2 && r_.chance(0.25);
      const int nrows = std::min(weighted({0.05, 0.85, 0.1}), 4 - nred - (has_batch ? 1 : 0));
      std::int64_t room = o_.max_tensor_elements / elems(red);
      if (has_batch && room >= 32) {
        batch.push_back(new_dim(std::min<std::int64_t>(8, room / 4), 2));
        room /= size(batch.back());
      }
      for (int i = 0; i < nrows && room >= 2; ++i) {
        rows.push_back(new_dim(i + 1 < nrows ? static_cast<std::int64_t>(std::sqrt(static_cast<double>(room))) : room,
                               nrows == 2 ? 4 : 16));
        room /= size(rows.back());
      }
      std::vector<int> ad = batch;
      const int layout = weighted({0.6, 0.3, 0.1});
      const std::vector<int>& first = layout == 1 ? red : rows;
      const std::vector<int>& second = layout == 1 ? rows : red;
      ad.insert(ad.end(), first.begin(), first.end());
      ad.insert(ad.end(), second.begin(), second.end());
      if (layout == 2) ad = permuted(ad);
      x = new_input(ad);
      rows.insert(rows.begin(), batch.begin(), batch.end());
      batch.clear();
    }
    // a batch index: one of the kept dims that the right operand carries too
    if (rows.size() >= 2 && red.size() <= 2 && r_.chance(0.4)) {
      batch.push_back(rows.front());
      rows.erase(rows.begin());
    }
    // the right operand: a new weight, or (rarely) an earlier result that carries the reduction
    // dims and otherwise only dims foreign to x (as K in Q·Kᵀ)
    const std::vector<int> xd = val(x).dims;
    std::vector<int> cols;
    int w = -1;
    if (batch.empty() && r_.chance(0.3)) {
      std::vector<int> cands;
      for (int v = 0; v < static_cast<int>(vals_.size()); ++v) {
        if (v == x || !subset(red, val(v).dims) || val(v).dims.size() == red.size()) continue;
        bool foreign = true;
        for (int d : val(v).dims)
          if (std::find(red.begin(), red.end(), d) == red.end() && std::find(xd.begin(), xd.end(), d) != xd.end())
            foreign = false;
        std::vector<int> od = rows;
        for (int d : val(v).dims)
          if (std::find(red.begin(), red.end(), d) == red.end()) od.push_back(d);
        if (foreign && elems(od) <= o_.max_tensor_elements && od.size() <= 4) cands.push_back(v);
      }
      if (!cands.empty()) {
        w = pick(cands);
        for (int d : val(w).dims)
          if (std::find(red.begin(), red.end(), d) == red.end()) cols.push_back(d);
      }
    }
    if (w < 0) {
      const std::int64_t cap =
          o_.max_tensor_elements / std::max(elems(batch) * elems(red), elems(batch) * elems(rows));
      const bool matvec = !rows.empty() && (cap < 2 || r_.chance(0.08));
      if (!matvec && rows.size() + batch.size() < 4) cols.push_back(new_dim(cap));
      std::vector<int> wd = batch;
      const int layout = weighted({0.6, 0.3, 0.1});
      const std::vector<int>& first = layout == 1 ? cols : red;
      const std::vector<int>& second = layout == 1 ? red : cols;
      wd.insert(wd.end(), first.begin(), first.end());
      wd.insert(wd.end(), second.begin(), second.end());
      if (layout == 2) wd = permuted(wd);
      w = new_input(wd);
    }
    std::vector<int> od = batch;
    od.insert(od.end(), rows.begin(), rows.end());
    od.insert(od.end(), cols.begin(), cols.end());
    if (od.size() >= 2 && r_.chance(0.12)) od = permuted(od);
    Expr a = read(x), b = read(w);
    const double scale = val(x).scale * val(w).scale * std::sqrt(static_cast<double>(elems(red)));
    const std::uint64_t roots = val(x).roots | val(w).roots;
    Expr prod = r_.chance(0.15) ? std::move(b) * std::move(a) : std::move(a) * std::move(b);
    const int acc = emit(od, ReduceOp::sum, red, std::move(prod), scale, false, roots, "acc");
    if (!epilogue) return;
    // epilogue: act(acc * 2^-k + bias[cols]) or a gate by another new operand
    Expr e = read(acc);
    double s = scale;
    bool nn = false;
    std::uint64_t rts = roots;
    e = norm(std::move(e), s);
    if (!cols.empty() && r_.chance(0.7)) {
      std::vector<int> bd = cols;
      if (r_.chance(0.15)) bd = od;
      const int bias = new_input(bd, InputKind::shift);
      rts |= val(bias).roots;
      e = std::move(e) + read(bias);
    }
    static const std::vector<Fn> acts = {Fn::gelu_tanh, Fn::gelu_erf, Fn::relu, Fn::silu, Fn::tanh, Fn::sigmoid};
    if (r_.chance(0.85)) {
      const Fn f = pick(acts);
      e = unary(f, std::move(e));
      nn = f == Fn::relu || f == Fn::sigmoid;
    }
    emit(od, ReduceOp::none, {}, std::move(e), s, nn, rts, "h");
  }

  // The reduced dim of a norm or softmax: the last one mostly, else another (a column norm).
  int norm_dim(const std::vector<int>& xd) { return r_.chance(0.75) ? xd.back() : xd[r_.below(xd.size() - 1)]; }
  std::vector<int> without(const std::vector<int>& ds, int d) {
    std::vector<int> v;
    for (int e : ds)
      if (e != d) v.push_back(e);
    return v;
  }

  // The eps of a norm over dimension c of values of scale s. rsqrt(var + eps) amplifies the
  // rounding of the mean and of x - mu (a legitimate difference between two correct summation
  // orders) by up to 1/sqrt(eps) when the row is nearly constant or short -- which random
  // intermediates often are (exp(-x^2) of small fp8 values is ~1 everywhere). So eps is at least
  // 0.05 s^2: a varied row's variance (~s^2) still dominates it, so a wrong variance still shows.
  double norm_eps(int c, double s, double usual) { return std::max(size(c) >= 16 ? usual : 0.1 * s * s, 0.05 * s * s); }

  // ms[r] = mean(c) x*x; inv[r] = rsqrt(ms[r] + eps); y[r, c] = x * inv[r] * g[c]
  void rmsnorm_motif(int x, int budget) {
    const std::vector<int> xd = val(x).dims;
    const int c = norm_dim(xd);
    const std::vector<int> rest = without(xd, c);
    Expr sq = r_.chance(0.5) ? read(x) * read(x) : unary(Fn::square, read(x));
    const double s = val(x).scale;
    const int ms = emit(rest, ReduceOp::mean, {c}, std::move(sq), s * s, true, val(x).roots, "ms");
    // rsqrt amplifies ms's rounding by up to 1/sqrt(eps) near ms = 0; a mean over a short row
    // (a few squares of values that may all be small) gets there, so its eps scales with x
    Expr inv = unary(Fn::rsqrt, read(ms) + norm_eps(c, s, 1e-6));
    if (budget >= 3 && r_.chance(0.6)) {
      const int iv = emit(rest, ReduceOp::none, {}, std::move(inv), 1 / std::max(s, 1e-3), true, val(x).roots, "inv");
      inv = read(iv);
    }
    Expr y = read(x) * std::move(inv);
    std::uint64_t roots = val(x).roots;
    if (r_.chance(0.8)) {
      const int g = new_input({c}, InputKind::gain);
      y = std::move(y) * read(g);
      roots |= val(g).roots;
    }
    emit(xd, ReduceOp::none, {}, std::move(y), 1.0, false, roots, "y");
  }

  // mx = max(c) x; e = exp(x - mx); s = sum(c) e; y = e / s  (or a 3-statement form)
  void softmax_motif(int x, int budget) {
    const std::vector<int> xd = val(x).dims;
    const int c = norm_dim(xd);
    const std::vector<int> rest = without(xd, c);
    const std::uint64_t roots = val(x).roots;
    const int mx = emit(rest, ReduceOp::max, {c}, read(x), val(x).scale, false, roots, "mx");
    const double n = static_cast<double>(size(c));
    if (budget >= 4 && r_.chance(0.7)) {
      const int e = emit(xd, ReduceOp::none, {}, unary(Fn::exp, read(x) - read(mx)), 0.5, true, roots, "e");
      const int s = emit(rest, ReduceOp::sum, {c}, read(e), n / 2, true, roots, "s");
      Expr y = r_.chance(0.8) ? read(e) / read(s) : read(e) * unary(Fn::reciprocal, read(s));
      emit(xd, ReduceOp::none, {}, std::move(y), 1 / n, true, roots, "p");
    } else {
      const int s = emit(rest, ReduceOp::sum, {c}, unary(Fn::exp, read(x) - read(mx)), n / 2, true, roots, "s");
      emit(xd, ReduceOp::none, {}, unary(Fn::exp, read(x) - read(mx)) / read(s), 1 / n, true, roots, "p");
    }
  }

  // mu = mean(c) x; xc = x - mu; var = mean(c) square(xc); y = xc * rsqrt(var + eps) * g + b
  void layernorm_motif(int x, int budget) {
    const std::vector<int> xd = val(x).dims;
    const int c = norm_dim(xd);
    const std::vector<int> rest = without(xd, c);
    std::uint64_t roots = val(x).roots;
    const double s = val(x).scale;
    const int mu = emit(rest, ReduceOp::mean, {c}, read(x), s, false, roots, "mu");
    Expr y;
    if (budget >= 4 && r_.chance(0.6)) {
      const int xc = emit(xd, ReduceOp::none, {}, read(x) - read(mu), s, false, roots, "xc");
      vals_[static_cast<std::size_t>(xc)].zero_sum_dim = c;
      const int var = emit(rest, ReduceOp::mean, {c}, unary(Fn::square, read(xc)), s * s, true, roots, "var");
      y = read(xc) * unary(Fn::rsqrt, read(var) + norm_eps(c, s, 1e-5));
    } else {
      const int var =
          emit(rest, ReduceOp::mean, {c}, unary(Fn::square, read(x) - read(mu)), s * s, true, roots, "var");
      y = (read(x) - read(mu)) * unary(Fn::rsqrt, read(var) + norm_eps(c, s, 1e-5));
    }
    if (r_.chance(0.8)) {
      const int g = new_input({c}, InputKind::gain);
      y = std::move(y) * read(g);
      roots |= val(g).roots;
    }
    if (r_.chance(0.6)) {
      const int b = new_input({c}, InputKind::shift);
      y = std::move(y) + read(b);
      roots |= val(b).roots;
    }
    // y's centred part sums to 0 along c (exactly without a gain, nearly with one close to 1): a
    // sum along c is the shift's sum plus a cancelled residue whose rounding scales with the terms.
    const int out = emit(xd, ReduceOp::none, {}, std::move(y), 1.0, false, roots, "y");
    vals_[static_cast<std::size_t>(out)].zero_sum_dim = c;
  }

  // ---- assembly ---------------------------------------------------------------------------
  static void rename(Expr& e, const std::vector<std::pair<std::string, std::string>>& names) {
    if (e.kind == Expr::Kind::access)
      for (const auto& [from, to] : names)
        if (e.tensor == from) {
          e.tensor = to;
          break;
        }
    for (auto& a : e.args) rename(a, names);
  }

  Kernel assemble() {
    std::vector<std::pair<std::string, std::string>> names;
    int n_out = 0;
    for (std::size_t i = 0; i < vals_.size(); ++i) {
      Val& v = vals_[i];
      if (v.input) continue;
      const std::string to = v.reads == 0 ? fmt::format("Y{}", n_out++) : fmt::format("{}{}", v.base, i);
      names.emplace_back(v.name, to);
      v.name = to;
    }
    KernelBuilder b("random");
    std::vector<bool> used(dims_.size(), false);
    for (const Val& v : vals_)
      if (v.input)
        for (int d : v.dims) used[static_cast<std::size_t>(d)] = true;
    for (std::size_t d = 0; d < dims_.size(); ++d)
      if (used[d]) b.dim(dims_[d].name, dims_[d].size);
    for (const Val& v : vals_) {
      std::vector<std::string> dn;
      for (int d : v.dims) dn.push_back(dims_[static_cast<std::size_t>(d)].name);
      if (v.input) b.input(v.name, v.dtype, dn);
      else if (v.reads == 0) b.output(v.name, output_dtype(v), dn);
    }
    for (Op& op : ops_) {
      for (const auto& [from, to] : names)
        if (op.out == from) {
          op.out = to;
          break;
        }
      rename(op.expr, names);
      if (op.reduce == ReduceOp::none) b.map(op.out, op.out_indices, std::move(op.expr));
      else b.reduce(op.reduce, op.out, op.out_indices, op.reduce_indices, std::move(op.expr));
    }
    return b.build_or_throw();
  }
};

}  // namespace

Kernel random_kernel(Rng& rng, const RandomKernelOptions& opt) {
  if (opt.min_statements < 1 || opt.max_statements < opt.min_statements || opt.max_extent < 2 ||
      opt.max_tensor_elements < 4 || opt.max_contraction_depth < 2 || opt.max_contracted_indices < 1 || opt.max_contracted_indices > 3)
    throw Error(fmt::format("random_kernel: unusable options (statements {}..{}, max_extent {}, max_tensor_elements {}, "
                            "max_contraction_depth {}, max_contracted_indices {})",
                            opt.min_statements, opt.max_statements, opt.max_extent, opt.max_tensor_elements,
                            opt.max_contraction_depth, opt.max_contracted_indices));
  return Gen(rng, opt).run();
}

Kernel random_kernel(std::uint64_t seed, const RandomKernelOptions& opt) {
  Rng rng(seed);
  return random_kernel(rng, opt);
}

}  // namespace kevo::ir
