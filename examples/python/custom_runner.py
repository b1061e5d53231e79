#!/usr/bin/env python3
"""A runner written in Python: kevo lowers every schedule, your function measures it.

A researcher with their own timing harness (a device, a cycle-accurate model, a cost model)
passes a callable as the runner. It gets a kevo.Candidate (kernel and schedule text, the tile
program's figures, the emitted NKI source via c.nki()) and returns the latency in ns: a number, a
list of samples, or a dict ({"latency_ns": ...}, {"samples_ns": [...]}, or {"status": "timeout",
"message": ...}). Exceptions and bad values become failed evaluations, never a crash.

    python3 examples/python/custom_runner.py [--budget 200]
"""
import argparse
import sys
import time

import kevo


class RooflineRunner:
    """A stand-in for a real device: the slower of moving the program's HBM bytes and doing its
    flops, plus a fixed cost per instruction. Replace measure() with your own harness."""

    kevo_identity = "example:roofline-v1"  # part of cache keys: change it when the model changes
    kevo_deterministic = True

    def __init__(self, gb_per_s=400.0, tflops=80.0, ns_per_instruction=20.0):
        self.gb_per_s, self.tflops, self.ns_per_instruction = gb_per_s, tflops, ns_per_instruction
        self.calls = 0
        self.seconds = 0.0

    def __call__(self, c):
        t0 = time.perf_counter()
        self.calls += 1
        p = c.program
        bytes_ns = (p["hbm_bytes_read"] + p["hbm_bytes_written"]) / self.gb_per_s
        flops_ns = p["flops"] / (self.tflops * 1e3)
        latency = max(bytes_ns, flops_ns) + p["instructions"] * self.ns_per_instruction
        self.seconds += time.perf_counter() - t0
        return latency


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=200)
    ap.add_argument("--workload", default="matmul:M=1024,N=1024,K=1024,dtype=bf16")
    a = ap.parse_args(argv)

    runner = RooflineRunner()
    t0 = time.perf_counter()
    r = kevo.search(kevo.workload(a.workload), target="trn2", runner=runner, budget=a.budget, seed=1)
    wall = time.perf_counter() - t0
    if r.best is None:
        print("no schedule verified:", r.verification.get("message"))
        return 1
    print(f"runner calls {runner.calls}, {1e6 * runner.seconds / max(runner.calls, 1):.1f} us each in Python; "
          f"search wall {wall:.2f} s")
    print(f"best under the Python runner: {r.best.latency_ns / 1e3:.1f} us ({r.verification['method']} verified)")
    print(f"  {r.best.schedule}")
    sim = kevo.eval(a.workload, r.best.schedule, target="trn2")
    print(f"the same schedule on the simulated trn2: {sim.latency_ns / 1e3:.1f} us, {100 * sim.fraction_of_peak:.1f}% of peak")
    return 0


if __name__ == "__main__":
    sys.exit(main())
