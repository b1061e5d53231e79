// The records database: writing and querying, JSON lines out and in, gc, located errors for corrupt,
// foreign and newer files, two writers at once, a writer killed mid-write, warm starts from
// records of the same kernel and of other shapes, schedules carried to a new shape (what they mean
// kept, idle buffer slots trimmed, the same program), and the recorder of a search.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kevo/evo/engine.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/ir/workloads.hpp"
#include <nlohmann/json.hpp>

#include "kevo/records.hpp"
#include "kevo/runner/sim.hpp"
#include "kevo/search/kernel_problem.hpp"
#include "kevo/target/target.hpp"
#include "kevo/lower/lower.hpp"
#include "kevo/schedule/detail/plan.hpp"

using namespace kevo;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  static const fs::path d = [] {
    auto p = fs::temp_directory_path() / fmt::format("kevo_records_test_{}", ::getpid());
    fs::remove_all(p);
    fs::create_directories(p);
    return p;
  }();
  fs::remove(d / name);
  fs::remove(d / (name + "-wal"));
  fs::remove(d / (name + "-shm"));
  return d / name;
}

records::Database open_db(const fs::path& p) {
  auto db = records::Database::open(p);
  if (!db) FAIL(db.error());
  return std::move(*db);
}

ir::Kernel mm(int m, int n, int k) { return *ir::workload(fmt::format("matmul:M={},N={},K={},dtype=bf16", m, n, k)); }

records::Record rec(const ir::Kernel& k, const std::string& schedule, double ns, double t, const std::string& status = "ok") {
  auto r = records::make_record(k, *target::load_target("trn2"));
  r.runner = "sim:test";
  r.schedule = schedule;
  r.status = status;
  r.latency_ns = status == "ok" ? ns : 0;
  r.samples_ns = {ns, ns * 1.01};
  r.time = t;
  r.kevo_version = "test";
  if (status != "ok") r.reason = "sbuf_overflow: too big";
  return r;
}

}  // namespace

