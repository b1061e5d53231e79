#include "kevo/llm/openai.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "detail.hpp"
#include "kevo/core/rng.hpp"

namespace kevo::llm {
namespace {

using json = nlohmann::json;

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

constexpr std::size_t kMaxBody = 16u << 20;

struct Transfer {
  std::string body;
  std::optional<double> retry_after_s;
  const std::atomic<bool>* cancel = nullptr;
  bool too_big = false;
};

std::size_t on_body(char* p, std::size_t size, std::size_t n, void* ud) {
  auto* t = static_cast<Transfer*>(ud);
  if (t->body.size() + size * n > kMaxBody) {
    t->too_big = true;
    return 0;
  }
  t->body.append(p, size * n);
  return size * n;
}

std::size_t on_header(char* p, std::size_t size, std::size_t n, void* ud) {
  auto* t = static_cast<Transfer*>(ud);
  std::string_view h(p, size * n);
  constexpr std::string_view name = "retry-after:";
  if (h.size() > name.size()) {
    bool match = true;
    for (std::size_t i = 0; i < name.size() && match; ++i)
      match = std::tolower(static_cast<unsigned char>(h[i])) == name[i];
    if (match) {
      std::string v(h.substr(name.size()));
      char* end = nullptr;
      const double s = std::strtod(v.c_str(), &end);
      // Only delta-seconds is honoured; an HTTP-date falls back to the backoff schedule.
      if (end != v.c_str() && std::isfinite(s) && s >= 0) {
        while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n') ++end;
        if (*end == '\0') t->retry_after_s = s;
      }
    }
  }
  return size * n;
}

int on_progress(void* ud, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(ud);
  return (t->cancel && t->cancel->load()) ? 1 : 0;
}

std::string no_proxy_list() {
  // Loopback never goes through a proxy (local model servers, tests); the user's list is kept.
  std::string np = "localhost,127.0.0.1,::1";
  for (const char* var : {"no_proxy", "NO_PROXY"}) {
    if (const char* v = std::getenv(var); v && *v) {
      np += ',';
      np += v;
      break;
    }
  }
  return np;
}

struct Attempt {
  CURLcode code = CURLE_OK;
  long status = 0;
  std::string error;
  Transfer t;
  double latency_s = 0;
};

Attempt perform(const std::string& url, const std::string& body, const std::string& key, const OpenAiConfig& cfg,
                const std::atomic<bool>* cancel) {
  Attempt a;
  a.t.cancel = cancel;
  CURL* h = curl_easy_init();
  if (!h) {
    a.code = CURLE_FAILED_INIT;
    a.error = "curl_easy_init failed";
    return a;
  }
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Content-Type: application/json");
  headers = curl_slist_append(headers, "Accept: application/json");
  headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip for large prompts
  std::string auth;
  if (!key.empty()) {
    auth = "Authorization: Bearer " + key;
    headers = curl_slist_append(headers, auth.c_str());
  }
  const std::string np = no_proxy_list();
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(h, CURLOPT_POST, 1L);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM-based DNS timeouts
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::max(1.0, cfg.connect_timeout_s * 1000)));
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max(1.0, cfg.timeout_s * 1000)));
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &a.t);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &a.t);
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, &a.t);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_NOPROXY, np.c_str());
  curl_easy_setopt(h, CURLOPT_USERAGENT, "kevo-llm/0.1");
  curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");
  const auto t0 = std::chrono::steady_clock::now();
  a.code = curl_easy_perform(h);
  a.latency_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &a.status);
  a.error = errbuf[0] ? std::string(errbuf) : std::string(curl_easy_strerror(a.code));
  if (a.t.too_big) a.error = "reply body larger than 16 MiB";
  curl_slist_free_all(headers);
  curl_easy_cleanup(h);
  return a;
}

std::string content_text(const json& c) {
  if (c.is_string()) return c.get<std::string>();
  if (c.is_array()) {  // content parts: [{"type":"text","text":"..."}]
    std::string s;
    for (const auto& p : c)
      if (p.is_object() && p.contains("text") && p["text"].is_string()) s += p["text"].get<std::string>();
    return s;
  }
  return {};
}

}  // namespace

