#!/usr/bin/env python3
"""What driving kevo from Python costs.

1. The same search (workload, budget, seed, GA of population 32, sim runner) from the CLI (`kevo search`) and from
   Python (`kevo.search`), each repeated; medians of wall time, and their ratio (target <= 1.10).
   Both verify the winner; the CLI also writes its results directory (journal, report).
2. A Python runner's per-evaluation overhead: a search whose runner is a no-op Python callable;
   kevo times its runner calls (GIL hand-over, the candidate object, the call, converting the
   result) and the callable times its own body; the difference per candidate is the boundary's
   cost. Lowering each schedule is not in it (every runner pays that).

    PYTHONPATH=build/release/python python3 bench/python/python_overhead.py --kevo build/release/lib/cli/kevo
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import kevo


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kevo", required=True, help="the kevo CLI binary")
    ap.add_argument("--workload", default="matmul:M=1024,N=1024,K=1024,dtype=bf16")
    ap.add_argument("--budget", type=int, default=600)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args(argv)

    cli, py = [], []
    for rep in range(a.repeats):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            subprocess.run([a.kevo, "search", "--workload", a.workload, "--budget", str(a.budget), "--seed", "3",
                            "--threads", "1", "--population", "32", "--out", os.path.join(d, "run"), "--quiet"],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            cli.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        r = kevo.search(kevo.workload(a.workload), budget=a.budget, seed=3, threads=1)
        py.append(time.perf_counter() - t0)
        assert r.best is not None
        print(f"repeat {rep + 1}/{a.repeats}: CLI {cli[-1]:.2f} s, Python {py[-1]:.2f} s", flush=True)

    inside = [0.0]

    def noop(c):
        t = time.perf_counter()
        v = 1000.0 + len(c.schedule_text)
        inside[0] += time.perf_counter() - t
        return v

    boundary = []
    inside_us = 0.0
    for rep in range(a.repeats):
        inside[0] = 0.0
        r = kevo.search(kevo.workload(a.workload), runner=noop, budget=a.budget, seed=3, verify_candidates=1)
        calls, seconds = r.python_runner["calls"], r.python_runner["seconds"]
        boundary.append(1e6 * (seconds - inside[0]) / calls)
        inside_us = 1e6 * inside[0] / calls
    per_eval_us = statistics.median(boundary)

    out = {
        "workload": a.workload, "budget": a.budget, "repeats": a.repeats,
        "cli_seconds_median": statistics.median(cli), "cli_seconds": cli,
        "python_seconds_median": statistics.median(py), "python_seconds": py,
        "python_over_cli": statistics.median(py) / statistics.median(cli),
        "python_runner_boundary_us_per_eval": per_eval_us, "python_runner_inside_callable_us": inside_us,
    }
    print(f"search from the CLI: median {out['cli_seconds_median']:.2f} s (range {min(cli):.2f}-{max(cli):.2f})")
    print(f"search from Python:  median {out['python_seconds_median']:.2f} s (range {min(py):.2f}-{max(py):.2f})")
    print(f"Python / CLI: {out['python_over_cli']:.3f}")
    print(f"Python runner boundary: {per_eval_us:.1f} us per evaluation (median of {a.repeats} searches), "
          f"{inside_us:.1f} us inside the no-op callable")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
