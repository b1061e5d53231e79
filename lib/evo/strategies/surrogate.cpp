// The surrogate-assisted strategy: a Gaussian process over genome features screens bred candidates
// (include/kevo/evo/strategies/surrogate.hpp says what and why).
#include "kevo/evo/strategies/surrogate.hpp"

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <unordered_set>

#include "kevo/evo/operators.hpp"
#include "kevo/evo/strategies/common.hpp"
#include "state.hpp"

namespace kevo::evo {

namespace {

// This strategy's random streams (ctx.rng(id)); distinct from the engine's and the other built-ins'.
constexpr std::uint64_t s_surrogate_init = 0x5a77'0001;
constexpr std::uint64_t s_surrogate_breed = 0x5a77'0002;
constexpr std::uint64_t s_surrogate_pick = 0x5a77'0003;

// Genome -> feature vector (see the header): a categorical or boolean gene that differs adds 1 to
// the squared distance, an ordinal |v - w| / (choices - 1) (a thermometer code: neighbours in its
// domain are close, its ends 1 apart), a continuous gene the square of its positions' distance
// as a share of the interval, a permutation 1 per pair of items in the other order.
class Encoder {
 public:
  explicit Encoder(const Space& s) : space_(s) {
    for (const Gene& g : s.genes()) {
      if (g.kind == GeneKind::permutation) {
        dim_ += g.labels.size() * (g.labels.size() - 1) / 2;
      } else if (g.kind == GeneKind::continuous) {
        dim_ += 1;
      } else if (g.kind == GeneKind::ordinal) {
        dim_ += g.choices() > 1 ? g.choices() - 1 : 0;
      } else {
        dim_ += g.choices();
      }
    }
  }
  [[nodiscard]] std::size_t dim() const { return dim_; }
  void encode(const Genome& genome, double* out) const {
    std::fill(out, out + dim_, 0.0);
    std::size_t f = 0;
    static const double kHot = 1.0 / std::sqrt(2.0);
    for (std::size_t i = 0; i < space_.size(); ++i) {
      const Gene& g = space_.gene(i);
      const auto sl = space_.slots(genome, i);
      if (g.kind == GeneKind::permutation) {
        const std::size_t m = g.labels.size();
        // position of each item, then +-0.5 for "item a before item b"
        std::vector<std::size_t> pos(m, 0);
        for (std::size_t p = 0; p < m; ++p) pos[static_cast<std::size_t>(sl[p])] = p;
        for (std::size_t a = 0; a < m; ++a)
          for (std::size_t b = a + 1; b < m; ++b) out[f++] = pos[a] < pos[b] ? 0.5 : -0.5;
        continue;
      }
      if (g.kind == GeneKind::continuous) {  // its position in the interval, 0..1
        out[f++] = static_cast<double>(sl[0]) / Gene::kContinuousSteps;
        continue;
      }
      const auto v = static_cast<std::size_t>(sl[0]);
      if (g.kind == GeneKind::ordinal) {
        // Thermometer code: squared distance |v - w| / (choices - 1), neighbours close, ends 1 apart.
        if (g.choices() < 2) continue;
        const double w = 1.0 / std::sqrt(static_cast<double>(g.choices() - 1));
        for (std::size_t k = 1; k < g.choices(); ++k) out[f++] = v >= k ? w : 0.0;
        continue;
      }
      out[f + v] = kHot;
      f += g.choices();
    }
  }

