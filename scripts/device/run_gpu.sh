#!/bin/bash
# Runs kevo on the GPU machine (docs/GPU.md). Expects the bundle from scripts/device/bundle.sh in
# dist/device (carried there) and python3 with torch and Triton. Everything goes to $OUT (default
# ./gpu-out): logs, baselines.json, and one folder per searched row (result.json, best.triton.py,
# history.jsonl).
#   run_gpu.sh probe            versions, the bundle runs, the GPU smoke test (small kernels)
#   run_gpu.sh measure [ROWS]   baselines, then a short kevo search per row (ROWS: names below)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
KEVO=${KEVO:-$PWD/dist/device/bin/kevo}
WORKER="cmd:python3 $PWD/examples/runners/triton_worker.py"
mode=${1:-probe}
shift || true
export KEVO_TRITON_CACHE=${KEVO_TRITON_CACHE:-/tmp/kevo_triton_modules}

if [ "$mode" = probe ]; then
  { nvidia-smi -L; nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit --format=csv
    python3 -c 'import torch, triton, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
    "$KEVO" --version; } > "$OUT/probe.txt" 2>&1
  cat "$OUT/probe.txt"
  timeout 400 python3 test/gpu/gpu_smoke.py "$KEVO" "$PWD" 2>&1 | tee "$OUT/smoke.txt"
  exit 0
fi

# name | workload | budget | seconds | a schedule to evaluate first (optional)
# matmul4096_nt: B stored [N, K]; the seed reads it from a transposed copy made in each call
ROWS_ALL="matmul2048|matmul:M=2048,N=2048,K=2048,dtype=bf16|30|45|
matmul4096|matmul:M=4096,N=4096,K=4096,dtype=bf16|30|60|
matmul8192|matmul:M=8192,N=8192,K=8192,dtype=bf16|24|70|
matmul_gelu|matmul_bias_act:M=4096,N=4096,K=4096,dtype=bf16,act=gelu|24|55|
rmsnorm|rmsnorm:R=8192,C=8192,dtype=bf16|40|35|
softmax|softmax:R=8192,C=8192,dtype=bf16|40|35|
layernorm|layernorm:R=8192,C=8192,dtype=bf16,eps=1e-05|40|35|
attention|attention:B=1,H=16,S=4096,D=128,causal=1,dtype=bf16|30|60|
matmul4096_nt|matmul:M=4096,N=4096,K=4096,dtype=bf16,layout=nt|6|40|block_m=128 block_n=256 block_k=64 warps=8 stages=3 program=persistent b_layout=transposed_copy"
want=" ${*:-} "
if [ "${SKIP_BASELINES:-0}" != 1 ]; then
  only=$(echo "${*:-}" | tr ' ' ',')
  timeout 150 python3 bench/gpu/baselines.py --json "$OUT/baselines.json" ${only:+--only "$only"} > "$OUT/baselines.txt" 2>&1
  tail -20 "$OUT/baselines.txt"
fi
echo "$ROWS_ALL" | while IFS='|' read -r name wl budget secs seed; do
  if [ "$want" != "  " ] && [[ "$want" != *" $name "* ]]; then continue; fi
  echo "== $name: $wl (budget $budget, $secs s)"
  seedarg=()
  if [ -n "$seed" ]; then echo "$seed" > "$OUT/$name.seed"; seedarg=(--seed-schedule "$OUT/$name.seed"); fi
  timeout $((secs + 40)) "$KEVO" search --workload "$wl" --target h200 --runner "$WORKER" --budget "$budget" \
    --time "$secs" --eval-timeout 60 "${seedarg[@]}" --out "$OUT/$name" > "$OUT/$name.log" 2>&1
  echo "exit $?"; tail -4 "$OUT/$name.log"
done
# one archive of the rows' folders and logs (the device call returns few files)
(cd "$OUT" && tar czf results.tar.gz --remove-files $(ls -d */ *.log *.seed 2>/dev/null))
