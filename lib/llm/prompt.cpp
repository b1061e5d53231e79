#include "kevo/llm/prompt.hpp"

#include <algorithm>

namespace kevo::llm {

PromptTemplates default_templates() {
  PromptTemplates t;
  t.system =
      "You are an expert performance engineer tuning compute kernels for an accelerator. You never "
      "write code: you propose schedules (tile sizes, loop orders, buffer counts, engine choices) in "
      "the exact schedule text form shown to you. kevo validates, lowers and measures every schedule "
      "you propose; invalid ones are rejected with a reason.";
  t.user =
      "# Problem\n"
      "{{context}}\n"
      "\n"
      "# Schedule text form (an example; keep exactly this syntax)\n"
      "```schedule\n"
      "{{example}}\n"
      "```\n"
      "\n"
      "# Parent schedule(s) to improve\n"
      "{{parents}}\n"
      "\n"
      "# Best schedules so far (lower latency is better)\n"
      "{{elites}}\n"
      "\n"
      "# Your recent measured proposals\n"
      "{{recent}}\n"
      "\n"
      "# Your recent rejected proposals and why (do not repeat these mistakes)\n"
      "{{rejected}}\n"
      "\n"
      "# Task\n"
      "Generation {{generation}}, {{evaluations}} evaluations so far. Read the profiles: find the "
      "bottleneck engine and the memory use, and propose {{k}} new schedules that should be faster "
      "than the parents, each different from every schedule above. Think briefly, then give each "
      "schedule in its own fenced block:\n"
      "```schedule\n"
      "<one schedule>\n"
      "```\n";
  return t;
}

const std::vector<std::string>& template_placeholders() {
  static const std::vector<std::string> names = {"context", "example", "parents",    "elites",     "rejected",
                                                 "recent",  "k",       "generation", "evaluations"};
  return names;
}

Expected<std::string, Diagnostic> check_template(std::string_view text, std::string file) {
  const auto& names = template_placeholders();
  std::size_t pos = 0;
  while ((pos = text.find("{{", pos)) != std::string_view::npos) {
    const std::size_t end = text.find("}}", pos + 2);
    if (end == std::string_view::npos)
      return unexpected(make_diagnostic(text, pos, file, "unclosed placeholder: '{{' without '}}'"));
    std::string_view name = text.substr(pos + 2, end - pos - 2);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      std::string allowed;
      for (const auto& n : names) allowed += (allowed.empty() ? "" : ", ") + n;
      return unexpected(make_diagnostic(text, pos, file,
                                        "unknown placeholder '{{" + std::string(name) + "}}' (known: " + allowed + ")"));
    }
    pos = end + 2;
  }
  return std::string(text);
}

std::string render_template(std::string_view tpl, const std::map<std::string, std::string>& vars) {
  std::string out;
  out.reserve(tpl.size() * 2);
  std::size_t pos = 0;
  while (pos < tpl.size()) {
    const std::size_t open = tpl.find("{{", pos);
    if (open == std::string_view::npos) break;
    const std::size_t close = tpl.find("}}", open + 2);
    if (close == std::string_view::npos) break;
    out.append(tpl.substr(pos, open - pos));
    std::string_view name = tpl.substr(open + 2, close - open - 2);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    if (auto it = vars.find(std::string(name)); it != vars.end()) out += it->second;
    pos = close + 2;
  }
  out.append(tpl.substr(pos));
  return out;
}

}  // namespace kevo::llm