 private:
  const Space& space_;
  std::size_t dim_ = 0;
};

// A Gaussian process fitted on (features, targets); predicts mean and standard deviation.
class Gp {
 public:
  Gp(Eigen::MatrixXd x, const Eigen::VectorXd& y) : x_(std::move(x)) {
    const auto n = x_.rows();
    mean_ = y.mean();
    const double var = (y.array() - mean_).square().sum() / static_cast<double>(std::max<Eigen::Index>(n - 1, 1));
    scale_ = var > 1e-18 ? std::sqrt(var) : 1.0;
    const Eigen::VectorXd ys = (y.array() - mean_) / scale_;
    // Length scale: the median squared distance between training genomes.
    const Eigen::VectorXd sq = x_.rowwise().squaredNorm();
    Eigen::MatrixXd d2 = (sq.replicate(1, n) + sq.transpose().replicate(n, 1) - 2.0 * x_ * x_.transpose()).cwiseMax(0.0);
    std::vector<double> pairs;
    pairs.reserve(static_cast<std::size_t>(n * (n - 1) / 2));
    for (Eigen::Index i = 0; i < n; ++i)
      for (Eigen::Index j = i + 1; j < n; ++j) pairs.push_back(d2(i, j));
    double med = 1.0;
    if (!pairs.empty()) {
      auto mid = pairs.begin() + static_cast<std::ptrdiff_t>(pairs.size() / 2);
      std::nth_element(pairs.begin(), mid, pairs.end());
      med = std::max(*mid, 1e-3);
    }
    inv2l2_ = 1.0 / med;  // exp(-d2 / median): neighbours at the median distance correlate at e^-1
    Eigen::MatrixXd k = (-d2 * inv2l2_).array().exp().matrix();
    k.diagonal().array() += kNoise;
    llt_.compute(k);
    alpha_ = llt_.solve(ys);
  }

  // Lower confidence bound mean - kappa * sd for each row of `c`, in the targets' units.
  [[nodiscard]] Eigen::VectorXd lcb(const Eigen::MatrixXd& c, double kappa) const {
    const Eigen::VectorXd cs = c.rowwise().squaredNorm();
    const Eigen::VectorXd xs = x_.rowwise().squaredNorm();
    Eigen::MatrixXd d2 = (cs.replicate(1, x_.rows()) + xs.transpose().replicate(c.rows(), 1) - 2.0 * c * x_.transpose())
                             .cwiseMax(0.0);
    const Eigen::MatrixXd ks = (-d2 * inv2l2_).array().exp().matrix();  // candidates x training
    const Eigen::VectorXd mu = ks * alpha_;
    const Eigen::MatrixXd v = llt_.matrixL().solve(ks.transpose());  // training x candidates
    Eigen::VectorXd out(c.rows());
    for (Eigen::Index i = 0; i < c.rows(); ++i) {
      const double var = std::max(0.0, 1.0 + kNoise - v.col(i).squaredNorm());
      out[i] = mean_ + scale_ * (mu[i] - kappa * std::sqrt(var));
    }
    return out;
  }

