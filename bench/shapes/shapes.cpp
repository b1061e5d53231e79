// shapes: kevo's default search on matmul shapes nobody tuned on (issue 17, second "done when":
// M, N, K in 256..8192, not all multiples of 512, >= 85% of peak at 2,000 evaluations where the
// roofline allows it, reported against the roofline bound).
//
// A seeded generator draws the shapes: each of M, N, K log-uniform in [256, 8192], rounded to a
// grain drawn per dimension (512, 128 or 1: a third each, so some dimensions are not multiples
// of 128 and the schedule space has to cut edge tiles), redrawn while M*N*K exceeds --max-volume.
// Per shape and seed it runs the search `kevo search` runs by default (search::default_search_config:
// GA, 2,000 evaluations; search::run_search, so the figure is the verified winner's) on the
// simulated target, cold (no records). Per shape it reports the roofline bound (runner::roofline:
// Tensor-engine FLOPs at peak vs minimum HBM bytes at datasheet bandwidth), which of the two
// limits it, the Tensor-engine ceiling (tensor bound / roofline bound: the highest fraction of
// peak any schedule could reach), the PE array's ceiling and the model floor's (pe_bound_ns and
// model_floor_ns below: the same with the array's passes and the simulator's DMA latencies in the
// bound; a miss whose floor ceiling is under 85% is out of reach of any schedule on the simulated
// target, and a run below its floor is reported as a bug), the median over seeds of the best fraction of peak and of the
// fraction of the roofline, and the winner's bottleneck; for a shape that misses, the latency 85%
// needs against the median winner's Tensor-busy and Tensor-idle time (the idle time split by the
// winner's simulated timeline into fill, drain and stalls) and its DMA-busy time (where the miss
// lies: too much Tensor work, DMA, or fill and drain). It measures; it never gates.
//   shapes [--target trn2] [--dtype bf16] [--layout nn] [--count 8] [--seed 1] [--budget 2000]
//          [--seeds 3] [--threads 0] [--max-volume 8589934592] [--json FILE] [--shapes MxNxK,...]
//          [--space searched]
// --space is the schedule space searched: searched (kevo search's default), full (`--space full`),
// or one of full's two halves, structures (schedule::DeriveOptions::every_structure) or
// orientations (every_orientation), to tell which of them a difference comes from.
// --shapes replaces the generator by the shapes given (to re-run rows of a table). --layout is the
// matmul workload's (docs/KIR.md): nn (the default: A stored [M, K], so every schedule transposes
// A on its way in) or tn (A stored [K, M], as NKI's own matmul kernels take it) or nt.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kevo/core/rng.hpp"
#include "kevo/ir/kernel.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/lower/program.hpp"
#include "kevo/runner/sim.hpp"
#include "kevo/search/kernel_problem.hpp"
#include "kevo/search/session.hpp"
#include "kevo/target/target.hpp"
#include "support.hpp"

using json = nlohmann::json;
using namespace kevo;  // NOLINT: a program, not a header