TEST_CASE("records are written, queried, exported, imported and collected", "[records]") {
  auto db = open_db(scratch("a.db"));
  const auto k1 = mm(256, 256, 256), k2 = mm(512, 256, 256);
  CHECK(records::structure_hash(k1) == records::structure_hash(k2));
  CHECK(ir::kernel_hash(k1) != ir::kernel_hash(k2));
  CHECK(records::shape_of(k2) == "M=512,K=256,N=256");
  CHECK(records::structure_hash(k1) != records::structure_hash(*ir::workload("matmul:M=256,N=256,K=256,dtype=fp32")));

  db.add(std::vector<records::Record>{rec(k1, "tile m=128", 900, 1), rec(k1, "tile m=64", 700, 2), rec(k1, "tile m=32", 0, 3, "invalid"),
                                      rec(k2, "tile m=128", 1500, 4)});
  CHECK(db.size() == 4);
  db.add(rec(k1, "tile m=64", 700, 2));  // the same record again: ignored
  CHECK(db.size() == 4);

  const auto b = db.best(ir::kernel_hash(k1), "trn2");
  REQUIRE(b);
  CHECK(b->schedule == "tile m=64");
  CHECK(b->latency_ns == 700);
  CHECK(b->samples_ns == std::vector<double>{700, 707});
  CHECK(b->kernel_text == ir::print_kernel(k1));
  CHECK_FALSE(db.best(ir::kernel_hash(k1), "trn1"));

  records::Query q;
  q.kernel_hash = ir::kernel_hash(k1);
  q.best_first = true;
  const auto all = db.find(q);
  REQUIRE(all.size() == 3);
  CHECK(all[0].latency_ns == 700);
  CHECK(all[1].latency_ns == 900);
  CHECK(all[2].status == "invalid");
  CHECK(all[2].reason == "sbuf_overflow: too big");

  const auto ks = db.kernels();
  REQUIRE(ks.size() == 2);
  CHECK(ks[0].records == 3);
  CHECK(ks[0].ok == 2);
  CHECK(ks[0].best_latency_ns == 700);
  CHECK(ks[0].best_schedule == "tile m=64");

  // JSON lines out, into a fresh database, and in again (nothing doubled).
  std::stringstream ss;
  CHECK(db.export_jsonl(ss) == 4);
  auto db2 = open_db(scratch("b.db"));
  std::stringstream in1(ss.str()), in2(ss.str());
  auto n = db2.import_jsonl(in1, "x.jsonl");
  REQUIRE(n);
  CHECK(*n == 4);
  n = db2.import_jsonl(in2, "x.jsonl");
  REQUIRE(n);
  CHECK(*n == 0);
  CHECK(db2.best(ir::kernel_hash(k1), "trn2")->samples_ns == std::vector<double>{700, 707});

  // A malformed line: located, nothing imported.
  std::istringstream bad(ss.str() + "{\"kernel_name\": 3}\n");
  auto db3 = open_db(scratch("c.db"));
  const auto e = db3.import_jsonl(bad, "y.jsonl");
  REQUIRE_FALSE(e);
  CHECK(e.error() == "y.jsonl:5: \"kernel_name\" must be a string");
  CHECK(db3.size() == 0);
  std::istringstream notjson("{oops\n");
  CHECK(db3.import_jsonl(notjson, "z.jsonl").error() == "z.jsonl:1: not valid JSON");
  // A record whose kernel is not the one it names, or whose figure is no kernel time, is refused.
  const std::string first = ss.str().substr(0, ss.str().find('\n'));
  const auto edited = [&](const std::string& key, const nlohmann::json& v) {
    auto j = nlohmann::json::parse(first);
    j[key] = v;
    return j.dump() + "\n";
  };
  const std::vector<std::pair<std::string, std::string>> refused = {
      {edited("kernel_text", "garbage"), "\"kernel_text\" does not parse"},
      {edited("kernel_text", ir::print_kernel(k2)), "is not the hash of its kernel_text"},
      {edited("latency_ns", 1e308), "is not a kernel time"},
      {edited("latency_ns", 1e-300), "is not a kernel time"},
      {edited("fraction_of_peak", -1), "\"fraction_of_peak\" must be in [0, 10]"},
      // the schedule must be one of its kernel's on its target (a record kevo check or a warm
      // start would otherwise meet as garbage)
      {edited("schedule", "tile m=77"), "\"schedule\" is not a schedule of its kernel on target 'trn2': schedule:1:"},
      {edited("schedule", "frobnicate"), "\"schedule\" is not a schedule of its kernel on target 'trn2'"},
  };
  for (const auto& [line, what] : refused) {
    INFO(line);
    std::istringstream one(line);
    const auto r = db3.import_jsonl(one, "w.jsonl");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error(), Catch::StartsWith("w.jsonl:1: ") && Catch::Contains(what));
  }
  CHECK(db3.size() == 0);

  // gc: failed records go, the best `keep_best` per kernel/target/runner stay.
  records::GcOptions g;
  g.keep_best = 1;
  CHECK(db.gc(g) == 2);
  CHECK(db.size() == 2);
  CHECK(db.best(ir::kernel_hash(k1), "trn2")->latency_ns == 700);
  CHECK(db.integrity_check() == "ok");
}

