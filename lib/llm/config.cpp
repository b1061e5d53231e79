#include "kevo/llm/config.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <set>
#include <toml++/toml.h>

#include "kevo/core/io.hpp"

namespace kevo::llm {
namespace {

std::string line_of(std::string_view text, int line) {
  int l = 1;
  std::size_t pos = 0;
  while (l < line && pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) return {};
    pos = nl + 1;
    ++l;
  }
  const std::size_t end = text.find('\n', pos);
  std::string s(text.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos));
  if (!s.empty() && s.back() == '\r') s.pop_back();
  return s;
}

// A config error carried out of the nested readers; turned into a Diagnostic at the top.
struct Bad {
  toml::source_region where;
  std::string message;
  bool hide_line = false;  // the line may hold a secret (a key pasted where its variable's name belongs)
};

class Reader {
 public:
  Reader(std::string_view text, std::string file) : text_(text), file_(std::move(file)) {}

  Diagnostic diag(const toml::source_region& r, std::string msg) const {
    Diagnostic d;
    d.loc.file = file_;
    d.loc.line = static_cast<int>(r.begin.line);
    d.loc.column = static_cast<int>(r.begin.column);
    d.message = std::move(msg);
    d.source_line = line_of(text_, d.loc.line);
    return d;
  }

 private:
  std::string_view text_;
  std::string file_;
};

void check_keys(const toml::table& t, const std::set<std::string>& allowed, const std::string& where) {
  for (const auto& [k, v] : t) {
    if (!allowed.count(std::string(k.str()))) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      throw Bad{k.source(), "unknown key '" + std::string(k.str()) + "' in " + where + " (allowed: " + list + ")"};
    }
  }
}

std::string toml_num(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

double get_num(const toml::table& t, const char* key, double def, double lo, double hi) {
  const toml::node* n = t.get(key);
  if (!n) return def;
  std::optional<double> v;
  if (auto i = n->value_exact<std::int64_t>()) v = static_cast<double>(*i);
  if (auto d = n->value_exact<double>()) v = *d;
  if (!v) throw Bad{n->source(), std::string("'") + key + "' must be a number"};
  if (!std::isfinite(*v) || *v < lo || *v > hi)
    throw Bad{n->source(), std::string("'") + key + "' must be between " + toml_num(lo) + " and " + toml_num(hi)};
  return *v;
}

std::int64_t get_int(const toml::table& t, const char* key, std::int64_t def, std::int64_t lo, std::int64_t hi) {
  const toml::node* n = t.get(key);
  if (!n) return def;
  auto v = n->value_exact<std::int64_t>();
  if (!v) throw Bad{n->source(), std::string("'") + key + "' must be an integer"};
  if (*v < lo || *v > hi)
    throw Bad{n->source(), std::string("'") + key + "' must be between " + std::to_string(lo) + " and " +
                               std::to_string(hi)};
  return *v;
}

std::optional<std::string> get_str(const toml::table& t, const char* key) {
  const toml::node* n = t.get(key);
  if (!n) return std::nullopt;
  auto v = n->value_exact<std::string>();
  if (!v) throw Bad{n->source(), std::string("'") + key + "' must be a string"};
  return *v;
}

bool get_bool(const toml::table& t, const char* key, bool def) {
  const toml::node* n = t.get(key);
  if (!n) return def;
  auto v = n->value_exact<bool>();
  if (!v) throw Bad{n->source(), std::string("'") + key + "' must be true or false"};
  return *v;
}

}  // namespace

