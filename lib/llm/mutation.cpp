#include "kevo/llm/mutation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <list>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

#include "detail.hpp"
#include "kevo/llm/reply.hpp"

namespace kevo::llm {

// ---------------------------------------------------------------- CostBudget

bool CostBudget::try_reserve(double worst_usd) {
  std::lock_guard lock(mu_);
  if (spent_ >= cap_ || spent_ + reserved_ + worst_usd > cap_) return false;
  reserved_ += worst_usd;
  return true;
}

void CostBudget::settle(double reserved_usd, double actual_usd) {
  std::lock_guard lock(mu_);
  reserved_ = std::max(0.0, reserved_ - reserved_usd);
  spent_ += actual_usd;
}

double CostBudget::spent() const {
  std::lock_guard lock(mu_);
  return spent_;
}

double CostBudget::reserved() const {
  std::lock_guard lock(mu_);
  return reserved_;
}

bool CostBudget::exhausted(double next_worst_usd) const {
  std::lock_guard lock(mu_);
  return spent_ >= cap_ || spent_ + next_worst_usd > cap_;
}

// ---------------------------------------------------------------- LlmMutation

namespace {

std::string_view rtrim(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string cut(std::string_view s, std::size_t max) {
  s = rtrim(s);
  if (s.size() <= max) return std::string(s);
  return std::string(s.substr(0, max)) + "\n[... profile cut ...]";
}

// A schedule quoted in the history a prompt shows (rejected, measured): one line, and at most
// kQuoteBytes of it (far above any real schedule), so one huge garbage reply cannot swell every
// later prompt.
constexpr std::size_t kQuoteBytes = 2000;
std::string one_liner(std::string_view schedule) {
  const std::size_t n = detail::utf8_cut(schedule, kQuoteBytes);
  std::string r;
  for (char c : schedule.substr(0, n)) r += (c == '\n') ? std::string(" | ") : std::string(1, c);
  if (n < schedule.size()) r += fmt::format(" [... cut: {} bytes in all]", schedule.size());
  return r;
}

std::string figures(const evo::Evaluation& e) {
  if (!e.ok()) return fmt::format("{}: {}", to_string(e.status), detail::one_line(e.reason, 300));
  std::string s;
  const double lat = e.metric("latency_ns", -1.0);
  if (lat >= 0)
    s = fmt::format("latency {:.0f} ns", lat);
  else
    s = fmt::format("fitness {:.6g}", e.fitness[0]);
  const double fop = e.metric("fraction_of_peak", -1.0);
  if (fop >= 0) s += fmt::format(", {:.1f}% of peak", 100.0 * fop);
  return s;
}

std::size_t prompt_chars(const ChatRequest& r) {
  std::size_t n = 0;
  for (const auto& m : r.messages) n += m.content.size();
  return n;
}

std::string gene_summary(const Space& space) {
  std::string s = "Minimise the objective by choosing a value for each gene:\n";
  for (const auto& g : space.genes()) {
    s += fmt::format("- {} ({}): ", g.name, to_string(g.kind));
    for (std::size_t i = 0; i < g.labels.size() && i < 32; ++i) s += (i ? ", " : "") + g.labels[i];
    if (g.labels.size() > 32) s += ", ...";
    s += '\n';
  }
  return s;
}

}  // namespace

struct LlmMutation::Impl {
  struct Call {
    std::uint64_t seq = 0;
    std::thread thread;
    bool done = false;
    double reserved = 0.0;
    std::optional<Expected<ChatReply, LlmError>> result;
  };