OpenAiClient::OpenAiClient(OpenAiConfig cfg) : cfg_(std::move(cfg)) {
  while (!cfg_.base_url.empty() && cfg_.base_url.back() == '/') cfg_.base_url.pop_back();
  global_init();
}

std::string OpenAiClient::name() const { return "openai:" + cfg_.base_url + " " + cfg_.model; }

std::string OpenAiClient::request_body(const ChatRequest& r, const std::string& default_model,
                                       const std::string& max_tokens_field) {
  json j;
  j["model"] = r.model.empty() ? default_model : r.model;
  json msgs = json::array();
  for (const auto& m : r.messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  j["messages"] = std::move(msgs);
  j["temperature"] = r.temperature;
  j[max_tokens_field.empty() ? std::string("max_tokens") : max_tokens_field] = r.max_tokens;
  j["stream"] = false;
  // A model's text may hold any bytes; invalid UTF-8 is replaced rather than refused.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Expected<ChatReply, LlmError> OpenAiClient::parse_reply_body(std::string_view body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    return unexpected(LlmError{LlmErrorKind::malformed,
                               "reply is not JSON (byte " + std::to_string(e.byte) + "): " + detail::one_line(body, 120)});
  }
  if (!j.is_object()) return unexpected(LlmError{LlmErrorKind::malformed, "reply JSON is not an object"});
  if (j.contains("error") && !j["error"].is_null()) {
    std::string msg = j["error"].is_object() && j["error"].contains("message") && j["error"]["message"].is_string()
                          ? j["error"]["message"].get<std::string>()
                          : j["error"].dump();
    return unexpected(LlmError{LlmErrorKind::http, "server reported an error: " + detail::one_line(msg)});
  }
  if (!j.contains("choices") || !j["choices"].is_array())
    return unexpected(LlmError{LlmErrorKind::malformed, "reply has no \"choices\" array"});
  if (j["choices"].empty()) return unexpected(LlmError{LlmErrorKind::empty, "reply has an empty \"choices\" array"});
  const json& c0 = j["choices"][0];
  if (!c0.is_object()) return unexpected(LlmError{LlmErrorKind::malformed, "choices[0] is not an object"});
  ChatReply reply;
  if (c0.contains("message") && c0["message"].is_object() && c0["message"].contains("content")) {
    reply.text = content_text(c0["message"]["content"]);
  } else if (c0.contains("text") && c0["text"].is_string()) {  // legacy completions shape
    reply.text = c0["text"].get<std::string>();
  } else {
    return unexpected(LlmError{LlmErrorKind::malformed, "choices[0] has no message content"});
  }
  if (reply.text.empty()) return unexpected(LlmError{LlmErrorKind::empty, "choices[0] has empty content"});
  if (c0.contains("finish_reason") && c0["finish_reason"].is_string())
    reply.finish_reason = c0["finish_reason"].get<std::string>();
  reply.usage_estimated = true;
  if (j.contains("usage") && j["usage"].is_object()) {
    const json& u = j["usage"];
    auto num = [&](const char* k) -> std::optional<std::uint64_t> {
      if (u.contains(k) && u[k].is_number() && u[k].get<double>() >= 0) return u[k].get<std::uint64_t>();
      return std::nullopt;
    };
    auto p = num("prompt_tokens");
    auto c = num("completion_tokens");
    if (p && c) {
      reply.prompt_tokens = *p;
      reply.completion_tokens = *c;
      reply.usage_estimated = false;
    }
  }
  return reply;
}

double OpenAiClient::backoff_s(std::uint64_t request_key, int attempt, double retry_after_s) const {
  if (retry_after_s >= 0) return retry_after_s;
  Rng rng = Rng(cfg_.seed, request_key).fork(static_cast<std::uint64_t>(attempt));
  const double base = cfg_.backoff_base_s * std::pow(2.0, attempt);
  return std::min(cfg_.backoff_max_s, base) * (0.5 + 0.5 * rng.uniform());
}