namespace {

constexpr double kTargetFraction = 0.85;  // issue 17

struct Shape {
  std::int64_t m, n, k;
};

// Where a schedule's Tensor engine idles, from its simulated timeline: before its first
// instruction starts (the fill: the first loads), after its last one's issue ends (the drain: the
// last evictions and stores), and between (stalls on operands, PSUM or the PE array's blocks).
struct TensorIdle {
  double fill_ns = 0, drain_ns = 0, stall_ns = 0;
};

std::optional<TensorIdle> tensor_idle_split(const search::KernelProblem& problem, const std::string& schedule) {
  const auto g = problem.from_text(schedule);
  if (!g) return std::nullopt;
  const auto prog = problem.lower(*g);
  if (!prog) return std::nullopt;
  const runner::SimResult r = runner::simulate(*prog, problem.target(), runner::default_sim_params(problem.target()));
  const auto tq = static_cast<std::uint8_t>(target::Engine::tensor);
  double first = -1, last = 0;
  for (std::size_t i = 0; i < r.queue.size(); ++i) {
    if (r.queue[i] != tq) continue;
    if (first < 0 || r.start_ns[i] < first) first = r.start_ns[i];
    last = std::max(last, r.issue_end_ns[i]);
  }
  if (first < 0) return std::nullopt;
  const double busy = r.engine_busy_ns[static_cast<std::size_t>(target::Engine::tensor)];
  TensorIdle t;
  t.fill_ns = first;
  t.drain_ns = std::max(0.0, r.latency_ns - last);
  t.stall_ns = std::max(0.0, last - first - busy);
  return t;
}

// One dimension: log-uniform in [256, 8192], rounded down to a grain of 512, 128 or 1.
std::int64_t draw_dim(Rng& rng) {
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
  const auto x = static_cast<std::int64_t>(std::exp2(8.0 + 5.0 * u));  // 2^8 .. 2^13
  static constexpr std::int64_t kGrain[] = {512, 128, 1};
  const std::int64_t g = kGrain[rng.below(3)];
  return std::clamp<std::int64_t>(x / g * g, 256, 8192);
}

std::vector<Shape> draw_shapes(std::uint64_t seed, int count, double max_volume) {
  Rng rng(seed, 17);
  std::vector<Shape> out;
  while (static_cast<int>(out.size()) < count) {
    Shape s{draw_dim(rng), draw_dim(rng), draw_dim(rng)};
    if (max_volume > 0 && static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k) > max_volume) continue;
    out.push_back(s);
  }
  return out;
}

// --shapes M1xN1xK1,M2xN2xK2,...: the shapes themselves, each dimension a positive integer
std::vector<Shape> parse_shapes(const std::string& text) {
  std::vector<Shape> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t end = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, end - pos);
    const auto bad = [&] { return std::runtime_error(fmt::format("--shapes: '{}' is not MxNxK (three positive integers joined by x)", item)); };
    std::int64_t d[3] = {0, 0, 0};
    std::size_t at = 0;
    for (int i = 0; i < 3; ++i) {
      // digits, then 'x' between the three (std::stoll alone would take a sign or spaces)
      const std::size_t digits_end = std::min(item.find_first_not_of("0123456789", at), item.size());
      if (digits_end == at || digits_end - at > 12) throw bad();
      d[i] = std::stoll(item.substr(at, digits_end - at));
      at = digits_end;
      if (i < 2) {
        if (at >= item.size() || item[at] != 'x') throw bad();
        ++at;
      }
    }
    if (at != item.size() || d[0] < 1 || d[1] < 1 || d[2] < 1) throw bad();
    out.push_back({d[0], d[1], d[2]});
    pos = end + 1;
  }
  return out;
}

std::string grain(std::int64_t x) { return x % 512 == 0 ? "512" : x % 128 == 0 ? "128" : "-"; }

// The PE array's bound on Tensor-engine time: a lower bound for every schedule kevo's space can
// write, tighter than the FLOP bound where a dimension is not a multiple of 128. A matmul
// contracts at most pmax partitions, keeps at most stationary_fmax columns stationary, moves at
// most moving_fmax, and costs max(min(matmul_min_cycles, stationary), moving) cycles whatever
// share of the array it fills (the simulator's cost, after the legacy nki.isa.nc_matmul
// estimate). With operand S stationary and V moving that is ceil(S / fmax) * ceil(K / pmax)
// passes of at least max(V, floor * ceil(V / moving_fmax)) cycles each, except where the target
// has the PE array's tiling mode (Target::row_tile_min) and an edge is at most 64 wide: there the
// space's `kedge slices` runs the k edge's matmuls in row tiles and `sedge slices` the stationary
// edge's in column tiles (docs/SCHEDULE.md), several at once, so such an edge counts as the
// share of a pass its tile holds (w / 128 for the smallest tile w >= the edge), and a matmul in
// both as the product. The bound takes the cheaper orientation (ignoring the output transposes B
// stationary needs) at the fp32 rate for fp32 operands. Until 2026-12-07 it counted every edge as
// a whole pass, which is no bound for the sliced schedules: 1536x1536x660's (a 20-row k edge)
// was 46.1 us, and a schedule of it with `kedge slices` keeps the Tensor engine busy 40.9 us.
double pe_bound_ns(const Shape& s, const target::Target& t, const std::string& dtype) {
  const auto cdiv = [](std::int64_t a, std::int64_t b) { return (a + b - 1) / b; };
  // tiles of a dimension of extent e at tile size `tile`: the full ones, plus the edge's share
  const auto tiles = [&](std::int64_t e, std::int64_t tile) {
    const std::int64_t full = e / tile, edge = e % tile;
    if (edge == 0) return static_cast<double>(full);
    if (t.row_tile_min <= 0 || e <= tile || edge > 64) return static_cast<double>(full + 1);
    std::int64_t w = t.row_tile_min;
    while (w < edge) w *= 2;
    return static_cast<double>(full) + static_cast<double>(std::min(w, tile)) / static_cast<double>(tile);
  };
  const auto cycles = [&](std::int64_t stat, std::int64_t mov) {
    const double floor = std::min<double>(t.matmul_min_cycles, static_cast<double>(std::min<std::int64_t>(stat, t.stationary_fmax)));
    const double pass = std::max(static_cast<double>(mov), floor * static_cast<double>(cdiv(mov, t.moving_fmax)));
    return tiles(stat, t.stationary_fmax) * tiles(s.k, t.pmax) * pass;
  };
  const double c = std::min(cycles(s.m, s.n), cycles(s.n, s.m)) * (dtype == "fp32" ? t.matmul_fp32_factor : 1.0);
  const double ghz = t.engine(target::Engine::tensor).clock_ghz;
  return c / (ghz > 0 ? ghz : 1.0);
}

