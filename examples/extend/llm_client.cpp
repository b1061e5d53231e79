// examples/extend/llm_client.cpp: an LLM client of the user's own. kevo's LLM operator builds the
// prompt (problem, parents with their profiles, elites, its own rejected proposals), sends it
// through any class with `complete(ChatRequest) -> Expected<ChatReply, LlmError>`, parses the
// schedules out of the reply and hands them to kevo's lowering and verification: the model
// proposes data, never code. Clients for OpenAI-compatible HTTP servers, commands and cassettes
// ship with kevo (docs/LLM.md); a user writes one for anything else -- an in-process model, a
// company gateway with its own auth, a queue.
//
// This one stands in for a small local model: it reads the first parent schedule from the prompt
// and answers with k edits of it, each doubling or halving one number (tile, block, buffer count,
// queue count). Replies are a function of the request (its hash seeds the choice), so a run is
// reproducible. Many edits are invalid (a tile over the engine's limit, SBUF overflow): kevo
// rejects them with a reason, which the next prompt shows the "model".
//   llm_client   searches matmul 1024^3 bf16 on the simulated trn2 with the client's operator beside
//                the built-ins and prints what the operator did.
#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include "kevo/evo.hpp"
#include "kevo/ir.hpp"
#include "kevo/llm.hpp"
#include "kevo/runner.hpp"
#include "kevo/search.hpp"
#include "kevo/target.hpp"

namespace {

struct EditingModel {
  std::string name() const { return "example:editing-model"; }

  kevo::Expected<kevo::llm::ChatReply, kevo::llm::LlmError> complete(const kevo::llm::ChatRequest& req) const {
    const std::string& prompt = req.messages.back().content;
    const auto at = prompt.find("# Parent schedule");
    const auto open = prompt.find("```schedule\n", at == std::string::npos ? 0 : at);
    const auto close = open == std::string::npos ? open : prompt.find("```", open + 12);
    if (close == std::string::npos)
      return kevo::unexpected(kevo::llm::LlmError{kevo::llm::LlmErrorKind::malformed, "no parent schedule in the prompt", 0, 1});
    const std::string parent = prompt.substr(open + 12, close - open - 12);
    // Numbers after '=', 'x' or 'q=' in the schedule text: the editable quantities.
    std::vector<std::pair<std::size_t, std::size_t>> numbers;  // (position, length)
    static const std::regex num(R"((?:=|\bx)(\d+))");
    for (auto it = std::sregex_iterator(parent.begin(), parent.end(), num); it != std::sregex_iterator(); ++it)
      numbers.emplace_back(static_cast<std::size_t>(it->position(1)), static_cast<std::size_t>(it->length(1)));
    kevo::Rng rng(kevo::llm::request_hash(req));
    std::string text = "Edits of the parent, one quantity each:\n";
    const int k = 4;
    for (int i = 0; i < k && !numbers.empty(); ++i) {
      const auto [pos, len] = numbers[rng.below(numbers.size())];
      const long v = std::stol(parent.substr(pos, len));
      const long w = rng.chance(0.5) || v < 2 ? v * 2 : v / 2;
      text += "```schedule\n" + parent.substr(0, pos) + std::to_string(w) + parent.substr(pos + len) + "```\n";
    }
    kevo::llm::ChatReply reply;
    reply.text = std::move(text);
    reply.prompt_tokens = prompt.size() / 4;  // this "model" has no tokenizer: an estimate
    reply.completion_tokens = reply.text.size() / 4;
    reply.usage_estimated = true;
    reply.finish_reason = "stop";
    return reply;
  }
};

}  // namespace

int main() {
  const auto kernel = kevo::ir::workload("matmul:M=1024,N=1024,K=1024,dtype=bf16");
  const auto target = kevo::target::load_target("trn2");
  if (!kernel || !target) return 1;
  const kevo::search::KernelProblem problem(*kernel, *target, kevo::runner::SimRunner{});

  kevo::llm::LlmMutationConfig lc;
  lc.name = "editing-model";
  lc.asynchronous = false;  // one call per proposal, waited for: a deterministic run
  kevo::llm::LlmMutation op(kevo::llm::LlmClient(EditingModel{}), lc);

  kevo::evo::Config cfg;
  cfg.seed = 5;
  cfg.threads = 1;
  cfg.budget.max_evaluations = 600;
  kevo::evo::Engine engine(kevo::evo::Problem(problem), cfg);
  engine.add_operator(kevo::evo::Operator(op), 1.0);  // the copy shares usage with `op`
  const auto r = engine.run();
  if (!r.best) return 1;
  const auto u = op.usage();
  std::printf("llm_client %s: %llu calls, %llu candidates, %llu accepted, %llu refused by the parser, %llu duplicates\n",
              u.op.c_str(), static_cast<unsigned long long>(u.calls), static_cast<unsigned long long>(u.candidates),
              static_cast<unsigned long long>(u.accepted), static_cast<unsigned long long>(u.rejected_parse),
              static_cast<unsigned long long>(u.duplicates));
  for (const auto& s : r.operators)
    std::printf("operator %-22s proposals %5llu evaluated %5llu improvements %4llu new bests %3llu\n", s.name.c_str(),
                static_cast<unsigned long long>(s.proposals), static_cast<unsigned long long>(s.evaluated),
                static_cast<unsigned long long>(s.improvements), static_cast<unsigned long long>(s.new_bests));
  std::printf("best %.2f us (%.1f%% of peak): %s\n", r.best->eval.fitness[0] / 1e3, 100 * r.best->eval.metric("fraction_of_peak"),
              problem.to_text(r.best->genome).c_str());
  return u.accepted > 0 ? 0 : 1;
}
