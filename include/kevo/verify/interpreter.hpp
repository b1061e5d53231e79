// The tile-program interpreter: executes a TileProgram on this CPU, with SBUF/PSUM as host
// buffers, fp32 arithmetic, fp32 PSUM accumulation and rounding to each buffer's storage dtype
// on every write, as the hardware does. It is both the correctness oracle for the lowering
// (compared against ir's reference evaluator) and the engine of the CpuRunner, so it is fast:
// matmul tiles go through Eigen (backed by OpenBLAS where present).
#pragma once
#include <atomic>
#include <bit>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/ir/eval.hpp"
#include "kevo/ir/kernel.hpp"
#include "kevo/lower/program.hpp"

namespace kevo::verify {

// Host storage for one execution: one float vector per program buffer (Buffer::elements()).
struct Memory {
  std::vector<std::vector<float>> buffers;
};

// The NaN every buffer a program writes holds before it runs: a quiet NaN with its own payload
// (0x550000), which fp32 and bf16 storage and x86 arithmetic carry on. An output element still
// holding it, or a value computed from it, was never written: compare() fails it even where the
// reference is NaN (any NaN passed there). Rounded through fp16 or fp8 the payload is lost.
inline constexpr float kUnwritten = std::bit_cast<float>(std::uint32_t{0x7fd50000u});
[[nodiscard]] inline bool is_unwritten(float x) noexcept {
  return (std::bit_cast<std::uint32_t>(x) & 0x7fff0000u) == 0x7fd50000u;
}

namespace detail {
struct Compiled;  // per-instruction execution plans, built once by the constructor
}

class Interpreter {
 public:
  // Checks the program's access patterns against its buffers once (throws kevo::Error naming the
  // instruction and operand when one is out of bounds), so execute() can run unchecked.
  // `program` must outlive the interpreter.
  explicit Interpreter(const lower::TileProgram& program);

  // Allocates every buffer. Kernel outputs are poisoned with kUnwritten so unwritten elements fail checks.
  [[nodiscard]] Memory allocate() const;
  // Copies kernel tensor values (indexed like Kernel::tensors; only inputs are read) into HBM buffers.
  void bind_inputs(Memory& m, std::span<const std::vector<float>> tensor_values) const;
  // Refills kernel outputs (and scratch) with kUnwritten.
  void poison_outputs(Memory& m) const;
  // Runs every instruction in program order. Thread-safe for distinct Memory objects. `cancel`,
  // set from another thread, stops it between two instructions (kevo::Error "execute: cancelled";
  // the memory's contents are then partial).
  void execute(Memory& m, const std::atomic<bool>* cancel = nullptr) const;
  // Runs the instructions in `order` (a permutation of 0..n-1, normally a topological order of the
  // dependency DAG such as adversarial_order()). Throws kevo::Error if it is not a permutation.
  void execute_in_order(Memory& m, std::span<const std::uint32_t> order) const;
  // The values of kernel tensor `tensor` (an output) after execute().
  [[nodiscard]] std::vector<float> output(const Memory& m, int tensor) const;

  [[nodiscard]] const lower::TileProgram& program() const noexcept { return *program_; }
  // Kernel tensor indices the program reads from HBM (never written) and writes to HBM.
  [[nodiscard]] const std::vector<int>& input_tensors() const noexcept;
  [[nodiscard]] const std::vector<int>& output_tensors() const noexcept;

