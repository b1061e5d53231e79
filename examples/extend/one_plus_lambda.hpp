// A user-written search strategy: a (1+lambda) evolution strategy over kevo's typed genes with the
// one-fifth success rule (Rechenberg 1973; Beyer & Schwefel, "Evolution strategies -- A
// comprehensive introduction", Natural Computing 1, 2002). It lives outside kevo's sources and uses
// only the installed public headers and cereal (which kevo's package config provides).
//
// Per generation: lambda children of the parent; each ordinal gene moves by a step whose size
// grows with `sigma`, other genes change through kevo::evo::mutate_genome; one child in four is
// bred through the engine's operator bandit instead (so the built-in operators, or an LLM
// operator added to the engine, take part and learn). The best child replaces the parent when it
// is at least as good (plus selection). sigma grows by 1.5 after a generation where more than a
// fifth of the children improved on the parent, and shrinks by 0.82 otherwise.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <cereal/archives/binary.hpp>

#include "kevo/evo.hpp"

namespace extend {

class OnePlusLambda {
 public:
  explicit OnePlusLambda(std::size_t lambda = 8, double sigma0 = 1.0) : lambda_(std::max<std::size_t>(lambda, 1)), sigma_(sigma0) {}

  // The name is recorded in checkpoints: a resumed run must be given the same strategy.
  [[nodiscard]] std::string name() const { return "one_plus_lambda"; }

  void ask(std::size_t n, kevo::evo::AskContext& ctx) {
    const std::size_t want = std::min(n, lambda_);
    // Every draw comes from a stream named by what it decides: stream 100 of this run, forked by
    // generation and child index. Never a clock, never a generator shared across calls.
    const kevo::Rng gen = ctx.rng(100).fork(ctx.generation());
    if (!parent_) {  // first generation: hand-written seeds, then uniform genomes
      ctx.offer_seeds(want);
      for (std::size_t k = 0; ctx.size() < want && k < 4 * want + 16; ++k) {
        kevo::Rng rng = gen.fork(k);
        ctx.offer(ctx.space().random(rng), rng, "init");
      }
      return;
    }
    auto pick = [&](std::span<kevo::evo::Individual> out, kevo::Rng&) {
      for (auto& p : out) p = *parent_;
    };
    for (std::size_t k = 0; ctx.size() < want && k < 4 * want + 16; ++k) {
      kevo::Rng rng = gen.fork(k);
      if (k % 4 == 3 && ctx.breed(rng, 1, pick)) continue;
      ctx.offer(mutate(ctx.space(), parent_->genome, rng), rng, "es");
    }
  }

  void tell(std::span<kevo::evo::Evaluated> results) {
    std::size_t improved = 0;
    const std::optional<kevo::evo::Individual> before = parent_;
    for (auto& r : results) {
      const auto& child = r.individual;
      if (before && kevo::evo::better(child, *before)) ++improved;
      if (!parent_ || kevo::evo::better(child, *parent_)) parent_ = child;  // plus selection
    }
    if (!results.empty() && generations_++ > 0) {
      const double rate = static_cast<double>(improved) / static_cast<double>(results.size());
      sigma_ = std::clamp(rate > 0.2 ? sigma_ * 1.5 : sigma_ * 0.82, 0.25, 64.0);
    }
  }

  // State for checkpoints: the parent as its journal id (restored from the history), sigma and the
  // generation count, in a cereal binary archive.
  [[nodiscard]] std::string save() const {
    std::ostringstream ss;
    {
      cereal::BinaryOutputArchive ar(ss);
      const bool has = parent_.has_value();
      const std::uint64_t id = has ? parent_->id : 0;
      ar(has, id, sigma_, generations_);
    }
    return std::move(ss).str();
  }
  void load(std::string_view bytes, std::span<const kevo::evo::Individual> history) {
    std::istringstream ss{std::string(bytes)};
    cereal::BinaryInputArchive ar(ss);
    bool has = false;
    std::uint64_t id = 0;
    ar(has, id, sigma_, generations_);
    parent_.reset();
    if (has) {
      if (id >= history.size()) throw std::runtime_error("one_plus_lambda: parent id beyond the journal");
      parent_ = history[id];
    }
  }

  [[nodiscard]] double sigma() const { return sigma_; }
  [[nodiscard]] const std::optional<kevo::evo::Individual>& parent() const { return parent_; }

 private:
  // A child of `g`: each ordinal gene moves with probability about sigma / genes by a step of
  // 1 + |round(N(0, sigma))| positions (reflected at the ends); other kinds through mutate_genome.
  kevo::Genome mutate(const kevo::Space& space, const kevo::Genome& g, kevo::Rng& rng) const {
    kevo::Genome child = g;
    const double p = std::min(1.0, std::max(sigma_, 1.0) / static_cast<double>(space.size()));
    bool changed = false;
    for (std::size_t i = 0; i < space.size(); ++i) {
      const auto& gene = space.gene(i);
      if (gene.kind != kevo::GeneKind::ordinal || gene.choices() < 2 || !rng.chance(p)) continue;
      // Box-Muller from two uniforms of this child's stream.
      const double u1 = std::max(rng.uniform(), 1e-12), u2 = rng.uniform();
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
      const auto step = 1 + static_cast<std::int64_t>(std::llround(std::abs(z) * sigma_));
      const auto n = static_cast<std::int64_t>(gene.choices());
      auto s = space.slots(child, i);
      std::int64_t v = s[0] + (rng.chance(0.5) ? step : -step);
      while (v < 0 || v >= n) v = v < 0 ? -v : 2 * (n - 1) - v;  // reflect
      changed |= v != s[0];
      s[0] = static_cast<std::int32_t>(v);
    }
    if (!changed) kevo::evo::mutate_genome(space, child, 0.0, rng);
    return child;
  }

  std::size_t lambda_;
  double sigma_;
  std::uint64_t generations_ = 0;
  std::optional<kevo::evo::Individual> parent_;
};

}  // namespace extend