  Impl(LlmClient c, LlmMutationConfig cf, std::shared_ptr<CostBudget> b)
      : client(std::move(c)), cfg(std::move(cf)), budget(std::move(b)) {
    usage.op = "llm:" + cfg.name;
    usage.model = cfg.model;
    cfg.proposals_per_call = std::max(1, cfg.proposals_per_call);
    cfg.concurrency = std::max(1, cfg.concurrency);
    cfg.arity = std::max<std::size_t>(1, cfg.arity);
  }
  ~Impl() {
    cancel.store(true);
    std::unique_lock lock(mu);
    for (auto& c : calls) {
      if (c->thread.joinable()) {
        std::thread t = std::move(c->thread);
        lock.unlock();
        t.join();
        lock.lock();
      }
    }
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  LlmClient client;
  LlmMutationConfig cfg;
  std::shared_ptr<CostBudget> budget;
  std::atomic<bool> cancel{false};

  mutable std::mutex mu;
  mutable std::condition_variable cv;
  std::list<std::unique_ptr<Call>> calls;
  std::uint64_t next_seq = 0;
  LlmUsage usage;
  std::deque<std::string> rejected;
  std::deque<std::string> recent;
  std::unordered_map<std::uint64_t, std::string> proposed_text;
  std::deque<std::uint64_t> proposed_order;
  std::optional<evo::Problem> problem;
  bool multiline = false;
  std::string item_start;
  double last_worst = 0.0;
  // Prompt tokens per character: starts at the safe 1/3 and rises to what the server reports,
  // so a tokenizer denser than the estimate cannot push the spend past the cap twice.
  double tokens_per_char = 1.0 / 3.0;

  void remember_rejected(std::string line) {
    rejected.push_back(std::move(line));
    while (rejected.size() > std::max<std::size_t>(cfg.rejected_in_prompt, 1)) rejected.pop_front();
  }
  void remember_recent(std::string line) {
    recent.push_back(std::move(line));
    while (recent.size() > std::max<std::size_t>(cfg.recent_in_prompt, 1)) recent.pop_front();
  }

  // A genome's schedule text without trailing blank lines (it sits inside a fence).
  std::string text_of(const Genome& g) const {
    std::string t = problem->to_text(g);
    while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
    return t;
  }

  double worst_cost(const ChatRequest& r) const {
    const std::size_t chars = prompt_chars(r);
    const auto prompt = static_cast<std::uint64_t>(std::ceil(static_cast<double>(chars) * tokens_per_char * 1.05)) + 8;
    return cfg.prices.cost(prompt, static_cast<std::uint64_t>(std::max(0, cfg.max_tokens)));
  }

  std::string individual(const evo::Individual& ind, const std::string& title) const {
    std::string s = fmt::format("## {}: {}\n```schedule\n{}\n```\n", title, figures(ind.eval), text_of(ind.genome));
    if (!ind.eval.profile.empty()) s += "Profile:\n" + cut(ind.eval.profile, cfg.profile_chars) + "\n";
    return s;
  }

  // Caller holds mu (reads history) — problem must be set.
  std::vector<ChatMessage> messages(const evo::OperatorContext& ctx) const {
    std::map<std::string, std::string> v;
    const evo::Problem& p = *problem;
    std::string ctx_text = p.context();
    v["context"] = std::string(rtrim(ctx_text.empty() ? gene_summary(p.space()) : ctx_text));
    Genome example = !ctx.parents.empty() ? ctx.parents[0].genome
                     : !ctx.elites.empty() ? ctx.elites[0].genome
                                           : p.space().first();
    v["example"] = text_of(example);
    std::string parents;
    std::set<std::uint64_t> shown;
    for (std::size_t i = 0; i < ctx.parents.size() && i < cfg.arity; ++i) {
      parents += individual(ctx.parents[i], fmt::format("Parent {}", i + 1));
      shown.insert(genome_hash(ctx.parents[i].genome));
    }
    v["parents"] = parents.empty() ? "(none: start from the example)\n" : parents;
    std::string elites;
    std::size_t n = 0;
    for (const auto& e : ctx.elites) {
      if (n >= cfg.elites_in_prompt) break;
      if (!shown.insert(genome_hash(e.genome)).second) continue;
      elites += individual(e, fmt::format("Elite {}", ++n));
    }
    v["elites"] = elites.empty() ? "(none yet besides the parents)\n" : elites;
    std::string rej;
    for (const auto& r : rejected) rej += "- " + r + "\n";
    v["rejected"] = rej.empty() ? "(none)\n" : rej;
    std::string rec;
    for (const auto& r : recent) rec += "- " + r + "\n";
    v["recent"] = rec.empty() ? "(none)\n" : rec;
    v["k"] = std::to_string(cfg.proposals_per_call);
    v["generation"] = std::to_string(ctx.generation);
    v["evaluations"] = std::to_string(ctx.evaluations);
    std::vector<ChatMessage> m;
    if (!cfg.templates.system.empty()) m.push_back({"system", render_template(cfg.templates.system, v)});
    m.push_back({"user", render_template(cfg.templates.user, v)});
    return m;
  }

  ChatRequest request(std::vector<ChatMessage> msgs) const {
    ChatRequest r;
    r.messages = std::move(msgs);
    r.model = cfg.model;
    r.temperature = cfg.temperature;
    r.max_tokens = cfg.max_tokens;
    r.cancel = &cancel;
    return r;
  }

  // Accounts a finished call. Caller holds mu.
  void account(const Expected<ChatReply, LlmError>& res, double reserved, std::size_t chars_sent) {
    double actual = 0.0;
    if (res) {
      if (!res->usage_estimated && chars_sent > 0)
        tokens_per_char = std::max(tokens_per_char, static_cast<double>(res->prompt_tokens) / static_cast<double>(chars_sent));
      actual = cfg.prices.cost(res->prompt_tokens, res->completion_tokens);
      usage.prompt_tokens += res->prompt_tokens;
      usage.completion_tokens += res->completion_tokens;
      usage.latency_s += res->latency_s;
      usage.cost_usd += actual;
    } else {
      ++usage.failures;
      usage.last_error = res.error().str();
    }
    if (budget) budget->settle(reserved, actual);
  }

  // Turns a reply into genomes. Caller holds mu.
  void harvest(const Expected<ChatReply, LlmError>& res, std::vector<Genome>& out, std::set<std::uint64_t>& batch) {
    if (!res || !problem) return;
    ReplyParseOptions o;
    o.multiline = multiline;
    o.item_start = item_start;
    o.truncated = res->finish_reason == "length";
    o.max_candidates = static_cast<std::size_t>(cfg.proposals_per_call) * 4 + 8;
    const ParsedReply parsed = parse_reply(res->text, o);
    usage.duplicates += parsed.duplicates;
    const Space& space = problem->space();
    for (const auto& text : parsed.candidates) {
      ++usage.candidates;
      auto g = problem->from_text(text);
      if (!g) {
        ++usage.rejected_parse;
        remember_rejected(fmt::format("`{}` → rejected by the schedule parser: {}", one_liner(text),
                                      detail::one_line(g.error(), 300)));
        continue;
      }
      if (!space.contains(*g)) {
        ++usage.rejected_parse;
        remember_rejected(fmt::format("`{}` → rejected: outside the schedule space", one_liner(text)));
        continue;
      }
      const std::uint64_t h = genome_hash(*g);
      if (!batch.insert(h).second || proposed_text.count(h)) {
        ++usage.duplicates;
        continue;
      }
      proposed_text.emplace(h, text_of(*g));
      proposed_order.push_back(h);
      while (proposed_order.size() > 4096) {
        proposed_text.erase(proposed_order.front());
        proposed_order.pop_front();
      }
      ++usage.accepted;
      out.push_back(std::move(*g));
    }
  }
};

LlmMutation::LlmMutation(LlmClient client, LlmMutationConfig cfg, std::shared_ptr<CostBudget> budget)
    : impl_(std::make_shared<Impl>(std::move(client), std::move(cfg), std::move(budget))) {}

std::string LlmMutation::name() const { return impl_->usage.op; }
std::size_t LlmMutation::arity() const { return impl_->cfg.arity; }
bool LlmMutation::asynchronous() const { return impl_->cfg.asynchronous; }
const LlmMutationConfig& LlmMutation::config() const { return impl_->cfg; }
const std::shared_ptr<CostBudget>& LlmMutation::budget() const { return impl_->budget; }

std::vector<ChatMessage> LlmMutation::build_messages(const evo::OperatorContext& ctx) const {
  std::lock_guard lock(impl_->mu);
  std::optional<evo::Problem> saved = impl_->problem;
  impl_->problem = ctx.problem;
  auto m = impl_->messages(ctx);
  impl_->problem = std::move(saved);
  return m;
}

void LlmMutation::cancel() noexcept { impl_->cancel.store(true); }

std::vector<Genome> LlmMutation::propose(const evo::OperatorContext& ctx) {
  Impl& s = *impl_;
  std::vector<Genome> out;
  std::set<std::uint64_t> batch;
  for (const auto& p : ctx.parents) batch.insert(genome_hash(p.genome));  // a copy of a parent is no proposal
  std::unique_lock lock(s.mu);
  s.problem = ctx.problem;
  if (!ctx.problem.has_text()) {
    s.usage.last_error = "config: the problem has no text form (to_text/from_text); the LLM operator cannot propose";
    return out;
  }
  {
    const Genome ex = !ctx.parents.empty() ? ctx.parents[0].genome : ctx.problem.space().first();
    std::string text = ctx.problem.to_text(ex);
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    s.multiline = text.find('\n') != std::string::npos;
    s.item_start = s.multiline ? item_start_of(text) : std::string();
  }

  if (s.cancel.load()) return out;  // cancel(): no new call, nothing more to collect in this mode
  if (!s.cfg.asynchronous) {
    ChatRequest req = s.request(s.messages(ctx));
    const double worst = s.worst_cost(req);
    s.last_worst = worst;
    if (s.budget && !s.budget->try_reserve(worst)) {
      ++s.usage.skipped_budget;
      return out;
    }
    ++s.usage.calls;
    lock.unlock();
    auto res = s.client.complete(req);
    lock.lock();
    s.account(res, s.budget ? worst : 0.0, prompt_chars(req));
    s.harvest(res, out, batch);
    return out;
  }

  // Asynchronous: collect finished calls in launch order, then top up the calls in flight.
  for (auto it = s.calls.begin(); it != s.calls.end();) {
    if (!(*it)->done) {
      ++it;
      continue;
    }
    std::unique_ptr<Impl::Call> call = std::move(*it);
    it = s.calls.erase(it);
    lock.unlock();
    if (call->thread.joinable()) call->thread.join();
    lock.lock();
    s.harvest(*call->result, out, batch);
  }
  std::size_t in_flight = s.calls.size();
  if (in_flight < static_cast<std::size_t>(s.cfg.concurrency)) {
    const std::vector<ChatMessage> msgs = s.messages(ctx);
    while (in_flight < static_cast<std::size_t>(s.cfg.concurrency)) {
      ChatRequest req = s.request(msgs);
      const double worst = s.worst_cost(req);
      s.last_worst = worst;
      if (s.budget && !s.budget->try_reserve(worst)) {
        ++s.usage.skipped_budget;
        break;
      }
      ++s.usage.calls;
      auto call = std::make_unique<Impl::Call>();
      call->seq = s.next_seq++;
      call->reserved = s.budget ? worst : 0.0;
      Impl::Call* c = call.get();
      s.calls.push_back(std::move(call));
      Impl* self = &s;
      c->thread = std::thread([self, c, req = std::move(req)] {
        auto res = self->client.complete(req);
        std::lock_guard g(self->mu);
        self->account(res, c->reserved, prompt_chars(req));
        c->result = std::move(res);
        c->done = true;
        self->cv.notify_all();
      });
      ++in_flight;
    }
  }
  return out;
}

void LlmMutation::feedback(std::span<const evo::ProposalOutcome> outcomes) {
  Impl& s = *impl_;
  std::lock_guard lock(s.mu);
  for (const auto& o : outcomes) {
    const auto it = s.proposed_text.find(genome_hash(o.genome));
    std::string text = it != s.proposed_text.end() ? it->second
                       : s.problem                 ? s.text_of(o.genome)
                                                   : std::string("(unknown schedule)");
    if (o.eval.ok())
      s.remember_recent(fmt::format("`{}` → {}", one_liner(text), figures(o.eval)));
    else
      s.remember_rejected(fmt::format("`{}` → {}", one_liner(text), figures(o.eval)));
  }
}

double LlmMutation::cost() const {
  std::lock_guard lock(impl_->mu);
  return impl_->usage.cost_usd;
}

bool LlmMutation::exhausted() const {
  std::lock_guard lock(impl_->mu);
  if (!impl_->budget || !impl_->calls.empty()) return false;
  return impl_->budget->exhausted(impl_->last_worst);
}

LlmUsage LlmMutation::usage() const {
  std::lock_guard lock(impl_->mu);
  return impl_->usage;
}

std::size_t LlmMutation::in_flight() const {
  std::lock_guard lock(impl_->mu);
  return static_cast<std::size_t>(
      std::count_if(impl_->calls.begin(), impl_->calls.end(), [](const auto& c) { return !c->done; }));
}

bool LlmMutation::wait_idle(double timeout_s) const {
  std::unique_lock lock(impl_->mu);
  return impl_->cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] {
    return std::all_of(impl_->calls.begin(), impl_->calls.end(), [](const auto& c) { return c->done; });
  });
}

std::string usage_json(std::span<const LlmUsage> usage, const CostBudget* budget) {
  using json = nlohmann::json;
  json j;
  if (budget) {
    j["cost_cap_usd"] = std::isfinite(budget->cap()) ? json(budget->cap()) : json(nullptr);
    j["spent_usd"] = budget->spent();
  }
  json ops = json::array();
  for (const auto& u : usage) {
    ops.push_back({{"op", u.op},
                   {"model", u.model},
                   {"calls", u.calls},
                   {"failures", u.failures},
                   {"prompt_tokens", u.prompt_tokens},
                   {"completion_tokens", u.completion_tokens},
                   {"cost_usd", u.cost_usd},
                   {"latency_s", u.latency_s},
                   {"candidates", u.candidates},
                   {"accepted", u.accepted},
                   {"rejected_parse", u.rejected_parse},
                   {"duplicates", u.duplicates},
                   {"skipped_budget", u.skipped_budget},
                   {"last_error", u.last_error}});
  }
  j["operators"] = std::move(ops);
  return j.dump(2, ' ', false, json::error_handler_t::replace);
}

}  // namespace kevo::llm
