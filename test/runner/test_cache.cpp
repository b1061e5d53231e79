#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "kevo/core/io.hpp"
#include "kevo/runner/cache.hpp"

using namespace kevo;
using runner::Candidate;
using runner::Measurement;

namespace {

// Latency = length of the schedule text (+ a per-call offset when noisy); counts what it measures.
struct CountingRunner {
  std::shared_ptr<std::size_t> calls = std::make_shared<std::size_t>(0);
  std::string id = "counting:v1";
  Status status = Status::ok;
  std::vector<Measurement> measure(std::span<const Candidate> cs) {
    std::vector<Measurement> out;
    for (const auto& c : cs) {
      ++*calls;
      Measurement m;
      m.status = status;
      m.samples_ns = {static_cast<double>(c.schedule_text.size()) * 1000.0 + 0.1};
      m.latency = runner::summarize(m.samples_ns);
      m.profile = "p\n\"q\"";
      out.push_back(m);
    }
    return out;
  }
  [[nodiscard]] runner::RunnerTraits traits() const { return {id, false, runner::ThreadSafety::none, 1.0, false}; }
};

Candidate cand(const std::string& sched, const std::string& kernel = "kernel a") {
  Candidate c;
  c.kernel_text = kernel;
  c.schedule_text = sched;
  return c;
}

std::filesystem::path temp_file(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("kevo_cache_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove(p);
  return p;
}

}  // namespace

TEST_CASE("cached runner measures an identical candidate only once", "[cache]") {
  CountingRunner inner;
  auto cache = std::make_shared<runner::MeasurementCache>();
  runner::CachedRunner r(inner, cache);
  std::vector<Candidate> batch{cand("a"), cand("bb"), cand("a")};  // duplicate inside the batch
  auto ms = r.measure(batch);
  CHECK(*inner.calls == 2);
  CHECK(ms[0].latency.median == ms[2].latency.median);
  CHECK(ms[1].latency.median == Approx(2000.1));
  ms = r.measure(batch);
  CHECK(*inner.calls == 2);
  CHECK(cache->hits() == 3);
  CHECK(ms[1].latency.median == Approx(2000.1));
}

TEST_CASE("cache keys separate kernels, targets, runners and schedules", "[cache]") {
  runner::RunnerTraits t{"r1", true, runner::ThreadSafety::constant, 0, false};
  const auto k = runner::cache_key(cand("s"), t);
  CHECK(runner::cache_key(cand("s"), t) == k);
  CHECK(!(runner::cache_key(cand("s2"), t) == k));
  CHECK(!(runner::cache_key(cand("s", "kernel b"), t) == k));
  auto t2 = t;
  t2.identity = "r2";
  CHECK(!(runner::cache_key(cand("s"), t2) == k));
  CHECK(runner::cache_key(cand("s2"), t).digest() != k.digest());
}

TEST_CASE("transient failures are not cached so they are tried again", "[cache]") {
  CountingRunner inner;
  inner.status = Status::timeout;
  runner::CachedRunner r(inner, std::make_shared<runner::MeasurementCache>());
  std::vector<Candidate> batch{cand("a")};
  r.measure(batch);
  r.measure(batch);
  CHECK(*inner.calls == 2);
}

TEST_CASE("the in-memory cache is bounded and drops the least recently used", "[cache]") {
  runner::MeasurementCache c(2);
  runner::RunnerTraits t{"r", true, runner::ThreadSafety::constant, 0, false};
  Measurement m;
  m.samples_ns = {1};
  c.insert(runner::cache_key(cand("a"), t), m);
  c.insert(runner::cache_key(cand("b"), t), m);
  CHECK(c.find(runner::cache_key(cand("a"), t)));  // a is now the most recent
  c.insert(runner::cache_key(cand("c"), t), m);
  CHECK(c.size() == 2);
  CHECK(c.find(runner::cache_key(cand("a"), t)));
  CHECK(!c.find(runner::cache_key(cand("b"), t)));
}

TEST_CASE("the on-disk cache is shared across runs and round-trips measurements exactly", "[cache]") {
  const auto file = temp_file("shared.jsonl");
  CountingRunner inner;
  {
    runner::CachedRunner r(inner, std::make_shared<runner::MeasurementCache>(100, file));
    std::vector<Candidate> batch{cand("a"), cand("bbb")};
    r.measure(batch);
  }
  auto cache = std::make_shared<runner::MeasurementCache>(100, file);
  CHECK(cache->loaded() == 2);
  CHECK(cache->skipped_lines() == 0);
  runner::CachedRunner r(inner, cache);
  std::vector<Candidate> batch{cand("bbb")};
  const auto ms = r.measure(batch);
  CHECK(*inner.calls == 2);
  CHECK(ms[0].samples_ns[0] == 3000.1);  // bit-exact through JSON
  CHECK(ms[0].profile == "p\n\"q\"");
  std::filesystem::remove(file);
}

TEST_CASE("a torn last line in the cache file is skipped and later entries still load", "[cache]") {
  const auto file = temp_file("torn.jsonl");
  runner::RunnerTraits t{"r", true, runner::ThreadSafety::constant, 0, false};
  Measurement m;
  m.samples_ns = {5};
  {
    runner::MeasurementCache c(100, file);
    c.insert(runner::cache_key(cand("a"), t), m);
  }
  {
    std::ofstream f(file, std::ios::app);
    f << R"({"kernel":"00ab","target":"0000","runner":"r","sche)";  // a run killed mid-write
  }
  {
    runner::MeasurementCache c(100, file);
    CHECK(c.loaded() == 1);
    CHECK(c.skipped_lines() == 1);
    c.insert(runner::cache_key(cand("b"), t), m);
  }
  runner::MeasurementCache c(100, file);
  CHECK(c.loaded() == 2);
  CHECK(c.skipped_lines() == 1);
  CHECK(c.find(runner::cache_key(cand("b"), t)));
  std::filesystem::remove(file);
}

