/* kevo's C API: kernels, targets, schedules, one-off measurements and searches through opaque
 * handles, for front ends in any language with a C FFI (Rust, Julia, Go, a compiler's autotuner).
 *
 * Conventions
 *  - Every fallible call returns a kevo_status; KEVO_OK is 0. On failure, kevo_last_error()
 *    returns a one-line message naming where and what (a located message for bad text). The
 *    message is per thread and stays valid until the next failing call on that thread.
 *  - No C++ exception ever crosses this boundary; out-of-memory is KEVO_ERR_INTERNAL.
 *  - Handles are created by kevo_*_new / kevo_*_parse / kevo_search and released by the matching
 *    kevo_*_free (NULL is accepted). They are immutable once created: any number of threads may
 *    use one handle at once, except that a kevo_search_options is not synchronised (do not change
 *    it while another thread passes it to kevo_search).
 *  - Strings returned by getters belong to the handle and live as long as it does.
 *  - ABI: KEVO_ABI_VERSION changes whenever a declaration here changes incompatibly;
 *    kevo_abi_version() is the value the library was built with. Check it at start-up.
 */
#ifndef KEVO_KEVO_H
#define KEVO_KEVO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KEVO_ABI_VERSION 1

#if defined(__GNUC__)
#define KEVO_API __attribute__((visibility("default")))
#else
#define KEVO_API
#endif

typedef enum kevo_status {
  KEVO_OK = 0,
  KEVO_ERR_INVALID_ARGUMENT = 1, /* a NULL handle or out-of-range option */
  KEVO_ERR_PARSE = 2,            /* kernel, schedule or target text that does not parse (located message) */
  KEVO_ERR_NOT_FOUND = 3,        /* an unknown workload, target or runner name */
  KEVO_ERR_INVALID_SCHEDULE = 4, /* a schedule that parses but cannot run (kevo_last_error says why) */
  KEVO_ERR_IO = 5,               /* a file or process failure */
  KEVO_ERR_NO_RESULT = 6,        /* a search found no schedule that measured and verified */
  KEVO_ERR_INTERNAL = 7,         /* a broken invariant or out of memory: a bug, please report it */
  KEVO_ERR_UNSUPPORTED = 8       /* a kernel kevo cannot schedule, e.g. a contraction over two indices (kevo_last_error says which op and why) */
} kevo_status;

typedef struct kevo_kernel kevo_kernel;
typedef struct kevo_target kevo_target;
typedef struct kevo_measurement kevo_measurement;
typedef struct kevo_search_options kevo_search_options;
typedef struct kevo_result kevo_result;

KEVO_API int kevo_abi_version(void);
KEVO_API const char* kevo_version(void); /* "0.1.0" */
KEVO_API const char* kevo_last_error(void);
KEVO_API const char* kevo_status_name(kevo_status s); /* "ok", "parse", ... */

/* Kernels: .kir text (docs/KIR.md) or a workload name such as "matmul:M=512,N=512,K=512,dtype=bf16". */
KEVO_API kevo_status kevo_kernel_parse(const char* kir_text, kevo_kernel** out);
KEVO_API kevo_status kevo_kernel_workload(const char* spec, kevo_kernel** out);
KEVO_API void kevo_kernel_free(kevo_kernel* k);
KEVO_API const char* kevo_kernel_name(const kevo_kernel* k);
KEVO_API const char* kevo_kernel_text(const kevo_kernel* k); /* canonical .kir text */

/* Targets: a built-in name (trn1, trn2, trn3, host) or a target .json file. A name that is neither
 * is KEVO_ERR_NOT_FOUND; a file that does not parse KEVO_ERR_PARSE; one that cannot be read
 * KEVO_ERR_IO. */
KEVO_API kevo_status kevo_target_load(const char* name_or_path, kevo_target** out);
KEVO_API void kevo_target_free(kevo_target* t);
KEVO_API const char* kevo_target_name(const kevo_target* t);

/* The default schedule of a kernel on a target, as schedule text (docs/SCHEDULE.md). The string
 * is written to `buf` (NUL-terminated, truncated to `size`); `*needed` (may be NULL) receives the
 * full length + 1. */
KEVO_API kevo_status kevo_default_schedule(const kevo_kernel* k, const kevo_target* t, char* buf, size_t size,
                                           size_t* needed);

/* Measures one schedule (NULL or "" = the default schedule) with a runner: "sim", "cpu" (target
 * host) or "cmd:COMMAND". An invalid schedule is KEVO_ERR_INVALID_SCHEDULE; a runner failure
 * (timeout, crash) is KEVO_OK with kevo_measurement_status() saying so. */
KEVO_API kevo_status kevo_measure(const kevo_kernel* k, const kevo_target* t, const char* schedule_text,
                                  const char* runner, kevo_measurement** out);
/* As kevo_measure, with the schedule read in a named space: "searched" (NULL or "" too: the space
 * searches explore) or "full" (adds structures no search needs by default, such as dma=pair and
 * transpose=dma_transpose_region; docs/SCHEDULE.md). A full-space value read in the searched space
 * is KEVO_ERR_PARSE; another name is KEVO_ERR_INVALID_ARGUMENT. */
