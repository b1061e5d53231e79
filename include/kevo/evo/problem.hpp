// The evolution engine's view of a problem: a space of typed genes and a batch evaluation.
// It knows genomes and fitness, never kernels. Users write a plain class; kevo::evo::Problem
// holds it by value (type erasure, as pagmo2's problem does). Optional members are detected.
#pragma once
#include <concepts>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kevo/core/expected.hpp"
#include "kevo/core/genes.hpp"
#include "kevo/core/rng.hpp"
#include "kevo/core/status.hpp"

namespace kevo::evo {

struct Evaluation {
  Status status = Status::ok;
  std::string reason;                 // typed reason when status != ok, e.g. "sbuf_overflow: ..."
  std::vector<double> fitness;        // minimised; fitness[0] is the primary objective; empty unless ok
  std::vector<double> descriptors;    // behaviour descriptors (MAP-Elites), any scale
  double cost = 0.0;                  // evaluation cost (seconds of runner time)
  std::string profile;                // text for operators (per-engine use, bottleneck, memory)
  std::vector<std::pair<std::string, double>> metrics;  // named figures: latency_ns, fraction_of_peak, ...

  [[nodiscard]] bool ok() const noexcept { return status == Status::ok && !fitness.empty(); }
  [[nodiscard]] double metric(std::string_view name, double fallback = 0.0) const noexcept {
    for (const auto& [k, v] : metrics)
      if (k == name) return v;
    return fallback;
  }
};

// none: one evaluate() at a time; basic: separate copies of the problem may evaluate at once
// (the engine gives each thread its own copy, as pagmo2 does); constant: one object may.
enum class ThreadSafety : unsigned char { none, basic, constant };

template <typename T>
concept ProblemLike = std::copy_constructible<std::remove_cvref_t<T>> &&
                      requires(const std::remove_cvref_t<T>& p, std::span<const Genome> gs) {
                        { p.space() } -> std::convertible_to<const Space&>;
                        // by reference: the engine keeps the space for the whole run (a space
                        // returned by value would be a temporary it points into)
                        requires std::is_lvalue_reference_v<decltype(p.space())>;
                        { p.evaluate(gs) } -> std::same_as<std::vector<Evaluation>>;
                      };

namespace detail {
template <typename T> concept HasName = requires(const T& p) { { p.name() } -> std::convertible_to<std::string>; };
template <typename T> concept HasDeterministic = requires(const T& p) { { p.deterministic() } -> std::convertible_to<bool>; };
template <typename T> concept HasThreadSafety = requires(const T& p) { { p.thread_safety() } -> std::convertible_to<ThreadSafety>; };
template <typename T> concept HasToText = requires(const T& p, const Genome& g) { { p.to_text(g) } -> std::convertible_to<std::string>; };
template <typename T> concept HasFromText = requires(const T& p, std::string_view s) {
  { p.from_text(s) } -> std::same_as<Expected<Genome, std::string>>; };
template <typename T> concept HasRepair = requires(const T& p, Genome& g, Rng& r) { { p.repair(g, r) } -> std::convertible_to<bool>; };
template <typename T> concept HasDescriptorNames = requires(const T& p) {
  { p.descriptor_names() } -> std::convertible_to<std::vector<std::string>>; };
template <typename T> concept HasContext = requires(const T& p) { { p.context() } -> std::convertible_to<std::string>; };
template <typename T> concept HasFeatures = requires(const T& p, const Genome& g) {
  { p.features(g) } -> std::convertible_to<std::vector<double>>; };
}  // namespace detail

// A problem held by value. Optional members of the user type, when present, are used:
//   name(), deterministic() (default false), thread_safety() (default none),
//   to_text(genome) / from_text(text) (for text-proposing operators such as the LLM),
//   repair(genome&, rng&) -> bool (make a genome valid where cheap; false if it cannot),
//   descriptor_names(), context() (a description of the problem for text operators),
//   features(genome) -> vector<double> (for cost models such as the surrogate strategy): cheap,
//     deterministic figures of what the genome would become, far below an evaluation's cost; the
//     same length for every genome the problem can evaluate; element 0 an a-priori estimate of
//     fitness[0] (minimised, its units; NaN when the problem has none); empty for a genome the
//     problem already knows evaluate() would call invalid. Without it, features() is empty and
//     has_features() false.
class Problem {
 public:
  template <typename T>
    requires(!std::same_as<std::remove_cvref_t<T>, Problem> && ProblemLike<T>)
  Problem(T&& p) : p_(std::make_shared<Model<std::remove_cvref_t<T>>>(std::forward<T>(p))) {}  // NOLINT

