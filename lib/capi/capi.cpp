// The C API (include/kevo/kevo.h): opaque handles over the C++ library, every exception caught
// at the boundary and turned into a kevo_status with a per-thread message.
#include "kevo/kevo.h"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "kevo/core/error.hpp"
#include "kevo/evo/engine.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/search/kernel_problem.hpp"
#include "kevo/search/session.hpp"
#include "kevo/session/resolve.hpp"
#include "kevo/target/target.hpp"

#ifndef KEVO_VERSION_STRING
#error "KEVO_VERSION_STRING must be defined by the build"
#endif

struct kevo_kernel {
  kevo::ir::Kernel kernel;
  std::string text;
};
struct kevo_target {
  kevo::target::Target target;
};
struct kevo_measurement {
  std::string status, message, bottleneck;
  double latency_ns = 0, fraction_of_peak = 0;
};
struct kevo_search_options {
  kevo::search::SearchOptions options;
  std::string runner = "sim";
  bool full_space = false;  // kevo_search_options_set_space
  kevo_progress_fn progress = nullptr;
  void* progress_user = nullptr;
  // kevo_search_cancel's stop (async-signal-safe), consumed when kevo_search returns
  kevo::search::AsyncStop cancel;
};
struct kevo_result {
  bool has_best = false;
  std::string schedule, verification, stop_reason;
  double latency_ns = 0, fraction_of_peak = 0;
  std::uint64_t evaluations = 0, valid = 0;
};

namespace {

thread_local std::string g_error;

kevo_status fail(kevo_status s, std::string message) {
  try {
    g_error = std::move(message);
  } catch (...) {
    g_error.clear();
  }
  return s;
}

// A kernel the schedule space cannot handle (schedule::ScheduleSpace::try_derive's reason).
kevo_status unsupported(const kevo::schedule::Unsupported& u) {
  return fail(KEVO_ERR_UNSUPPORTED, fmt::format("{} [{}]", u.str(), u.code()));
}

// "searched" (NULL or "" too) or "full" (docs/SCHEDULE.md, "The full space").
std::optional<bool> full_space(const char* space) {
  if (!space || !*space || std::strcmp(space, "searched") == 0) return false;
  if (std::strcmp(space, "full") == 0) return true;
  return std::nullopt;
}
kevo_status bad_space(const char* space) {
  return fail(KEVO_ERR_INVALID_ARGUMENT, fmt::format("space '{}' is not one of searched, full", space));
}

// The problem of kernel k on t with the named runner, over the searched or the full space.
kevo_status make_problem(const kevo_kernel* k, const kevo_target* t, const std::string& runner, bool full,
                         std::optional<kevo::search::KernelProblem>& out, const std::atomic<bool>* cancel = nullptr) {
  auto r = kevo::session::runner_by_name(runner, t->target, {300, cancel});
  if (!r) return fail(KEVO_ERR_NOT_FOUND, r.error());
  auto space = kevo::schedule::ScheduleSpace::try_derive(
      k->kernel, t->target, full ? kevo::schedule::DeriveOptions::full() : kevo::schedule::DeriveOptions{});
  if (!space) return unsupported(space.error());
  out.emplace(std::move(*space), std::move(*r));
  return KEVO_OK;
}

// Runs `f` (returning kevo_status), converting every escaping exception.
template <typename F>
kevo_status guarded(F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return fail(KEVO_ERR_INTERNAL, "out of memory");
  } catch (const kevo::ParseError& e) {
    return fail(KEVO_ERR_PARSE, e.diagnostic().headline());
  } catch (const kevo::Error& e) {
    return fail(KEVO_ERR_IO, e.what());
  } catch (const std::exception& e) {
    return fail(KEVO_ERR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(KEVO_ERR_INTERNAL, "internal error: unknown exception");
  }
}

// `api_fn` is the API function's name: its __func__, captured by the guarded() lambda (whose own
// __func__ would be "operator()") or declared by a function that checks without one.
#define KEVO_REQUIRE(ptr, what) \
  if ((ptr) == nullptr) return fail(KEVO_ERR_INVALID_ARGUMENT, std::string(api_fn) + ": " what " is NULL")

kevo_measurement* to_c(const kevo::runner::Measurement& m) {
  auto* out = new kevo_measurement;
  out->status = std::string(kevo::to_string(m.status));
  out->message = m.message;
  out->bottleneck = m.bottleneck;
  out->latency_ns = m.latency_ns();
  out->fraction_of_peak = m.fraction_of_peak;
  return out;
}

}  // namespace