// The model floor: a latency no schedule can beat on the simulated target, whatever its tiles,
// order or buffers, from the simulator's own constants (docs/SIMULATOR.md) rather than the
// datasheet roofline's. Every matmul needs a loaded operand, and a load completes no sooner than
// dma_fixed_ns after it starts; the last matmul's result reaches HBM through a store that takes
// dma_fixed_ns too. So the Tensor work (pe_ns) sits between two DMA latencies, plus the last
// matmul's own latency. On the memory side the loads move at least the inputs' bytes through HBM
// (hbm_bytes_per_ns x hbm_efficiency), and after the last of them a store still follows; all of
// it, the output included, moves through HBM before the end. Descriptor costs, the transposes'
// efficiency and edge waste beyond pe_ns are left out, so the floor is loose where they bind;
// it is a bound, not an estimate: a winner below it would be a bug, and the run says so.
double model_floor_ns(const runner::Roofline& rf, double pe_ns, double input_bytes, const target::Target& t,
                      const runner::SimParams& sp) {
  const double fixed = sp.dma_fixed_ns >= 0 ? sp.dma_fixed_ns : t.dma_fixed_ns;
  // a transfer's data is visible this long after its bandwidth phase ends (docs/SIMULATOR.md)
  const double tail = sp.dma_tail_ns >= 0 ? std::min(sp.dma_tail_ns, fixed) : fixed;
  const double hbm = t.hbm_bytes_per_ns * (sp.hbm_efficiency > 0 ? sp.hbm_efficiency : 1.0);
  const double ghz = t.engine(target::Engine::tensor).clock_ghz;
  const double matmul_latency = ghz > 0 ? t.matmul_fixed_cycles / ghz : 0;
  const double compute = fixed + pe_ns + matmul_latency + fixed;
  const double loads = input_bytes / hbm + tail + fixed;
  const double all = static_cast<double>(rf.min_hbm_bytes) / hbm + tail;
  return std::max({compute, loads, all});
}

}  // namespace

