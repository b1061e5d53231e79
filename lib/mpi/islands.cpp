// Islands over ranks: a strategy wrapper that exchanges migrants with the ring neighbours at fixed
// generations, the end-of-run handshake, and run_islands() for embedders.
#include "kevo/mpi/islands.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <list>

#include "comm.hpp"
#include "kevo/core/hash.hpp"
#include "kevo/core/rng.hpp"
#include "kevo/evo/strategies.hpp"

namespace kevo::mpi {

namespace {

constexpr int kMigrants = 21, kFin = 22, kSummary = 23;

struct Link {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1, succ = 0, pred = 0;
  IslandOptions opt;
  std::size_t migrants = 1;
  bool pred_done = false, finished = false;
  std::uint64_t last_generation = 0;
  struct Out {
    std::string buf;
    MPI_Request req = MPI_REQUEST_NULL;
  };
  std::list<Out> pending;  // sends in flight (their buffers must stay put)
  std::uint64_t messages = 0, bytes = 0;
  evo::Problem problem;
  std::uint64_t seed = 0;

  Link(Session& s, evo::Problem p, IslandOptions o) : opt(o), problem(std::move(p)) {
    MPI_Comm_dup(s.impl().world, &comm);
    rank = s.rank();
    size = s.size();
    succ = (rank + 1) % size;
    pred = (rank + size - 1) % size;
  }
  ~Link() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm);
  }

  void send(std::string buf, int tag) {
    auto& o = pending.emplace_back();
    o.buf = std::move(buf);
    MPI_Isend(o.buf.data(), static_cast<int>(o.buf.size()), MPI_BYTE, succ, tag, comm, &o.req);
    ++messages;
    bytes += o.buf.size();
    for (auto it = pending.begin(); it != pending.end();) {
      int flag = 0;
      MPI_Test(&it->req, &flag, MPI_STATUS_IGNORE);
      it = flag ? pending.erase(it) : std::next(it);
    }
  }

  // Sends `out` to the next rank and returns the previous rank's migrants of `generation`.
  std::vector<evo::Individual> exchange(std::uint64_t generation, const std::vector<const evo::Individual*>& out) {
    detail::Writer w;
    w.u64(generation).u64(out.size());
    for (const auto* i : out) w.individual(*i);
    send(std::move(w.out), kMigrants);
    if (pred_done) return {};
    auto st = detail::probe_until(comm, pred, MPI_ANY_TAG, detail::deadline_in(opt.timeout_s));
    if (!st)
      throw RankError(fmt::format("mpi islands: rank {} got no migrants from rank {} for generation {} within {} s (rank {} "
                                  "died, hung, or is that far behind: raise the timeout); the journal of rank {} is "
                                  "complete up to this generation: resume the job",
                                  rank, pred, generation, opt.timeout_s, pred, rank));
    const auto buf = detail::recv_probed(comm, *st);
    if (st->MPI_TAG == kFin) {
      pred_done = true;
      return {};
    }
    detail::Reader r(buf, fmt::format("migrants from rank {}", pred));
    const auto g = r.u64();
    if (g != generation)
      throw RankError(fmt::format("mpi islands: rank {} is at generation {} but rank {} sent migrants of generation {}: "
                                  "the ranks run out of step (different population, interval or budget?)",
                                  rank, generation, pred, g));
    const auto n = r.u64();
    std::vector<evo::Individual> got;
    for (std::uint64_t i = 0; i < n; ++i) got.push_back(r.individual());
    return got;
  }

  void finish() {
    if (finished) return;
    finished = true;
    if (size < 2) return;
    send(std::string(), kFin);
    while (!pred_done) {
      auto st = detail::probe_until(comm, pred, MPI_ANY_TAG, detail::deadline_in(opt.timeout_s));
      if (!st)
        throw RankError(fmt::format("mpi islands: rank {} finished but rank {} sent nothing within {} s (died or hung)", rank,
                                    pred, opt.timeout_s));
      (void)detail::recv_probed(comm, *st);
      if (st->MPI_TAG == kFin) pred_done = true;  // migrants sent after this rank stopped are dropped
    }
    const auto deadline = detail::deadline_in(opt.timeout_s);
    for (auto& o : pending)
      if (!detail::wait_until(o.req, deadline))
        throw RankError(fmt::format("mpi islands: rank {} did not take rank {}'s last messages within {} s", succ, rank,
                                    opt.timeout_s));
    pending.clear();
  }
};

