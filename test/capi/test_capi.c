/* The C API from C (include/kevo/kevo.h): error codes and messages for bad input, measurements,
 * a deterministic search whose winner verified, a progress callback that stops it, and
 * kevo_search_cancel from another thread while a cmd: worker hangs. */
#define _POSIX_C_SOURCE 200809L
#include <kevo/kevo.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int failures = 0;
#define CHECK(cond)                                                         \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                           \
    }                                                                       \
  } while (0)

static const char* kKir =
    "kernel mm(A: bf16[M=256, K=256], B: bf16[K, N=512]) -> (C: bf16[M, N]) {\n"
    "  C[m, n] = sum(k) A[m, k] * B[k, n]\n"
    "}\n";

static int stop_after_five(void* user, uint64_t evaluations, double best_ns) {
  int* calls = (int*)user;
  ++*calls;
  (void)best_ns;
  return evaluations >= 5;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Cancels the search once the worker has hung (its marker file exists), however slow the machine. */
struct canceller {
  kevo_search_options* options;
  char marker[512];
  double cancelled_at;
};
static void* cancel_once_hanging(void* arg) {
  struct canceller* c = (struct canceller*)arg;
  const double deadline = now_s() + 120;
  while (access(c->marker, F_OK) != 0 && now_s() < deadline) {
    struct timespec ms50 = {0, 50000000};
    nanosleep(&ms50, NULL);
  }
  c->cancelled_at = now_s();
  if (kevo_search_cancel(c->options) != KEVO_OK) ++failures;
  return NULL;
}

int main(void) {
  kevo_kernel* k = NULL;
  kevo_target* t = NULL;
  kevo_measurement* m = NULL;
  kevo_search_options* o = NULL;
  kevo_result* r = NULL;
  char buf[4096];
  size_t needed = 0;

  CHECK(kevo_abi_version() == KEVO_ABI_VERSION);
  CHECK(strlen(kevo_version()) > 0);

  /* Bad input: typed codes, located one-line messages, nothing allocated. */
  CHECK(kevo_kernel_parse("kernel broken(A: bf16[M=4]) -> (C: bf16[M]) { C[m] = A[q] }", &k) == KEVO_ERR_PARSE);
  CHECK(k == NULL);
  CHECK(strstr(kevo_last_error(), "<kir>:1:") != NULL);
  CHECK(strchr(kevo_last_error(), '\n') == NULL);
  CHECK(kevo_kernel_workload("matmul:M=-3", &k) == KEVO_ERR_NOT_FOUND);
  CHECK(kevo_kernel_workload("no_such_kernel:X=1", &k) == KEVO_ERR_NOT_FOUND);
  CHECK(kevo_target_load("trn9", &t) == KEVO_ERR_NOT_FOUND);
  CHECK(kevo_kernel_parse(NULL, &k) == KEVO_ERR_INVALID_ARGUMENT);
  CHECK(strcmp(kevo_last_error(), "kevo_kernel_parse: kir_text is NULL") == 0); /* names the function called */
  CHECK(kevo_search(NULL, NULL, NULL, &r) == KEVO_ERR_INVALID_ARGUMENT);
  CHECK(strcmp(kevo_last_error(), "kevo_search: kernel is NULL") == 0);
  CHECK(kevo_measure(NULL, NULL, NULL, NULL, &m) == KEVO_ERR_INVALID_ARGUMENT);
  CHECK(strcmp(kevo_last_error(), "kevo_measure: kernel is NULL") == 0);
  CHECK(kevo_measure_in_space(NULL, NULL, NULL, NULL, NULL, &m) == KEVO_ERR_INVALID_ARGUMENT);
  CHECK(strcmp(kevo_last_error(), "kevo_measure_in_space: kernel is NULL") == 0);
  CHECK(kevo_search_options_set_seed(NULL, 1) == KEVO_ERR_INVALID_ARGUMENT);
  CHECK(strcmp(kevo_last_error(), "kevo_search_options_set_seed: options is NULL") == 0);
  CHECK(kevo_target_load("/nonexistent/kevo_target.json", &t) == KEVO_ERR_NOT_FOUND);
  {
    /* A target file that does not parse is a parse error, located in the file. */
    static const char* path = "test_capi_bad_target.json";
    FILE* f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
      fputs("{\"name\": \"bad\",\n  oops\n}\n", f);
      fclose(f);
      CHECK(kevo_target_load(path, &t) == KEVO_ERR_PARSE);
      CHECK(t == NULL);
      CHECK(strstr(kevo_last_error(), path) != NULL);
      CHECK(strchr(kevo_last_error(), '\n') == NULL);
      remove(path);
    }
  }
  kevo_kernel_free(NULL); /* NULL is accepted by every free */

  CHECK(kevo_kernel_parse(kKir, &k) == KEVO_OK);
  CHECK(strcmp(kevo_kernel_name(k), "mm") == 0);
  CHECK(strstr(kevo_kernel_text(k), "sum(k)") != NULL);
  CHECK(kevo_target_load("trn2", &t) == KEVO_OK);
  CHECK(strcmp(kevo_target_name(t), "trn2") == 0);

  /* The default schedule: size query, then the text; truncation is NUL-terminated. */
  CHECK(kevo_default_schedule(k, t, NULL, 0, &needed) == KEVO_OK);
  CHECK(needed > 10 && needed < sizeof buf);
  CHECK(kevo_default_schedule(k, t, buf, sizeof buf, NULL) == KEVO_OK);
  CHECK(strlen(buf) + 1 == needed);
  CHECK(strstr(buf, "tile") != NULL);
  {
    char small[8];
    CHECK(kevo_default_schedule(k, t, small, sizeof small, NULL) == KEVO_OK);
    CHECK(strlen(small) == 7);
  }

  /* Measure: the default schedule, a schedule text that does not parse, one that cannot run. */
  CHECK(kevo_measure(k, t, NULL, "sim", &m) == KEVO_OK);
  CHECK(strcmp(kevo_measurement_status(m), "ok") == 0);
  CHECK(kevo_measurement_latency_ns(m) > 0);
  CHECK(kevo_measurement_fraction_of_peak(m) > 0 && kevo_measurement_fraction_of_peak(m) <= 1);
  const double default_ns = kevo_measurement_latency_ns(m);
  kevo_measurement_free(m);
  m = NULL;
  CHECK(kevo_measure(k, t, "tile m=banana", "sim", &m) == KEVO_ERR_PARSE);
  CHECK(m == NULL);
  CHECK(strstr(kevo_last_error(), "banana") != NULL);
  CHECK(kevo_measure(k, t, NULL, "warp", &m) == KEVO_ERR_NOT_FOUND);
  CHECK(strstr(kevo_last_error(), "sim, cpu, cmd:COMMAND") != NULL);
  CHECK(kevo_measure(k, t, NULL, "cpu", &m) == KEVO_ERR_NOT_FOUND); /* cpu needs target host */

  /* The full space: a structure the searched space does not offer (A loaded in pairs of m tiles)
   * parses and measures there, and is a parse error naming --space full in the searched one. */
  {
    static const char* pairs =
        "tile m=128 n=512 k=128; block m=2; order m.b n.b k.b k n m; stationary A; transpose A=strided; load A@k x2 dma=pair q=1";
    CHECK(kevo_measure_in_space(k, t, pairs, "sim", "full", &m) == KEVO_OK);
    CHECK(m != NULL && kevo_measurement_latency_ns(m) > 0);
    kevo_measurement_free(m);
    m = NULL;
    CHECK(kevo_measure(k, t, pairs, "sim", &m) == KEVO_ERR_PARSE);
    CHECK(strstr(kevo_last_error(), "full space") != NULL);
    CHECK(kevo_measure_in_space(k, t, pairs, "sim", "searched", &m) == KEVO_ERR_PARSE);
    CHECK(kevo_measure_in_space(k, t, pairs, "sim", "everything", &m) == KEVO_ERR_INVALID_ARGUMENT);
    CHECK(strstr(kevo_last_error(), "searched, full") != NULL);
    CHECK(m == NULL);
  }

  /* A kernel kevo cannot schedule (a scalar op: no loop index) is KEVO_ERR_UNSUPPORTED naming the op. */
  {
    kevo_kernel* two = NULL;
    char tmp[64];
    CHECK(kevo_kernel_parse("kernel scalar(x: fp32[]) -> (y: fp32[]) {\n  y[] = x[] * 2\n}\n", &two) == KEVO_OK);
    CHECK(kevo_default_schedule(two, t, tmp, sizeof tmp, NULL) == KEVO_ERR_UNSUPPORTED);
    CHECK(strstr(kevo_last_error(), "op 'y'") != NULL);
    CHECK(strstr(kevo_last_error(), "[no_layout]") != NULL);
    CHECK(strcmp(kevo_status_name(KEVO_ERR_UNSUPPORTED), "unsupported") == 0);
    CHECK(kevo_measure(two, t, NULL, "sim", &m) == KEVO_ERR_UNSUPPORTED);
    CHECK(m == NULL);
    kevo_kernel_free(two);
  }

  /* Options are validated. */
  CHECK(kevo_search_options_new(&o) == KEVO_OK);
  CHECK(kevo_search_options_set_threads(o, 0) == KEVO_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kevo_last_error(), "threads") != NULL);
  CHECK(kevo_search_options_set_population(o, 1) == KEVO_ERR_INVALID_ARGUMENT);
  CHECK(kevo_search_options_set_budget(o, 0) == KEVO_ERR_INVALID_ARGUMENT);
  CHECK(kevo_search_options_set_time_limit(o, -3) == KEVO_ERR_INVALID_ARGUMENT);
  CHECK(kevo_search_options_set_time_limit(o, NAN) == KEVO_ERR_INVALID_ARGUMENT);
  CHECK(kevo_search_options_set_algorithm(o, "annealing") == KEVO_ERR_INVALID_ARGUMENT);
  CHECK(kevo_search_options_set_space(o, "largest") == KEVO_ERR_INVALID_ARGUMENT);
  CHECK(kevo_search_options_set_space(o, NULL) == KEVO_ERR_INVALID_ARGUMENT);
  CHECK(kevo_search_options_set_algorithm(o, "ga") == KEVO_OK);
  CHECK(kevo_search_options_set_budget(o, 60) == KEVO_OK);
  CHECK(kevo_search_options_set_population(o, 12) == KEVO_OK);
  CHECK(kevo_search_options_set_seed(o, 3) == KEVO_OK);

  /* A search: verified winner, no slower than the default schedule (which seeds it). */
  CHECK(kevo_search_options_add_seed_schedule(o, buf) == KEVO_OK);
  CHECK(kevo_search(k, t, o, &r) == KEVO_OK);
  CHECK(kevo_result_has_best(r));
  CHECK(kevo_result_evaluations(r) == 60);
  CHECK(kevo_result_valid(r) > 0);
  CHECK(kevo_result_best_latency_ns(r) > 0 && kevo_result_best_latency_ns(r) <= default_ns);
  CHECK(strcmp(kevo_result_verification(r), "interpreter") == 0 || strcmp(kevo_result_verification(r), "reduced_shape") == 0);
  CHECK(strcmp(kevo_result_stop_reason(r), "evaluations") == 0);
  {
    /* Determinism: the same seed gives the same winner. */
    char first[4096];
    kevo_result* r2 = NULL;
    snprintf(first, sizeof first, "%s", kevo_result_best_schedule(r));
    CHECK(kevo_search(k, t, o, &r2) == KEVO_OK);
    CHECK(strcmp(first, kevo_result_best_schedule(r2)) == 0);
    CHECK(kevo_result_best_latency_ns(r2) == kevo_result_best_latency_ns(r));
    kevo_result_free(r2);
  }
  kevo_result_free(r);
  r = NULL;

  /* A bad seed schedule is a located parse error; a progress callback stops the search. */
  {
    kevo_search_options* bad = NULL;
    CHECK(kevo_search_options_new(&bad) == KEVO_OK);
    CHECK(kevo_search_options_add_seed_schedule(bad, "tile q=12") == KEVO_OK);
    CHECK(kevo_search(k, t, bad, &r) == KEVO_ERR_PARSE);
    CHECK(strstr(kevo_last_error(), "<seed schedule 1>") != NULL);
    CHECK(r == NULL);
    kevo_search_options_free(bad);
  }
  {
    /* A seed schedule written in the full space: refused in the searched space, searched from in
     * the full one (the winner no slower than it). */
    static const char* pairs =
        "tile m=128 n=512 k=128; block m=2; order m.b n.b k.b k n m; stationary A; transpose A=strided; load A@k x2 dma=pair q=1";
    kevo_search_options* fo = NULL;
    double pairs_ns = 0;
    CHECK(kevo_measure_in_space(k, t, pairs, "sim", "full", &m) == KEVO_OK);
    pairs_ns = kevo_measurement_latency_ns(m);
    kevo_measurement_free(m);
    m = NULL;
    CHECK(kevo_search_options_new(&fo) == KEVO_OK);
    CHECK(kevo_search_options_set_budget(fo, 30) == KEVO_OK);
    CHECK(kevo_search_options_add_seed_schedule(fo, pairs) == KEVO_OK);
    CHECK(kevo_search(k, t, fo, &r) == KEVO_ERR_PARSE);
    CHECK(strstr(kevo_last_error(), "full space") != NULL);
    CHECK(r == NULL);
    CHECK(kevo_search_options_set_space(fo, "full") == KEVO_OK);
    CHECK(kevo_search(k, t, fo, &r) == KEVO_OK);
    CHECK(kevo_result_has_best(r));
    CHECK(kevo_result_best_latency_ns(r) > 0 && kevo_result_best_latency_ns(r) <= pairs_ns);
    kevo_result_free(r);
    r = NULL;
    kevo_search_options_free(fo);
  }
  {
    int calls = 0;
    CHECK(kevo_search_options_set_budget(o, 500) == KEVO_OK);
    CHECK(kevo_search_options_set_progress(o, stop_after_five, &calls) == KEVO_OK);
    CHECK(kevo_search(k, t, o, &r) == KEVO_OK);
    CHECK(calls >= 5);
    CHECK(kevo_result_evaluations(r) < 500);
    CHECK(strcmp(kevo_result_stop_reason(r), "requested") == 0);
    kevo_result_free(r);
    r = NULL;
  }

  {
    /* A worker that answers 20 candidates, then hangs: without the cancel the search would wait
     * for the candidate's 300 s timeout. With it the worker is killed at once, the search stops
     * with a verified winner, and the cut-short candidate is not counted as a failure. */
    char dir[] = "/tmp/kevo_capi_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char worker[512], runner[600];
    struct canceller c;
    snprintf(worker, sizeof worker, "%s/worker.py", dir);
    snprintf(c.marker, sizeof c.marker, "%s/hanging", dir);
    FILE* f = fopen(worker, "w");
    CHECK(f != NULL);
    if (f) {
      fprintf(f,
              "import json, sys, time\n"
              "for n, line in enumerate(sys.stdin):\n"
              "    if n >= 20:\n"
              "        open('%s', 'w').close()\n"
              "        time.sleep(100)\n"
              "    req = json.loads(line)\n"
              "    print(json.dumps({'v': 1, 'id': req['id'], 'status': 'ok',\n"
              "                      'latency_ns': [1000.0 + n] * req.get('repeats', 3)}), flush=True)\n",
              c.marker);
      fclose(f);
    }
    snprintf(runner, sizeof runner, "cmd:python3 %s", worker);
    kevo_search_options* co = NULL;
    CHECK(kevo_search_options_new(&co) == KEVO_OK);
    CHECK(kevo_search_options_set_runner(co, runner) == KEVO_OK);
    CHECK(kevo_search_options_set_budget(co, 50) == KEVO_OK);
    CHECK(kevo_search_options_set_population(co, 8) == KEVO_OK);
    CHECK(kevo_search_cancel(NULL) == KEVO_ERR_INVALID_ARGUMENT);
    c.options = co;
    c.cancelled_at = 0;
    pthread_t th;
    CHECK(pthread_create(&th, NULL, cancel_once_hanging, &c) == 0);
    const kevo_status st = kevo_search(k, t, co, &r);
    const double returned_at = now_s();
    pthread_join(th, NULL);
    CHECK(st == KEVO_OK);
    CHECK(access(c.marker, F_OK) == 0);
    CHECK(returned_at - c.cancelled_at < 10); /* not the candidate's 300 s timeout */
    CHECK(strcmp(kevo_result_stop_reason(r), "requested") == 0);
    CHECK(kevo_result_evaluations(r) > 0 && kevo_result_evaluations(r) <= 20);
    CHECK(kevo_result_valid(r) == kevo_result_evaluations(r)); /* the cancelled one is not a failure */
    CHECK(kevo_result_has_best(r));
    kevo_result_free(r);
    r = NULL;
    /* the cancel was consumed: the next search with these options runs (its worker answers all) */
    f = fopen(worker, "w");
    if (f) {
      fprintf(f,
              "import json, sys\n"
              "for n, line in enumerate(sys.stdin):\n"
              "    req = json.loads(line)\n"
              "    print(json.dumps({'v': 1, 'id': req['id'], 'status': 'ok',\n"
              "                      'latency_ns': [1000.0 + n] * req.get('repeats', 3)}), flush=True)\n");
      fclose(f);
    }
    CHECK(kevo_search_options_set_budget(co, 12) == KEVO_OK);
    CHECK(kevo_search(k, t, co, &r) == KEVO_OK);
    CHECK(kevo_result_evaluations(r) == 12);
    CHECK(strcmp(kevo_result_stop_reason(r), "requested") != 0);
    kevo_result_free(r);
    r = NULL;
    /* a cancel before the search starts stops it at its first check */
    CHECK(kevo_search_cancel(co) == KEVO_OK);
    const kevo_status early = kevo_search(k, t, co, &r);
    CHECK(early == KEVO_ERR_NO_RESULT);
    CHECK(r != NULL && kevo_result_evaluations(r) == 0);
    kevo_result_free(r);
    r = NULL;
    kevo_search_options_free(co);
    unlink(c.marker);
    unlink(worker);
    rmdir(dir);
  }

  kevo_search_options_free(o);
  kevo_target_free(t);
  kevo_kernel_free(k);
  if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
  else printf("all C API checks passed\n");
  return failures ? 1 : 0;
}