 private:
  static constexpr double kNoise = 0.05;  // of the standardised targets' variance
  Eigen::MatrixXd x_;
  Eigen::LLT<Eigen::MatrixXd> llt_;
  Eigen::VectorXd alpha_;
  double mean_ = 0, scale_ = 1, inv2l2_ = 1;
};

// Group crossover (genes of one group come whole from one parent), as GroupCrossover does.
Genome cross(const Space& space, const Genome& a, const Genome& b, Rng& rng) {
  Genome child = a;
  std::map<std::string, bool> from_b;
  for (std::size_t i = 0; i < space.size(); ++i) {
    const Gene& g = space.gene(i);
    const std::string key = g.group.empty() ? "\x01" + g.name : g.group;
    auto it = from_b.find(key);
    if (it == from_b.end()) it = from_b.emplace(key, rng.below(2) == 1).first;
    if (!it->second) continue;
    const auto src = space.slots(b, i);
    auto dst = space.slots(child, i);
    std::copy(src.begin(), src.end(), dst.begin());
  }
  return child;
}

}  // namespace

void Surrogate::ask(std::size_t n, AskContext& ctx) {
  const Space& space = ctx.space();
  if (seen.empty() && ctx.generation() == 0) {
    const std::size_t want = std::min(n, std::max<std::size_t>(initial, 1));
    ctx.offer_seeds(want);
    const Rng root = ctx.rng(s_surrogate_init);
    if (ctx.problem().has_features() && ctx.size() < want) screen_initial(want, ctx);
    for (std::uint64_t t = 0; ctx.size() < want && t < 4 * want + 64; ++t) {
      Rng r = root.fork(t);
      ctx.offer(space.random(r), r, "init");
    }
    return;
  }
  const std::size_t want = std::min(n, batch ? batch : std::max<std::size_t>(4, pop_size / 4));

  // Breed the pool from the best seen (random genomes while nothing is valid yet).
  std::unordered_set<std::uint64_t> known;
  for (const auto& s : seen) known.insert(genome_hash(s.genome));
  std::vector<Genome> cand;
  const bool with_features = ctx.problem().has_features();
  const std::size_t pool_size = std::max<std::size_t>(want, pool * want);
  const Rng breed = ctx.rng(s_surrogate_breed).fork(ctx.generation());
  for (std::uint64_t t = 0; cand.size() < pool_size && t < 8 * pool_size + 64; ++t) {
    Rng r = breed.fork(t);
    Genome g;
    if (pop.empty()) {
      g = space.random(r);
    } else {
      // Local steps, crossovers and jumps: the model, not the breeding, decides which are worth it.
      g = tournament(pop, 2, r).genome;
      const auto kind = r.below(8);
      if (kind < 2 && pop.size() >= 2) g = cross(space, g, tournament(pop, 2, r).genome, r);
      if (kind >= 6) {
        reset_genome(space, g, 0.0, r);
      } else {
        const auto steps = 1 + r.below(3);
        for (std::uint64_t s = 0; s < steps; ++s) mutate_genome(space, g, 0.0, r);
      }
    }
    if (!ctx.problem().repair(g, r) || !space.contains(g)) continue;
    if (!known.insert(genome_hash(g)).second) continue;
    if (with_features && features_of(ctx.problem(), g).empty()) continue;  // the problem knows it is invalid
    cand.push_back(std::move(g));
  }

  // Order the pool: by the model's lower confidence bound once it has data, else as bred.
  std::vector<std::size_t> order(cand.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::size_t valid = 0;
  for (const auto& s : seen) valid += s.eval.ok() && !s.eval.fitness.empty() ? 1 : 0;
  const char* label = "bred";
  if (valid >= min_train && !cand.empty()) {
    label = "surrogate";
    // Training set: the best half of max_train, then the most recent evaluations.
    std::vector<std::size_t> idx(seen.size());
    std::iota(idx.begin(), idx.end(), std::size_t{0});
    std::vector<std::size_t> train;
    if (seen.size() <= max_train) {
      train = idx;
    } else {
      std::vector<std::size_t> ok;
      for (auto i : idx)
        if (seen[i].eval.ok() && !seen[i].eval.fitness.empty()) ok.push_back(i);
      std::stable_sort(ok.begin(), ok.end(), [&](std::size_t a, std::size_t b) {
        return seen[a].eval.fitness[0] < seen[b].eval.fitness[0];
      });
      ok.resize(std::min(ok.size(), max_train / 2));
      std::vector<char> in(seen.size(), 0);
      for (auto i : ok) in[i] = 1;
      train = ok;
      for (std::size_t i = seen.size(); i-- > 0 && train.size() < max_train;)
        if (!in[i]) train.push_back(i);
    }
    bool positive = true;
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (auto i : train)
      if (seen[i].eval.ok() && !seen[i].eval.fitness.empty()) positive = positive && seen[i].eval.fitness[0] > 0;
    auto target = [&](double f) { return positive ? std::log(f) : f; };
    for (auto i : train)
      if (seen[i].eval.ok() && !seen[i].eval.fitness.empty()) {
        lo = std::min(lo, target(seen[i].eval.fitness[0]));
        hi = std::max(hi, target(seen[i].eval.fitness[0]));
      }
    const double penalty = hi + 0.5 * std::max(hi - lo, 1e-3);  // invalid: worse than every valid one
    const Encoder enc(space);
    // The problem's features of each genome (none without the hook; training genomes the problem
    // calls invalid have none and are left out: the pool holds none of them either).
    std::size_t nf = 0;
    if (with_features) {
      std::vector<std::size_t> kept;
      for (auto i : train) {
        const auto& f = features_of(ctx.problem(), seen[i].genome);
        if (f.size() < 2) continue;
        if (nf == 0) nf = f.size() - 1;
        if (f.size() - 1 == nf) kept.push_back(i);
      }
      train = std::move(kept);
    }
    const auto gdim = static_cast<Eigen::Index>(enc.dim());
    const auto dim = gdim + static_cast<Eigen::Index>(nf);
    auto fill_row = [&](const Genome& g, Eigen::RowVectorXd& row) {
      enc.encode(g, row.data());
      if (nf == 0) return;
      const auto& f = features_of(ctx.problem(), g);
      for (std::size_t j = 0; j < nf; ++j) row[gdim + static_cast<Eigen::Index>(j)] = j + 1 < f.size() && std::isfinite(f[j + 1]) ? f[j + 1] : 0.0;
    };
    Eigen::MatrixXd x(static_cast<Eigen::Index>(train.size()), dim);
    Eigen::RowVectorXd row(dim);
    Eigen::VectorXd y(static_cast<Eigen::Index>(train.size()));
    for (std::size_t r = 0; r < train.size(); ++r) {
      const Individual& s = seen[train[r]];
      fill_row(s.genome, row);
      x.row(static_cast<Eigen::Index>(r)) = row;
      y[static_cast<Eigen::Index>(r)] = s.eval.ok() && !s.eval.fitness.empty() ? target(s.eval.fitness[0]) : penalty;
    }
    Eigen::MatrixXd c(static_cast<Eigen::Index>(cand.size()), dim);
    for (std::size_t r = 0; r < cand.size(); ++r) {
      fill_row(cand[r], row);
      c.row(static_cast<Eigen::Index>(r)) = row;
    }
    Eigen::VectorXd prior_train = Eigen::VectorXd::Zero(y.size()), prior_cand = Eigen::VectorXd::Zero(c.rows());
    if (nf > 0 && train.size() >= 2) {
      // Program features: standardised over the training set; a ridge regression on them is the
      // GP's prior mean, and they join the genome's features in its kernel (scaled so that they
      // weigh as much as the genome's genes together).
      const auto fx = x.rightCols(static_cast<Eigen::Index>(nf));
      const Eigen::RowVectorXd mu = fx.colwise().mean();
      Eigen::RowVectorXd sd = ((fx.rowwise() - mu).array().square().colwise().sum() / static_cast<double>(train.size())).sqrt();
      for (Eigen::Index j = 0; j < sd.size(); ++j) sd[j] = sd[j] > 1e-9 ? sd[j] : 1.0;
      auto standardise = [&](Eigen::MatrixXd& m) {
        auto block = m.rightCols(static_cast<Eigen::Index>(nf));
        block = (block.rowwise() - mu).array().rowwise() / sd.array();
      };
      standardise(x);
      standardise(c);
      const Eigen::MatrixXd zt = x.rightCols(static_cast<Eigen::Index>(nf));
      const double ybar = y.mean();
      Eigen::MatrixXd a = zt.transpose() * zt;
      a.diagonal().array() += ridge * static_cast<double>(train.size());
      const Eigen::VectorXd beta = a.ldlt().solve(zt.transpose() * (y.array() - ybar).matrix());
      prior_train = (zt * beta).array() + ybar;
      prior_cand = (c.rightCols(static_cast<Eigen::Index>(nf)) * beta).array() + ybar;
      const double w = std::sqrt(feature_weight * static_cast<double>(space.size()) / static_cast<double>(nf));
      x.rightCols(static_cast<Eigen::Index>(nf)) *= w;
      c.rightCols(static_cast<Eigen::Index>(nf)) *= w;
    }
    const Gp gp(std::move(x), y - prior_train);
    const Eigen::VectorXd score = gp.lcb(c, kappa) + prior_cand;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return score[static_cast<Eigen::Index>(a)] < score[static_cast<Eigen::Index>(b)]; });
    // A share of the batch drawn uniformly from the rest of the pool: the model is never the only judge.
    const auto n_explore = static_cast<std::size_t>(std::floor(explore * static_cast<double>(want)));
    const std::size_t head = want - std::min(want, n_explore);
    Rng pick = ctx.rng(s_surrogate_pick).fork(ctx.generation());
    for (std::size_t k = 0; k < n_explore && head + k < order.size(); ++k) {
      const std::size_t j = head + k + pick.below(order.size() - head - k);
      std::swap(order[head + k], order[j]);
    }
  }
  const Rng offer = ctx.rng(s_surrogate_pick).fork(ctx.generation()).fork(1);
  for (std::size_t k = 0; k < order.size() && ctx.size() < want; ++k) {
    Rng r = offer.fork(k);
    ctx.offer(std::move(cand[order[k]]), r, label, 0, /*repair=*/false);
  }
  // Everything near the best is known: fresh random genomes keep the run going.
  const Rng fill = ctx.rng(s_surrogate_init).fork(ctx.generation()).fork(7);
  for (std::uint64_t t = 0; ctx.size() < want && t < 4 * want + 64; ++t) {
    Rng r = fill.fork(t);
    ctx.offer(space.random(r), r, "random");
  }
}

