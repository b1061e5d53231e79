// GuardedProblem: a search::KernelProblem behind a cap on the unrolled size of its loop nests,
// shared by the benchmark programs (search_quality, scaling). Private to bench/.
#pragma once
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "kevo/evo/problem.hpp"
#include "kevo/search/kernel_problem.hpp"

namespace kevo::bench {

// Rejects, before lowering, genomes whose loop nests would unroll into more than `cap` tile
// iterations (the product over a nest's tile genes of ceil(extent / tile)). kevo's lowering has no
// such bound yet: a random 2048^3 matmul genome with 16-wide tiles unrolls into millions of
// instructions and takes minutes and gigabytes to lower, which no benchmark budget survives. The
// rejected genomes count as invalid proposals ("too_large"), for every algorithm alike. The cap
// is max(cap, 4 x the fewest tile iterations the largest tile values allow).
class GuardedProblem {
 public:
  GuardedProblem(search::KernelProblem kp, double cap) : kp_(std::move(kp)), cap_(cap) {
    const auto& k = kp_.kernel();
    std::map<std::string, std::int64_t> extent;
    for (std::size_t i = 0; i < k.ops.size(); ++i)
      for (const auto& [name, size] : k.op_indices(i)) extent[name] = std::max(extent[name], size);
    const auto& sp = kp_.space();
    for (std::size_t g = 0; g < sp.size(); ++g) {
      const auto& name = sp.gene(g).name;
      const auto pos = name.find(".tile.");
      if (pos == std::string::npos || sp.gene(g).kind != GeneKind::ordinal) continue;
      auto it = extent.find(name.substr(pos + 6));
      if (it == extent.end()) continue;
      tiles_.push_back({name.substr(0, pos), g, it->second});
    }
    // The cap is at least 4x the fewest tile iterations the largest tiles allow, so large problems
    // (4096x8192x8192) keep a searchable range.
    std::map<std::string, double> fewest;
    for (const auto& t : tiles_) {
      const auto& vals = sp.gene(t.gene).values;
      const auto biggest = vals.empty() ? std::int64_t{1} : *std::max_element(vals.begin(), vals.end());
      auto& n = fewest.try_emplace(t.group, 1.0).first->second;
      n *= std::ceil(static_cast<double>(t.extent) / static_cast<double>(std::max<std::int64_t>(1, biggest)));
    }
    for (const auto& [grp, n] : fewest) cap_ = std::max(cap_, 4 * n);
  }
  [[nodiscard]] double cap() const noexcept { return cap_; }
  [[nodiscard]] const Space& space() const { return kp_.space(); }
  // Estimated tile iterations of the largest nest.
  [[nodiscard]] double iterations(const Genome& g) const {
    std::map<std::string, double> per_group;
    for (const auto& t : tiles_) {
      const auto& gene = kp_.space().gene(t.gene);
      const auto v = gene.values.at(static_cast<std::size_t>(kp_.space().at(g, t.gene)));
      auto& n = per_group.try_emplace(t.group, 1.0).first->second;
      n *= std::ceil(static_cast<double>(t.extent) / static_cast<double>(std::max<std::int64_t>(1, v)));
    }
    double worst = 0;
    for (const auto& [grp, n] : per_group) worst = std::max(worst, n);
    return worst;
  }
  [[nodiscard]] std::vector<evo::Evaluation> evaluate(std::span<const Genome> gs) const {
    std::vector<evo::Evaluation> out(gs.size());
    std::vector<Genome> pass;
    std::vector<std::size_t> idx;
    for (std::size_t i = 0; i < gs.size(); ++i) {
      const double n = kp_.space().contains(gs[i]) ? iterations(gs[i]) : 0;
      if (n > cap_) {
        out[i].status = Status::invalid;
        out[i].reason = fmt::format("too_large: {:.0f} tile iterations in one nest, the benchmark's cap is {:.0f}", n, cap_);
      } else {
        pass.push_back(gs[i]);
        idx.push_back(i);
      }
    }
    if (!pass.empty()) {
      auto ev = kp_.evaluate(pass);
      for (std::size_t j = 0; j < idx.size(); ++j) out[idx[j]] = std::move(ev[j]);
    }
    return out;
  }
  [[nodiscard]] std::string name() const { return kp_.name(); }
  [[nodiscard]] bool deterministic() const { return kp_.deterministic(); }
  [[nodiscard]] evo::ThreadSafety thread_safety() const { return kp_.thread_safety(); }
  [[nodiscard]] std::string to_text(const Genome& g) const { return kp_.to_text(g); }
  [[nodiscard]] Expected<Genome, std::string> from_text(std::string_view s) const { return kp_.from_text(s); }
  bool repair(Genome& g, Rng& r) const { return kp_.repair(g, r); }
  [[nodiscard]] std::vector<std::string> descriptor_names() const { return kp_.descriptor_names(); }
  [[nodiscard]] const search::KernelProblem& kernel_problem() const { return kp_; }

 private:
  struct TileGene {
    std::string group;
    std::size_t gene;
    std::int64_t extent;
  };
  search::KernelProblem kp_;
  double cap_;
  std::vector<TileGene> tiles_;
};


}  // namespace kevo::bench
