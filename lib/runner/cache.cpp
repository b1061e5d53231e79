// MeasurementCache, CachedRunner and top-k re-measurement. The on-disk file is append-only JSON
// lines written with one write(2) per entry (O_APPEND), so concurrent runs interleave whole
// lines; a run killed mid-write leaves at most one torn last line, which loading skips.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <list>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "kevo/core/error.hpp"
#include "kevo/core/hash.hpp"
#include "kevo/core/io.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/runner/cache.hpp"

namespace kevo::runner {

std::uint64_t CacheKey::digest() const {
  return StableHasher{}.str("kevo.cache.v1").u64(kernel_hash).u64(target_hash).str(runner).str(schedule).digest();
}

CacheKey cache_key(const Candidate& c, const RunnerTraits& traits) {
  CacheKey k;
  k.kernel_hash = c.kernel != nullptr ? ir::kernel_hash(*c.kernel) : stable_hash(c.kernel_text);
  k.target_hash = c.target != nullptr ? c.target->hash() : 0;
  k.runner = traits.identity;
  k.schedule = c.schedule_text;
  return k;
}

std::string measurement_to_json(const Measurement& m) {
  nlohmann::json j;
  j["status"] = std::string(to_string(m.status));
  j["message"] = m.message;
  j["samples_ns"] = m.samples_ns;
  nlohmann::json e = nlohmann::json::array();
  for (const EngineUse& u : m.engines) e.push_back({{"engine", u.engine}, {"busy_ns", u.busy_ns}, {"utilisation", u.utilisation}});
  j["engines"] = e;
  j["bytes_moved"] = m.bytes_moved;
  j["roofline_ns"] = m.roofline_ns;
  j["fraction_of_peak"] = m.fraction_of_peak;
  j["bottleneck"] = m.bottleneck;
  j["profile"] = m.profile;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

Measurement from_json_value(const nlohmann::json& j) {
  Measurement m;
  const auto st = status_from_string(j.at("status").get<std::string>());
  if (!st) throw std::runtime_error("unknown status");
  m.status = *st;
  m.message = j.value("message", std::string());
  m.samples_ns = j.at("samples_ns").get<std::vector<double>>();
  // an ok entry's samples are kernel times, as a worker's must be (docs/PROTOCOL.md): a hand-edited
  // or foreign entry is skipped and measured again, never reported as the runner's figure
  if (m.status == Status::ok && (m.samples_ns.empty() || !std::all_of(m.samples_ns.begin(), m.samples_ns.end(), is_kernel_time_ns)))
    throw std::runtime_error("ok entry without kernel times");
  for (const auto& u : j.value("engines", nlohmann::json::array()))
    m.engines.push_back({u.at("engine").get<std::string>(), u.at("busy_ns").get<double>(), u.at("utilisation").get<double>()});
  m.bytes_moved = j.value("bytes_moved", 0.0);
  m.roofline_ns = j.value("roofline_ns", 0.0);
  m.fraction_of_peak = j.value("fraction_of_peak", 0.0);
  m.bottleneck = j.value("bottleneck", std::string());
  m.profile = j.value("profile", std::string());
  m.latency = summarize(m.samples_ns);
  return m;
}

}  // namespace

Expected<Measurement, std::string> measurement_from_json(std::string_view line) {
  try {
    return from_json_value(nlohmann::json::parse(line));
  } catch (const std::exception& e) {
    return unexpected(std::string("not a measurement: ") + e.what());
  }
}

struct MeasurementCache::Impl {
  struct Entry {
    CacheKey key;
    Measurement m;
  };
  std::size_t capacity;
  std::list<Entry> lru;  // most recent first
  std::unordered_map<std::uint64_t, std::list<Entry>::iterator> index;
  mutable std::mutex mu;
  int fd = -1;
  std::filesystem::path file;
  std::size_t hits = 0, misses = 0, loaded = 0, skipped = 0;

