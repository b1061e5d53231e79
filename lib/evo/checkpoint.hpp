// Private: the on-disk checkpoint of a run. Two files in the checkpoint directory:
//   journal.kevo  — header, then one record per evaluation (u32 length, u64 checksum, payload),
//                   appended per batch; a torn last record is dropped on reading;
//   snapshot.kevo — the engine state at a generation boundary, replaced atomically.
// Payloads are cereal portable-binary archives so files move between machines.
#pragma once
#include <cstdint>
#include <filesystem>
#include <array>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kevo/evo/engine.hpp"

namespace kevo::evo::detail {

inline constexpr std::uint32_t kJournalVersion = 1;
inline constexpr std::uint32_t kSnapshotVersion = 3;  // 3: Config::late_seeds after the state  // 1: before strategies were plug-ins (still read)
inline constexpr const char* kJournalName = "journal.kevo";
inline constexpr const char* kSnapshotName = "snapshot.kevo";

// Identity of a search space (kevo::space_fingerprint): a run's checkpoint only resumes with the same space.
using kevo::space_fingerprint;

struct ArmState {
  std::string name;
  double prior = 1;
  double reward = 0, cost = 0, count = 0;  // decayed bandit sums
  OperatorStats stats;
};

struct SnapshotState {
  Config config;
  bool deterministic = false;
  std::uint64_t records = 0;     // journal records applied to this state
  std::uint64_t generation = 0;  // next generation to breed
  std::string strategy;          // Strategy::name()
  bool strategy_stateful = false;  // the strategy saved its state (else a resume replays the journal)
  std::string strategy_state;    // Strategy::save()
  std::vector<std::uint64_t> leaders;  // ids of the best seen, for a strategy without population()
  bool has_archive = false;
  std::vector<std::pair<double, double>> archive_ranges;
  bool archive_calibrated = false;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> archive_cells;  // (cell, id)
  std::vector<std::uint64_t> archive_pending;
  std::uint64_t valid = 0;
  std::array<std::uint64_t, 6> by_status{};
  std::uint64_t duplicates = 0, outside = 0;
  bool has_best = false;
  std::uint64_t best_id = 0;
  std::uint64_t last_improvement = 0;
  double cost = 0, evaluation_cost = 0, wall_seconds = 0;
  double cost_sum = 0;
  std::uint64_t cost_samples = 0;
  std::uint64_t history_hash = 0;
  std::vector<ArmState> arms;
};

class JournalWriter {
 public:
  // Creates the journal (fresh) or opens it for appending after `valid_bytes` (resume; the
  // file is truncated there so a torn record never sits in the middle).
  JournalWriter(const std::filesystem::path& path, std::uint64_t fingerprint, std::uint32_t width,
                std::optional<std::uint64_t> valid_bytes, bool sync);
  ~JournalWriter();
  JournalWriter(const JournalWriter&) = delete;
  JournalWriter& operator=(const JournalWriter&) = delete;
  // Appends records with one write() (and fdatasync when sync).
  void append(std::span<const Individual* const> records);

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  bool sync_ = true;
  std::string buf_;
};

struct JournalContents {
  std::vector<Individual> records;
  std::uint64_t valid_bytes = 0;  // length of the well-formed prefix
  bool torn_tail = false;         // a partial last record was dropped
};

// Reads a journal; throws kevo::Error("checkpoint <path>: ...") on bad magic, unsupported
// version, a foreign space (when fingerprint is given) or a corrupt record before the last.
JournalContents read_journal_file(const std::filesystem::path& path, std::optional<std::uint64_t> fingerprint);

// Atomic replacement (temp file + rename); with sync also fsync of file and directory
// (kevo::write_file_atomic). Without sync a kill still never leaves a half-written snapshot.
void write_snapshot(const std::filesystem::path& path, std::uint64_t fingerprint, const SnapshotState& s, bool sync);
SnapshotState read_snapshot(const std::filesystem::path& path, std::uint64_t fingerprint);

}  // namespace kevo::evo::detail
