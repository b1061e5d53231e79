// The hardware-runner interface. A runner measures a batch of tile programs and returns one
// Measurement per program. Users write a plain class with `measure` and `traits`; kevo holds it
// by value through type erasure (pagmo2's pattern), so the engine never knows which device it has.
#pragma once
#include <concepts>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kevo/core/status.hpp"
#include "kevo/ir/kernel.hpp"
#include "kevo/lower/program.hpp"
#include "kevo/target/target.hpp"

namespace kevo::runner {

struct LatencySummary {
  double median = 0, min = 0, p10 = 0, p90 = 0;
  double ci_low = 0, ci_high = 0;  // 95% confidence interval of the median
  std::size_t n = 0;
};
// Summary of a set of samples (sorted copy; empty input gives zeros).
LatencySummary summarize(std::span<const double> samples_ns);

struct EngineUse {
  std::string engine;   // "tensor", "vector", "scalar", "gpsimd", "dma"
  double busy_ns = 0;
  double utilisation = 0;  // busy / latency
};

// The span of a kernel time kevo takes from outside (a worker's sample, a measurements file's row,
// an imported record): more than a nanosecond and at most a day, the longest timeout a candidate
// may have. Anything else is a unit or arithmetic error (NaN and infinities included).
inline constexpr double kMinKernelNs = 1.0, kMaxKernelNs = 86400e9;
constexpr bool is_kernel_time_ns(double ns) { return ns >= kMinKernelNs && ns <= kMaxKernelNs; }

struct Measurement {
  Status status = Status::ok;
  std::string message;               // why, when status != ok
  std::vector<double> samples_ns;
  LatencySummary latency;
  std::vector<EngineUse> engines;    // where known
  double bytes_moved = 0;            // HBM traffic
  double roofline_ns = 0;            // lower bound for this kernel on this target (0 if unknown)
  double fraction_of_peak = 0;       // roofline_ns / latency (MFU for contractions)
  std::string bottleneck;            // engine on the critical path, where known
  std::string profile;               // short text for operators (LLM prompts)

  [[nodiscard]] double latency_ns() const noexcept { return latency.median; }
};

// What a runner is given for each program. Pointers stay valid for the duration of measure().
struct Candidate {
  const ir::Kernel* kernel = nullptr;
  const target::Target* target = nullptr;
  const lower::TileProgram* program = nullptr;
  std::string kernel_text;    // .kir text of the kernel
  std::string schedule_text;  // schedule text of the genome
};

enum class ThreadSafety : unsigned char {
  none,      // one call at a time, from one thread
  basic,     // copies of the runner may be used concurrently
  constant,  // one instance may be called concurrently
};

struct RunnerTraits {
  std::string identity;           // stable name incl. settings, part of cache keys, e.g. "sim:v1"
  bool deterministic = false;     // same program => bit-identical Measurement
  ThreadSafety thread_safety = ThreadSafety::none;
  double cost_seconds = 0.0;      // typical wall time per candidate
  bool checks_outputs = false;    // measure() verifies outputs itself (status incorrect possible)
};

template <typename T>
concept RunnerLike = std::copy_constructible<std::remove_cvref_t<T>> &&
                     requires(std::remove_cvref_t<T>& r, const std::remove_cvref_t<T>& cr, std::span<const Candidate> c) {
                       { r.measure(c) } -> std::same_as<std::vector<Measurement>>;
                       { cr.traits() } -> std::convertible_to<RunnerTraits>;
                     };

// A runner held by value.
class Runner {
 public:
  template <typename T>
    requires(!std::same_as<std::remove_cvref_t<T>, Runner> && RunnerLike<T>)
  Runner(T&& r) : p_(std::make_unique<Model<std::remove_cvref_t<T>>>(std::forward<T>(r))) {}  // NOLINT
  Runner(const Runner& o) : p_(o.p_->clone()) {}
  Runner(Runner&&) noexcept = default;
  Runner& operator=(const Runner& o) {
    if (this != &o) p_ = o.p_->clone();
    return *this;
  }
  Runner& operator=(Runner&&) noexcept = default;

  std::vector<Measurement> measure(std::span<const Candidate> c) { return p_->measure(c); }
  [[nodiscard]] RunnerTraits traits() const { return p_->traits(); }

  // Access to the user's object (nullptr if the type differs).
  template <typename T>
  T* extract() noexcept {
    auto* m = dynamic_cast<Model<T>*>(p_.get());
    return m ? &m->value : nullptr;
  }

 private:
  struct Concept {
    virtual ~Concept() = default;
    [[nodiscard]] virtual std::unique_ptr<Concept> clone() const = 0;
    virtual std::vector<Measurement> measure(std::span<const Candidate>) = 0;
    [[nodiscard]] virtual RunnerTraits traits() const = 0;
  };
  template <typename T>
  struct Model final : Concept {
    template <typename U>
    explicit Model(U&& u) : value(std::forward<U>(u)) {}
    [[nodiscard]] std::unique_ptr<Concept> clone() const override { return std::make_unique<Model>(value); }
    std::vector<Measurement> measure(std::span<const Candidate> c) override { return value.measure(c); }
    [[nodiscard]] RunnerTraits traits() const override { return value.traits(); }
    T value;
  };
  std::unique_ptr<Concept> p_;
};

}  // namespace kevo::runner
