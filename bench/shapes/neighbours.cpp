// neighbours: is a schedule a local optimum? Measures every schedule one gene away from it (and,
// with --radius 2, every schedule two genes away) on the simulated target and reports the best
// (issue 17: telling a search that stops short from a space that holds nothing better nearby).
// A gene's neighbours are its other values (a permutation's: every swap of two items; a
// continuous gene, which no kernel space has, is not varied); the
// kernel's problem measures them as the search would (lowering, validity, the simulator), and
// invalid ones count as such. It measures; it never gates.
//   neighbours --workload W --schedule S [--target trn2] [--radius 1] [--space searched|full] [--json FILE]
// Exit 2 on bad arguments, a bad workload or a schedule that does not parse or is invalid.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kevo/ir/workloads.hpp"
#include "kevo/runner/sim.hpp"
#include "kevo/search/kernel_problem.hpp"
#include "kevo/target/target.hpp"
#include "support.hpp"

using json = nlohmann::json;
using namespace kevo;  // NOLINT: a program, not a header

namespace {

// Every genome one gene away from g in gene i. Moves in different genes, or different values of
// one, never give the same genome, so no neighbour is measured twice.
std::vector<Genome> moves(const Space& sp, const Genome& g, std::size_t i) {
  std::vector<Genome> out;
  const Gene& gene = sp.gene(i);
  if (gene.kind == GeneKind::permutation) {
    for (std::size_t a = 0; a < gene.width(); ++a)
      for (std::size_t b = a + 1; b < gene.width(); ++b) {
        Genome n = g;
        auto s = sp.slots(n, i);
        std::swap(s[a], s[b]);
        out.push_back(std::move(n));
      }
  } else if (gene.kind != GeneKind::continuous) {
    for (std::size_t v = 0; v < gene.choices(); ++v) {
      if (static_cast<std::int32_t>(v) == sp.at(g, i)) continue;
      Genome n = g;
      sp.slots(n, i)[0] = static_cast<std::int32_t>(v);
      out.push_back(std::move(n));
    }
  }
  return out;
}

struct Best {
  double latency_ns = 0;
  std::string genes;  // the genes changed, "a+b"
  Genome genome;
};

}  // namespace

int main(int argc, char** argv) {
  std::string workload, schedule_text, target_name, space_name, json_out;
  int radius = 1;
  try {
    const bench::Args a(argc, argv, {}, {"--workload", "--schedule", "--target", "--radius", "--space", "--json"});
    workload = a.str("--workload", "");
    schedule_text = a.str("--schedule", "");
    target_name = a.str("--target", "trn2");
    radius = static_cast<int>(a.integer("--radius", 1));
    space_name = a.str("--space", "searched");
    json_out = a.str("--json", "");
    if (workload.empty() || schedule_text.empty()) throw std::runtime_error("--workload and --schedule are required");
    if (radius != 1 && radius != 2) throw std::runtime_error("--radius must be 1 or 2");
    if (space_name != "searched" && space_name != "full") throw std::runtime_error("--space " + space_name + ": expected searched or full");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "neighbours: %s\n", e.what());
    return 2;
  }
  auto tgt = target::load_target(target_name);
  if (!tgt) {
    std::fprintf(stderr, "neighbours: --target %s: %s\n", target_name.c_str(), tgt.error().headline().c_str());
    return 2;
  }
  auto kernel = ir::workload(workload);
  if (!kernel) {
    std::fprintf(stderr, "neighbours: --workload %s: %s\n", workload.c_str(), kernel.error().c_str());
    return 2;
  }
  schedule::DeriveOptions derive;
  derive.every_structure = derive.every_orientation = space_name == "full";
  search::KernelProblem problem(schedule::ScheduleSpace::derive(*kernel, *tgt, derive), runner::Runner(runner::SimRunner{}));
  auto start = problem.from_text(schedule_text);
  if (!start) {
    std::fprintf(stderr, "neighbours: --schedule: %s\n", start.error().c_str());
    return 2;
  }
  const Space& sp = problem.space();
  long evaluated = 0, valid = 0;
  const auto measure = [&](const Genome& g) -> std::optional<double> {
    const auto e = problem.evaluate(std::span<const Genome>(&g, 1));
    ++evaluated;
    if (!e[0].ok()) return std::nullopt;
    ++valid;
    return e[0].fitness[0];
  };
  const auto l0 = measure(*start);
  if (!l0) {
    std::fprintf(stderr, "neighbours: --schedule is invalid on %s\n", tgt->name.c_str());
    return 2;
  }
  std::vector<Best> best(static_cast<std::size_t>(radius), Best{*l0, "", *start});
  const auto offer = [&](const Genome& g, int r, const std::string& genes) {
    const auto l = measure(g);
    Best& b = best[static_cast<std::size_t>(r - 1)];
    // faster by more than the simulator's rounding (a deterministic runner: anything measurable)
    if (l && *l < b.latency_ns && *l < *l0 * (1 - 1e-5)) b = Best{*l, genes, g};
    if (evaluated % 1000 == 0) std::fprintf(stderr, "[neighbours] %ld measured\n", evaluated);
  };
  for (std::size_t i = 0; i < sp.size(); ++i)
    for (const Genome& g1 : moves(sp, *start, i)) {
      offer(g1, 1, sp.gene(i).name);
      if (radius < 2) continue;
      for (std::size_t j = i + 1; j < sp.size(); ++j)
        for (const Genome& g2 : moves(sp, g1, j)) offer(g2, 2, sp.gene(i).name + "+" + sp.gene(j).name);
    }
  json out{{"workload", workload}, {"target", tgt->name}, {"space", space_name}, {"schedule", schedule_text}, {"latency_ns", *l0},
           {"evaluated", evaluated}, {"valid", valid}};
  std::printf("%s on %s: %.2f us; %ld neighbours measured (%ld valid)\n", workload.c_str(), tgt->name.c_str(), *l0 / 1e3, evaluated - 1, valid - 1);
  for (int r = 1; r <= radius; ++r) {
    const Best& b = best[static_cast<std::size_t>(r - 1)];
    const double gain = 1 - b.latency_ns / *l0;
    if (b.genes.empty())
      std::printf("  %d gene%s away: nothing faster (a local optimum)\n", r, r == 1 ? "" : "s");
    else
      std::printf("  %d gene%s away: %.2f us (%.2f%% faster), changing %s:\n    %s\n", r, r == 1 ? "" : "s", b.latency_ns / 1e3, 100 * gain,
                  b.genes.c_str(), problem.to_text(b.genome).c_str());
    out[fmt::format("radius_{}", r)] = {{"latency_ns", b.latency_ns}, {"gain", gain}, {"genes", b.genes},
                                        {"schedule", b.genes.empty() ? "" : problem.to_text(b.genome)}};
  }
  if (!json_out.empty()) {
    std::ofstream f(json_out);
    f << out.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "neighbours: cannot write %s\n", json_out.c_str());
      return 1;
    }
  }
  return 0;
}