TEST_CASE("corrupt, foreign and newer files are clear errors, never reset", "[records]") {
  const auto junk = scratch("junk.db");
  {
    std::ofstream f(junk, std::ios::binary);
    for (int i = 0; i < 4096; ++i) f.put(static_cast<char>((i * 7919) & 0xff));
  }
  const auto size = fs::file_size(junk);
  auto e = records::Database::open(junk);
  REQUIRE_FALSE(e);
  CHECK_THAT(e.error(), Catch::Contains(junk.string()) && Catch::Contains("not an SQLite database"));
  CHECK(fs::file_size(junk) == size);  // untouched

  const auto foreign = scratch("foreign.db");
  {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(foreign.c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "CREATE TABLE photos(id INTEGER)", nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
  }
  e = records::Database::open(foreign);
  REQUIRE_FALSE(e);
  CHECK_THAT(e.error(), Catch::Contains("another program"));

  const auto newer = scratch("newer.db");
  { open_db(newer); }
  {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(newer.c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "PRAGMA user_version=99", nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
  }
  e = records::Database::open(newer);
  REQUIRE_FALSE(e);
  CHECK_THAT(e.error(), Catch::Contains("schema version 99 is newer"));

  e = records::Database::open(scratch("missing.db"), /*create=*/false);
  REQUIRE_FALSE(e);
  CHECK_THAT(e.error(), Catch::Contains("no such file"));
  e = records::Database::open(fs::temp_directory_path());
  REQUIRE_FALSE(e);
  CHECK_THAT(e.error(), Catch::Contains("is a directory"));
}

TEST_CASE("two processes writing one database at once lose nothing", "[records]") {
  const auto path = scratch("shared.db");
  { open_db(path); }
  const auto k = mm(256, 256, 256);
  constexpr int kPer = 150;
  pid_t kids[2];
  for (int w = 0; w < 2; ++w) {
    kids[w] = ::fork();
    REQUIRE(kids[w] >= 0);
    if (kids[w] == 0) {
      int rc = 0;
      try {
        auto db = records::Database::open(path);
        if (!db) ::_exit(3);
        for (int i = 0; i < kPer; ++i) db->add(rec(k, fmt::format("w{} s{}", w, i), 100 + i, w * 1000 + i));
      } catch (...) {
        rc = 4;
      }
      ::_exit(rc);
    }
  }
  for (pid_t p : kids) {
    int st = 0;
    REQUIRE(::waitpid(p, &st, 0) == p);
    CHECK(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 0);
  }
  auto db = open_db(path);
  CHECK(db.size() == 2 * kPer);
  CHECK(db.integrity_check() == "ok");
}

TEST_CASE("a writer killed with SIGKILL leaves every committed record and a consistent file", "[records]") {
  const auto path = scratch("killed.db");
  { open_db(path); }
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t kid = ::fork();
  REQUIRE(kid >= 0);
  if (kid == 0) {
    ::close(fds[0]);
    auto db = records::Database::open(path);
    if (!db) ::_exit(3);
    const auto k = mm(256, 256, 256);
    for (int batch = 0;; ++batch) {
      std::vector<records::Record> rs;
      for (int i = 0; i < 10; ++i) rs.push_back(rec(k, fmt::format("b{} s{}", batch, i), 100 + i, batch * 100 + i));
      db->add(rs);
      const int committed = (batch + 1) * 10;
      if (::write(fds[1], &committed, sizeof committed) != sizeof committed) ::_exit(5);
    }
  }
  ::close(fds[1]);
  int committed = 0, v = 0;
  while (committed < 200 && ::read(fds[0], &v, sizeof v) == sizeof v) committed = v;
  ::kill(kid, SIGKILL);
  int st = 0;
  ::waitpid(kid, &st, 0);
  ::close(fds[0]);
  CHECK(WIFSIGNALED(st));
  auto db = open_db(path);
  CHECK(db.integrity_check() == "ok");
  CHECK(db.size() >= static_cast<std::size_t>(committed));
  CHECK(db.size() % 10 == 0);  // whole transactions only
}

TEST_CASE("warm starts come from the same kernel first, then from the nearest shapes", "[records]") {
  auto db = open_db(scratch("warm.db"));
  const auto t = *target::load_target("trn2");
  const auto big = mm(2048, 2048, 2048), near = mm(2304, 2048, 2560), far = mm(256, 256, 256);
  const auto s_big = schedule::ScheduleSpace::derive(big, t);
  const auto s_near = schedule::ScheduleSpace::derive(near, t);
  const auto s_far = schedule::ScheduleSpace::derive(far, t);

  // Records of 2048^3 and 256^3 (distinct sampled schedules), none of the new shape.
  Rng rng(1);
  std::vector<records::Record> rs;
  for (int i = 0; i < 6; ++i) {
    Genome g = s_big.genes().random(rng);
    s_big.repair(g, rng);
    auto r = records::make_record(big, t);
    r.runner = "sim:test";
    r.schedule = s_big.print(g);
    r.latency_ns = 1000 + 10 * i;
    r.time = i;
    rs.push_back(r);
  }
  auto r_far = records::make_record(far, t);
  r_far.runner = "sim:test";
  r_far.schedule = s_far.print(s_far.default_genome());
  r_far.latency_ns = 50;
  rs.push_back(r_far);
  db.add(rs);

  // The same kernel: its records' schedules, fastest first.
  const auto same = records::warm_start(db, s_big, 4);
  REQUIRE(same.genomes.size() == 4);
  CHECK(same.same_kernel == 4);
  CHECK(s_big.print(same.genomes[0]) == rs[0].schedule);
  CHECK(s_big.print(same.genomes[1]) == rs[1].schedule);

  // An unseen shape: schedules transferred from the nearest shape (2048^3) before the far one.
  const auto w = records::warm_start(db, s_near, 16);
  CHECK(w.same_kernel == 0);
  REQUIRE(w.other_shapes >= 2);
  REQUIRE_FALSE(w.shapes.empty());
  CHECK(w.shapes.front() == "M=2048,K=2048,N=2048");
  for (const auto& g : w.genomes) CHECK(s_near.genes().contains(g));
  CHECK_THAT(w.summary(), Catch::Contains("transferred from M=2048,K=2048,N=2048"));
  // The first transferred genome keeps the 2048^3 winner's structure where the labels exist.
  const auto first_big = s_big.parse(rs[0].schedule);
  REQUIRE(first_big);
  CHECK(w.genomes.front() == [&] {
    Rng r2(0x57a27ULL);
    auto g = records::transfer_schedule(s_big, *first_big, s_near, r2);
    REQUIRE(g);
    return *g;
  }());

  // Another target: none of trn1's records exist, but trn2's schedules parse there.
  const auto s_t1 = schedule::ScheduleSpace::derive(big, *target::load_target("trn1"));
  const auto w1 = records::warm_start(db, s_t1, 3);
  CHECK(w1.other_targets == w1.genomes.size());
  CHECK(w1.genomes.size() > 0);
}

namespace {

// The genes of `a` and `b` (one space) that differ, by name.
std::vector<std::string> differing(const schedule::ScheduleSpace& s, const Genome& a, const Genome& b) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.genes().size(); ++i) {
    const auto x = s.genes().slots(a, i), y = s.genes().slots(b, i);
    if (!std::equal(x.begin(), x.end(), y.begin(), y.end())) out.push_back(s.genes().gene(i).name);
  }
  return out;
}

std::string gene_label(const schedule::ScheduleSpace& s, const Genome& g, const std::string& name) {
  const auto i = s.genes().find(name);
  REQUIRE(i);
  return s.genes().gene(*i).labels[static_cast<std::size_t>(s.genes().at(g, *i))];
}

}  // namespace

