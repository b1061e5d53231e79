// Search strategies as plug-ins. A strategy decides which genomes to try next (ask) and learns
// from their evaluations (tell); the engine keeps everything around it: the journal and
// snapshots, dedup, budgets, the operator bandit, parallel evaluation and observers. Users write
// a plain class; kevo::evo::Strategy holds it by value (type erasure, as Problem and Operator do).
// The built-ins (GA, islands, MAP-Elites, steady-state, random, exhaustive) are plug-ins of the
// same kind: kevo/evo/strategies.hpp.
//
// Determinism contract: draw random numbers only from ctx.rng(...) streams (or from state you
// save), never from a clock or a shared generator. ask() and tell() are then pure functions of
// the saved state and the results, which is what makes a run identical at any thread count and
// lets a killed run resume bit-identically (the engine replays the journal through them).
#pragma once
#include <concepts>
#include <iterator>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kevo/core/genes.hpp"
#include "kevo/core/rng.hpp"
#include "kevo/evo/operator.hpp"
#include "kevo/evo/problem.hpp"

namespace kevo::evo {

class Archive;

// One evaluated candidate handed back to the strategy that proposed it.
struct Evaluated {
  Individual individual;   // genome, evaluation, id, operator name; tell() may move from it
  std::uint64_t tag = 0;   // the tag the candidate was offered with (e.g. an island index)
};

// A callable reference (non-owning, no allocation): valid for the duration of the call it is passed to.
template <typename Sig>
class FunctionRef;
template <typename R, typename... A>
class FunctionRef<R(A...)> {
 public:
  template <typename F>
    requires(!std::same_as<std::remove_cvref_t<F>, FunctionRef> && std::is_invocable_r_v<R, F&, A...>)
  FunctionRef(F&& f) noexcept  // NOLINT: implicit by design
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, A... a) -> R { return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<A>(a)...); }) {}
  R operator()(A... a) const { return call_(obj_, std::forward<A>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, A...);
};

// Read-only facts a strategy may consult in ask() and tell().
class StrategyContext {
 public:
  virtual ~StrategyContext() = default;
  [[nodiscard]] virtual const Problem& problem() const = 0;
  [[nodiscard]] const Space& space() const { return problem().space(); }
  [[nodiscard]] virtual std::uint64_t seed() const = 0;
  // Batches completed so far (steady-state: population-sized steps). Saved by the engine.
  [[nodiscard]] virtual std::uint64_t generation() const = 0;
  [[nodiscard]] virtual std::uint64_t evaluations() const = 0;  // evaluations so far in the run
  [[nodiscard]] virtual const Individual* best() const = 0;     // the run's best, nullptr when none is valid
  // The MAP-Elites archive when the run keeps one (Config::archive, or the map_elites strategy).
  [[nodiscard]] virtual const Archive* archive() const = 0;
  // Random stream `id` of this run: Rng(seed).fork(id). Fork it further by what the draw decides
  // (generation, slot, ...) so that draws never depend on order or thread count.
  [[nodiscard]] Rng rng(std::uint64_t id) const { return Rng(seed()).fork(id); }
};

// The engine's services while a strategy proposes one batch. Every candidate goes through
// offer() or breed(): repair by the problem, space check, dedup against the whole run (and the
// batch), replay of a journaled result on resume, and the room left in the budget.
class AskContext : public StrategyContext {
 public:
  // Fills every slot of `out` (one per parent the chosen operator takes; at least one) with a
  // parent, drawing from `rng`.
  using ParentPicker = FunctionRef<void(std::span<Individual> out, Rng& rng)>;

  [[nodiscard]] virtual std::size_t size() const = 0;   // candidates admitted to this batch so far
  // Offers a genome the strategy made itself; `label` is recorded as Individual::op. repair=false
  // skips the problem's repair (for genomes known to lie in the space). True when admitted.
  virtual bool offer(Genome genome, Rng& rng, std::string_view label, std::uint64_t tag = 0, bool repair = true) = 0;
  // Offers Config::seeds (hand-written genomes) until the batch holds `until` candidates.
  virtual void offer_seeds(std::size_t until, std::uint64_t tag = 0) = 0;
  // Computes the operators' bandit shares for this batch; false when no operator is usable
  // (all exhausted or muted): an empty batch then ends the run with operators_exhausted.
  virtual bool operators_ready() = 0;
  // One breeding step: draws an operator from the bandit (from `rng`), picks its parents, asks it
  // for offspring and offers at most `room` of them under `tag`. The bandit is credited with what
  // becomes of them. An operator that proposes nothing hands the slot to the first built-in.
  // False when no operator is usable. Calls operators_ready() first if the batch has not.
  virtual bool breed(Rng& rng, std::size_t room, ParentPicker pick, std::uint64_t tag = 0) = 0;
  // Polls every asynchronous operator (an LLM with requests in flight) once, with stream
  // base.fork(operator index), offering at most `room` candidates per operator.
  virtual void poll_asynchronous(Rng base, std::size_t room, ParentPicker pick, std::uint64_t tag = 0) = 0;
  // The elites operators see (OperatorContext::elites): by default the best of the strategy's
  // population(); after this call, the archive's cell elites.
  virtual void elites_from_archive() = 0;
  // Evaluations running now (asynchronous strategies; 0 for batch strategies).
  [[nodiscard]] virtual std::size_t in_flight() const = 0;
  // Stops the run as Engine::request_stop() does (Ctrl-C inside a strategy written in Python):
  // what this batch admitted is still evaluated, then run() returns with StopReason::requested.
  virtual void request_stop() = 0;
};

