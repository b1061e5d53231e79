// Operators: the adaptive bandit (UCB over cost-normalised improvement), breeding through it, and
// the admission of every candidate (repair, space check, dedup, journal replay lookup). These are
// the services a strategy's ask() calls through AskContext.
#include <algorithm>
#include <cmath>

#include "engine_impl.hpp"
#include "kevo/core/hash.hpp"
#include "streams.hpp"

namespace kevo::evo {

using detail::kInf;
using detail::kNoArm;

void Engine::Impl::compute_weights() {
  weights.assign(arms.size(), 0.0);
  double total_count = 0, max_value = 0;
  for (const auto& a : arms) total_count += a.count;
  std::vector<double> value(arms.size(), 0.0);
  for (std::size_t i = 0; i < arms.size(); ++i) {
    const auto& a = arms[i];
    value[i] = a.count > 1e-9 && a.cost > 0 ? a.reward / a.cost : 0.0;
    max_value = std::max(max_value, value[i]);
  }
  double sum = 0;
  std::size_t live = 0;
  for (std::size_t i = 0; i < arms.size(); ++i) {
    const auto& a = arms[i];
    if (a.op.exhausted() || a.prior <= 0 || a.muted()) continue;
    ++live;
    double score;
    if (!cfg.adaptive_operators) {
      score = 1.0;
    } else if (a.count < 1e-9) {
      score = 1.0 + detail::kExplore;  // untried: optimistic
    } else {
      // Improvement per unit of cost, relative to the best operator, plus a UCB bonus.
      const double v = max_value > 0 ? value[i] / max_value : 0.0;
      score = v + detail::kExplore * std::sqrt(std::log(total_count + 1.0) / a.count);
    }
    weights[i] = a.prior * score;
    sum += weights[i];
  }
  if (live == 0 || sum <= 0) {
    std::fill(weights.begin(), weights.end(), 0.0);
    return;
  }
  const double floor = detail::kMinShare / static_cast<double>(live);
  double sum2 = 0;
  for (std::size_t i = 0; i < arms.size(); ++i) {
    if (weights[i] <= 0 && (arms[i].op.exhausted() || arms[i].prior <= 0 || arms[i].muted())) continue;
    weights[i] = std::max(weights[i] / sum, floor);
    sum2 += weights[i];
  }
  for (auto& w : weights) w /= sum2;
  for (std::size_t i = 0; i < arms.size(); ++i) arms[i].stats.weight = weights[i];
}

std::optional<std::uint32_t> Engine::Impl::pick_arm(Rng& rng) const {
  double total = 0;
  for (double w : weights) total += w;
  if (total <= 0) return std::nullopt;
  double r = rng.uniform() * total;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0) continue;
    if (r < weights[i]) return static_cast<std::uint32_t>(i);
    r -= weights[i];
  }
  for (std::size_t i = weights.size(); i-- > 0;)
    if (weights[i] > 0) return static_cast<std::uint32_t>(i);
  return std::nullopt;
}

void Engine::Impl::credit(std::uint32_t arm, double reward, double raw_cost) {
  if (arm == kNoArm) return;
  cost_sum += raw_cost;
  ++cost_samples;
  const double mean = cost_sum / static_cast<double>(cost_samples);
  const double c = mean > 0 ? std::max(raw_cost / mean, 0.1) : 1.0;
  auto& a = arms[arm];
  a.reward = a.reward * detail::kDecay + reward;
  a.cost = a.cost * detail::kDecay + c;
  a.count = a.count * detail::kDecay + 1.0;
}

void Engine::Impl::collect_members() {
  members.clear();
  if (strategy->has_population()) {
    strategy->population(members);
  } else {
    for (const auto& i : leaders) members.push_back(&i);
  }
}