TEST_CASE("a schedule carried to a new shape keeps what it means and every gene valid there", "[records]") {
  const auto t = *target::load_target("trn2");
  const auto src = mm(2048, 2048, 2048), dst = mm(2304, 2048, 2560);
  const auto s_src = schedule::ScheduleSpace::derive(src, t);
  const auto s_dst = schedule::ScheduleSpace::derive(dst, t);
  auto parse = [](const schedule::ScheduleSpace& s, const std::string& text) {
    auto g = s.parse(text);
    REQUIRE(g);
    return *g;
  };
  Rng rng(7);

  SECTION("a schedule valid at both shapes arrives unchanged, issue-17 genes included") {
    for (const std::string text :
         {"tile m=128 n=512 k=128; block m=4 n=1 k=4; order k.b m.b n.b n m k; stationary A; "
          "transpose A=dma_transpose_block; load A@m.b x6 dma=tile q=4; load B@n.b x12 dma=row q=4; "
          "acc sbuf x6 dtype=out zero=start; store C@root x2 dma=tile q=2; evict vector",
          "tile m=128 n=512 k=128; block m=2 n=1 k=4; order k.b m.b n.b n m k; stationary A; "
          "transpose A=dma_transpose_block; load A@m.b x4 dma=tile q=2; load B@n.b x16 dma=row q=4; "
          "acc sbuf x2 dtype=out zero=memset; store C@root x1 dma=tile q=2; evict scalar"}) {
      auto g = records::transfer_schedule(s_src, parse(s_src, text), s_dst, rng);
      REQUIRE(g);
      CHECK(s_dst.print(*g) == s_dst.print(parse(s_dst, text)));
      CHECK(schedule::make_plan(s_dst, *g));
    }
  }

  SECTION("an SBUF overflow at the new shape costs only buffer slots that are never filled") {
    // B is loaded once (at the root) into 3 slots: free at 2048^3, 253.5 KiB at K = 2560.
    const std::string text =
        "tile m=128 n=256 k=128; block m=1 n=64 k=2; order m.b k.b n.b n k m; stationary A; "
        "transpose A=dma_transpose_block; load A@n.b x3 dma=row q=1; load B@root x3 dma=region q=4; "
        "acc psum x1 zero=start; store C@auto x3 dma=row q=1; evict scalar";
    const Genome literal = parse(s_dst, text);
    const auto why = schedule::make_plan(s_dst, literal);
    REQUIRE_FALSE(why);
    CHECK(why.error().code == "sbuf_overflow");
    auto g = records::transfer_schedule(s_src, parse(s_src, text), s_dst, rng);
    REQUIRE(g);
    CHECK(schedule::make_plan(s_dst, *g));
    CHECK(differing(s_dst, literal, *g) == std::vector<std::string>{"C.bufs.B"});
    CHECK(gene_label(s_dst, *g, "C.bufs.B") == "1");
    CHECK(gene_label(s_dst, *g, "C.bufs.A") == "3");  // A rotates through 3 slots, filled many times

    // Trimming idle slots changes nothing but memory: at 2048^3, where both fit, the lowered
    // programs are the same instructions with the same dependencies, and the simulator agrees.
    Genome a = parse(s_src, text), b = a;
    CHECK(records::trim_idle_buffers(s_src, b) == 1);
    CHECK(differing(s_src, a, b) == std::vector<std::string>{"C.bufs.B"});
    const auto pa = lower::lower(s_src, a), pb = lower::lower(s_src, b);
    REQUIRE(pa);
    REQUIRE(pb);
    REQUIRE(pa->instrs.size() == pb->instrs.size());
    CHECK(pa->deps == pb->deps);
    CHECK(pa->dep_begin == pb->dep_begin);
    for (std::size_t i = 0; i < pa->instrs.size(); ++i) {
      const auto &x = pa->instrs[i], &y = pb->instrs[i];
      CHECK((x.op == y.op && x.dst.offset == y.dst.offset && x.src[0].offset == y.src[0].offset &&
             x.src[1].offset == y.src[1].offset && x.at.queue == y.at.queue));
    }
    CHECK(pb->stats.sbuf_bytes_per_partition < pa->stats.sbuf_bytes_per_partition);
    const search::KernelProblem p(src, t, runner::SimRunner{});
    const std::vector<Genome> both{a, b};
    const auto e = p.evaluate(both);
    REQUIRE(e[0].ok());
    REQUIRE(e[1].ok());
    CHECK(e[0].fitness[0] == e[1].fitness[0]);
  }

  SECTION("a block that spanned its dimension spans it at the new shape") {
    // block k=16 is all of K = 2048 (16 tiles of 128), so C may be stored inside the k.b loop;
    // at K = 2560 (20 tiles) block k=16 would split K in two blocks and make that store illegal.
    const std::string text =
        "tile m=128 n=64 k=128; block m=64 n=2 k=16; order n.b k.b m.b m n k; stationary A; "
        "transpose A=dma_transpose_block; load A@root x1 dma=tile q=2; load B@k.b x2 dma=region q=2; "
        "acc psum x2 zero=start; store C@m x3 dma=region q=1; evict scalar";
    const auto why = schedule::make_plan(s_dst, parse(s_dst, text));
    REQUIRE_FALSE(why);
    CHECK(why.error().code == "illegal_order");
    auto g = records::transfer_schedule(s_src, parse(s_src, text), s_dst, rng);
    REQUIRE(g);
    CHECK(schedule::make_plan(s_dst, *g));
    CHECK(differing(s_dst, parse(s_dst, text), *g) == std::vector<std::string>{"C.block.k"});
    CHECK(gene_label(s_dst, *g, "C.block.k") == "32");
    // A block of part of its dimension keeps its tile count (its footprint): block n=2 stays 2.
    CHECK(gene_label(s_dst, *g, "C.block.n") == "2");
  }

  SECTION("warm starts take the carried schedules") {
    auto db = open_db(scratch("carry.db"));
    const std::string text =
        "tile m=128 n=256 k=128; block m=1 n=64 k=2; order m.b k.b n.b n k m; stationary A; "
        "transpose A=dma_transpose_block; load A@n.b x3 dma=row q=1; load B@root x3 dma=region q=4; "
        "acc psum x1 zero=start; store C@auto x3 dma=row q=1; evict scalar";
    db.add(rec(src, text, 246290, 1));
    const auto w = records::warm_start(db, s_dst, 4);
    REQUIRE(w.genomes.size() == 1);
    CHECK(w.other_shapes == 1);
    CHECK(differing(s_dst, parse(s_dst, text), w.genomes.front()) == std::vector<std::string>{"C.bufs.B"});
  }
}