  [[nodiscard]] const Space& space() const { return p_->space(); }
  [[nodiscard]] std::vector<Evaluation> evaluate(std::span<const Genome> gs) const { return p_->evaluate(gs); }
  [[nodiscard]] std::string name() const { return p_->name(); }
  [[nodiscard]] bool deterministic() const { return p_->deterministic(); }
  [[nodiscard]] ThreadSafety thread_safety() const { return p_->thread_safety(); }
  [[nodiscard]] bool has_text() const { return p_->has_text(); }
  [[nodiscard]] std::string to_text(const Genome& g) const { return p_->to_text(g); }
  [[nodiscard]] Expected<Genome, std::string> from_text(std::string_view s) const { return p_->from_text(s); }
  bool repair(Genome& g, Rng& r) const { return p_->repair(g, r); }
  [[nodiscard]] std::vector<std::string> descriptor_names() const { return p_->descriptor_names(); }
  [[nodiscard]] std::string context() const { return p_->context(); }
  [[nodiscard]] bool has_features() const { return p_->has_features(); }
  [[nodiscard]] std::vector<double> features(const Genome& g) const { return p_->features(g); }
  // A problem with its own copy of the user's object (copies of a Problem share one): what the
  // engine gives each thread of a ThreadSafety::basic problem.
  [[nodiscard]] Problem clone() const {
    Problem p(*this);
    p.p_ = p_->clone();
    return p;
  }

  template <typename T>
  [[nodiscard]] const T* extract() const noexcept {
    auto* m = dynamic_cast<const Model<T>*>(p_.get());
    return m ? &m->value : nullptr;
  }

 private:
  // Problems are immutable once built (evaluate is const), so copies share the model.
  struct Concept {
    virtual ~Concept() = default;
    [[nodiscard]] virtual const Space& space() const = 0;
    [[nodiscard]] virtual std::vector<Evaluation> evaluate(std::span<const Genome>) const = 0;
    [[nodiscard]] virtual std::string name() const = 0;
    [[nodiscard]] virtual bool deterministic() const = 0;
    [[nodiscard]] virtual ThreadSafety thread_safety() const = 0;
    [[nodiscard]] virtual bool has_text() const = 0;
    [[nodiscard]] virtual std::string to_text(const Genome&) const = 0;
    [[nodiscard]] virtual Expected<Genome, std::string> from_text(std::string_view) const = 0;
    virtual bool repair(Genome&, Rng&) const = 0;
    [[nodiscard]] virtual std::vector<std::string> descriptor_names() const = 0;
    [[nodiscard]] virtual std::string context() const = 0;
    [[nodiscard]] virtual bool has_features() const = 0;
    [[nodiscard]] virtual std::vector<double> features(const Genome&) const = 0;
    [[nodiscard]] virtual std::shared_ptr<const Concept> clone() const = 0;
  };
  template <typename T>
  struct Model final : Concept {
    template <typename U>
    explicit Model(U&& u) : value(std::forward<U>(u)) {}
    const Space& space() const override { return value.space(); }
    std::vector<Evaluation> evaluate(std::span<const Genome> gs) const override { return value.evaluate(gs); }
    std::string name() const override {
      if constexpr (detail::HasName<T>) return value.name(); else return "problem";
    }
    bool deterministic() const override {
      if constexpr (detail::HasDeterministic<T>) return value.deterministic(); else return false;
    }
    ThreadSafety thread_safety() const override {
      if constexpr (detail::HasThreadSafety<T>) return value.thread_safety(); else return ThreadSafety::none;
    }
    bool has_text() const override { return detail::HasToText<T> && detail::HasFromText<T>; }
    std::string to_text(const Genome& g) const override {
      if constexpr (detail::HasToText<T>) return value.to_text(g); else return value.space().describe(g);
    }
    Expected<Genome, std::string> from_text(std::string_view s) const override {
      if constexpr (detail::HasFromText<T>) return value.from_text(s);
      else return unexpected(std::string("this problem has no text form for genomes"));
    }
    bool repair(Genome& g, Rng& r) const override {
      if constexpr (detail::HasRepair<T>) return value.repair(g, r); else return value.space().contains(g);
    }
    std::vector<std::string> descriptor_names() const override {
      if constexpr (detail::HasDescriptorNames<T>) return value.descriptor_names(); else return {};
    }
    std::string context() const override {
      if constexpr (detail::HasContext<T>) return value.context(); else return {};
    }
    bool has_features() const override { return detail::HasFeatures<T>; }
    std::vector<double> features(const Genome& g) const override {
      if constexpr (detail::HasFeatures<T>) return value.features(g); else return {};
    }
    std::shared_ptr<const Concept> clone() const override { return std::make_shared<Model>(value); }
    T value;
  };
  std::shared_ptr<const Concept> p_;
};

}  // namespace kevo::evo