Expected<LlmConfig, Diagnostic> parse_llm_config(std::string_view text, std::string file,
                                                 const std::filesystem::path& base_dir) {
  Reader rd(text, file);
  // toml++ ends a document at a NUL byte: a binary file would read as an empty configuration
  if (const auto z = text.find('\0'); z != std::string_view::npos) return unexpected(make_diagnostic(text, z, file, "a NUL byte: not a TOML file"));
  toml::table root;
  try {
    root = toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    return unexpected(rd.diag(e.source(), std::string(e.description())));
  }
  LlmConfig cfg;
  cfg.source = file;
  std::optional<Diagnostic> template_error;
  try {
    check_keys(root,
               {"cost_cap_usd", "proposals_per_call", "asynchronous", "seed", "cassette", "prompt", "model"},
               "the top level");
    cfg.cost_cap_usd = get_num(root, "cost_cap_usd", cfg.cost_cap_usd, 0.0, INFINITY);
    cfg.proposals_per_call = static_cast<int>(get_int(root, "proposals_per_call", cfg.proposals_per_call, 1, 64));
    cfg.asynchronous = get_bool(root, "asynchronous", cfg.asynchronous);
    cfg.seed = static_cast<std::uint64_t>(get_int(root, "seed", 0, 0, INT64_MAX));

    if (const toml::node* c = root.get("cassette")) {
      CassetteConfig cc;
      if (auto s = c->value_exact<std::string>()) {
        cc.path = *s;
      } else if (const toml::table* ct = c->as_table()) {
        check_keys(*ct, {"path", "mode"}, "[cassette]");
        auto p = get_str(*ct, "path");
        if (!p || p->empty()) throw Bad{c->source(), "[cassette] needs a 'path'"};
        cc.path = *p;
        if (auto m = get_str(*ct, "mode")) {
          if (*m == "record")
            cc.mode = CassetteMode::record;
          else if (*m == "replay")
            cc.mode = CassetteMode::replay;
          else
            throw Bad{ct->get("mode")->source(), "cassette mode must be \"record\" or \"replay\", not \"" + *m + "\""};
        }
      } else {
        throw Bad{c->source(), "'cassette' must be a path string or a table {path, mode}"};
      }
      if (cc.path.is_relative()) cc.path = base_dir / cc.path;
      cfg.cassette = cc;
    }

    if (const toml::node* pn = root.get("prompt")) {
      const toml::table* pt = pn->as_table();
      if (!pt) throw Bad{pn->source(), "'prompt' must be a table"};
      check_keys(*pt, {"system", "user", "elites", "rejected", "recent", "profile_chars"}, "[prompt]");
      cfg.elites_in_prompt = static_cast<std::size_t>(get_int(*pt, "elites", 4, 0, 64));
      cfg.rejected_in_prompt = static_cast<std::size_t>(get_int(*pt, "rejected", 8, 0, 256));
      cfg.recent_in_prompt = static_cast<std::size_t>(get_int(*pt, "recent", 6, 0, 256));
      cfg.profile_chars = static_cast<std::size_t>(get_int(*pt, "profile_chars", 1500, 0, 1 << 20));
      for (const char* which : {"system", "user"}) {
        auto path = get_str(*pt, which);
        if (!path) continue;
        std::filesystem::path fp = *path;
        if (fp.is_relative()) fp = base_dir / fp;
        std::string body;
        try {
          body = read_file(fp, kMaxTextFileBytes);
        } catch (const Error& e) {
          throw Bad{pt->get(which)->source(), std::string("prompt.") + which + ": " + e.what()};
        }
        auto checked = check_template(body, fp.string());
        if (!checked) {
          template_error = checked.error();
          throw Bad{pt->get(which)->source(), ""};
        }
        (std::string_view(which) == "system" ? cfg.templates.system : cfg.templates.user) = body;
      }
    }

    const toml::node* mn = root.get("model");
    if (!mn) throw Bad{toml::source_region{{1, 1}, {1, 1}, nullptr}, "no [[model]] table: configure at least one model"};
    const toml::array* arr = mn->as_array();
    if (!arr || arr->empty()) throw Bad{mn->source(), "'model' must be one or more [[model]] tables"};
    std::set<std::string> names;
    for (const toml::node& node : *arr) {
      const toml::table* t = node.as_table();
      if (!t) throw Bad{node.source(), "each 'model' entry must be a table"};
      check_keys(*t,
                 {"name", "base_url", "model", "api_key_env", "command", "json_input", "price_prompt_per_mtok",
                  "price_completion_per_mtok", "temperature", "max_tokens", "concurrency", "connect_timeout_s",
                  "timeout_s", "retries", "backoff_base_s", "backoff_max_s", "retry_after_max_s", "max_tokens_field"},
                 "[[model]]");
      ModelConfig m;
      auto base_url = get_str(*t, "base_url");
      auto command = get_str(*t, "command");
      if (base_url && command)
        throw Bad{t->get("command")->source(), "a [[model]] has either 'base_url' (HTTP) or 'command', not both"};
      if (!base_url && !command) throw Bad{node.source(), "a [[model]] needs 'base_url' (HTTP) or 'command'"};
      m.model = get_str(*t, "model").value_or("");
      m.prices.prompt_per_mtok = get_num(*t, "price_prompt_per_mtok", 0.0, 0.0, 1e6);
      m.prices.completion_per_mtok = get_num(*t, "price_completion_per_mtok", 0.0, 0.0, 1e6);
      m.temperature = get_num(*t, "temperature", 0.7, 0.0, 2.0);
      m.max_tokens = static_cast<int>(get_int(*t, "max_tokens", 2048, 1, 1 << 20));
      m.concurrency = static_cast<int>(get_int(*t, "concurrency", 1, 1, 64));
      const double timeout = get_num(*t, "timeout_s", command ? 300.0 : 120.0, 0.001, 86400.0);
      if (base_url) {
        if (!base_url->starts_with("http://") && !base_url->starts_with("https://"))
          throw Bad{t->get("base_url")->source(), "base_url must start with http:// or https://"};
        if (m.model.empty()) throw Bad{node.source(), "an HTTP [[model]] needs 'model' (the server's model name)"};
        OpenAiConfig h;
        h.base_url = *base_url;
        h.model = m.model;
        if (auto k = get_str(*t, "api_key_env")) {
          // The value must be a variable NAME; a pasted key is refused without echoing it.
          bool name_like = !k->empty() && k->size() <= 128;
          for (char ch : *k) name_like = name_like && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_');
          if (!name_like || k->starts_with("sk-"))
            throw Bad{t->get("api_key_env")->source(),
                      "api_key_env must be the NAME of an environment variable (e.g. \"OPENAI_API_KEY\"), "
                      "never the key itself",
                      true};
          h.api_key_env = *k;
        }
        h.connect_timeout_s = get_num(*t, "connect_timeout_s", 10.0, 0.001, 3600.0);
        h.timeout_s = timeout;
        h.retries = static_cast<int>(get_int(*t, "retries", 3, 0, 20));
        h.backoff_base_s = get_num(*t, "backoff_base_s", 1.0, 0.0, 600.0);
        h.backoff_max_s = get_num(*t, "backoff_max_s", 30.0, 0.0, 3600.0);
        h.retry_after_max_s = get_num(*t, "retry_after_max_s", 120.0, 0.0, 86400.0);
        h.seed = cfg.seed;
        if (auto f = get_str(*t, "max_tokens_field")) {
          if (*f != "max_tokens" && *f != "max_completion_tokens")
            throw Bad{t->get("max_tokens_field")->source(),
                      "max_tokens_field must be \"max_tokens\" or \"max_completion_tokens\""};
          h.max_tokens_field = *f;
        }
        m.http = h;
      } else {
        for (const char* k : {"api_key_env", "connect_timeout_s", "retries", "backoff_base_s", "backoff_max_s",
                              "retry_after_max_s", "max_tokens_field"})
          if (t->get(k)) throw Bad{t->get(k)->source(), std::string("'") + k + "' applies to HTTP models only"};
        if (command->empty()) throw Bad{t->get("command")->source(), "'command' is empty"};
        CommandConfig c;
        c.command = *command;
        c.timeout_s = timeout;
        c.json_input = get_bool(*t, "json_input", false);
        m.command = c;
      }
      if (!command && t->get("json_input"))
        throw Bad{t->get("json_input")->source(), "'json_input' applies to command models only"};
      m.name = get_str(*t, "name").value_or(m.model.empty() ? "command" : m.model);
      if (m.name.empty()) throw Bad{node.source(), "'name' is empty"};
      if (printable(m.name) != m.name)  // it is printed in every operator table
        throw Bad{t->get("name") ? t->get("name")->source() : node.source(), "'name' holds control bytes: " + printable(m.name)};
      if (!names.insert(m.name).second)
        throw Bad{t->get("name") ? t->get("name")->source() : node.source(),
                  "two models are named '" + m.name + "'; give each [[model]] a distinct 'name'"};
      cfg.models.push_back(std::move(m));
    }
  } catch (const Bad& b) {
    if (template_error) return unexpected(*template_error);
    Diagnostic d = rd.diag(b.where, b.message);
    if (b.hide_line) d.source_line.clear();
    return unexpected(std::move(d));
  }
  return cfg;
}

