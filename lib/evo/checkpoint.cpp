#include "checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cereal/archives/portable_binary.hpp>
#include <cereal/types/array.hpp>
#include <cereal/types/optional.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/utility.hpp>
#include <cereal/types/vector.hpp>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <sstream>

#include "kevo/core/error.hpp"
#include "kevo/core/hash.hpp"
#include "kevo/core/io.hpp"
#include "strategies/state.hpp"

namespace kevo::evo {

// Non-intrusive cereal functions, found by ADL.
template <class A>
void serialize(A& ar, Evaluation& e) {
  ar(e.status, e.reason, e.fitness, e.descriptors, e.cost, e.profile, e.metrics);
}
template <class A>
void serialize(A& ar, Individual& i) {
  ar(i.genome, i.eval, i.id, i.op, i.generation);
}
template <class A>
void serialize(A& ar, IslandConfig& c) {
  ar(c.count, c.topology, c.interval, c.rate);
}
template <class A>
void serialize(A& ar, ArchiveConfig& c) {
  ar(c.bins, c.ranges);
}
template <class A>
void serialize(A& ar, Budget& b) {
  ar(b.max_evaluations, b.max_seconds, b.max_cost, b.patience, b.target_fitness, b.max_generations);
}
template <class A>
void save(A& ar, const CheckpointConfig& c) {
  ar(c.dir.string(), c.snapshot_interval, c.sync);
}
template <class A>
void load(A& ar, CheckpointConfig& c) {
  std::string dir;
  ar(dir, c.snapshot_interval, c.sync);
  c.dir = dir;
}
template <class A>
void serialize(A& ar, Config& c) {
  ar(c.algorithm, c.seed, c.threads, c.population, c.elites, c.tournament, c.mutation_rate, c.crossover_rate,
     c.builtin_operators, c.adaptive_operators, c.islands, c.archive, c.budget, c.checkpoint, c.in_flight,
     c.deterministic, c.exhaustive_limit, c.seeds);
}
template <class A>
void serialize(A& ar, OperatorStats& s) {
  ar(s.name, s.proposals, s.evaluated, s.duplicates, s.outside, s.improvements, s.new_bests, s.cost, s.weight);
}

namespace detail {

template <class A>
void serialize(A& ar, ArmState& a) {
  ar(a.name, a.prior, a.reward, a.cost, a.count, a.stats);
}
template <class A>
void serialize(A& ar, SnapshotState& s) {
  ar(s.config, s.deterministic, s.records, s.generation, s.strategy, s.strategy_stateful, s.strategy_state,
     s.leaders, s.has_archive, s.archive_ranges, s.archive_calibrated, s.archive_cells, s.archive_pending, s.valid,
     s.by_status, s.duplicates, s.outside, s.has_best, s.best_id, s.last_improvement, s.cost, s.evaluation_cost,
     s.wall_seconds, s.cost_sum, s.cost_samples, s.history_hash, s.arms);
}

// Version 1 (the algorithms were built into the engine): the enumeration cursor and the
// populations sat in the engine state; they become the built-in strategy's state.
template <class A>
void load_v1(A& ar, SnapshotState& s) {
  std::uint64_t cursor = 0;
  std::vector<std::vector<std::uint64_t>> islands;
  ar(s.config, s.deterministic, s.records, s.generation, cursor, islands, s.has_archive, s.archive_ranges,
     s.archive_calibrated, s.archive_cells, s.archive_pending, s.valid, s.by_status, s.duplicates, s.outside,
     s.has_best, s.best_id, s.last_improvement, s.cost, s.evaluation_cost, s.wall_seconds, s.cost_sum,
     s.cost_samples, s.history_hash, s.arms);
  s.strategy = std::string(to_string(s.config.algorithm));
  s.strategy_stateful = true;
  s.strategy_state = encode_builtin_state(BuiltinState{cursor, std::move(islands)});
}

namespace {

constexpr char kJournalMagic[8] = {'K', 'E', 'V', 'O', 'J', 'R', 'N', 'L'};
constexpr char kSnapshotMagic[8] = {'K', 'E', 'V', 'O', 'S', 'N', 'A', 'P'};
constexpr std::size_t kJournalHeader = 24;  // magic, u32 version, u32 width, u64 fingerprint
constexpr std::size_t kRecordHeader = 12;   // u32 length, u64 checksum
constexpr std::uint32_t kMaxRecord = 1u << 30;

void put_u32(std::string& s, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}
void put_u64(std::string& s, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}
std::uint32_t get_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
std::uint64_t get_u64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
std::uint64_t checksum(std::string_view payload) { return StableHasher{}.bytes(payload.data(), payload.size()).digest(); }

[[noreturn]] void fail(const std::filesystem::path& p, const std::string& what) {
  throw Error(fmt::format("checkpoint {}: {}", p.string(), what));
}

void write_all(int fd, const std::string& data, const std::filesystem::path& p) {
  std::size_t done = 0;
  while (done < data.size()) {
    const auto n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(p, std::string("write failed: ") + std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

JournalWriter::JournalWriter(const std::filesystem::path& path, std::uint64_t fingerprint, std::uint32_t width,
                             std::optional<std::uint64_t> valid_bytes, bool sync)
    : path_(path), sync_(sync) {
  const bool fresh = !valid_bytes || *valid_bytes < kJournalHeader;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (fresh ? O_TRUNC : 0), 0644);
  if (fd_ < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  if (fresh) {
    std::string h(kJournalMagic, 8);
    put_u32(h, kJournalVersion);
    put_u32(h, width);
    put_u64(h, fingerprint);
    write_all(fd_, h, path_);
    if (sync_ && ::fdatasync(fd_) != 0) fail(path_, std::string("fdatasync failed: ") + std::strerror(errno));
  } else {
    if (::ftruncate(fd_, static_cast<off_t>(*valid_bytes)) != 0)
      fail(path, std::string("cannot truncate torn tail: ") + std::strerror(errno));
    if (::lseek(fd_, static_cast<off_t>(*valid_bytes), SEEK_SET) < 0)
      fail(path, std::string("cannot seek: ") + std::strerror(errno));
  }
}

JournalWriter::~JournalWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void JournalWriter::append(std::span<const Individual* const> records) {
  if (records.empty()) return;
  // One stream for the whole batch (a fresh archive per record keeps each payload standalone).
  std::ostringstream ss;
  std::vector<std::size_t> ends;
  ends.reserve(records.size());
  for (const Individual* r : records) {
    {
      cereal::PortableBinaryOutputArchive ar(ss);
      ar(*r);
    }
    ends.push_back(static_cast<std::size_t>(ss.tellp()));
  }
  const std::string all = std::move(ss).str();
  buf_.clear();
  buf_.reserve(all.size() + kRecordHeader * records.size());
  std::size_t begin = 0;
  for (std::size_t end : ends) {
    const std::string_view payload(all.data() + begin, end - begin);
    put_u32(buf_, static_cast<std::uint32_t>(payload.size()));
    put_u64(buf_, checksum(payload));
    buf_ += payload;
    begin = end;
  }
  write_all(fd_, buf_, path_);
  if (sync_ && ::fdatasync(fd_) != 0) fail(path_, std::string("fdatasync failed: ") + std::strerror(errno));
}

JournalContents read_journal_file(const std::filesystem::path& path, std::optional<std::uint64_t> fingerprint) {
  const std::string data = read_file(path);
  JournalContents out;
  if (data.size() < kJournalHeader) {
    // A header cut short by a kill is an empty journal; anything else is not ours.
    if (data.size() >= 8 ? std::memcmp(data.data(), kJournalMagic, 8) == 0
                         : std::memcmp(data.data(), kJournalMagic, data.size()) == 0) {
      out.torn_tail = !data.empty();
      return out;
    }
    fail(path, "bad magic (not a kevo journal)");
  }
  if (std::memcmp(data.data(), kJournalMagic, 8) != 0) fail(path, "bad magic (not a kevo journal)");
  const auto version = get_u32(data.data() + 8);
  if (version != kJournalVersion)
    fail(path, fmt::format("version {} unsupported (this kevo reads version {})", version, kJournalVersion));
  const auto width = get_u32(data.data() + 12);
  const auto fp = get_u64(data.data() + 16);
  if (fingerprint && fp != *fingerprint)
    fail(path, fmt::format("recorded for a different search space (fingerprint {}, expected {})", hex64(fp),
                           hex64(*fingerprint)));
  std::size_t pos = kJournalHeader;
  out.valid_bytes = pos;
  for (std::uint64_t k = 0; pos < data.size(); ++k) {
    if (data.size() - pos < kRecordHeader) {
      out.torn_tail = true;
      break;
    }
    const auto len = get_u32(data.data() + pos);
    const auto sum = get_u64(data.data() + pos + 4);
    if (len > kMaxRecord) {
      if (data.size() - pos - kRecordHeader < kMaxRecord) {  // garbage length at the very end: torn
        out.torn_tail = true;
        break;
      }
      fail(path, fmt::format("implausible length {} at record {}", len, k));
    }
    if (data.size() - pos - kRecordHeader < len) {
      out.torn_tail = true;
      break;
    }
    const std::string_view payload(data.data() + pos + kRecordHeader, len);
    const bool last = pos + kRecordHeader + len == data.size();
    if (checksum(payload) != sum) {
      if (last) {
        out.torn_tail = true;
        break;
      }
      fail(path, fmt::format("checksum mismatch at record {}", k));
    }
    Individual ind;
    try {
      std::istringstream ss{std::string(payload)};
      cereal::PortableBinaryInputArchive ar(ss);
      ar(ind);
    } catch (const std::exception& e) {
      fail(path, fmt::format("record {} unreadable ({})", k, e.what()));
    }
    if (ind.id != k) fail(path, fmt::format("record {} carries id {}", k, ind.id));
    if (ind.genome.size() != width) fail(path, fmt::format("record {} has a genome of width {}, expected {}", k, ind.genome.size(), width));
    out.records.push_back(std::move(ind));
    pos += kRecordHeader + len;
    out.valid_bytes = pos;
  }
  return out;
}

void write_snapshot(const std::filesystem::path& path, std::uint64_t fingerprint, const SnapshotState& s, bool sync) {
  std::ostringstream ss;
  {
    cereal::PortableBinaryOutputArchive ar(ss);
    ar(s);
    ar(s.config.late_seeds, s.config.late_seeds_at);  // version 3
  }
  const std::string payload = std::move(ss).str();
  std::string data(kSnapshotMagic, 8);
  put_u32(data, kSnapshotVersion);
  put_u32(data, 0);
  put_u64(data, fingerprint);
  put_u64(data, checksum(payload));
  put_u64(data, payload.size());
  data += payload;
  if (sync) {
    write_file_atomic(path, data);
    return;
  }
  const auto tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, std::string("cannot write ") + tmp + ": " + std::strerror(errno));
  try {
    write_all(fd, data, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail(path, std::string("cannot rename ") + tmp + ": " + std::strerror(errno));
}

SnapshotState read_snapshot(const std::filesystem::path& path, std::uint64_t fingerprint) {
  const std::string data = read_file(path);
  if (data.size() < 8 || std::memcmp(data.data(), kSnapshotMagic, 8) != 0) fail(path, "bad magic (not a kevo snapshot)");
  if (data.size() < 40) fail(path, "truncated header");
  const auto version = get_u32(data.data() + 8);
  if (version < 1 || version > kSnapshotVersion)
    fail(path, fmt::format("version {} unsupported (this kevo reads versions 1 to {})", version, kSnapshotVersion));
  // bytes 12-15 are reserved and always written as zero; the checksum covers only the payload, so
  // a flipped bit there is caught here or nowhere
  if (const auto reserved = get_u32(data.data() + 12); reserved != 0)
    fail(path, fmt::format("corrupt header (reserved bytes 12-15 hold {}, not 0)", reserved));
  const auto fp = get_u64(data.data() + 16);
  if (fp != fingerprint)
    fail(path, fmt::format("recorded for a different search space (fingerprint {}, expected {})", hex64(fp),
                           hex64(fingerprint)));
  const auto sum = get_u64(data.data() + 24);
  const auto len = get_u64(data.data() + 32);
  if (len != data.size() - 40) fail(path, fmt::format("truncated (payload {} bytes, header says {})", data.size() - 40, len));
  const std::string_view payload(data.data() + 40, data.size() - 40);
  if (checksum(payload) != sum) fail(path, "checksum mismatch");
  SnapshotState s;
  try {
    std::istringstream in{std::string(payload)};
    cereal::PortableBinaryInputArchive ar(in);
    if (version == 1) {
      load_v1(ar, s);
    } else {
      ar(s);
      if (version >= 3) ar(s.config.late_seeds, s.config.late_seeds_at);  // version 2 had none
    }
  } catch (const std::exception& e) {
    fail(path, fmt::format("unreadable ({})", e.what()));
  }
  return s;
}

}  // namespace detail
}  // namespace kevo::evo