 private:
  const lower::TileProgram* program_;
  std::shared_ptr<const detail::Compiled> compiled_;
};

// A topological order of the program's dependency DAG that always runs the most recently readied
// instruction first (a ready stack; among simultaneously readied ones the highest index first).
// Unrelated instructions move as far from program order as the edges allow, so a missing edge
// changes results instead of being hidden by program order. Throws kevo::Error when the edges
// are not a DAG over earlier instructions.
std::vector<std::uint32_t> adversarial_order(const lower::TileProgram& p);

// A value passes when |got - want| <= abs + rel * |want|.
struct Tolerance {
  double abs = 0, rel = 0;
};
// Tolerance for comparing a result stored as `dtype` against the fp64/fp32 reference; `depth`
// is the longest reduction length feeding it (error grows with accumulation length). `abs` is for
// results of unit magnitude: check_program scales it by rms(reference).
Tolerance tolerance_for(ir::DType dtype, std::int64_t depth = 1);
// The tolerance an output is checked with, everywhere kevo checks one (check_program, the
// CpuRunner): tolerance_for(dtype, depth) with `abs` scaled by the rms of the finite reference
// values (the tensor's own scale, however small: outputs of magnitude 1/C are checked at 1/C). Rounding a sum's partials (PSUM evictions, SBUF partial sums kept in the storage dtype,
// re-associated adds) errs in proportion to the partials' magnitude, which is the tensor's typical
// magnitude, not the element's own: an element whose terms cancel to a small value carries the same
// absolute error as its neighbours.
Tolerance tolerance_for(ir::DType dtype, std::int64_t depth, std::span<const float> reference);
// The accumulated reduction length feeding each tensor of `k` (indexed like Kernel::tensors):
// inputs 0; an op's output = max over the tensors it reads + the product of its reduce extents.
std::vector<std::int64_t> reduction_depths(const ir::Kernel& k);
// Where the values feeding a tensor are rounded on the way: the coarsest dtype (a computed
// tensor's storage dtype, a cast<T> in a statement, and what feeds the tensors it reads; inputs
// are given values, fp32) and the most roundings below fp32 on one path (`stages`).
struct Rounding {
  ir::DType dtype = ir::DType::fp32;
  int stages = 0;
};
// Per tensor of `k` (indexed like Kernel::tensors). The program and the reference round at the
// same points but from values computed apart (fp32 in PSUM against fp64), so each rounding may
// land one ulp apart; over a chain the differences add up as independent errors do. A 20-matmul
// chain with bf16 temps (`h = cast<bf16>(...)`) ends 3.6% of the output's rms from the fp64
// reference, 1.6% after one matmul.
std::vector<Rounding> rounding_dtypes(const ir::Kernel& k);
// The tolerance an output is checked with: tolerance_for(r.dtype, depth, reference) with its
// rounding part grown by sqrt(r.stages) (one stage: unchanged).
Tolerance tolerance_for(const Rounding& r, std::int64_t depth, std::span<const float> reference);

// How a check failed: the first failing element's values were both finite but apart beyond the
// tolerance (mismatch); one side was NaN or Inf and the other not, or they were different
// non-finite values (non_finite); the element counts differ (size); the interpreter threw (error).
enum class CheckFailure : std::uint8_t { none, mismatch, non_finite, size, error };
std::string_view to_string(CheckFailure) noexcept;

struct CheckResult {
  bool ok = true;
  std::string message;  // first mismatch: tensor, index, got, want; or "NaN at ..." / "unwritten ..."
  double max_abs_err = 0, max_rel_err = 0;
  CheckFailure failure = CheckFailure::none;  // of the first failure
  int order = -1;  // check_program: the order it showed in (0: program order, 1: adversarial only)
};

// Compares one output tensor against the reference values. NaN or Inf in `got` where the
// reference is finite never passes. `allowance`, where given, widens each element's tolerance
// by that much: check_program passes kFp32Allowance times the reference's estimate of fp32
// arithmetic's own error there (ir::evaluate_with_error), so an ill-conditioned element (a sum
// that cancels, (x + 1e4) - 1e4) is not failed for what no fp32 schedule can avoid.
inline constexpr double kFp32Allowance = 2;
CheckResult compare(const ir::Kernel& k, int tensor, std::span<const float> got, std::span<const float> want,
                    Tolerance tol, std::span<const float> allowance = {});
// The oracle's reference for `inputs`: fp64 values, and as `error` each element's allowance for
// compare (kFp32Allowance times ir::evaluate_with_error's estimate). `cancel` stops it early
// (kevo::Error "evaluate: cancelled").
ir::ValuesWithError reference_with_allowance(const ir::Kernel& k, std::span<const std::vector<float>> inputs,
                                             const std::atomic<bool>* cancel = nullptr);

// Lowered program vs the ir reference evaluator on `trials` fresh random non-degenerate input
// sets derived from `seed`, with poisoned outputs. The oracle every correctness claim rests on.
CheckResult check_program(const ir::Kernel& k, const lower::TileProgram& p, std::uint64_t seed, int trials = 2);

// What executes nc_matmul: "OpenBLAS sgemm (SkylakeX kernels, 1 thread)" or "Eigen GEMM (no BLAS)".
// It reports; it changes nothing.
std::string matmul_backend();

// This CPU's rate, in FLOP/s, for the interpreter's largest nc_matmul: an accumulating fp32
// product of a [128 x 512] stationary and a [128 x 512] moving operand into [512 x 512], the
// largest tile a `host` schedule can give one instruction, through the same code path
// (Eigen/OpenBLAS) the interpreter uses. Best of several timed batches taking about `seconds` in
// all, on the calling thread. What a CpuRunner's fraction of peak is measured against: no
// schedule's matmuls run faster than their largest instruction does alone.
double measure_matmul_flops(double seconds = 0.2);

// Opt-in, process-wide (for applications; a library embedding kevo should not call it unless the
// process is its own): pins OpenBLAS to one thread (the interpreter is timed as one core's kernel
// and runs in several threads at once) and, on CPUs OpenBLAS 0.3.21 does not recognise, re-runs its
// kernel selection with OPENBLAS_CORETYPE set from CPUID features unless the environment already
// chooses. Idempotent; the kevo command, kevo's tests and benchmarks call it.
void configure_process_blas();

// Name of an opcode as nki.isa spells it ("nc_matmul"), independent of the lower library.
std::string_view opcode_name(lower::Opcode op) noexcept;

}  // namespace kevo::verify