extern "C" {

int kevo_abi_version(void) { return KEVO_ABI_VERSION; }
const char* kevo_version(void) { return KEVO_VERSION_STRING; }
const char* kevo_last_error(void) { return g_error.c_str(); }

const char* kevo_status_name(kevo_status s) {
  switch (s) {
    case KEVO_OK: return "ok";
    case KEVO_ERR_INVALID_ARGUMENT: return "invalid_argument";
    case KEVO_ERR_PARSE: return "parse";
    case KEVO_ERR_NOT_FOUND: return "not_found";
    case KEVO_ERR_INVALID_SCHEDULE: return "invalid_schedule";
    case KEVO_ERR_IO: return "io";
    case KEVO_ERR_NO_RESULT: return "no_result";
    case KEVO_ERR_INTERNAL: return "internal";
    case KEVO_ERR_UNSUPPORTED: return "unsupported";
  }
  return "unknown";
}

kevo_status kevo_kernel_parse(const char* kir_text, kevo_kernel** out) {
  return guarded([&, api_fn = __func__]() -> kevo_status {
    KEVO_REQUIRE(kir_text, "kir_text");
    KEVO_REQUIRE(out, "out");
    *out = nullptr;
    auto k = kevo::ir::parse_kernel(kir_text, "<kir>");
    if (!k) return fail(KEVO_ERR_PARSE, k.error().headline());
    auto h = std::make_unique<kevo_kernel>();
    h->text = kevo::ir::print_kernel(*k);
    h->kernel = std::move(*k);
    *out = h.release();
    return KEVO_OK;
  });
}

kevo_status kevo_kernel_workload(const char* spec, kevo_kernel** out) {
  return guarded([&, api_fn = __func__]() -> kevo_status {
    KEVO_REQUIRE(spec, "spec");
    KEVO_REQUIRE(out, "out");
    *out = nullptr;
    auto k = kevo::ir::workload(spec);
    if (!k) return fail(KEVO_ERR_NOT_FOUND, fmt::format("workload '{}': {}", spec, k.error()));
    auto h = std::make_unique<kevo_kernel>();
    h->text = kevo::ir::print_kernel(*k);
    h->kernel = std::move(*k);
    *out = h.release();
    return KEVO_OK;
  });
}

void kevo_kernel_free(kevo_kernel* k) { delete k; }
const char* kevo_kernel_name(const kevo_kernel* k) { return k ? k->kernel.name.c_str() : ""; }
const char* kevo_kernel_text(const kevo_kernel* k) { return k ? k->text.c_str() : ""; }

kevo_status kevo_target_load(const char* name_or_path, kevo_target** out) {
  return guarded([&, api_fn = __func__]() -> kevo_status {
    KEVO_REQUIRE(name_or_path, "name_or_path");
    KEVO_REQUIRE(out, "out");
    *out = nullptr;
    auto t = kevo::target::load_target(name_or_path);
    if (!t) {
      const auto why = kevo::session::target_failure(name_or_path);
      return fail(why == kevo::session::TargetFailure::parse       ? KEVO_ERR_PARSE
                  : why == kevo::session::TargetFailure::unreadable ? KEVO_ERR_IO
                                                                    : KEVO_ERR_NOT_FOUND,
                  t.error().headline());
    }
    *out = new kevo_target{std::move(*t)};
    return KEVO_OK;
  });
}

void kevo_target_free(kevo_target* t) { delete t; }
const char* kevo_target_name(const kevo_target* t) { return t ? t->target.name.c_str() : ""; }

kevo_status kevo_default_schedule(const kevo_kernel* k, const kevo_target* t, char* buf, size_t size, size_t* needed) {
  return guarded([&, api_fn = __func__]() -> kevo_status {
    KEVO_REQUIRE(k, "kernel");
    KEVO_REQUIRE(t, "target");
    const auto space = kevo::schedule::ScheduleSpace::try_derive(k->kernel, t->target);
    if (!space) return unsupported(space.error());
    const std::string s = space->print(space->default_genome());
    if (needed) *needed = s.size() + 1;
    if (buf && size > 0) {
      const std::size_t n = std::min(size - 1, s.size());
      std::memcpy(buf, s.data(), n);
      buf[n] = '\0';
    }
    return KEVO_OK;
  });
}

}  // extern "C"

