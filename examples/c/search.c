/* kevo from C: search the schedules of a workload on a simulated trn2 NeuronCore and print the
 * verified winner. Build against an installed kevo: cc search.c -lkevo_c
 * Usage: search [WORKLOAD] [BUDGET] */
#include <kevo/kevo.h>
#include <stdio.h>
#include <stdlib.h>

static int progress(void* user, uint64_t evaluations, double best_ns) {
  uint64_t budget = *(const uint64_t*)user;
  if (evaluations % 20 == 0 || evaluations == budget)
    fprintf(stderr, "  %llu/%llu evaluations, best %.1f us\n", (unsigned long long)evaluations,
            (unsigned long long)budget, best_ns / 1e3);
  return 0; /* nonzero stops the search */
}

int main(int argc, char** argv) {
  const char* spec = argc > 1 ? argv[1] : "matmul:M=512,N=512,K=512,dtype=bf16";
  uint64_t budget = argc > 2 ? strtoull(argv[2], NULL, 10) : 200;
  kevo_kernel* kernel = NULL;
  kevo_target* target = NULL;
  kevo_search_options* options = NULL;
  kevo_result* result = NULL;
  int rc = 1;

  if (kevo_abi_version() != KEVO_ABI_VERSION) {
    fprintf(stderr, "kevo: built against ABI %d, running with %d\n", KEVO_ABI_VERSION, kevo_abi_version());
    return 1;
  }
  if (kevo_kernel_workload(spec, &kernel) != KEVO_OK || kevo_target_load("trn2", &target) != KEVO_OK ||
      kevo_search_options_new(&options) != KEVO_OK) {
    fprintf(stderr, "kevo: %s\n", kevo_last_error());
    goto done;
  }
  if (kevo_search_options_set_budget(options, budget) != KEVO_OK || kevo_search_options_set_seed(options, 7) != KEVO_OK ||
      kevo_search_options_set_progress(options, progress, &budget) != KEVO_OK) {
    fprintf(stderr, "kevo: %s\n", kevo_last_error());
    goto done;
  }
  printf("kevo %s: searching %s on %s\n", kevo_version(), kevo_kernel_name(kernel), kevo_target_name(target));
  kevo_status s = kevo_search(kernel, target, options, &result);
  if (s != KEVO_OK) {
    fprintf(stderr, "kevo: search: %s (%s)\n", kevo_last_error(), kevo_status_name(s));
    goto done;
  }
  printf("best: %.2f us, %.1f%% of peak, verified (%s), after %llu evaluations\n",
         kevo_result_best_latency_ns(result) / 1e3, 100 * kevo_result_best_fraction_of_peak(result),
         kevo_result_verification(result), (unsigned long long)kevo_result_evaluations(result));
  printf("schedule: %s\n", kevo_result_best_schedule(result));
  rc = 0;
done:
  kevo_result_free(result);
  kevo_search_options_free(options);
  kevo_target_free(target);
  kevo_kernel_free(kernel);
  return rc;
}
