// The LLM as an evolution operator: it shows the model the problem, the parents, the best
// schedules with their profiles and its own recent failures, asks for k schedules, and returns
// the ones Problem::from_text accepts. Asynchronous by default (propose() never waits for the
// model); synchronous mode blocks per call and is the one a deterministic, replayed run needs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "kevo/core/genes.hpp"
#include "kevo/evo/operator.hpp"
#include "kevo/evo/problem.hpp"
#include "kevo/llm/client.hpp"
#include "kevo/llm/prompt.hpp"

namespace kevo::llm {

struct Prices {
  double prompt_per_mtok = 0.0;      // dollars per million prompt tokens
  double completion_per_mtok = 0.0;  // dollars per million completion tokens
  [[nodiscard]] double cost(std::uint64_t prompt_tokens, std::uint64_t completion_tokens) const noexcept {
    return (static_cast<double>(prompt_tokens) * prompt_per_mtok +
            static_cast<double>(completion_tokens) * completion_per_mtok) * 1e-6;
  }
};

// A dollar budget shared by every LLM operator of a run. A call starts only when its worst-case
// cost (prompt estimate, max_tokens of completion) fits in what is left after the money already
// spent and the worst cases of the calls in flight; so the cap holds as long as the server bills
// no more completion tokens than max_tokens and no more than one prompt token per 3 characters.
class CostBudget {
 public:
  explicit CostBudget(double cap_usd = std::numeric_limits<double>::infinity()) : cap_(cap_usd) {}
  // Reserves `worst_usd`; false (nothing reserved) when it does not fit.
  bool try_reserve(double worst_usd);
  // Replaces a reservation by the actual cost of the finished call.
  void settle(double reserved_usd, double actual_usd);
  [[nodiscard]] double spent() const;
  [[nodiscard]] double reserved() const;
  [[nodiscard]] double cap() const noexcept { return cap_; }
  // True when a call costing `next_worst_usd` could not start even with nothing in flight.
  [[nodiscard]] bool exhausted(double next_worst_usd) const;

 private:
  mutable std::mutex mu_;
  double cap_;
  double spent_ = 0.0;
  double reserved_ = 0.0;
};

// What one operator did, for the run's results.
struct LlmUsage {
  std::string op;                  // operator name, "llm:<name>"
  std::string model;
  std::uint64_t calls = 0;         // calls started
  std::uint64_t failures = 0;      // calls that returned an error
  std::uint64_t prompt_tokens = 0;
  std::uint64_t completion_tokens = 0;
  double cost_usd = 0.0;
  double latency_s = 0.0;          // summed over successful calls
  std::uint64_t candidates = 0;    // candidate texts parsed from replies
  std::uint64_t accepted = 0;      // candidates Problem::from_text accepted and returned
  std::uint64_t rejected_parse = 0;  // candidates from_text refused
  std::uint64_t duplicates = 0;    // repeats within a reply or of an earlier proposal
  std::uint64_t skipped_budget = 0;  // calls not started because the budget could not cover them
  std::string last_error;          // the last call error, one line, key-free
};

struct LlmMutationConfig {
  std::string name = "llm";        // the operator is named "llm:<name>"
  std::string model;               // model name sent in requests
  double temperature = 0.7;
  int max_tokens = 2048;
  int proposals_per_call = 4;      // k
  int concurrency = 1;             // calls in flight at once (asynchronous mode)
  bool asynchronous = true;
  std::size_t arity = 1;           // parents shown per call
  Prices prices;
  PromptTemplates templates = default_templates();
  std::size_t elites_in_prompt = 4;
  std::size_t rejected_in_prompt = 8;
  std::size_t recent_in_prompt = 6;
  std::size_t profile_chars = 1500;  // each profile is cut to this many characters
};

class LlmMutation {
 public:
  // `budget` may be shared between operators (one cap for the run); null = no cap.
  LlmMutation(LlmClient client, LlmMutationConfig cfg, std::shared_ptr<CostBudget> budget = nullptr);

  // --- evo::OperatorLike ---
  [[nodiscard]] std::string name() const;
  [[nodiscard]] std::size_t arity() const;
  // Asynchronous: returns the genomes of replies that have arrived since the last call and starts
  // new calls up to `concurrency`; never waits. Synchronous: one call, waits for it.
  std::vector<Genome> propose(const evo::OperatorContext& ctx);
  // Outcomes of this operator's proposals; failures become "rejected" lines of later prompts.
  void feedback(std::span<const evo::ProposalOutcome> outcomes);
  [[nodiscard]] double cost() const;       // dollars spent by this operator
  [[nodiscard]] bool exhausted() const;    // the budget cannot cover another call and none is pending
  [[nodiscard]] bool asynchronous() const;

  // --- beyond the concept ---
  [[nodiscard]] LlmUsage usage() const;
  [[nodiscard]] std::size_t in_flight() const;
  // Waits until no call is in flight (or `timeout_s` passed); true when idle. For tests and for
  // a clean end of run: completed replies stay queued for the next propose().
  bool wait_idle(double timeout_s = 600.0) const;
  // Async-signal-safe (one lock-free store): every call in flight is cancelled (a command model's
  // process group killed, an HTTP transfer aborted, within about 50 ms) and none is made after;
  // a synchronous propose() then returns nothing. For a front end's SIGINT/SIGTERM handler,
  // alongside evo::Engine::request_stop, so that a hung model cannot hold the batch open.
  void cancel() noexcept;
  // The messages a call made now would send (what propose() sends).
  [[nodiscard]] std::vector<ChatMessage> build_messages(const evo::OperatorContext& ctx) const;
  [[nodiscard]] const LlmMutationConfig& config() const;
  [[nodiscard]] const std::shared_ptr<CostBudget>& budget() const;

  // Copies share one session (client, calls in flight, history, usage), so the copy the engine
  // holds and the copy the caller keeps report the same figures.
  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

static_assert(evo::OperatorLike<LlmMutation>);

// JSON object for a run's results: {"cost_cap_usd":..,"spent_usd":..,"operators":[{...usage...}]}.
[[nodiscard]] std::string usage_json(std::span<const LlmUsage> usage, const CostBudget* budget = nullptr);

}  // namespace kevo::llm
