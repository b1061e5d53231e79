#!/usr/bin/env bash
# Builds the .kir parser fuzzer with clang++ -fsanitize=fuzzer,address,undefined into build/fuzz
# and runs a bounded number of iterations from a seed corpus of every workload's text.
#   fuzz/run_bounded.sh [runs=20000] [max_seconds=120] [lowering_runs=300]
# Exits 0 when clang++ is absent (nothing to fuzz with), non-zero when the fuzzer finds a crash.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-20000}
secs=${2:-120}
out=${KEVO_FUZZ_DIR:-$root/build/fuzz}
cxx=${KEVO_FUZZ_CXX:-clang++}
if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "fuzz: $cxx not found; skipping"
  exit 0
fi
mkdir -p "$out/seeds" "$out/corpus"
srcs=(fuzz/fuzz_kir.cpp lib/core/error.cpp lib/core/hash.cpp lib/core/genes.cpp
      lib/ir/kernel.cpp lib/ir/check.cpp lib/ir/graph.cpp lib/ir/parse.cpp lib/ir/print.cpp
      lib/ir/builder.cpp lib/ir/workloads.cpp)
bin="$out/fuzz_kir"
# rebuild only when a source or header is newer than the binary
if [[ ! -x "$bin" ]] || [[ -n "$(cd "$root" && find fuzz lib/ir lib/core include/kevo/ir include/kevo/core -newer "$bin" -type f | head -1)" ]]; then
  echo "fuzz: building $bin"
  objs=()
  mkdir -p "$out/obj"
  pids=()
  for s in "${srcs[@]}"; do
    o="$out/obj/$(echo "$s" | tr '/' '_').o"
    objs+=("$o")
    (cd "$root" && "$cxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-omit-frame-pointer \
        -Iinclude -Ilib/ir -c "$s" -o "$o") &
    pids+=($!)
    if (( ${#pids[@]} >= 2 )); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
  done
  for p in "${pids[@]}"; do wait "$p"; done
  "$cxx" -fsanitize=fuzzer,address,undefined "${objs[@]}" -lfmt -o "$bin"
fi
KEVO_FUZZ_WRITE_SEEDS="$out/seeds" "$bin" >/dev/null
echo "fuzz: $runs runs, at most ${secs}s"
"$bin" -runs="$runs" -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$out/" "$out/corpus" "$out/seeds" 2>&1 | tail -25

# The LLM reply parser (std-only: one source file besides the target).
rbin="$out/fuzz_llm_reply"
if [[ ! -x "$rbin" ]] || [[ -n "$(cd "$root" && find fuzz/fuzz_llm_reply.cpp lib/llm/reply.cpp include/kevo/llm -newer "$rbin" -type f | head -1)" ]]; then
  echo "fuzz: building $rbin"
  (cd "$root" && "$cxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-omit-frame-pointer -Iinclude \
      fuzz/fuzz_llm_reply.cpp lib/llm/reply.cpp -o "$rbin")
fi
mkdir -p "$out/corpus_llm"
echo "fuzz: LLM reply parser, $runs runs, at most ${secs}s"
"$rbin" -runs="$runs" -max_total_time="$secs" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$out/llm-" "$out/corpus_llm" 2>&1 | tail -8

# The lowering's differential test over (kernel text, genome bytes): schedule and lower carry the
# fuzzer's coverage instrumentation; the interpreter, targets, ir and core come from the release
# build (the README's test command builds it first). Skipped, saying so, when that build is absent.
rel=${KEVO_FUZZ_RELEASE_DIR:-$root/build/release}
lruns=${3:-3000}
if [[ ! -f "$rel/lib/verify/libkevo_verify.a" ]]; then
  echo "fuzz: lowering target skipped ($rel has no release build)"
  exit 0
fi
lbin="$out/fuzz_lower"
# every source of the schedule and lower modules, the nest kinds' folders included (lib/nests/<kind>/)
mapfile -t lsrcs < <(cd "$root" && ls fuzz/fuzz_lower.cpp lib/schedule/*.cpp lib/lower/*.cpp lib/nests/*/*.cpp)
if [[ ! -x "$lbin" ]] || [[ -n "$(cd "$root" && find fuzz/fuzz_lower.cpp lib/schedule lib/lower lib/nests include/kevo "$rel/lib" -newer "$lbin" -type f | head -1)" ]]; then
  echo "fuzz: building $lbin"
  mkdir -p "$out/obj"
  lobjs=()
  pids=()
  for s in "${lsrcs[@]}"; do
    o="$out/obj/lower_$(echo "$s" | tr '/' '_').o"
    lobjs+=("$o")
    flag=-fsanitize=fuzzer-no-link,address,undefined
    [[ "$s" == fuzz/* ]] && flag=-fsanitize=fuzzer,address,undefined
    (cd "$root" && "$cxx" -std=c++20 -O1 -g "$flag" -fno-omit-frame-pointer -Iinclude -Ilib -Ilib/lower -Ilib/schedule \
        -c "$s" -o "$o") &
    pids+=($!)
    if (( ${#pids[@]} >= 2 )); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
  done
  for p in "${pids[@]}"; do wait "$p"; done
  blas=()
  for l in openblas mvec; do
    if [[ -n "$(ldconfig -p 2>/dev/null | grep "lib$l\.so")" ]]; then blas+=("-l$l"); fi
  done
  "$cxx" -fsanitize=fuzzer,address,undefined "${lobjs[@]}" "$rel/lib/verify/libkevo_verify.a" \
    "$rel/lib/target/libkevo_target.a" "$rel/lib/ir/libkevo_ir.a" "$rel/lib/core/libkevo_core.a" \
    -lfmt "${blas[@]}" -lpthread -o "$lbin"
fi
mkdir -p "$out/seeds_lower" "$out/corpus_lower"
KEVO_FUZZ_WRITE_SEEDS="$out/seeds_lower" "$lbin" >/dev/null
echo "fuzz: lowering differential, $lruns runs, at most ${secs}s"
"$lbin" -runs="$lruns" -max_total_time="$secs" -max_len=4096 -timeout=60 -rss_limit_mb=4096 \
  -print_final_stats=1 -artifact_prefix="$out/lower-" "$out/corpus_lower" "$out/seeds_lower" 2>&1 | tail -8