// A strategy: name(), ask(n, ctx) proposing at most n candidates through ctx, and
// tell(results[, ctx]) receiving their evaluations in proposal order.
template <typename T>
concept StrategyLike = std::copy_constructible<std::remove_cvref_t<T>> &&
                       requires(std::remove_cvref_t<T>& s, const std::remove_cvref_t<T>& cs, std::size_t n,
                                AskContext& ask, std::span<Evaluated> told, const StrategyContext& ctx) {
                         { cs.name() } -> std::convertible_to<std::string>;
                         s.ask(n, ask);
                         requires(requires { s.tell(told, ctx); } || requires { s.tell(told); });
                       };

namespace detail {
template <typename T> concept HasTellCtx = requires(T& s, std::span<Evaluated> r, const StrategyContext& c) { s.tell(r, c); };
template <typename T> concept HasSave = requires(const T& s) { { s.save() } -> std::convertible_to<std::string>; };
template <typename T> concept HasLoad = requires(T& s, std::string_view b) { s.load(b); };
template <typename T> concept HasLoadHistory = requires(T& s, std::string_view b, std::span<const Individual> h) { s.load(b, h); };
template <typename T> concept HasPopulationOut = requires(const T& s, std::vector<const Individual*>& out) { s.population(out); };
template <typename T> concept HasPopulationRange = requires(const T& s) {
  { *std::begin(s.population()) } -> std::convertible_to<const Individual&>;
  requires std::is_lvalue_reference_v<decltype(s.population())>;  // the engine points into it
};
template <typename T> concept HasPopulationByValue = requires(const T& s) { s.population(); } &&
                                                  !std::is_lvalue_reference_v<decltype(std::declval<const T&>().population())>;
template <typename T> concept HasAbsorb = requires(T& s, std::span<Evaluated> r) { s.absorb(r); };
template <typename T> concept HasAsynchronous = requires(const T& s) { { s.asynchronous() } -> std::convertible_to<bool>; };
template <typename T> concept HasUsesOperators = requires(const T& s) { { s.uses_operators() } -> std::convertible_to<bool>; };
template <typename T> concept HasUsesArchive = requires(const T& s) { { s.uses_archive() } -> std::convertible_to<bool>; };
}  // namespace detail

// A strategy held by value. Optional members of the user type, when present, are used:
//   save() -> std::string and load(bytes) or load(bytes, history): the strategy's state, stored in
//     the engine's snapshot (write it with cereal, as kevo does, or any encoding). `history` holds
//     the journal's records indexed by id, so a strategy may save individuals as their ids. Without
//     save/load a resumed run replays the whole journal through the strategy from the start.
//   population(out) appending const Individual* (or population() returning a range of
//     Individual): the individuals the strategy holds; they give Result::elites, the mean in
//     GenerationStats and the elites operators see. Without it the engine keeps the best ones.
//   absorb(results): journal records applied outside the strategy's own order (a
//     non-deterministic resume, or records a resumed run with a smaller budget did not reach);
//     default: tell(results).
//   asynchronous() -> bool: evaluate one candidate at a time as threads free up, telling each
//     result as it arrives (steady state); such runs are not reproducible.
//   uses_operators() -> bool (default true): false when the strategy never calls breed(), so the
//     engine does not insist on operators. uses_archive() -> bool: the strategy needs the archive.
class Strategy {
 public:
  template <typename T>
    requires(!std::same_as<std::remove_cvref_t<T>, Strategy> && StrategyLike<T>)
  Strategy(T&& s) : p_(std::make_unique<Model<std::remove_cvref_t<T>>>(std::forward<T>(s))) {}  // NOLINT
  Strategy(const Strategy& o) : p_(o.p_->clone()) {}
  Strategy(Strategy&&) noexcept = default;
  Strategy& operator=(const Strategy& o) {
    if (this != &o) p_ = o.p_->clone();
    return *this;
  }
  Strategy& operator=(Strategy&&) noexcept = default;