  void put(const CacheKey& k, const Measurement& m) {
    const std::uint64_t d = k.digest();
    if (auto it = index.find(d); it != index.end()) {
      it->second->key = k;
      it->second->m = m;
      lru.splice(lru.begin(), lru, it->second);
      return;
    }
    lru.push_front({k, m});
    index[d] = lru.begin();
    while (lru.size() > capacity) {
      index.erase(lru.back().key.digest());
      lru.pop_back();
    }
  }
};

MeasurementCache::MeasurementCache(std::size_t capacity) : impl_(std::make_unique<Impl>()) {
  impl_->capacity = std::max<std::size_t>(1, capacity);
}

MeasurementCache::MeasurementCache(std::size_t capacity, const std::filesystem::path& file) : MeasurementCache(capacity) {
  impl_->file = file;
  std::string text;
  std::error_code ec;
  if (std::filesystem::exists(file, ec)) {
    // Every entry kevo writes starts so (keys in order): a file that does not is someone else's,
    // and appending to it would change a file the user made. Its first bytes are read first, so
    // a device (/dev/zero) is refused without reading on.
    static constexpr std::string_view kEntryStart = R"({"kernel":")";
    std::ifstream head(file, std::ios::binary);
    char buf[kEntryStart.size()] = {};
    head.read(buf, static_cast<std::streamsize>(sizeof buf));
    const std::string_view got(buf, static_cast<std::size_t>(head.gcount()));
    if (!got.empty() && got != kEntryStart.substr(0, got.size()))
      throw Error(fmt::format("measurement cache {}: not a kevo measurement cache (its first line is not a cache entry); "
                              "kevo adds only to its own caches: name another file",
                              file.string()));
    text = read_file(file);
  }
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto nl = text.find('\n', pos);
    const bool complete = nl != std::string::npos;
    if (!complete) nl = text.size();
    const std::string_view line(text.data() + pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) continue;
    try {
      const auto j = nlohmann::json::parse(line);
      CacheKey k;
      k.kernel_hash = std::stoull(j.at("kernel").get<std::string>(), nullptr, 16);
      k.target_hash = std::stoull(j.at("target").get<std::string>(), nullptr, 16);
      k.runner = j.at("runner").get<std::string>();
      k.schedule = j.at("schedule").get<std::string>();
      impl_->put(k, from_json_value(j.at("m")));
      ++impl_->loaded;
    } catch (const std::exception&) {
      ++impl_->skipped;  // a torn last line from a killed run, or a line someone garbled
    }
  }
  impl_->fd = ::open(file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (impl_->fd < 0) throw Error(fmt::format("cannot open measurement cache {}: {}", file.string(), std::strerror(errno)));
  // Start our entries on a fresh line if the previous writer was cut off mid-line.
  if (!text.empty() && text.back() != '\n') (void)!::write(impl_->fd, "\n", 1);
}

MeasurementCache::~MeasurementCache() {
  if (impl_ && impl_->fd >= 0) ::close(impl_->fd);
}

bool MeasurementCache::cacheable(Status s) noexcept {
  return s == Status::ok || s == Status::invalid || s == Status::incorrect;
}

std::optional<Measurement> MeasurementCache::find(const CacheKey& k) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->index.find(k.digest());
  if (it == impl_->index.end() || !(it->second->key == k)) {
    ++impl_->misses;
    return std::nullopt;
  }
  ++impl_->hits;
  impl_->lru.splice(impl_->lru.begin(), impl_->lru, it->second);
  return it->second->m;
}

void MeasurementCache::insert(const CacheKey& k, const Measurement& m) {
  if (!cacheable(m.status)) return;
  std::lock_guard lock(impl_->mu);
  impl_->put(k, m);
  if (impl_->fd < 0) return;
  std::string line = fmt::format(R"({{"kernel":"{}","target":"{}","runner":{},"schedule":{},"m":{}}})", hex64(k.kernel_hash),
                                 hex64(k.target_hash), nlohmann::json(k.runner).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                                 nlohmann::json(k.schedule).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                                 measurement_to_json(m));
  line += '\n';
  const ssize_t w = ::write(impl_->fd, line.data(), line.size());
  if (w != static_cast<ssize_t>(line.size()))
    throw Error(fmt::format("cannot append to measurement cache {}: {}", impl_->file.string(),
                            w < 0 ? std::strerror(errno) : "short write"));
}