// The context the wrapper's absorb() hands on (the engine's own is not passed to absorb).
class AbsorbContext final : public evo::StrategyContext {
 public:
  AbsorbContext(const Link& l, std::uint64_t generation) : l_(l), g_(generation) {}
  const evo::Problem& problem() const override { return l_.problem; }
  std::uint64_t seed() const override { return l_.seed; }
  std::uint64_t generation() const override { return g_; }
  std::uint64_t evaluations() const override { return 0; }
  const evo::Individual* best() const override { return nullptr; }
  const evo::Archive* archive() const override { return nullptr; }

 private:
  const Link& l_;
  std::uint64_t g_;
};

struct RankIslands {
  evo::Strategy inner;
  std::shared_ptr<Link> link;

  [[nodiscard]] std::string name() const { return "mpi-islands:" + inner.name(); }
  void ask(std::size_t n, evo::AskContext& ctx) { inner.ask(n, ctx); }
  void tell(std::span<evo::Evaluated> results, const evo::StrategyContext& ctx) {
    inner.tell(results, ctx);
    const std::uint64_t g = ctx.generation();
    const auto interval = static_cast<std::uint64_t>(std::max(0, link->opt.interval));
    if (link->size < 2 || interval == 0 || g == 0 || g % interval != 0 || g == link->last_generation) return;
    link->last_generation = g;
    std::vector<const evo::Individual*> pop;
    inner.population(pop);
    if (pop.empty() && ctx.best()) pop.push_back(ctx.best());
    std::vector<const evo::Individual*> valid;
    for (const auto* i : pop)
      if (i->eval.ok()) valid.push_back(i);
    std::stable_sort(valid.begin(), valid.end(), [](const evo::Individual* a, const evo::Individual* b) { return evo::better(*a, *b); });
    std::vector<const evo::Individual*> out;
    for (const auto* i : valid) {
      if (out.size() >= link->migrants) break;
      if (std::none_of(out.begin(), out.end(), [&](const evo::Individual* o) { return o->genome == i->genome; })) out.push_back(i);
    }
    auto got = link->exchange(g, out);
    std::vector<evo::Evaluated> in;
    for (auto& m : got)
      if (std::none_of(pop.begin(), pop.end(), [&](const evo::Individual* p) { return p->genome == m.genome; }))
        in.push_back(evo::Evaluated{std::move(m), 0});
    if (!in.empty()) inner.absorb(in, ctx);
  }
  void absorb(std::span<evo::Evaluated> results) {
    AbsorbContext c(*link, link->last_generation);
    inner.absorb(results, c);
  }
  void population(std::vector<const evo::Individual*>& out) const { inner.population(out); }
  [[nodiscard]] bool asynchronous() const { return inner.asynchronous(); }
  [[nodiscard]] bool uses_operators() const { return inner.uses_operators(); }
  [[nodiscard]] bool uses_archive() const { return inner.uses_archive(); }
};

}  // namespace

std::uint64_t rank_seed(std::uint64_t seed, int rank) noexcept {
  return rank == 0 ? seed : mix64(seed ^ mix64(0x6d70692d72616e6bULL + static_cast<std::uint64_t>(rank)));
}

evo::Strategy rank_islands(Session& session, evo::Strategy inner, const evo::Config& cfg, IslandOptions options) {
  if (!(options.timeout_s > 0)) throw Error(fmt::format("mpi islands: timeout must be > 0 s (got {})", options.timeout_s));
  if (options.interval < 0) throw Error(fmt::format("mpi islands: interval must be >= 0 (got {})", options.interval));
  RankIslands w{std::move(inner), nullptr};
  // The link's problem only serves absorb()'s context; the engine evaluates its own.
  struct NoProblem {
    Space s;
    const Space& space() const { return s; }
    std::vector<evo::Evaluation> evaluate(std::span<const Genome> gs) const { return std::vector<evo::Evaluation>(gs.size()); }
  };
  w.link = std::make_shared<Link>(session, evo::Problem(NoProblem{}), options);
  w.link->seed = cfg.seed;
  w.link->migrants = options.migrants
                         ? options.migrants
                         : static_cast<std::size_t>(std::max(1.0, std::round(cfg.islands.rate * static_cast<double>(cfg.population))));
  return evo::Strategy(std::move(w));
}

