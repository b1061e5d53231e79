#include "kevo/llm/cassette.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "kevo/core/error.hpp"
#include "kevo/core/hash.hpp"
#include "kevo/core/io.hpp"

namespace kevo::llm {
namespace {

using json = nlohmann::json;

std::optional<LlmErrorKind> kind_from_string(std::string_view s) {
  for (auto k : {LlmErrorKind::config, LlmErrorKind::transport, LlmErrorKind::timeout, LlmErrorKind::http,
                 LlmErrorKind::malformed, LlmErrorKind::empty, LlmErrorKind::process, LlmErrorKind::cassette,
                 LlmErrorKind::cancelled})
    if (s == to_string(k)) return k;
  return std::nullopt;
}

std::uint64_t parse_hex(const std::string& s) {
  if (s.size() != 16 || s.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw Error("key is not 16 lowercase hex digits");
  return std::stoull(s, nullptr, 16);
}

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64(std::string_view s) {
  std::string r;
  r.reserve((s.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < s.size(); i += 3) {
    std::uint32_t v = static_cast<unsigned char>(s[i]) << 16;
    if (i + 1 < s.size()) v |= static_cast<unsigned char>(s[i + 1]) << 8;
    if (i + 2 < s.size()) v |= static_cast<unsigned char>(s[i + 2]);
    r += kB64[(v >> 18) & 63];
    r += kB64[(v >> 12) & 63];
    r += i + 1 < s.size() ? kB64[(v >> 6) & 63] : '=';
    r += i + 2 < s.size() ? kB64[v & 63] : '=';
  }
  return r;
}

std::optional<std::string> unbase64(std::string_view s) {
  if (s.size() % 4 != 0) return std::nullopt;
  std::string r;
  for (std::size_t i = 0; i < s.size(); i += 4) {
    // '=' pads only the last group, at most two of them
    const int pad = i + 4 != s.size() || s[i + 3] != '=' ? 0 : s[i + 2] == '=' ? 2 : 1;
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      std::uint32_t d = 0;
      if (k < 4 - static_cast<std::size_t>(pad)) {
        const char* p = s[i + k] != '\0' ? std::strchr(kB64, s[i + k]) : nullptr;
        if (!p) return std::nullopt;
        d = static_cast<std::uint32_t>(p - kB64);
      }
      v = (v << 6) | d;
    }
    r += static_cast<char>((v >> 16) & 0xFF);
    if (pad < 2) r += static_cast<char>((v >> 8) & 0xFF);
    if (pad < 1) r += static_cast<char>(v & 0xFF);
  }
  return r;
}

// A text field kept exactly: `key` when the text is valid UTF-8 (readable in the file), else
// `key_base64` holding its bytes (a model's or a command's reply may hold any byte, and a replay
// must give the very same text).
void put_text(json& o, const std::string& key, const std::string& text) {
  if (valid_utf8(text))
    o[key] = text;
  else
    o[key + "_base64"] = base64(text);
}

}  // namespace

struct Cassette::Entry {
  Expected<ChatReply, LlmError> result = ChatReply{};
};

Cassette::Cassette(std::filesystem::path path, CassetteMode mode) : path_(std::move(path)), mode_(mode) {}

Cassette::~Cassette() {
  if (fd_ >= 0) ::close(fd_);
}

std::shared_ptr<Cassette> Cassette::open(const std::filesystem::path& path, CassetteMode mode) {
  auto c = std::make_shared<Cassette>(path, mode);
  std::error_code ec;
  const bool existing = std::filesystem::exists(path, ec);
  if (mode == CassetteMode::record) {
    // Never truncate: a cassette holds calls that were paid for. Recording extends it, and the
    // entries it already holds answer their requests (a resumed or repeated run costs nothing twice).
    c->fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (c->fd_ < 0) throw Error("cannot write cassette " + path.string() + ": " + std::strerror(errno));
    if (!existing) return c;
  }
  std::string text = read_file(path);
  // A run killed mid-write leaves a torn last line; recording drops it (replay reports it).
  if (mode == CassetteMode::record && !text.empty() && text.back() != '\n') {
    const std::size_t nl = text.rfind('\n');
    text.resize(nl == std::string::npos ? 0 : nl + 1);
    if (::ftruncate(c->fd_, static_cast<off_t>(text.size())) != 0)
      throw Error("cannot repair cassette " + path.string() + ": " + std::strerror(errno));
  }
  std::size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = path.string() + ":" + std::to_string(line_no) + ": ";
    try {
      const json j = json::parse(line, nullptr, false);
      if (j.is_discarded()) throw Error("not JSON");
      if (!j.is_object()) throw Error("not a JSON object");
      // each field checked by name: a hand-edited or truncated line says which field is wrong
      const auto field = [](const json& o, const char* k, const char* in) -> const json& {
        if (!o.contains(k)) throw Error(fmt::format("'{}{}' is missing", in, k));
        return o[k];
      };
      const auto str = [&](const json& o, const char* k, const char* in) {
        const json& v = field(o, k, in);
        if (!v.is_string()) throw Error(fmt::format("'{}{}' must be a string", in, k));
        return v.get<std::string>();
      };
      const auto count = [&](const json& o, const char* k, const char* in) {
        const json& v = field(o, k, in);
        if (!v.is_number_unsigned()) throw Error(fmt::format("'{}{}' must be a whole number >= 0", in, k));
        return v.get<std::uint64_t>();
      };
      const auto opt = [](const json& o, const char* k, auto dflt, bool ok_type, const char* in, const char* what) {
        if (!o.contains(k)) return dflt;
        if (!ok_type) throw Error(fmt::format("'{}{}' must be {}", in, k, what));
        return o[k].get<decltype(dflt)>();
      };
      // A text written by put_text: `k` or `k_base64`, one of them.
      const auto text = [&](const json& o, const char* k, const char* in) {
        const std::string b = std::string(k) + "_base64";
        if (o.contains(b)) {
          if (o.contains(k)) throw Error(fmt::format("both '{}{}' and '{}{}'", in, k, in, b));
          auto t = unbase64(str(o, b.c_str(), in));
          if (!t) throw Error(fmt::format("'{}{}' is not base64", in, b));
          return *t;
        }
        return str(o, k, in);
      };
      const std::uint64_t key = parse_hex(str(j, "key", ""));
      const std::uint64_t n = count(j, "n", "");
      auto e = std::make_shared<Entry>();
      if (j.contains("reply")) {
        const json& r = j["reply"];
        if (!r.is_object()) throw Error("'reply' must be an object");
        ChatReply rep;
        rep.text = text(r, "text", "reply.");
        rep.prompt_tokens = count(r, "prompt_tokens", "reply.");
        rep.completion_tokens = count(r, "completion_tokens", "reply.");
        rep.usage_estimated = opt(r, "usage_estimated", false, r.contains("usage_estimated") && r["usage_estimated"].is_boolean(),
                                  "reply.", "true or false");
        rep.latency_s = opt(r, "latency_s", 0.0, r.contains("latency_s") && r["latency_s"].is_number(), "reply.", "a number");
        rep.finish_reason = opt(r, "finish_reason", std::string(), r.contains("finish_reason") && r["finish_reason"].is_string(),
                                "reply.", "a string");
        // No client bills more completion tokens than the request allowed (an API stops there, the
        // command client cuts there): more is an edited or foreign cassette, and replaying it
        // would report a spend the cost cap never allowed.
        if (j.contains("request") && j["request"].is_object() && j["request"].contains("max_tokens") &&
            j["request"]["max_tokens"].is_number_integer() && j["request"]["max_tokens"].get<std::int64_t>() >= 0 &&
            rep.completion_tokens > j["request"]["max_tokens"].get<std::uint64_t>())
          throw Error(fmt::format("'reply.completion_tokens' is {}, more than the request's max_tokens {}", rep.completion_tokens,
                                  j["request"]["max_tokens"].get<std::uint64_t>()));
        e->result = rep;
      } else {
        if (!j.contains("error")) throw Error("neither 'reply' nor 'error'");
        const json& r = j["error"];
        if (!r.is_object()) throw Error("'error' must be an object");
        const std::string kind = str(r, "kind", "error.");
        auto k = kind_from_string(kind);
        if (!k) throw Error("unknown error kind '" + printable(kind) + "'");
        const auto whole = [&](const char* f) {
          if (!r.contains(f)) return 0;
          if (!r[f].is_number_integer()) throw Error(fmt::format("'error.{}' must be a whole number", f));
          return r[f].get<int>();
        };
        e->result = unexpected(LlmError{*k, text(r, "message", "error."), whole("http_status"), whole("attempts")});
      }
      if (!c->entries_.emplace(std::make_pair(key, n), std::move(e)).second)
        throw Error("duplicate entry for key " + hex64(key) + " occurrence " + std::to_string(n));
    } catch (const Error& ex) {
      throw Error(where + "corrupt cassette line: " + ex.what());
    } catch (const json::exception& ex) {  // (every access is checked first; kept as a last guard)
      throw Error(where + "corrupt cassette line: " + ex.what());
    }
  }
  return c;
}

std::size_t Cassette::size() const {
  std::lock_guard lock(mu_);
  return entries_.size() + written_;
}

std::uint64_t Cassette::next_occurrence(std::uint64_t key) {
  std::lock_guard lock(mu_);
  return seen_[key]++;
}

void Cassette::append(std::uint64_t key, std::uint64_t occurrence, const ChatRequest& r,
                      const Expected<ChatReply, LlmError>& result) {
  json j;
  j["key"] = hex64(key);
  j["n"] = occurrence;
  json msgs = json::array();
  for (const auto& m : r.messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  j["request"] = {{"model", r.model}, {"temperature", r.temperature}, {"max_tokens", r.max_tokens}, {"messages", msgs}};
  if (result) {
    const ChatReply& rep = *result;
    j["reply"] = {{"prompt_tokens", rep.prompt_tokens},
                  {"completion_tokens", rep.completion_tokens},
                  {"usage_estimated", rep.usage_estimated},
                  {"latency_s", rep.latency_s},
                  {"finish_reason", rep.finish_reason}};
    put_text(j["reply"], "text", rep.text);
  } else {
    const LlmError& e = result.error();
    j["error"] = {{"kind", to_string(e.kind)}, {"http_status", e.http_status}, {"attempts", e.attempts}};
    put_text(j["error"], "message", e.message);
  }
  // (replace: only the request, kept for reading, may hold bytes that are not UTF-8; the reply and
  // the error are exact, and the key is the hash of the request as it was made)
  const std::string line = j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  std::lock_guard lock(mu_);
  if (fd_ < 0) throw Error("cassette " + path_.string() + " is not open for recording");
  std::size_t off = 0;
  while (off < line.size()) {
    const ssize_t k = ::write(fd_, line.data() + off, line.size() - off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) throw Error("cannot write cassette " + path_.string() + ": " + std::strerror(errno));
    off += static_cast<std::size_t>(k);
  }
  ::fdatasync(fd_);  // a killed run keeps every call it paid for
  ++written_;
}

std::optional<Expected<ChatReply, LlmError>> Cassette::lookup(std::uint64_t key, std::uint64_t occurrence) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find({key, occurrence});
  if (it == entries_.end()) return std::nullopt;
  return it->second->result;
}

CassetteClient::CassetteClient(std::shared_ptr<Cassette> cassette, std::optional<LlmClient> inner)
    : cassette_(std::move(cassette)), inner_(std::move(inner)) {
  if (!cassette_) throw Error("CassetteClient needs a cassette");
  if (cassette_->mode() == CassetteMode::record && !inner_)
    throw Error("CassetteClient in record mode needs a client to record from");
}

std::string CassetteClient::name() const {
  std::string s = "cassette(";
  s += cassette_->mode() == CassetteMode::record ? "record:" : "replay:";
  s += cassette_->path().string();
  s += ')';
  if (inner_) {
    s += ' ';
    s += inner_->name();
  }
  return s;
}

Expected<ChatReply, LlmError> CassetteClient::complete(const ChatRequest& r) const {
  const std::uint64_t key = request_hash(r);
  const std::uint64_t n = cassette_->next_occurrence(key);
  if (auto hit = cassette_->lookup(key, n)) {
    // (the load checks the recorded request's max_tokens; this one, the request actually made)
    if (*hit && (*hit)->completion_tokens > static_cast<std::uint64_t>(std::max(0, r.max_tokens)))
      return unexpected(LlmError{LlmErrorKind::cassette,
                                 fmt::format("cassette {}: the reply to request {} (occurrence {}) bills {} completion tokens, more "
                                             "than its max_tokens {}",
                                             cassette_->path().string(), hex64(key), n, (*hit)->completion_tokens, r.max_tokens),
                                 0, 0});
    return *hit;
  }
  if (cassette_->mode() == CassetteMode::replay) {
    return unexpected(LlmError{LlmErrorKind::cassette,
                               "cassette " + cassette_->path().string() + " has no reply for request " + hex64(key) +
                                   " (occurrence " + std::to_string(n) +
                                   "); the run diverged from the recorded one or the cassette is from another run",
                               0, 0});
  }
  auto result = inner_->complete(r);
  // A cancelled call is a shutdown artefact, not an answer the replay should give.
  if (result || result.error().kind != LlmErrorKind::cancelled) cassette_->append(key, n, r, result);
  return result;
}

}  // namespace kevo::llm