namespace {
// kevo_measure and kevo_measure_in_space, whose messages name `api_fn`, the function called.
kevo_status measure(const char* api_fn, const kevo_kernel* k, const kevo_target* t, const char* schedule_text,
                    const char* runner, const char* space, kevo_measurement** out) {
  return guarded([&]() -> kevo_status {
    KEVO_REQUIRE(k, "kernel");
    KEVO_REQUIRE(t, "target");
    KEVO_REQUIRE(out, "out");
    *out = nullptr;
    const auto full = full_space(space);
    if (!full) return bad_space(space);
    std::optional<kevo::search::KernelProblem> made;
    if (const kevo_status st = make_problem(k, t, runner && *runner ? runner : (t->target.host ? "cpu" : "sim"), *full, made);
        st != KEVO_OK)
      return st;
    const kevo::search::KernelProblem& problem = *made;
    kevo::Genome g = problem.schedule_space().default_genome();
    if (schedule_text && *schedule_text) {
      auto parsed = problem.schedule_space().parse(schedule_text);
      if (!parsed) return fail(KEVO_ERR_PARSE, parsed.error().headline());
      g = std::move(*parsed);
    }
    const auto rep = problem.measure_one(g);
    if (rep.invalid) return fail(KEVO_ERR_INVALID_SCHEDULE, rep.invalid->code + ": " + rep.invalid->message);
    if (!rep.measurement) return fail(KEVO_ERR_INTERNAL, "internal error: no measurement for a schedule that lowered");
    *out = to_c(*rep.measurement);
    return KEVO_OK;
  });
}
}  // namespace

