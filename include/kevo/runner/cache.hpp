// The measurement cache: results keyed by (kernel, target, runner identity, canonical schedule)
// held in memory (bounded, least recently used dropped first) and optionally in an append-only
// JSON-lines file shared across runs, so an identical candidate is never measured twice.
// CachedRunner puts it in front of any runner; remeasure_top_k re-times the leaders of a noisy
// runner before a winner is named.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kevo/core/expected.hpp"
#include "kevo/runner/runner.hpp"

namespace kevo::runner {

struct CacheKey {
  std::uint64_t kernel_hash = 0;
  std::uint64_t target_hash = 0;
  std::string runner;    // RunnerTraits::identity
  std::string schedule;  // canonical schedule text
  [[nodiscard]] std::uint64_t digest() const;
  friend bool operator==(const CacheKey&, const CacheKey&) = default;
};
// The key of a candidate under a runner (kernel hashed from Candidate::kernel, or from
// kernel_text when the kernel pointer is null).
CacheKey cache_key(const Candidate& c, const RunnerTraits& traits);

// Measurement <-> one-line JSON (what the on-disk cache stores). Parse errors are values.
std::string measurement_to_json(const Measurement& m);
Expected<Measurement, std::string> measurement_from_json(std::string_view line);

class MeasurementCache {
 public:
  explicit MeasurementCache(std::size_t capacity = 1 << 16);
  // Loads `file` if it exists (skipping torn or garbled lines) and appends every new entry to it.
  // Throws kevo::Error when the file cannot be opened for appending.
  MeasurementCache(std::size_t capacity, const std::filesystem::path& file);
  ~MeasurementCache();
  MeasurementCache(const MeasurementCache&) = delete;
  MeasurementCache& operator=(const MeasurementCache&) = delete;

  std::optional<Measurement> find(const CacheKey& k);
  // Stores ok / invalid / incorrect results; transient failures (timeout, crashed, error) are not
  // cached, so they are tried again.
  void insert(const CacheKey& k, const Measurement& m);
  [[nodiscard]] static bool cacheable(Status s) noexcept;

  [[nodiscard]] std::size_t size() const;
  [[nodiscard]] std::size_t hits() const;
  [[nodiscard]] std::size_t misses() const;
  [[nodiscard]] std::size_t loaded() const;         // entries read from the file
  [[nodiscard]] std::size_t skipped_lines() const;  // torn or garbled lines ignored in the file

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A runner in front of which a cache sits: hits are returned without measuring, duplicates in
// one batch are measured once, and the inner runner's traits are reported unchanged.
class CachedRunner {
 public:
  CachedRunner(Runner inner, std::shared_ptr<MeasurementCache> cache);
  std::vector<Measurement> measure(std::span<const Candidate> candidates);
  [[nodiscard]] RunnerTraits traits() const { return traits_; }
  [[nodiscard]] std::size_t measured() const noexcept { return measured_; }  // candidates passed to the inner runner

 private:
  Runner inner_;
  RunnerTraits traits_;
  std::shared_ptr<MeasurementCache> cache_;
  std::size_t measured_ = 0;
};

// Re-measures the `k` best ok candidates (lowest median) `rounds` more times, appending the new
// samples to their Measurements and re-summarising. Returns every index, best first (ok by
// median, then the rest in input order). For noisy runners, before naming a winner. A leader
// whose re-measurement fails takes that status and is not re-timed in later rounds.
std::vector<std::size_t> remeasure_top_k(Runner& r, std::span<const Candidate> candidates, std::vector<Measurement>& ms,
                                         std::size_t k, int rounds = 1);

}  // namespace kevo::runner