KEVO_API kevo_status kevo_measure_in_space(const kevo_kernel* k, const kevo_target* t, const char* schedule_text,
                                           const char* runner, const char* space, kevo_measurement** out);
KEVO_API void kevo_measurement_free(kevo_measurement* m);
KEVO_API const char* kevo_measurement_status(const kevo_measurement* m); /* "ok", "timeout", "crashed", ... */
KEVO_API const char* kevo_measurement_message(const kevo_measurement* m);
KEVO_API double kevo_measurement_latency_ns(const kevo_measurement* m);
KEVO_API double kevo_measurement_fraction_of_peak(const kevo_measurement* m);
KEVO_API const char* kevo_measurement_bottleneck(const kevo_measurement* m);

/* Search options: defaults GA, seed 0, 1 thread, population 32, 2000 evaluations (the CLI's `kevo search`
   differs: seed 1, one thread per core, a GA population of 16). */
KEVO_API kevo_status kevo_search_options_new(kevo_search_options** out);
KEVO_API void kevo_search_options_free(kevo_search_options* o);
/* "ga", "islands", "map-elites", "async", "random", "exhaustive" */
KEVO_API kevo_status kevo_search_options_set_algorithm(kevo_search_options* o, const char* algorithm);
KEVO_API kevo_status kevo_search_options_set_seed(kevo_search_options* o, uint64_t seed);
KEVO_API kevo_status kevo_search_options_set_threads(kevo_search_options* o, int threads);           /* >= 1 */
KEVO_API kevo_status kevo_search_options_set_population(kevo_search_options* o, int population);    /* >= 2 */
KEVO_API kevo_status kevo_search_options_set_budget(kevo_search_options* o, uint64_t evaluations);  /* >= 1 */
KEVO_API kevo_status kevo_search_options_set_time_limit(kevo_search_options* o, double seconds);    /* 0 = none */
KEVO_API kevo_status kevo_search_options_set_runner(kevo_search_options* o, const char* runner);    /* default "sim" */
/* The space searched: "searched" (the default) or "full" (as kevo_measure_in_space). */
KEVO_API kevo_status kevo_search_options_set_space(kevo_search_options* o, const char* space);
/* A schedule evaluated first (repeatable); kevo_search returns KEVO_ERR_PARSE for one that does
 * not parse in the searched space (the message names it "<seed schedule N>"). */
KEVO_API kevo_status kevo_search_options_add_seed_schedule(kevo_search_options* o, const char* schedule_text);
/* Called on the searching thread after every evaluation with the evaluations so far and the best
 * latency so far (ns; +inf before any valid one). Return nonzero to stop the search: the current
 * batch finishes, the winner is verified, and kevo_search returns normally. */
typedef int (*kevo_progress_fn)(void* user, uint64_t evaluations, double best_latency_ns);
KEVO_API kevo_status kevo_search_options_set_progress(kevo_search_options* o, kevo_progress_fn fn, void* user);
/* Stops the kevo_search running with these options at once, from another thread or a signal
 * handler (async-signal-safe: atomic stores only; it sets no kevo_last_error). Measurements in
 * flight on a "cmd:" runner are cancelled (the workers' process groups killed within 0.1 s) and
 * not counted; the best so far is verified and kevo_search returns as after a stop, with stop
 * reason "requested" (KEVO_ERR_NO_RESULT if nothing valid was measured yet). A cancel while no
 * search runs stops the next one to start with these options; kevo_search consumes it when it
 * returns. One search at a time per options object. KEVO_ERR_INVALID_ARGUMENT for NULL. */
KEVO_API kevo_status kevo_search_cancel(kevo_search_options* o);

/* Searches schedules of `k` on `t`. On KEVO_OK the winner verified against the reference.
 * KEVO_ERR_NO_RESULT: nothing valid verified (the result, if `out` is set, still holds the counts). */
KEVO_API kevo_status kevo_search(const kevo_kernel* k, const kevo_target* t, const kevo_search_options* o,
                                 kevo_result** out);
KEVO_API void kevo_result_free(kevo_result* r);
KEVO_API int kevo_result_has_best(const kevo_result* r);
KEVO_API const char* kevo_result_best_schedule(const kevo_result* r); /* "" without a winner */
KEVO_API double kevo_result_best_latency_ns(const kevo_result* r);
KEVO_API double kevo_result_best_fraction_of_peak(const kevo_result* r);
KEVO_API const char* kevo_result_verification(const kevo_result* r); /* "interpreter", "reduced_shape", ... */
KEVO_API uint64_t kevo_result_evaluations(const kevo_result* r);
KEVO_API uint64_t kevo_result_valid(const kevo_result* r);
KEVO_API const char* kevo_result_stop_reason(const kevo_result* r);

#ifdef __cplusplus
}
#endif

#endif /* KEVO_KEVO_H */