// The best distinct individuals operators see: the strategy's population or the archive's cells.
void Engine::Impl::build_elite_view(bool from_archive) {
  elite_view.clear();
  std::vector<const Individual*> pool;
  if (from_archive && archive && !archive->empty()) {
    for (const auto& [c, ind] : archive->cells()) pool.push_back(&ind);
  } else {
    collect_members();
    pool = members;
  }
  std::sort(pool.begin(), pool.end(), [](const Individual* a, const Individual* b) { return better(*a, *b); });
  for (const Individual* e : pool) {
    if (elite_view.size() >= detail::kElitesView) break;
    if (std::none_of(elite_view.begin(), elite_view.end(), [&](const Individual& u) { return u.genome == e->genome; }))
      elite_view.push_back(*e);
  }
}

// Validates a proposed genome: repair, space membership, dedup. Returns true when it joins the batch.
bool Engine::Impl::admit(Genome&& g, Rng& rng, std::uint32_t arm, std::uint64_t tag, double parent, double op_cost,
                         std::string op, std::vector<Proposal>& batch, bool repair) {
  if (arm != kNoArm) ++arms[arm].stats.proposals;
  auto drop = [&](std::string why) {
    if (arm == kNoArm) return;
    ProposalOutcome o;
    o.genome = std::move(g);
    o.eval.status = Status::invalid;
    o.eval.reason = std::move(why);
    outcomes[arm].push_back(std::move(o));
    credit(arm, 0.0, op_cost);
  };
  if (!space->contains(g)) {
    const bool fixed = repair && g.size() == space->width() && problem.repair(g, rng) && space->contains(g);
    if (!fixed) {
      ++outside;
      if (arm != kNoArm) ++arms[arm].stats.outside;
      drop("outside space");
      return false;
    }
  } else if (repair) {
    // A valid genome may still be normalised by the problem (e.g. a cheap fix of a constraint).
    if (!problem.repair(g, rng) || !space->contains(g)) {
      ++outside;
      if (arm != kNoArm) ++arms[arm].stats.outside;
      drop("outside space (repair failed)");
      return false;
    }
  }
  const std::uint64_t h = genome_hash(g);
  if (seen.count(h) || batch_hashes.count(h)) {
    ++duplicates;
    if (arm != kNoArm) ++arms[arm].stats.duplicates;
    drop("duplicate");
    return false;
  }
  batch_hashes.insert(h);
  Proposal p;
  p.genome = std::move(g);
  p.hash = h;
  p.arm = arm;
  p.tag = tag;
  p.parent = parent;
  p.op_cost = op_cost;
  p.op = std::move(op);
  if (arm != kNoArm) {
    p.outcome = outcomes[arm].size();
    outcomes[arm].push_back(ProposalOutcome{});
  }
  if (auto it = replay.find(h); it != replay.end()) p.cached = &it->second;
  batch.push_back(std::move(p));
  return true;
}

// Asks operator `arm` for proposals from parents chosen by `pick`. An operator that returns nothing
// (an asynchronous one with nothing ready, or one that declined) hands the slot to the first
// built-in when `fallback` is set, so the slot is not lost.
void Engine::Impl::breed_with(std::uint32_t arm, Rng& rng, std::size_t room, AskContext::ParentPicker pick,
                              std::uint64_t tag, std::vector<Proposal>& batch, bool fallback, bool& elites_ready,
                              bool elites_archive) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    parent_buf.resize(std::max<std::size_t>(arms[arm].op.arity(), 1));
    pick(std::span<Individual>(parent_buf), rng);
    double parent = kInf;
    for (const auto& p : parent_buf) parent = std::min(parent, detail::primary(p));
    // The built-in operators never read the elites: the view is built for the others only.
    if (!elites_ready && arms[arm].added) {
      build_elite_view(elites_archive);
      elites_ready = true;
    }
    OperatorContext ctx{problem, std::span<const Individual>(parent_buf),
                        elites_ready ? std::span<const Individual>(elite_view) : std::span<const Individual>(),
                        generation, evaluations, rng};
    const double before = arms[arm].op.cost();
    auto genomes = arms[arm].op.propose(ctx);
    const double spent = std::max(0.0, arms[arm].op.cost() - before);
    arms[arm].stats.cost += spent;
    cost += spent;
    if (genomes.empty()) {
      ++arms[arm].empty_calls;
      if (spent > 0) credit(arm, 0.0, spent);
      if (fallback && arm != 0 && cfg.builtin_operators && weights[0] > 0) {
        arm = 0;
        continue;
      }
      return;
    }
    const double share = spent / static_cast<double>(genomes.size());
    const std::string name = arms[arm].stats.name;
    for (auto& g : genomes) {
      if (room == 0) break;
      if (admit(std::move(g), rng, arm, tag, parent, share, name, batch)) --room;
    }
    return;
  }
}