extern "C" {

kevo_status kevo_measure(const kevo_kernel* k, const kevo_target* t, const char* schedule_text, const char* runner,
                         kevo_measurement** out) {
  return measure(__func__, k, t, schedule_text, runner, "searched", out);
}

kevo_status kevo_measure_in_space(const kevo_kernel* k, const kevo_target* t, const char* schedule_text, const char* runner,
                                  const char* space, kevo_measurement** out) {
  return measure(__func__, k, t, schedule_text, runner, space, out);
}

void kevo_measurement_free(kevo_measurement* m) { delete m; }
const char* kevo_measurement_status(const kevo_measurement* m) { return m ? m->status.c_str() : ""; }
const char* kevo_measurement_message(const kevo_measurement* m) { return m ? m->message.c_str() : ""; }
double kevo_measurement_latency_ns(const kevo_measurement* m) { return m ? m->latency_ns : 0; }
double kevo_measurement_fraction_of_peak(const kevo_measurement* m) { return m ? m->fraction_of_peak : 0; }
const char* kevo_measurement_bottleneck(const kevo_measurement* m) { return m ? m->bottleneck.c_str() : ""; }

kevo_status kevo_search_options_new(kevo_search_options** out) {
  return guarded([&, api_fn = __func__]() -> kevo_status {
    KEVO_REQUIRE(out, "out");
    auto* o = new kevo_search_options;
    o->options.config.budget.max_evaluations = 2000;
    *out = o;
    return KEVO_OK;
  });
}
void kevo_search_options_free(kevo_search_options* o) { delete o; }

kevo_status kevo_search_options_set_algorithm(kevo_search_options* o, const char* algorithm) {
  return guarded([&, api_fn = __func__]() -> kevo_status {
    KEVO_REQUIRE(o, "options");
    KEVO_REQUIRE(algorithm, "algorithm");
    const auto a = kevo::evo::algorithm_from_string(algorithm);
    if (!a)
      return fail(KEVO_ERR_INVALID_ARGUMENT,
                  fmt::format("algorithm '{}' is not one of ga, islands, map-elites, async, random, exhaustive, surrogate", algorithm));
    o->options.config.algorithm = *a;
    return KEVO_OK;
  });
}
kevo_status kevo_search_options_set_seed(kevo_search_options* o, uint64_t seed) {
  const char* const api_fn = __func__;
  KEVO_REQUIRE(o, "options");
  o->options.config.seed = seed;
  return KEVO_OK;
}
kevo_status kevo_search_options_set_threads(kevo_search_options* o, int threads) {
  const char* const api_fn = __func__;
  KEVO_REQUIRE(o, "options");
  if (threads < 1 || threads > 1024)
    return fail(KEVO_ERR_INVALID_ARGUMENT, fmt::format("threads must be in [1, 1024], not {}", threads));
  o->options.config.threads = threads;
  return KEVO_OK;
}
kevo_status kevo_search_options_set_population(kevo_search_options* o, int population) {
  const char* const api_fn = __func__;
  KEVO_REQUIRE(o, "options");
  if (population < 2 || population > 1'000'000)
    return fail(KEVO_ERR_INVALID_ARGUMENT, fmt::format("population must be in [2, 1000000], not {}", population));
  o->options.config.population = static_cast<std::size_t>(population);
  return KEVO_OK;
}
kevo_status kevo_search_options_set_budget(kevo_search_options* o, uint64_t evaluations) {
  const char* const api_fn = __func__;
  KEVO_REQUIRE(o, "options");
  if (evaluations < 1 || evaluations > (std::uint64_t{1} << 40))
    return fail(KEVO_ERR_INVALID_ARGUMENT, fmt::format("budget must be in [1, 2^40] evaluations, not {}", evaluations));
  o->options.config.budget.max_evaluations = evaluations;
  return KEVO_OK;
}
kevo_status kevo_search_options_set_time_limit(kevo_search_options* o, double seconds) {
  const char* const api_fn = __func__;
  KEVO_REQUIRE(o, "options");
  if (!(seconds >= 0) || !std::isfinite(seconds))
    return fail(KEVO_ERR_INVALID_ARGUMENT, fmt::format("time limit must be a finite number of seconds >= 0, not {}", seconds));
  o->options.config.budget.max_seconds = seconds;
  return KEVO_OK;
}
kevo_status kevo_search_options_set_runner(kevo_search_options* o, const char* runner) {
  return guarded([&, api_fn = __func__]() -> kevo_status {
    KEVO_REQUIRE(o, "options");
    KEVO_REQUIRE(runner, "runner");
    o->runner = runner;
    return KEVO_OK;
  });
}
kevo_status kevo_search_options_set_space(kevo_search_options* o, const char* space) {
  return guarded([&, api_fn = __func__]() -> kevo_status {
    KEVO_REQUIRE(o, "options");
    KEVO_REQUIRE(space, "space");
    const auto full = full_space(space);
    if (!full) return bad_space(space);
    o->full_space = *full;
    return KEVO_OK;
  });
}
kevo_status kevo_search_options_add_seed_schedule(kevo_search_options* o, const char* schedule_text) {
  return guarded([&, api_fn = __func__]() -> kevo_status {
    KEVO_REQUIRE(o, "options");
    KEVO_REQUIRE(schedule_text, "schedule_text");
    o->options.seed_schedules.emplace_back(schedule_text);
    return KEVO_OK;
  });
}
kevo_status kevo_search_options_set_progress(kevo_search_options* o, kevo_progress_fn fn, void* user) {
  const char* const api_fn = __func__;
  KEVO_REQUIRE(o, "options");
  o->progress = fn;
  o->progress_user = user;
  return KEVO_OK;
}

kevo_status kevo_search(const kevo_kernel* k, const kevo_target* t, const kevo_search_options* o, kevo_result** out) {
  return guarded([&, api_fn = __func__]() -> kevo_status {
    KEVO_REQUIRE(k, "kernel");
    KEVO_REQUIRE(t, "target");
    KEVO_REQUIRE(o, "options");
    if (out) *out = nullptr;
    // a cancel is consumed when this search returns, however it returns
    kevo::search::AsyncStop& cancel = const_cast<kevo_search_options*>(o)->cancel;
    struct Consume {
      kevo::search::AsyncStop& c;
      ~Consume() { c.reset(); }
    } consume{cancel};
    std::optional<kevo::search::KernelProblem> made;
    if (const kevo_status st = make_problem(k, t, o->runner, o->full_space, made, cancel.runner_cancel()); st != KEVO_OK)
      return st;
    const kevo::search::KernelProblem& problem = *made;
    if (auto seeds = kevo::search::parse_seed_schedules(problem, o->options.seed_schedules); !seeds)
      return fail(KEVO_ERR_PARSE, seeds.error().headline());
    kevo::search::SearchHooks hooks;
    hooks.on_engine = [&cancel](kevo::evo::Engine* e) { cancel.engine(e); };
    hooks.should_stop = [&cancel] { return cancel.requested(); };
    double best = std::numeric_limits<double>::infinity();
    std::uint64_t evals = 0;
    bool stop = false;
    if (o->progress) {
      hooks.on_evaluation = [&](const kevo::evo::Individual& ind) {
        ++evals;
        if (ind.eval.ok()) best = std::min(best, ind.eval.fitness[0]);
        stop = o->progress(o->progress_user, evals, best) != 0;
      };
      hooks.should_stop = [&] { return stop || cancel.requested(); };
    }
    auto outcome = kevo::search::run_search(problem, o->options, hooks);
    if (!outcome) return fail(KEVO_ERR_INVALID_ARGUMENT, outcome.error());
    auto res = std::make_unique<kevo_result>();
    res->evaluations = outcome->result.evaluations;
    res->valid = outcome->result.valid;
    res->stop_reason = std::string(kevo::evo::to_string(outcome->result.stop_reason));
    res->verification = outcome->verification.method;
    if (outcome->best) {
      res->has_best = true;
      res->schedule = outcome->best_schedule;
      res->latency_ns = outcome->best->eval.fitness[0];
      res->fraction_of_peak = outcome->best->eval.metric("fraction_of_peak");
    }
    const bool has_best = res->has_best;
    std::string why;
    if (!has_best)
      why = outcome->result.valid == 0
                ? fmt::format("no valid schedule in {} evaluations", outcome->result.evaluations)
                : fmt::format("no schedule verified against the reference ({} checked; first reason: {})",
                              outcome->rejected.size(),
                              outcome->rejected.empty() ? outcome->verification.message : outcome->rejected.front().verification.message);
    if (out) *out = res.release();
    return has_best ? KEVO_OK : fail(KEVO_ERR_NO_RESULT, why);
  });
}

kevo_status kevo_search_cancel(kevo_search_options* o) {
  // async-signal-safe: no allocation, no lock, no kevo_last_error (thread-local, set by fail())
  if (!o) return KEVO_ERR_INVALID_ARGUMENT;
  o->cancel.request();
  return KEVO_OK;
}

void kevo_result_free(kevo_result* r) { delete r; }
int kevo_result_has_best(const kevo_result* r) { return r && r->has_best ? 1 : 0; }
const char* kevo_result_best_schedule(const kevo_result* r) { return r ? r->schedule.c_str() : ""; }
double kevo_result_best_latency_ns(const kevo_result* r) { return r ? r->latency_ns : 0; }
double kevo_result_best_fraction_of_peak(const kevo_result* r) { return r ? r->fraction_of_peak : 0; }
const char* kevo_result_verification(const kevo_result* r) { return r ? r->verification.c_str() : ""; }
uint64_t kevo_result_evaluations(const kevo_result* r) { return r ? r->evaluations : 0; }
uint64_t kevo_result_valid(const kevo_result* r) { return r ? r->valid : 0; }
const char* kevo_result_stop_reason(const kevo_result* r) { return r ? r->stop_reason.c_str() : ""; }

}  // extern "C"