  [[nodiscard]] std::string name() const { return p_->name(); }
  void ask(std::size_t n, AskContext& ctx) { p_->ask(n, ctx); }
  void tell(std::span<Evaluated> r, const StrategyContext& ctx) { p_->tell(r, ctx); }
  void absorb(std::span<Evaluated> r, const StrategyContext& ctx) { p_->absorb(r, ctx); }
  [[nodiscard]] bool stateful() const { return p_->stateful(); }
  [[nodiscard]] std::string save() const { return p_->save(); }
  void load(std::string_view bytes, std::span<const Individual> history) { p_->load(bytes, history); }
  [[nodiscard]] bool has_population() const { return p_->has_population(); }
  void population(std::vector<const Individual*>& out) const { p_->population(out); }
  [[nodiscard]] bool asynchronous() const { return p_->asynchronous(); }
  [[nodiscard]] bool uses_operators() const { return p_->uses_operators(); }
  [[nodiscard]] bool uses_archive() const { return p_->uses_archive(); }

  template <typename T>
  T* extract() noexcept {
    auto* m = dynamic_cast<Model<T>*>(p_.get());
    return m ? &m->value : nullptr;
  }
  template <typename T>
  const T* extract() const noexcept {
    auto* m = dynamic_cast<const Model<T>*>(p_.get());
    return m ? &m->value : nullptr;
  }

 private:
  struct Concept {
    virtual ~Concept() = default;
    [[nodiscard]] virtual std::unique_ptr<Concept> clone() const = 0;
    [[nodiscard]] virtual std::string name() const = 0;
    virtual void ask(std::size_t, AskContext&) = 0;
    virtual void tell(std::span<Evaluated>, const StrategyContext&) = 0;
    virtual void absorb(std::span<Evaluated>, const StrategyContext&) = 0;
    [[nodiscard]] virtual bool stateful() const = 0;
    [[nodiscard]] virtual std::string save() const = 0;
    virtual void load(std::string_view, std::span<const Individual>) = 0;
    [[nodiscard]] virtual bool has_population() const = 0;
    virtual void population(std::vector<const Individual*>&) const = 0;
    [[nodiscard]] virtual bool asynchronous() const = 0;
    [[nodiscard]] virtual bool uses_operators() const = 0;
    [[nodiscard]] virtual bool uses_archive() const = 0;
  };
  template <typename T>
  struct Model final : Concept {
    static_assert(!detail::HasPopulationByValue<T>,
                  "a strategy's population() must return a reference (the engine points into it) or take an out-vector");
    template <typename U>
    explicit Model(U&& u) : value(std::forward<U>(u)) {}
    std::unique_ptr<Concept> clone() const override { return std::make_unique<Model>(value); }
    std::string name() const override { return value.name(); }
    void ask(std::size_t n, AskContext& c) override { value.ask(n, c); }
    void tell(std::span<Evaluated> r, const StrategyContext& c) override {
      if constexpr (detail::HasTellCtx<T>) value.tell(r, c); else value.tell(r);
    }
    void absorb(std::span<Evaluated> r, const StrategyContext& c) override {
      if constexpr (detail::HasAbsorb<T>) value.absorb(r); else tell(r, c);
    }
    bool stateful() const override { return detail::HasSave<T> && (detail::HasLoad<T> || detail::HasLoadHistory<T>); }
    std::string save() const override {
      if constexpr (detail::HasSave<T>) return value.save(); else return {};
    }
    void load(std::string_view b, std::span<const Individual> h) override {
      if constexpr (detail::HasLoadHistory<T>) value.load(b, h);
      else if constexpr (detail::HasLoad<T>) value.load(b);
      else { (void)b; (void)h; }
    }
    bool has_population() const override { return detail::HasPopulationOut<T> || detail::HasPopulationRange<T>; }
    void population(std::vector<const Individual*>& out) const override {
      if constexpr (detail::HasPopulationOut<T>) {
        value.population(out);
      } else if constexpr (detail::HasPopulationRange<T>) {
        for (const Individual& i : value.population()) out.push_back(&i);
      } else {
        (void)out;
      }
    }
    bool asynchronous() const override {
      if constexpr (detail::HasAsynchronous<T>) return value.asynchronous(); else return false;
    }
    bool uses_operators() const override {
      if constexpr (detail::HasUsesOperators<T>) return value.uses_operators(); else return true;
    }
    bool uses_archive() const override {
      if constexpr (detail::HasUsesArchive<T>) return value.uses_archive(); else return false;
    }
    T value;
  };
  std::unique_ptr<Concept> p_;
};

}  // namespace kevo::evo
