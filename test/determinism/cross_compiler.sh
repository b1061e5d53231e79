#!/usr/bin/env bash
# The same seeded searches with two kevo binaries built by different compilers (CI: GCC's release
# build and clang's sanitizer build) must give the same history and the same verified winner:
# determinism ("same seed, deterministic runner, same result") must not hang on the compiler.
# Order-of-evaluation slips (two draws from one generator as arguments of one call) show here as a
# different history_hash; so do floating-point contraction differences in anything that decides.
#   test/determinism/cross_compiler.sh KEVO_A KEVO_B [WORKDIR]
set -euo pipefail
a=${1:?kevo binary A}
b=${2:?kevo binary B}
work=${3:-$(mktemp -d)}
mkdir -p "$work"
# contractions with edge tiles (one with a fused epilogue) and a row kernel; GA, islands, MAP-Elites
jobs=("--workload matmul_bias_act:M=200,N=300,K=260,act=gelu --algorithm ga --seed 5 --budget 400"
      "--workload matmul:M=640,N=384,K=900,dtype=bf16 --algorithm islands --seed 3 --budget 400"
      "--workload layernorm:R=256,C=1000 --algorithm map-elites --seed 9 --budget 300")
# what must agree: the history's hash, the evaluation count, the winner's latency and schedule
summary() {
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); b=j["best"]; print(j["history_hash"], j["evaluations"], b["latency_ns"] if b else None, b["schedule"].strip().replace(chr(10), " / ") if b else None)' "$1"
}
status=0
for i in "${!jobs[@]}"; do
  for side in a b; do
    bin=$a; [[ $side == b ]] && bin=$b
    # shellcheck disable=SC2086
    "$bin" search ${jobs[$i]} --threads 2 --no-db -q --out "$work/$i-$side" >/dev/null
  done
  ha=$(summary "$work/$i-a/result.json")
  hb=$(summary "$work/$i-b/result.json")
  if [[ "$ha" == "$hb" ]]; then
    echo "determinism: ${jobs[$i]}: same history and winner under both builds (${ha%% *})"
  else
    echo "determinism: ${jobs[$i]}: the builds differ" >&2
    echo "  $a: $ha" >&2
    echo "  $b: $hb" >&2
    status=1
  fi
done
exit $status
