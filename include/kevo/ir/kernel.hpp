// The kernel algebra: what a kernel computes, independent of how. A Kernel is a list of named
// dimensions, tensors (inputs and outputs in HBM, fp32 intermediates) and statements
//   out[i, j] = expr                  (map)
//   out[i]    = sum(k) expr           (reduce: sum, max, min, mean over named indices)
//   out[i, j] = sum(k) A[i, k] * B[k, j]   (contract: a reduce-sum of a product of two accesses)
// in program order, forming a DAG through the tensors they read and write.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kevo::ir {

// fp8_e4m3 is the IEEE-754-style E4M3 (exponent 15 holds inf and NaN; largest finite 240), the
// fp8 NeuronCore-v2 and -v3 compute in ("FP8_EXP4 (IEEE-754)"; NKI's nl.float8_e4m3);
// fp8_e4m3fn is OCP's E4M3FN (no inf; largest finite 448; NKI's nl.float8_e4m3fn, PyTorch's
// float8_e4m3fn), NeuronCore-v4 (trn3) and later. docs/KIR.md, "Reference evaluator".
enum class DType : std::uint8_t { bf16, fp16, fp32, fp8_e4m3, fp8_e4m3fn };
std::string_view to_string(DType) noexcept;
std::optional<DType> dtype_from_string(std::string_view) noexcept;
std::size_t dtype_bytes(DType) noexcept;
// Every dtype's name, in enum order ("bf16, fp16, fp32, fp8_e4m3, fp8_e4m3fn"): for messages.
std::string_view dtype_names() noexcept;
constexpr bool is_fp8(DType t) noexcept { return t == DType::fp8_e4m3 || t == DType::fp8_e4m3fn; }

// Elementwise functions. Comparisons yield 1.0 / 0.0 and are meant for select().
enum class Fn : std::uint8_t {
  // binary
  add, sub, mul, div, max, min, lt, le, gt, ge, eq, ne,
  // unary
  exp, log, tanh, gelu_tanh, gelu_erf, silu, relu, sigmoid, rsqrt, sqrt, square, abs, neg, reciprocal,
  cast,   // rounds to Expr::dtype
  // ternary
  select, // select(cond, a, b) = cond != 0 ? a : b
};
std::string_view to_string(Fn) noexcept;  // kir spelling: "add", "gelu", "gelu_erf", ...
std::optional<Fn> fn_from_string(std::string_view) noexcept;
int fn_arity(Fn) noexcept;

enum class ReduceOp : std::uint8_t { none, sum, max, min, mean };
std::string_view to_string(ReduceOp) noexcept;

// An access index beyond a plain name (shifted, strided and windowed reads such as convolutions
// and stencils): the position read along one tensor dimension is
//   stride * Expr::indices[d] + value of index `plus` (if any) + offset,
// with stride >= 1. Positions outside the dimension read as zero (implicit zero padding); only
// inputs may be read this way. Spelled in .kir as `2*w + f - 1`, `w + f`, `w - 1`.
struct IndexShift {
  std::int64_t stride = 1;
  std::string plus;         // a second index added with coefficient 1, or empty
  std::int64_t offset = 0;
  [[nodiscard]] bool plain() const noexcept { return stride == 1 && plus.empty() && offset == 0; }
  friend bool operator==(const IndexShift&, const IndexShift&) = default;
};

struct Expr {
  enum class Kind : std::uint8_t { access, constant, index, call };
  Kind kind = Kind::constant;
  std::string tensor;                // access: tensor name
  std::vector<std::string> indices;  // access: index names, one per tensor dim (the scaled one of a shifted index)
  std::vector<IndexShift> shifts;    // access: empty when every index is plain, else one per tensor dim
  double value = 0.0;                // constant (may be +-inf)
  std::string index;                 // index: the loop index whose value this is (for causal masks)
  Fn fn = Fn::add;                   // call
  DType dtype = DType::fp32;         // call with fn == cast: target dtype
  std::vector<Expr> args;            // call: arguments