TEST_CASE("the recorder writes a search's evaluations and its verified winner", "[records]") {
  auto db = open_db(scratch("recorder.db"));
  const auto k = mm(256, 256, 256);
  search::KernelProblem p(k, *target::load_target("trn2"), runner::SimRunner{});
  evo::Config cfg;
  cfg.seed = 3;
  cfg.population = 8;
  cfg.budget.max_evaluations = 40;
  evo::Engine e(evo::Problem(p), cfg);
  std::size_t seen = 0;
  {
    records::Recorder rec(db, p, "test", 16);
    evo::Observer o;
    o.on_evaluation = [&](const evo::Individual& ind) {
      rec.record(ind);
      ++seen;
    };
    e.add_observer(std::move(o));
    const auto res = e.run();
    REQUIRE(res.best);
    rec.record_verified(res.best->genome, res.best->eval.fitness[0], res.best->eval.metric("fraction_of_peak"));
  }
  CHECK(seen == 40);
  CHECK(db.size() == 41);
  const auto b = db.best(ir::kernel_hash(k), "trn2");
  REQUIRE(b);
  CHECK(b->verified);
  CHECK(b->runner == p.runner_traits().identity);
  CHECK(b->samples_ns.size() >= 1);
  CHECK(b->fraction_of_peak > 0);
  std::size_t invalid = 0, ok = 0;
  for (const auto& r : db.find(records::Query{})) {
    if (r.status == "ok") {
      ++ok;
      CHECK(r.latency_ns > 0);
    } else {
      ++invalid;
      CHECK(!r.reason.empty());
    }
  }
  CHECK(invalid + ok == 41);
}