TEST_CASE("a file that is not a kevo cache is refused untouched; an entry with no kernel times is measured again", "[cache]") {
  const auto file = temp_file("notes.txt");
  kevo::write_file_atomic(file, "precious user data\n");  // was: cache entries appended to it
  CHECK_THROWS_WITH(runner::MeasurementCache(100, file), Catch::Contains("not a kevo measurement cache"));
  CHECK(kevo::read_file(file) == "precious user data\n");
  CHECK_THROWS_WITH(runner::MeasurementCache(100, "/dev/zero"), Catch::Contains("not a kevo measurement cache"));
  runner::RunnerTraits t{"r", true, runner::ThreadSafety::constant, 0, false};
  Measurement m;
  m.samples_ns = {5};
  const auto cache_file = temp_file("poisoned.jsonl");
  {
    runner::MeasurementCache c(100, cache_file);
    c.insert(runner::cache_key(cand("a"), t), m);
  }
  std::string text = kevo::read_file(cache_file);
  text.replace(text.find("[5.0]") != std::string::npos ? text.find("[5.0]") : text.find("[5]"),
               text.find("[5.0]") != std::string::npos ? 5 : 3, "[-5]");
  kevo::write_file_atomic(cache_file, text);
  runner::MeasurementCache c(100, cache_file);
  CHECK(c.loaded() == 0);
  CHECK(c.skipped_lines() == 1);
  CHECK_FALSE(c.find(runner::cache_key(cand("a"), t)));
  std::filesystem::remove(file);
  std::filesystem::remove(cache_file);
}

TEST_CASE("re-measuring the top k merges samples and can change the winner", "[cache]") {
  // A noisy runner: the first timing of "lucky" was flattering; re-timing shows it is slower.
  struct Noisy {
    std::vector<Measurement> measure(std::span<const Candidate> cs) {
      std::vector<Measurement> out;
      for (const auto& c : cs) {
        Measurement m;
        m.samples_ns = {c.schedule_text == "lucky" ? 200.0 : 150.0, c.schedule_text == "lucky" ? 210.0 : 150.0};
        m.latency = runner::summarize(m.samples_ns);
        out.push_back(m);
      }
      return out;
    }
    [[nodiscard]] runner::RunnerTraits traits() const { return {"noisy", false, runner::ThreadSafety::none, 1, false}; }
  };
  runner::Runner r{Noisy{}};
  std::vector<Candidate> cs{cand("steady"), cand("lucky"), cand("slow")};
  std::vector<Measurement> ms(3);
  ms[0].samples_ns = {150};
  ms[1].samples_ns = {100};
  ms[2].samples_ns = {900};
  for (auto& m : ms) m.latency = runner::summarize(m.samples_ns);
  const auto order = runner::remeasure_top_k(r, cs, ms, 2, 1);
  CHECK(order == std::vector<std::size_t>{0, 1, 2});
  CHECK(ms[1].samples_ns.size() == 3);
  CHECK(ms[2].samples_ns.size() == 1);  // not in the top 2: untouched
}
