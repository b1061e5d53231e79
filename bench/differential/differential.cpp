// The long mode of the lowering's differential test: random kernels x random genomes for as many
// cases or hours as asked, on every core, any seed. Each case i is a pure function of (seed, i),
// so a reported failure reruns alone; each disagreement is shrunk and written as a regression
// file (test/verify/regressions/ keeps them; docs/VERIFY.md).
//
//   differential [--seed S] [--first I] [--cases N] [--hours H] [--threads T] [--out DIR] [--json FILE]
//
// Prints a progress line every 10 s and a closing "N passed, N failed" line (pairs); exits 1 when
// any pair disagreed, 2 on bad arguments.
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kevo/verify/interpreter.hpp"
#include "kevo/core/hash.hpp"
#include "kevo/verify/differential.hpp"

namespace {

struct Args {
  std::uint64_t seed = 1, first = 0, cases = 1000;
  double hours = 0;
  int threads = 0;
  std::string out = "differential-failures", json;
};

[[noreturn]] void usage(const std::string& why) {
  fmt::print(stderr, "differential: error: {}\nusage: differential [--seed S] [--first I] [--cases N] [--hours H] "
                     "[--threads T] [--out DIR] [--json FILE]\n", why);
  std::exit(2);
}

std::uint64_t number(const std::string& flag, const char* v) {
  char* end = nullptr;
  const auto x = std::strtoull(v, &end, 10);
  if (!*v || *end) usage(fmt::format("{} wants a non-negative integer, got '{}'", flag, v));
  return x;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (i + 1 >= argc) usage(fmt::format("{} needs a value", f));
    const char* v = argv[++i];
    if (f == "--seed") a.seed = number(f, v);
    else if (f == "--first") a.first = number(f, v);
    else if (f == "--cases") a.cases = number(f, v);
    else if (f == "--threads") a.threads = static_cast<int>(number(f, v));
    else if (f == "--out") a.out = v;
    else if (f == "--json") a.json = v;
    else if (f == "--hours") {
      char* end = nullptr;
      a.hours = std::strtod(v, &end);
      if (!*v || *end || a.hours < 0) usage(fmt::format("--hours wants a non-negative number, got '{}'", v));
    } else usage(fmt::format("unknown flag '{}'", f));
  }
  if (a.threads <= 0) a.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  kevo::verify::configure_process_blas();  // an application: one-thread OpenBLAS for the interpreter
  const Args a = parse(argc, argv);
  // With --hours the run goes on in chunks until the time is up (cases is then a chunk count bound).
  const std::uint64_t limit = a.hours > 0 ? ~std::uint64_t{0} / 2 : a.cases;
  constexpr std::uint64_t kChunk = 32;
  std::atomic<std::uint64_t> next{0};
  std::mutex mu;
  kevo::verify::CampaignStats total;
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  std::atomic<bool> stop{false};
  std::uint64_t written = 0;

  const auto worker = [&] {
    while (!stop.load()) {
      const std::uint64_t c0 = next.fetch_add(kChunk);
      if (c0 >= limit) break;
      kevo::verify::CampaignOptions o;
      o.seed = a.seed;
      o.first = a.first + c0;
      o.count = std::min(kChunk, limit - c0);
      const auto st = kevo::verify::run_campaign(o);
      std::lock_guard lk(mu);
      for (const auto& f : st.failures) {
        std::filesystem::create_directories(a.out);
        const auto text = kevo::verify::regression_text(
            f.shrunk, fmt::format("found by: differential --seed {} --first {} --cases 1\nfailure: {} (the shrunk case fails the same "
                                  "way)\n{}",
                                  a.seed, a.first + f.index - a.first, f.failure, f.reason));
        const auto path = std::filesystem::path(a.out) / fmt::format("case-{}-{}.case", a.seed, f.index);
        std::ofstream(path) << text;
        ++written;
        fmt::print(stderr, "differential: DISAGREE case {} (seed {}): [{}] {}\n  shrunk -> {}\n", f.index, a.seed, f.failure,
                   f.reason, path.string());
      }
      total.merge(st);
      if (a.hours > 0 && elapsed() > a.hours * 3600) stop.store(true);
    }
  };
  std::vector<std::thread> pool;
  for (int i = 0; i < a.threads; ++i) pool.emplace_back(worker);
  // A progress line every 10 s until the workers are done (`finished` is set after they join).
  std::atomic<bool> finished{false};
  std::thread progress([&] {
    for (int tick = 1; !finished.load(); ++tick) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (tick % 100 != 0) continue;
      std::lock_guard lk(mu);
      fmt::print(stderr, "differential: {:.0f} s: {}\n", elapsed(), total.summary());
    }
  });
  for (auto& t : pool) t.join();
  finished.store(true);
  progress.join();

  // Every chunk claimed was finished, so the cases run are exactly [first, first + cases).
  const double secs = elapsed();
  std::string codes;
  for (const auto& [c, n] : total.reject_codes) codes += fmt::format("{}{}={}", codes.empty() ? "" : " ", c, n);
  fmt::print("differential: seed {}, cases [{}, {}) in {:.1f} s on {} threads ({:.0f} pairs/s)\n", a.seed, a.first,
             a.first + total.cases, secs, a.threads, static_cast<double>(total.pairs) / std::max(secs, 1e-9));
  fmt::print("{}\nrejected by code: {}\n", total.summary(), codes);
  for (const auto& [w, n] : total.underivable_why) fmt::print("underivable x{}: {}\n", n, w);
  if (!a.json.empty()) {
    std::string rc;
    for (const auto& [c, n] : total.reject_codes) rc += fmt::format("{}\"{}\": {}", rc.empty() ? "" : ", ", c, n);
    std::string j = fmt::format(
        "{{\"seed\": {}, \"first\": {}, \"cases\": {}, \"pairs\": {}, \"agree\": {}, \"rejected\": {}, \"disagree\": {}, "
        "\"underivable\": {}, \"instructions\": {}, \"seconds\": {:.1f}, \"threads\": {}, \"reject_codes\": {{{}}}}}\n",
        a.seed, a.first, total.cases, total.pairs, total.agree, total.rejected, total.disagree, total.underivable,
        total.instructions, secs, a.threads, rc);
    std::ofstream(a.json) << j;
  }
  fmt::print("{} passed, {} failed\n", total.agree + total.rejected, total.disagree);
  return total.disagree ? 1 : 0;
}
