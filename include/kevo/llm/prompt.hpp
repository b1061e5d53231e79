// Prompt templates: plain text with {{placeholders}}, a compiled-in default pair (system, user)
// that a user may override with files. Unknown placeholders are reported with their location
// when a template is loaded, so a typo never silently empties part of a prompt.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/core/error.hpp"
#include "kevo/core/expected.hpp"

namespace kevo::llm {

struct PromptTemplates {
  std::string system;
  std::string user;
};

// The default templates.
[[nodiscard]] PromptTemplates default_templates();

// Every placeholder a template may use:
//   context      the problem's description (kernel text, target summary, schedule grammar)
//   example      one schedule in the exact text form (the first parent)
//   parents      the parent schedule(s) with latency, fraction of peak and profile
//   elites       the best schedules so far, best first, with their figures and profiles
//   rejected     recent rejected proposals of this operator with their reasons
//   recent       recent measured proposals of this operator with their latencies
//   k            how many schedules to propose
//   generation, evaluations   progress counters
[[nodiscard]] const std::vector<std::string>& template_placeholders();

// Checks that every {{name}} in `text` is known and every "{{" is closed.
[[nodiscard]] Expected<std::string, Diagnostic> check_template(std::string_view text, std::string file = "<template>");

// Replaces {{name}} by vars[name] (a missing variable renders empty). Text from vars is inserted
// verbatim and never re-expanded, so a schedule or profile cannot inject placeholders.
[[nodiscard]] std::string render_template(std::string_view tpl, const std::map<std::string, std::string>& vars);

}  // namespace kevo::llm