IslandsResult finish_islands(const evo::Strategy& wrapped, const evo::Result& local) {
  const auto* w = wrapped.extract<RankIslands>();
  if (!w) throw Error("mpi islands: finish_islands() needs the strategy made by rank_islands()");
  Link& l = *w->link;
  l.finish();
  IslandsResult out;
  out.local = local;
  RankSummary mine{l.rank, local.evaluations, local.valid, local.history_hash, local.best};
  if (l.rank != 0) {
    detail::Writer wr;
    wr.u64(mine.evaluations).u64(mine.valid).u64(mine.history_hash).u64(mine.best ? 1 : 0);
    if (mine.best) wr.individual(*mine.best);
    detail::send_bytes(l.comm, wr.out, 0, kSummary);
    return out;
  }
  out.ranks.resize(static_cast<std::size_t>(l.size));
  out.ranks[0] = mine;
  for (int got = 1; got < l.size; ++got) {
    auto st = detail::probe_until(l.comm, MPI_ANY_SOURCE, kSummary, detail::deadline_in(l.opt.timeout_s));
    if (!st) throw RankError(fmt::format("mpi islands: {} rank(s) sent no result within {} s of the last one", l.size - got, l.opt.timeout_s));
    const auto buf = detail::recv_probed(l.comm, *st);
    detail::Reader r(buf, fmt::format("summary of rank {}", st->MPI_SOURCE));
    auto& s = out.ranks[static_cast<std::size_t>(st->MPI_SOURCE)];
    s.rank = st->MPI_SOURCE;
    s.evaluations = r.u64();
    s.valid = r.u64();
    s.history_hash = r.u64();
    if (r.u64()) s.best = r.individual();
  }
  StableHasher h;
  h.str("kevo.mpi.islands").u64(out.ranks.size());
  for (const auto& s : out.ranks) {
    h.u64(s.history_hash);
    out.evaluations += s.evaluations;
    if (s.best && (!out.best || evo::better(*s.best, *out.best))) out.best = s.best;
  }
  out.history_hash = h.digest();
  return out;
}

void check_rank_count(Session& session, const std::filesystem::path& f, bool resume) {
  namespace fs = std::filesystem;
  std::string err;
  if (session.rank() == 0) {
    const fs::path root = f.parent_path();
    std::error_code ec;
    if (resume) {
      std::ifstream in(f);
      int n = 0;
      if (!(in >> n)) err = fmt::format("checkpoint {}: no islands run recorded here ({} missing)", root.string(), f.string());
      else if (n != session.size())
        err = fmt::format("checkpoint {}: recorded over {} ranks; islands resume with the same count (mpirun -n {})", root.string(),
                          n, n);
    } else if (fs::exists(f, ec)) {
      err = fmt::format("checkpoint {}: already holds a run", root.string());
    } else {
      if (!root.empty()) fs::create_directories(root, ec);
      std::ofstream(f) << session.size() << "\n";
      if (!fs::exists(f, ec)) err = fmt::format("checkpoint {}: cannot write {}", root.string(), f.string());
    }
  }
  err = session.broadcast(err);  // all ranks are alive here: a plain broadcast
  if (!err.empty()) throw Error(err);
}

IslandsResult run_islands(Session& session, evo::Problem problem, evo::Config cfg, IslandOptions options, bool resume,
                          const std::function<void(evo::Engine&)>& setup) {
  namespace fs = std::filesystem;
  const fs::path root = cfg.checkpoint.dir;
  if (!root.empty()) {
    check_rank_count(session, root / "ranks.txt", resume);
    cfg.checkpoint.dir = root / fmt::format("rank-{}", session.rank());
    std::error_code ec;
    fs::create_directories(cfg.checkpoint.dir, ec);
  }
  cfg.seed = rank_seed(cfg.seed, session.rank());
  auto strategy = rank_islands(session, evo::builtin_strategy(cfg), cfg, options);
  std::optional<evo::Engine> engine;
  if (resume && !root.empty())
    engine.emplace(evo::Engine::resume(cfg.checkpoint.dir, problem, cfg));
  else
    engine.emplace(problem, cfg);
  engine->set_strategy(std::move(strategy));
  if (setup) setup(*engine);
  const auto r = engine->run();
  return finish_islands(engine->strategy(), r);
}

}  // namespace kevo::mpi