int main(int argc, char** argv) {
  std::string target_name, dtype, layout, json_out, shape_list, space_name;
  int count = 0, seeds = 0, threads = 0;
  std::uint64_t seed = 0, budget = 0;
  double max_volume = 0;
  try {
    const bench::Args a(argc, argv, {}, {"--target", "--dtype", "--layout", "--count", "--seed", "--budget", "--seeds", "--threads", "--max-volume", "--json", "--shapes", "--space"});
    target_name = a.str("--target", "trn2");
    dtype = a.str("--dtype", "bf16");
    layout = a.str("--layout", "nn");
    count = static_cast<int>(a.integer("--count", 8));
    seed = static_cast<std::uint64_t>(a.integer("--seed", 1));
    budget = static_cast<std::uint64_t>(a.integer("--budget", static_cast<long long>(search::kDefaultBudget)));
    seeds = static_cast<int>(a.integer("--seeds", 3));
    threads = static_cast<int>(a.integer("--threads", 0));
    max_volume = a.real("--max-volume", 8589934592.0);  // 2^33 = 2048^3
    json_out = a.str("--json", "");
    shape_list = a.str("--shapes", "");
    space_name = a.str("--space", "searched");
    if (space_name != "searched" && space_name != "full" && space_name != "structures" && space_name != "orientations")
      throw std::runtime_error("--space " + space_name + ": expected searched, full, structures or orientations");
    if (!shape_list.empty()) count = static_cast<int>(parse_shapes(shape_list).size());
    if (count < 1 || seeds < 1 || budget < 1) throw std::runtime_error("--count, --seeds and --budget must be at least 1");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shapes: %s\n", e.what());
    return 2;
  }
  auto tgt = target::load_target(target_name);
  if (!tgt) {
    std::fprintf(stderr, "shapes: --target %s: %s\n", target_name.c_str(), tgt.error().headline().c_str());
    return 2;
  }
  // --shapes names them (one row of a table, re-run); otherwise the seeded generator draws them
  const auto shapes = shape_list.empty() ? draw_shapes(seed, count, max_volume) : parse_shapes(shape_list);
  // Every workload is checked before the first search starts (a bad --dtype or --layout is exit 2
  // at once). The default layout is left out of the spec, so nn rows read as they always have.
  const auto workload_of = [&](const Shape& s) {
    return fmt::format("matmul:M={},N={},K={},dtype={}{}", s.m, s.n, s.k, dtype, layout == "nn" ? "" : ",layout=" + layout);
  };
  std::vector<ir::Kernel> kernels;
  for (const Shape& s : shapes) {
    const std::string spec = workload_of(s);
    auto k = ir::workload(spec);
    if (!k) {
      std::fprintf(stderr, "shapes: %s: %s\n", spec.c_str(), k.error().c_str());
      return 2;
    }
    kernels.push_back(std::move(*k));
  }
  schedule::DeriveOptions derive;  // --space searched: kevo search's default
  derive.every_structure = space_name == "full" || space_name == "structures";
  derive.every_orientation = space_name == "full" || space_name == "orientations";
  const auto t_all = std::chrono::steady_clock::now();
  json rows = json::array();
  int allowed = 0, met = 0;
  int out_of_reach = 0, below_floor = 0;  // misses the model floor puts below 85%; runs below the floor
  const runner::SimParams sim_params = runner::default_sim_params(*tgt);
  // the mean of the eligible shapes' medians: a steadier figure than the count, whose shapes near
  // 85% flip with search noise (docs/BENCHMARKS.md, "Narrow outputs ...")
  double sum_allowed_median = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const Shape& s = shapes[i];
    const ir::Kernel& kernel = kernels[i];
    const runner::Roofline rf = runner::roofline(&kernel, lower::TileProgram{}, *tgt);
    const double ceiling = rf.ns > 0 ? rf.tensor_ns / rf.ns : 0;  // the best fraction of peak any schedule could reach
    const bool allows = ceiling >= kTargetFraction;
    const char* limit = rf.limit();
    // the same ceiling with the PE array's bound in place of the FLOP bound: what quantisation to
    // 128-row tiles leaves (reported beside the roofline's; `allows` stays the roofline's)
    const double pe_ns = std::max(pe_bound_ns(s, *tgt, dtype), rf.tensor_ns);
    const double pe_ceiling = rf.tensor_ns / std::max(pe_ns, rf.ns);
    // the model floor and the best fraction of peak it leaves (beside the roofline's; `allows`
    // stays the roofline's, as issue 17 asks)
    const double in_bytes = static_cast<double>((s.m * s.k + s.k * s.n) * static_cast<std::int64_t>(ir::dtype_bytes(ir::dtype_from_string(dtype).value_or(ir::DType::bf16))));
    const double floor_ns = model_floor_ns(rf, pe_ns, in_bytes, *tgt, sim_params);
    const double floor_ceiling = rf.tensor_ns / floor_ns;
    std::vector<double> fop, frl, lat, wall;
    json runs = json::array();
    for (int r = 0; r < seeds; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      search::KernelProblem problem(schedule::ScheduleSpace::derive(kernel, *tgt, derive), runner::Runner(runner::SimRunner{}));
      search::SearchOptions so;
      so.config = search::default_search_config(static_cast<std::uint64_t>(r) + 1, threads);
      so.config.budget.max_evaluations = budget;
      auto out = search::run_search(problem, so);
      const double secs = bench::seconds_since(t0);
      if (!out) {
        std::fprintf(stderr, "shapes: %s seed %d: %s\n", kernel.name.c_str(), r + 1, out.error().c_str());
        return 1;
      }
      json run{{"seed", r + 1}, {"evaluations", out->result.evaluations}, {"wall_s", secs}, {"verified", out->best.has_value()}};
      if (out->best) {
        const double l = out->best->eval.fitness[0];
        const double f = out->best->eval.metric("fraction_of_peak");
        fop.push_back(f);
        frl.push_back(rf.ns / l);
        lat.push_back(l);
        run["latency_ns"] = l;
        if (l < floor_ns * (1 - 1e-9)) {  // the floor is a bound: a run below it is a bug in the one or the other
          ++below_floor;
          std::fprintf(stderr, "shapes: %s seed %d: %.1f ns is below the model floor %.1f ns\n", kernel.name.c_str(), r + 1, l, floor_ns);
        }
        run["fraction_of_peak"] = f;
        run["fraction_of_roofline"] = rf.ns / l;
        run["schedule"] = out->best_schedule;
        run["verification"] = out->verification.method;
        if (out->best_measurement) {
          run["bottleneck"] = out->best_measurement->bottleneck;
          json busy = json::object();
          for (const auto& e : out->best_measurement->engines) busy[e.engine] = e.utilisation;
          run["busy"] = busy;
        }
      } else {
        fop.push_back(0);
        frl.push_back(0);
      }
      wall.push_back(secs);
      runs.push_back(run);
      std::fprintf(stderr, "[shapes] %ldx%ldx%ld seed %d: %.1f%% of peak, %.1f%% of roofline, %.0f s\n", static_cast<long>(s.m),
                   static_cast<long>(s.n), static_cast<long>(s.k), r + 1, 100 * fop.back(), 100 * frl.back(), secs);
    }
    // The run whose best is the median (the lower middle for an even count) names the bottleneck.
    std::vector<std::size_t> order(runs.size());
    for (std::size_t j = 0; j < order.size(); ++j) order[j] = j;
    std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return fop[x] < fop[y]; });
    const json& mid = runs[order[(order.size() - 1) / 2]];
    const double med = bench::median(fop);
    // Where the median winner's time goes against the latency 85% of peak allows: the Tensor
    // engine's busy time (matmuls, edge tiles' waste, PE transposes) and the rest, when Tensor
    // idles (the first loads, the last evictions and stores, stalls on DMA). A miss whose Tensor
    // work alone exceeds that latency needs less work (other tiles or orientation), not overlap.
    const double l85 = rf.tensor_ns / kTargetFraction;
    const double mid_lat = mid.value("latency_ns", 0.0);
    const json busy = mid.value("busy", json::object());
    const double tensor_busy = busy.value("tensor", 0.0) * mid_lat, tensor_idle = mid_lat - tensor_busy;
    const double dma_busy = busy.value("dma", 0.0) * mid_lat;
    // the median winner's Tensor idle time split by its simulated timeline (re-lowered here)
    std::optional<TensorIdle> idle;
    if (mid.contains("schedule"))
      idle = tensor_idle_split(search::KernelProblem(schedule::ScheduleSpace::derive(kernel, *tgt, derive), runner::Runner(runner::SimRunner{})),
                               mid["schedule"].get<std::string>());
    const bool hit = med >= kTargetFraction;
    allowed += allows;
    met += allows && hit;
    out_of_reach += allows && !hit && floor_ceiling < kTargetFraction;
    if (allows) sum_allowed_median += med;
    rows.push_back({{"m", s.m}, {"n", s.n}, {"k", s.k}, {"grain", {grain(s.m), grain(s.n), grain(s.k)}},
                    {"workload", workload_of(s)},
                    {"roofline_ns", rf.ns}, {"tensor_ns", rf.tensor_ns}, {"memory_ns", rf.memory_ns}, {"limit", limit},
                    {"ceiling", ceiling}, {"pe_bound_ns", pe_ns}, {"pe_ceiling", pe_ceiling}, {"floor_ns", floor_ns}, {"floor_ceiling", floor_ceiling}, {"allows", allows},
                    {"median_fraction_of_peak", med},
                    {"min_fraction_of_peak", *std::min_element(fop.begin(), fop.end())},
                    {"max_fraction_of_peak", *std::max_element(fop.begin(), fop.end())},
                    {"median_fraction_of_roofline", bench::median(frl)}, {"median_latency_ns", bench::median(lat)},
                    {"median_run", mid}, {"reached", hit}, {"median_wall_s", bench::median(wall)},
                    {"latency_85_ns", l85}, {"tensor_busy_ns", tensor_busy}, {"tensor_idle_ns", tensor_idle},
                    {"dma_busy_ns", dma_busy}, {"runs", runs}});
    if (idle) {
      rows.back()["tensor_fill_ns"] = idle->fill_ns;
      rows.back()["tensor_drain_ns"] = idle->drain_ns;
      rows.back()["tensor_stall_ns"] = idle->stall_ns;
    }
    std::printf("%5ld x %5ld x %5ld  roofline %9.1f us (%s, ceiling %5.1f%%, PE ceiling %5.1f%%, model floor %.1f us: %5.1f%%)  best %5.1f%% of peak (median of %d), %5.1f%% of roofline  %s  bottleneck %s\n",
                static_cast<long>(s.m), static_cast<long>(s.n), static_cast<long>(s.k), rf.ns / 1e3, limit, 100 * ceiling, 100 * pe_ceiling,
                floor_ns / 1e3, 100 * floor_ceiling, 100 * med,
                seeds, 100 * bench::median(frl), allows ? (hit ? "reached" : "MISSED") : "n/a (roofline < 85%)",
                mid.value("bottleneck", std::string("?")).c_str());
    if (allows && !hit) {
      std::printf("      85%% needs <= %.1f us; the median winner: %.1f us, Tensor busy %.1f us and idle %.1f us, DMA busy %.1f us\n",
                  l85 / 1e3, mid_lat / 1e3, tensor_busy / 1e3, tensor_idle / 1e3, dma_busy / 1e3);
      if (idle)
        std::printf("      Tensor idle: %.1f us before its first instruction (fill), %.1f us after its last (drain), %.1f us between (stalls)\n",
                    idle->fill_ns / 1e3, idle->drain_ns / 1e3, idle->stall_ns / 1e3);
    }
    std::fflush(stdout);
  }
  const double total = bench::seconds_since(t_all);
  const double mean_median = allowed > 0 ? sum_allowed_median / allowed : 0;
  std::printf("%d of %d shapes allow >= 85%% of peak by the roofline; %d of them reached it (median over %d seeds); "
              "mean of their medians %.1f%%; %s space; %.0f s\n",
              allowed, static_cast<int>(shapes.size()), met, seeds, 100 * mean_median, space_name.c_str(), total);
  std::printf("of the %d misses, %d cannot reach 85%% under the simulator's model (model floor); %d runs fell below the floor%s\n",
              allowed - met, out_of_reach, below_floor, below_floor > 0 ? " (a bug: see stderr)" : "");
  if (!json_out.empty()) {
    json j{{"target", tgt->name}, {"dtype", dtype}, {"layout", layout}, {"count", count}, {"seed", seed}, {"budget", budget}, {"seeds", seeds},
           {"threads", threads}, {"max_volume", max_volume}, {"target_fraction", kTargetFraction}, {"search", "kevo search defaults (search::default_search_config), cold, winner verified"}, {"space", space_name},
           {"allowed", allowed}, {"reached", met}, {"out_of_reach", out_of_reach}, {"below_floor", below_floor}, {"mean_allowed_median", mean_median}, {"wall_s", total}, {"rows", rows}};
    if (!shape_list.empty()) j["shapes"] = shape_list;
    std::ofstream f(json_out);
    f << j.dump(1) << "\n";
    if (!f) {
      std::fprintf(stderr, "shapes: cannot write %s\n", json_out.c_str());
      return 1;
    }
  }
  return 0;
}