LlmConfig load_llm_config(const std::filesystem::path& path) {
  const std::string text = read_file(path, kMaxTextFileBytes);
  auto cfg = parse_llm_config(text, path.string(), path.has_parent_path() ? path.parent_path() : ".");
  if (!cfg) throw ParseError(cfg.error());
  return std::move(*cfg);
}

std::vector<LlmUsage> LlmOperators::usage() const {
  std::vector<LlmUsage> u;
  for (const auto& op : operators) u.push_back(op.usage());
  return u;
}

std::string LlmOperators::usage_json() const {
  const auto u = usage();
  return kevo::llm::usage_json(u, budget.get());
}

LlmOperators make_llm_operators(const LlmConfig& cfg) {
  LlmOperators out;
  out.budget = std::make_shared<CostBudget>(cfg.cost_cap_usd);
  if (cfg.cassette) out.cassette = Cassette::open(cfg.cassette->path, cfg.cassette->mode);
  for (const auto& m : cfg.models) {
    std::optional<LlmClient> client;
    const bool replay = out.cassette && out.cassette->mode() == CassetteMode::replay;
    if (!replay) {
      if (m.http)
        client = LlmClient(OpenAiClient(*m.http));
      else
        client = LlmClient(CommandClient(*m.command));
    }
    if (out.cassette) client = LlmClient(CassetteClient(out.cassette, client));
    LlmMutationConfig oc;
    oc.name = m.name;
    oc.model = m.model;
    oc.temperature = m.temperature;
    oc.max_tokens = m.max_tokens;
    oc.proposals_per_call = cfg.proposals_per_call;
    oc.concurrency = m.concurrency;
    oc.asynchronous = cfg.asynchronous;
    oc.prices = m.prices;
    oc.templates = cfg.templates;
    oc.elites_in_prompt = cfg.elites_in_prompt;
    oc.rejected_in_prompt = cfg.rejected_in_prompt;
    oc.recent_in_prompt = cfg.recent_in_prompt;
    oc.profile_chars = cfg.profile_chars;
    out.operators.emplace_back(std::move(*client), std::move(oc), out.budget);
  }
  return out;
}

}  // namespace kevo::llm