Expected<ChatReply, LlmError> OpenAiClient::complete(const ChatRequest& r) const {
  std::string key;
  if (!cfg_.api_key_env.empty()) {
    const char* v = std::getenv(cfg_.api_key_env.c_str());
    if (!v || !*v)
      return unexpected(LlmError{LlmErrorKind::config,
                                 "environment variable " + cfg_.api_key_env + " (named by api_key_env) is not set"});
    key = v;
  }
  auto fail = [&](LlmErrorKind k, std::string msg, int status, int attempts) {
    return unexpected(LlmError{k, detail::scrub(std::move(msg), key), status, attempts});
  };
  const std::string url = cfg_.base_url + "/chat/completions";
  const std::string body = request_body(r, cfg_.model, cfg_.max_tokens_field);
  const std::uint64_t rkey = request_hash(r);
  const int attempts = 1 + std::max(0, cfg_.retries);
  for (int i = 0; i < attempts; ++i) {
    if (r.cancel && r.cancel->load()) return fail(LlmErrorKind::cancelled, "call cancelled", 0, i);
    Attempt a = perform(url, body, key, cfg_, r.cancel);
    LlmErrorKind kind = LlmErrorKind::transport;
    std::string msg;
    bool retry = true;
    if (a.code == CURLE_ABORTED_BY_CALLBACK) return fail(LlmErrorKind::cancelled, "call cancelled", 0, i + 1);
    if (a.code == CURLE_OK && a.status >= 200 && a.status < 300) {
      auto rep = parse_reply_body(a.t.body);
      if (!rep) {
        LlmError e = rep.error();
        e.message = detail::scrub(e.message + " (from " + url + ")", key);
        e.http_status = static_cast<int>(a.status);
        e.attempts = i + 1;
        return unexpected(std::move(e));
      }
      ChatReply out = std::move(*rep);
      // Short keys are not real secrets and scrubbing them would mangle ordinary text.
      if (key.size() >= 8) out.text = detail::scrub(std::move(out.text), key);
      out.latency_s = a.latency_s;
      if (out.usage_estimated) {
        std::size_t chars = 0;
        for (const auto& m : r.messages) chars += m.content.size();
        out.prompt_tokens = detail::estimate_tokens(chars);
        out.completion_tokens = detail::estimate_tokens(out.text.size());
      }
      return out;
    }
    if (a.code != CURLE_OK) {
      kind = a.code == CURLE_OPERATION_TIMEDOUT ? LlmErrorKind::timeout : LlmErrorKind::transport;
      msg = std::string(a.code == CURLE_OPERATION_TIMEDOUT ? "timed out" : "transport error") + " calling " + url +
            ": " + a.error;
      if (a.code == CURLE_UNSUPPORTED_PROTOCOL || a.code == CURLE_URL_MALFORMAT) {
        kind = LlmErrorKind::config;
        retry = false;
      }
      if (a.t.too_big) retry = false;
    } else {
      kind = LlmErrorKind::http;
      msg = "HTTP " + std::to_string(a.status) + " from " + url + ": " + detail::one_line(a.t.body);
      retry = a.status == 429 || a.status == 408 || a.status >= 500;
    }
    if (!retry || i + 1 == attempts) {
      if (retry) msg += " (after " + std::to_string(attempts) + " attempts)";
      return fail(kind, std::move(msg), static_cast<int>(a.status), i + 1);
    }
    const double ra = a.t.retry_after_s.value_or(-1.0);
    if (ra > cfg_.retry_after_max_s)
      return fail(kind, msg + " (Retry-After " + std::to_string(static_cast<long>(ra)) + " s exceeds retry_after_max_s)",
                  static_cast<int>(a.status), i + 1);
    const double wait = backoff_s(rkey, i, ra);
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait);
    while (std::chrono::steady_clock::now() < until) {
      if (r.cancel && r.cancel->load()) return fail(LlmErrorKind::cancelled, "call cancelled", 0, i + 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  return fail(LlmErrorKind::transport, "no attempt made", 0, 0);
}

}  // namespace kevo::llm
