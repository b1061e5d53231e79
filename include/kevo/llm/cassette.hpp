// Record / replay of LLM calls. A cassette is a JSON-lines file: one line per call, keyed by the
// request's stable hash and its occurrence number (the n-th identical request gets the n-th
// recorded reply), holding the request, and the reply or the error. Replay needs no model, so an
// LLM-driven search re-runs bit-identically. Requests carry no key material, and neither do lines.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kevo/llm/client.hpp"

namespace kevo::llm {

enum class CassetteMode : unsigned char { record, replay };

// The file behind one or more CassetteClients (one per model may share it).
class Cassette {
 public:
  // record: creates `path`, or extends it — entries it already holds answer their requests and
  // are not called again (delete the file for fresh answers); a torn last line is dropped.
  // replay: loads it. Throws kevo::Error on an unwritable or unreadable file or a corrupt line
  // ("path:line: ...").
  static std::shared_ptr<Cassette> open(const std::filesystem::path& path, CassetteMode mode);

  [[nodiscard]] CassetteMode mode() const noexcept { return mode_; }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  // Number of entries loaded plus entries written.
  [[nodiscard]] std::size_t size() const;

  // Internals shared by CassetteClient.
  std::uint64_t next_occurrence(std::uint64_t key);
  void append(std::uint64_t key, std::uint64_t occurrence, const ChatRequest& r,
              const Expected<ChatReply, LlmError>& result);
  [[nodiscard]] std::optional<Expected<ChatReply, LlmError>> lookup(std::uint64_t key, std::uint64_t occurrence) const;

  Cassette(std::filesystem::path path, CassetteMode mode);
  ~Cassette();
  Cassette(const Cassette&) = delete;
  Cassette& operator=(const Cassette&) = delete;

 private:
  struct Entry;
  std::filesystem::path path_;
  CassetteMode mode_;
  mutable std::mutex mu_;
  std::map<std::uint64_t, std::uint64_t> seen_;
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::shared_ptr<Entry>> entries_;
  std::size_t written_ = 0;
  int fd_ = -1;
};

class CassetteClient {
 public:
  // Record: answers from the cassette when it holds the request, otherwise forwards to `inner`
  // and writes the request/result pair. Replay: answers from the
  // cassette alone (`inner` is not needed and never called); a request it has no entry for is a
  // `cassette` error.
  CassetteClient(std::shared_ptr<Cassette> cassette, std::optional<LlmClient> inner = std::nullopt);
  [[nodiscard]] Expected<ChatReply, LlmError> complete(const ChatRequest& r) const;
  [[nodiscard]] std::string name() const;
  [[nodiscard]] const std::shared_ptr<Cassette>& cassette() const noexcept { return cassette_; }

 private:
  std::shared_ptr<Cassette> cassette_;
  std::optional<LlmClient> inner_;
};

}  // namespace kevo::llm