TEST_CASE("the best record is never a rejected schedule, prefers this target definition, and comes from the runner asked", "[records]") {
  auto db = open_db(scratch("best.db"));
  const auto k = mm(256, 256, 256);
  const auto h = ir::kernel_hash(k);
  // a fast schedule the reference check rejected: its ok evaluation stays, its rejection beside it
  auto rejected = rec(k, "tile m=32", 500, 1);
  auto verdict = rec(k, "tile m=32", 0, 5, "incorrect");
  verdict.reason = "rejected by the reference check";
  db.add(std::vector<records::Record>{rejected, rec(k, "tile m=64", 700, 2), verdict});
  REQUIRE(db.best(h, "trn2"));
  CHECK(db.best(h, "trn2")->schedule == "tile m=64");  // was tile m=32 (500 ns), which failed verification
  // a target file that kept the name "trn2" with other figures records faster times under it
  auto edited = rec(k, "tile m=128", 300, 3);
  edited.target_hash ^= 0x1234;
  db.add(edited);
  const auto t2 = target::load_target("trn2");
  CHECK(db.best(h, "trn2")->schedule == "tile m=128");                         // by name alone: the edited one
  CHECK(db.best(h, "trn2", "", t2->hash())->schedule == "tile m=64");          // this definition's first
  CHECK(db.best(h, "trn2", "", edited.target_hash)->schedule == "tile m=128");
  // another runner's records are not this runner's baseline
  auto hw = rec(k, "tile m=16", 100, 4);
  hw.runner = "cmd:device";
  db.add(hw);
  CHECK(db.best(h, "trn2", "sim:test", t2->hash())->schedule == "tile m=64");
  CHECK(db.best(h, "trn2", "cmd:device")->schedule == "tile m=16");
  const auto by = db.kernels("trn2", true);
  REQUIRE(by.size() == 2);
  CHECK(by[0].runner == "cmd:device");
  CHECK(by[1].runner == "sim:test");
  CHECK(db.kernels("trn2").size() == 1);
}