  friend bool operator==(const Expr&, const Expr&) = default;
};

// Access helpers: whether every index of an access is a plain name; whether an access (or any
// access in an expression) uses index `i` anywhere (shifts included); the text of index d ("2*w + f - 1").
[[nodiscard]] bool is_plain(const Expr& access) noexcept;
[[nodiscard]] bool has_shifts(const Expr& e) noexcept;  // some access in e is not plain
[[nodiscard]] bool access_uses(const Expr& access, std::string_view i) noexcept;
[[nodiscard]] std::string index_text(const Expr& access, std::size_t d);

struct Dim {
  std::string name;  // e.g. "M"
  std::int64_t size = 0;
  friend bool operator==(const Dim&, const Dim&) = default;
};

enum class Role : std::uint8_t { input, output, temp };

struct Tensor {
  std::string name;
  DType dtype = DType::fp32;
  std::vector<std::string> dims;  // dimension names (Kernel::dims), outermost first, row-major in HBM
  Role role = Role::input;
  friend bool operator==(const Tensor&, const Tensor&) = default;
};

enum class OpKind : std::uint8_t { contract, map, reduce };
std::string_view to_string(OpKind) noexcept;

struct Op {
  std::string out;                        // tensor written
  std::vector<std::string> out_indices;   // one index name per dim of `out`
  ReduceOp reduce = ReduceOp::none;
  std::vector<std::string> reduce_indices;
  Expr expr;
  // contract when reduce == sum and expr == mul(access, access) of plain accesses; reduce when
  // reduce != none (convolutions: a sum of a product with a shifted access); else map.
  [[nodiscard]] OpKind kind() const noexcept;
  // The dtype a temp written by this op is held in: T when the op is a map whose whole right-hand
  // side is cast<T>(...) (its values are T's already, so holding them in T loses nothing), else fp32.
  [[nodiscard]] DType temp_dtype() const noexcept;
  friend bool operator==(const Op&, const Op&) = default;
};

// A convolution written as a product (`Y[o, w] = sum(c, f) X[c, w + f] * W[o, c, f]`): a sum of
// the product of two accesses, one plain, the other shifted only by contracted indices added to
// its output indices (the taps: `w + f`, `2*h + r - 1`), with exactly one more contracted index
// (the channel) that both operands use plainly, and an output index that one operand alone uses.
// The PE array runs it as a contraction whose k loop spans every tap (docs/SCHEDULE.md,
// "Convolutions"). Returns the taps in reduce order, or nothing when op is not such a product.
[[nodiscard]] std::vector<std::string> conv_taps(const Op& op);
// A product the PE array runs: a contraction, or a convolution written as one (conv_taps).
[[nodiscard]] bool pe_product(const Op& op);

struct Kernel {
  std::string name;
  std::vector<Dim> dims;        // every named dimension, in declaration order
  std::vector<Tensor> tensors;  // inputs, outputs (declaration order), then temps in first-write order
  std::vector<Op> ops;          // program order (a topological order of the DAG)

  [[nodiscard]] const Tensor* tensor(std::string_view name) const noexcept;
  [[nodiscard]] const Dim* dim(std::string_view name) const noexcept;
  [[nodiscard]] std::int64_t dim_size(std::string_view name) const;  // throws kevo::Error if unknown
  // Shape of a tensor (sizes of its dims).
  [[nodiscard]] std::vector<std::int64_t> shape(const Tensor& t) const;
  [[nodiscard]] std::int64_t elements(const Tensor& t) const;
  // Extent of every index used by op i (name, size) in first-use order: out indices then reduce indices.
  [[nodiscard]] std::vector<std::pair<std::string, std::int64_t>> op_indices(std::size_t i) const;
  friend bool operator==(const Kernel&, const Kernel&) = default;
};

}  // namespace kevo::ir