const std::vector<double>& Surrogate::features_of(const Problem& problem, const Genome& g) {
  const std::uint64_t h = genome_hash(g);
  auto it = feature_cache.find(h);
  if (it == feature_cache.end()) {
    if (feature_cache.size() >= kFeatureCacheLimit) feature_cache.clear();  // derived: recomputed when asked
    it = feature_cache.emplace(h, problem.features(g)).first;
  }
  return it->second;
}

// The first batch, screened: `pool` x its size random genomes (repaired, deduplicated, those the
// problem calls invalid dropped), the ones with the lowest a-priori estimate (features()[0]) first,
// a share `explore` drawn uniformly from the rest.
void Surrogate::screen_initial(std::size_t want, AskContext& ctx) {
  const Space& space = ctx.space();
  const std::size_t room = want - ctx.size();
  const std::size_t pool_size = std::max<std::size_t>(room, pool * room);
  const Rng root = ctx.rng(s_surrogate_init).fork(0x1417);
  std::unordered_set<std::uint64_t> known;
  std::vector<Genome> cand;
  std::vector<double> est;
  for (std::uint64_t t = 0; cand.size() < pool_size && t < 4 * pool_size + 64; ++t) {
    Rng r = root.fork(t);
    Genome g = space.random(r);
    if (!ctx.problem().repair(g, r) || !space.contains(g)) continue;
    if (!known.insert(genome_hash(g)).second) continue;
    const auto& f = features_of(ctx.problem(), g);
    if (f.empty()) continue;
    est.push_back(std::isfinite(f[0]) ? f[0] : std::numeric_limits<double>::infinity());
    cand.push_back(std::move(g));
  }
  std::vector<std::size_t> order(cand.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return est[a] < est[b]; });
  const auto n_explore = static_cast<std::size_t>(std::ceil(explore * static_cast<double>(room)));
  const std::size_t head = room - std::min(room, n_explore);
  Rng pick = ctx.rng(s_surrogate_pick).fork(0x1417);
  for (std::size_t k = 0; k < n_explore && head + k < order.size(); ++k) {
    const std::size_t j = head + k + pick.below(order.size() - head - k);
    std::swap(order[head + k], order[j]);
  }
  const Rng offer = ctx.rng(s_surrogate_pick).fork(0x1418);
  for (std::size_t k = 0; k < order.size() && ctx.size() < want; ++k) {
    Rng r = offer.fork(k);
    ctx.offer(std::move(cand[order[k]]), r, k < head ? "screened" : "init", 0, /*repair=*/false);
  }
}

void Surrogate::tell(std::span<Evaluated> results) {
  for (auto& r : results) {
    if (r.individual.eval.ok()) keep_best(pop, r.individual, pop_size);
    seen.push_back(std::move(r.individual));
  }
}

std::string Surrogate::save() const { return detail::save_one(0, seen); }

void Surrogate::load(std::string_view bytes, std::span<const Individual> history) {
  std::uint64_t cursor = 0;
  detail::load_one(bytes, history, cursor, seen);
  pop.clear();
  for (const auto& s : seen)
    if (s.eval.ok()) keep_best(pop, s, pop_size);
}

}  // namespace kevo::evo