TEST_CASE("a warm start takes distinct schedules, never a rejected one", "[records]") {
  auto db = open_db(scratch("warm_distinct.db"));
  const auto t = *target::load_target("trn2");
  const auto k = mm(512, 512, 512);
  const auto s = schedule::ScheduleSpace::derive(k, t);
  Rng rng(3);
  std::vector<std::string> texts;
  while (texts.size() < 6) {
    Genome g = s.genes().random(rng);
    s.repair(g, rng);
    const auto text = s.print(g);
    if (std::find(texts.begin(), texts.end(), text) == texts.end()) texts.push_back(text);
  }
  std::vector<records::Record> rs;
  // 40 evaluations of the fastest schedule (a search that kept finding it), then five others
  for (int i = 0; i < 40; ++i) {
    auto r = records::make_record(k, t);
    r.runner = "sim:test";
    r.schedule = texts[0];
    r.latency_ns = 1000 + i;
    r.time = i;
    rs.push_back(r);
  }
  for (int i = 1; i < 6; ++i) {
    auto r = records::make_record(k, t);
    r.runner = "sim:test";
    r.schedule = texts[static_cast<std::size_t>(i)];
    r.latency_ns = 2000 + i;
    r.time = 100 + i;
    rs.push_back(r);
  }
  auto bad = records::make_record(k, t);
  bad.runner = "sim:test";
  bad.schedule = texts[1];
  bad.status = "incorrect";
  bad.time = 200;
  rs.push_back(bad);
  db.add(rs);
  const auto w = records::warm_start(db, s, 4);
  REQUIRE(w.genomes.size() == 4);  // was 1: the 16 fastest records were one schedule
  CHECK(s.print(w.genomes[0]) == texts[0]);
  for (const auto& g : w.genomes) CHECK(s.print(g) != texts[1]);
  CHECK(s.print(w.genomes[1]) == texts[2]);
}

TEST_CASE("a database path is a file, never SQLite's in-memory name; a damaged ok record is no best", "[records]") {
  // ":memory:" opened a database in memory: a search reported records no file kept
  const auto dir = scratch("memdir.db").parent_path() / "memdir";
  fs::create_directories(dir);
  const auto here = fs::current_path();
  fs::current_path(dir);
  {
    auto db = records::Database::open(":memory:");
    REQUIRE(db);
    db->add(rec(mm(128, 128, 128), "tile m=128", 900, 1));
  }
  CHECK(fs::exists(dir / ":memory:"));
  fs::current_path(here);
  auto db = open_db(scratch("damaged.db"));
  const auto k = mm(128, 128, 128);
  auto bad = rec(k, "tile m=32", 0, 1);
  bad.latency_ns = -5;  // an ok record no run writes (edited outside kevo)
  db.add(std::vector<records::Record>{bad, rec(k, "tile m=64", 700, 2)});
  REQUIRE(db.best(ir::kernel_hash(k), "trn2"));
  CHECK(db.best(ir::kernel_hash(k), "trn2")->schedule == "tile m=64");
}