std::size_t MeasurementCache::size() const {
  std::lock_guard lock(impl_->mu);
  return impl_->lru.size();
}
std::size_t MeasurementCache::hits() const {
  std::lock_guard lock(impl_->mu);
  return impl_->hits;
}
std::size_t MeasurementCache::misses() const {
  std::lock_guard lock(impl_->mu);
  return impl_->misses;
}
std::size_t MeasurementCache::loaded() const {
  std::lock_guard lock(impl_->mu);
  return impl_->loaded;
}
std::size_t MeasurementCache::skipped_lines() const {
  std::lock_guard lock(impl_->mu);
  return impl_->skipped;
}

// ---------------------------------------------------------------------------------------------

CachedRunner::CachedRunner(Runner inner, std::shared_ptr<MeasurementCache> cache)
    : inner_(std::move(inner)), traits_(inner_.traits()), cache_(std::move(cache)) {
  if (!cache_) cache_ = std::make_shared<MeasurementCache>();
}

std::vector<Measurement> CachedRunner::measure(std::span<const Candidate> candidates) {
  std::vector<Measurement> out(candidates.size());
  std::vector<CacheKey> keys;
  keys.reserve(candidates.size());
  std::vector<Candidate> todo;
  std::vector<std::size_t> todo_key;                 // index into keys of each todo entry
  std::vector<std::size_t> source(candidates.size());  // which todo entry answers candidate i
  std::unordered_map<std::uint64_t, std::size_t> pending;
  constexpr std::size_t kHit = static_cast<std::size_t>(-1);
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    keys.push_back(cache_key(candidates[i], traits_));
    if (auto m = cache_->find(keys[i])) {
      out[i] = std::move(*m);
      source[i] = kHit;
      continue;
    }
    const std::uint64_t d = keys[i].digest();
    if (auto it = pending.find(d); it != pending.end() && keys[todo_key[it->second]] == keys[i]) {
      source[i] = it->second;
      continue;
    }
    pending[d] = todo.size();
    source[i] = todo.size();
    todo_key.push_back(i);
    todo.push_back(candidates[i]);
  }
  if (!todo.empty()) {
    std::vector<Measurement> ms = inner_.measure(todo);
    if (ms.size() != todo.size())
      throw Error(fmt::format("runner {} returned {} measurements for {} candidates", traits_.identity, ms.size(), todo.size()));
    measured_ += todo.size();
    for (std::size_t t = 0; t < todo.size(); ++t) cache_->insert(keys[todo_key[t]], ms[t]);
    for (std::size_t i = 0; i < candidates.size(); ++i)
      if (source[i] != kHit) out[i] = ms[source[i]];
  }
  return out;
}

std::vector<std::size_t> remeasure_top_k(Runner& r, std::span<const Candidate> candidates, std::vector<Measurement>& ms,
                                         std::size_t k, int rounds) {
  if (ms.size() != candidates.size()) throw Error("remeasure_top_k: one measurement per candidate expected");
  auto rank = [&] {
    std::vector<std::size_t> idx(ms.size());
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
      const bool oa = ms[a].status == Status::ok, ob = ms[b].status == Status::ok;
      if (oa != ob) return oa;
      return oa && ms[a].latency.median < ms[b].latency.median;
    });
    return idx;
  };
  std::vector<std::size_t> order = rank();
  std::vector<std::size_t> top;
  for (std::size_t i : order)
    if (top.size() < k && ms[i].status == Status::ok) top.push_back(i);
  for (int round = 0; round < rounds && !top.empty(); ++round) {
    std::vector<Candidate> batch;
    for (std::size_t i : top) batch.push_back(candidates[i]);
    const std::vector<Measurement> again = r.measure(batch);
    std::vector<std::size_t> still;
    for (std::size_t t = 0; t < top.size() && t < again.size(); ++t) {
      Measurement& m = ms[top[t]];
      if (again[t].status != Status::ok) {
        // A leader that fails when re-timed (incorrect output, crash) must not be named winner,
        // and is not re-timed again (a hung device costs one timeout per leader, not per round).
        m.status = again[t].status;
        m.message = "on re-measurement: " + again[t].message;
        continue;
      }
      m.samples_ns.insert(m.samples_ns.end(), again[t].samples_ns.begin(), again[t].samples_ns.end());
      m.latency = summarize(m.samples_ns);
      still.push_back(top[t]);
    }
    top = std::move(still);
  }
  return rank();
}

}  // namespace kevo::runner
