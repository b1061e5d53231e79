// Variation operators as plug-ins. An operator proposes offspring genomes from parents; the
// engine validates (space membership, repair, dedup), evaluates, and reports the results back
// through feedback() so an operator can learn (the LLM operator feeds rejection reasons into its
// next prompt). An adaptive bandit in the engine decides how often each operator is used,
// crediting improvement per unit of cost.
#pragma once
#include <concepts>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kevo/core/genes.hpp"
#include "kevo/core/rng.hpp"
#include "kevo/evo/problem.hpp"

namespace kevo::evo {

struct Individual {
  Genome genome;
  Evaluation eval;
  std::uint64_t id = 0;        // evaluation index in the run (0-based, in journal order)
  std::string op;              // name of the operator that proposed it ("init", "mutate", "llm:gpt", ...)
  std::uint64_t generation = 0;
};

// What an operator sees when asked for proposals.
struct OperatorContext {
  const Problem& problem;
  std::span<const Individual> parents;  // chosen by the engine's selection; size >= arity()
  std::span<const Individual> elites;   // best individuals so far, best first
  std::uint64_t generation = 0;
  std::uint64_t evaluations = 0;        // evaluations done so far
  Rng& rng;                             // this proposal's own stream
};

// The outcome of one proposal, reported back to the operator that made it.
struct ProposalOutcome {
  Genome genome;
  Evaluation eval;  // status invalid with reason "duplicate" or "outside space" when the engine dropped it
};

template <typename T>
concept OperatorLike = std::copy_constructible<std::remove_cvref_t<T>> &&
                       requires(std::remove_cvref_t<T>& op, const std::remove_cvref_t<T>& cop, const OperatorContext& ctx) {
                         { cop.name() } -> std::convertible_to<std::string>;
                         { cop.arity() } -> std::convertible_to<std::size_t>;
                         { op.propose(ctx) } -> std::same_as<std::vector<Genome>>;
                       };

namespace detail {
template <typename T> concept HasFeedback = requires(T& op, std::span<const ProposalOutcome> o) { op.feedback(o); };
template <typename T> concept HasCost = requires(const T& op) { { op.cost() } -> std::convertible_to<double>; };
template <typename T> concept HasExhausted = requires(const T& op) { { op.exhausted() } -> std::convertible_to<bool>; };
template <typename T> concept HasAsync = requires(const T& op) { { op.asynchronous() } -> std::convertible_to<bool>; };
}  // namespace detail

// An operator held by value. Optional members: feedback(outcomes), cost() (cumulative cost spent,
// e.g. dollars; the bandit credits improvement per cost), exhausted() (e.g. LLM cost cap reached),
// asynchronous() (propose() never blocks; it may return nothing while work is in flight).
class Operator {
 public:
  template <typename T>
    requires(!std::same_as<std::remove_cvref_t<T>, Operator> && OperatorLike<T>)
  Operator(T&& op) : p_(std::make_unique<Model<std::remove_cvref_t<T>>>(std::forward<T>(op))) {}  // NOLINT
  Operator(const Operator& o) : p_(o.p_->clone()) {}
  Operator(Operator&&) noexcept = default;
  Operator& operator=(const Operator& o) {
    if (this != &o) p_ = o.p_->clone();
    return *this;
  }
  Operator& operator=(Operator&&) noexcept = default;

  [[nodiscard]] std::string name() const { return p_->name(); }
  [[nodiscard]] std::size_t arity() const { return p_->arity(); }
  std::vector<Genome> propose(const OperatorContext& ctx) { return p_->propose(ctx); }
  void feedback(std::span<const ProposalOutcome> o) { p_->feedback(o); }
  [[nodiscard]] double cost() const { return p_->cost(); }
  [[nodiscard]] bool exhausted() const { return p_->exhausted(); }
  [[nodiscard]] bool asynchronous() const { return p_->asynchronous(); }

  template <typename T>
  T* extract() noexcept {
    auto* m = dynamic_cast<Model<T>*>(p_.get());
    return m ? &m->value : nullptr;
  }

 private:
  struct Concept {
    virtual ~Concept() = default;
    [[nodiscard]] virtual std::unique_ptr<Concept> clone() const = 0;
    [[nodiscard]] virtual std::string name() const = 0;
    [[nodiscard]] virtual std::size_t arity() const = 0;
    virtual std::vector<Genome> propose(const OperatorContext&) = 0;
    virtual void feedback(std::span<const ProposalOutcome>) = 0;
    [[nodiscard]] virtual double cost() const = 0;
    [[nodiscard]] virtual bool exhausted() const = 0;
    [[nodiscard]] virtual bool asynchronous() const = 0;
  };
  template <typename T>
  struct Model final : Concept {
    template <typename U>
    explicit Model(U&& u) : value(std::forward<U>(u)) {}
    std::unique_ptr<Concept> clone() const override { return std::make_unique<Model>(value); }
    std::string name() const override { return value.name(); }
    std::size_t arity() const override { return value.arity(); }
    std::vector<Genome> propose(const OperatorContext& c) override { return value.propose(c); }
    void feedback(std::span<const ProposalOutcome> o) override {
      if constexpr (detail::HasFeedback<T>) value.feedback(o);
    }
    double cost() const override {
      if constexpr (detail::HasCost<T>) return value.cost(); else return 0.0;
    }
    bool exhausted() const override {
      if constexpr (detail::HasExhausted<T>) return value.exhausted(); else return false;
    }
    bool asynchronous() const override {
      if constexpr (detail::HasAsync<T>) return value.asynchronous(); else return false;
    }
    T value;
  };
  std::unique_ptr<Concept> p_;
};

}  // namespace kevo::evo
