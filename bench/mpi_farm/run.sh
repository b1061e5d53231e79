#!/usr/bin/env bash
# Farm throughput against ranks, end to end (docs/SCALING.md): `mpirun -n N kevo search` with a
# cmd: worker that sleeps a fixed time per measurement (bench/mpi_farm/sleep_worker.py, standing in
# for a device), N = 1, 2, 4 in one run; prints one JSON line per N and the 4-rank speed-up.
#   bench/mpi_farm/run.sh [KEVO] [SLEEP_S=1] [BUDGET=48] [POPULATION=16] [ALGORITHM=ga]
# ALGORITHM=async is the steady-state farm (no batch barrier; not deterministic, so the history
# hashes of the three runs differ and "same_history" is not printed).
# Evaluations per second = evaluations / the search phase's seconds (result.json timing); "steady"
# leaves out the first batch (workers starting). Measures; never gates.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kevo=${1:-$here/../../build/release/lib/cli/kevo}
sleep_s=${2:-1}; budget=${3:-48}; pop=${4:-16}; algorithm=${5:-ga}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
flags=(--oversubscribe); [[ $(id -u) == 0 ]] && flags+=(--allow-run-as-root)
for n in 1 2 4; do
  KEVO_SLEEP_S=$sleep_s mpirun "${flags[@]}" -x KEVO_SLEEP_S -n "$n" "$kevo" search -w matmul:M=256,N=256,K=256 \
    --runner "cmd:$here/sleep_worker.py" --budget "$budget" --population "$pop" --algorithm "$algorithm" -j1 --no-db -q --mpi-mode farm \
    --out "$work/n$n" >/dev/null
  python3 - "$work/n$n" "$n" "$sleep_s" <<'PY'
import json, sys
d, n, s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
r = json.load(open(d + "/result.json"))
t = r["timing"]["search_seconds"]
pts = [json.loads(l) for l in open(d + "/history.jsonl")]
gens = sorted({p.get("generation", 0) for p in pts})
first = [p["t"] for p in pts if p.get("generation", 0) == gens[0]]
rest = [p["t"] for p in pts if p.get("generation", 0) != gens[0]]
steady = len(rest) / (max(rest) - max(first)) if rest and max(rest) > max(first) else 0
m = r["mpi"]
print(json.dumps({"ranks": n, "sleep_s": s, "evaluations": r["evaluations"], "search_seconds": round(t, 3),
                  "evaluations_per_s": round(r["evaluations"] / t, 3), "steady_evaluations_per_s": round(steady, 3),
                  "evaluations_by_rank": m["evaluations_by_rank"], "messages_per_evaluation": round(m["messages_per_evaluation"], 3),
                  "overhead_ms_per_remote_evaluation": round(m["overhead_ms_per_remote_evaluation"], 3),
                  "history_hash": r["history_hash"]}))
PY
done | tee "$work/all.jsonl"
python3 - "$work/all.jsonl" "$algorithm" <<'PY'
import json, sys
rows = {r["ranks"]: r for r in map(json.loads, open(sys.argv[1]))}
out = {"algorithm": sys.argv[2], "speedup_4_over_1": round(rows[4]["evaluations_per_s"] / rows[1]["evaluations_per_s"], 3)}
if sys.argv[2] != "async":
    out["steady_speedup_4_over_1"] = round(rows[4]["steady_evaluations_per_s"] / rows[1]["steady_evaluations_per_s"], 3)
    out["same_history"] = len({r["history_hash"] for r in rows.values()}) == 1
print(json.dumps(out))
PY