void Engine::Impl::add_seeds(std::vector<Proposal>& batch, std::size_t want, std::uint64_t tag) {
  Rng rng = Rng(cfg.seed).fork(detail::s_init).fork(0xfeed);
  for (const auto& s : cfg.seeds) {
    if (batch.size() >= want) break;
    Genome g = s;
    admit(std::move(g), rng, kNoArm, tag, kInf, 0, "seed", batch);
  }
}

void Engine::Impl::add_late_seeds(std::vector<Proposal>& batch, std::size_t room) {
  if (cfg.late_seeds.empty() || cfg.late_seeds_at == 0 || evaluations < cfg.late_seeds_at) return;
  Rng rng = Rng(cfg.seed).fork(detail::s_init).fork(0x1a7e);
  for (const auto& s : cfg.late_seeds) {
    if (batch.size() >= room) break;
    // known ones are skipped here, not dropped by admit(), so that asking again after they were
    // evaluated (every later batch, and a resumed run) leaves no trace in the statistics
    const std::uint64_t h = genome_hash(s);
    if (!space->contains(s) || seen.count(h) || batch_hashes.count(h)) continue;
    Genome g = s;
    admit(std::move(g), rng, kNoArm, 0, kInf, 0, "late seed", batch);
  }
}

// ---- the services of ask() ---------------------------------------------------------------------

bool Engine::Impl::Services::offer(Genome genome, Rng& rng, std::string_view label, std::uint64_t tag, bool repair) {
  if (!batch_ || batch_->size() >= room_) return false;
  return e_.admit(std::move(genome), rng, kNoArm, tag, kInf, 0, std::string(label), *batch_, repair);
}

void Engine::Impl::Services::offer_seeds(std::size_t until, std::uint64_t tag) {
  if (batch_) e_.add_seeds(*batch_, std::min(until, room_), tag);
}

bool Engine::Impl::Services::operators_ready() {
  e_.compute_weights();
  weights_ready_ = true;
  const bool any = std::any_of(e_.weights.begin(), e_.weights.end(), [](double w) { return w > 0; });
  if (!any) no_operators_ = true;
  return any;
}

bool Engine::Impl::Services::breed(Rng& rng, std::size_t room, ParentPicker pick, std::uint64_t tag) {
  if (!batch_) return false;
  if (!weights_ready_ && !operators_ready()) return false;
  room = std::min(room, room_ - std::min(room_, batch_->size()));
  auto chosen = e_.pick_arm(rng);
  if (!chosen) return false;
  e_.breed_with(*chosen, rng, room, pick, tag, *batch_, true, elites_ready_, elites_archive_);
  return true;
}

void Engine::Impl::Services::poll_asynchronous(Rng base, std::size_t room, ParentPicker pick, std::uint64_t tag) {
  if (!batch_) return;
  if (!weights_ready_ && !operators_ready()) return;
  for (std::uint32_t a = 0; a < e_.arms.size(); ++a)
    if (e_.weights[a] > 0 && e_.arms[a].op.asynchronous() && batch_->size() < room_) {
      Rng rng = base.fork(a);
      e_.breed_with(a, rng, std::min(room_ - batch_->size(), room), pick, tag, *batch_, false, elites_ready_,
                    elites_archive_);
    }
}

}  // namespace kevo::evo
