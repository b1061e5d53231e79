#!/usr/bin/env python3
"""Compare kevo's search strategies on three kernels over five seeds and plot best-so-far curves.

    PYTHONPATH=<prefix>/lib/python3/dist-packages python3 examples/python/compare_strategies.py
    python3 examples/python/compare_strategies.py --budget 100 --seeds 2 --out /tmp/curves.png

Writes one panel per kernel (median best-so-far latency over the seeds, the band between the best
and worst seed) and prints a table of final medians. Every curve ends at a verified winner.
"""
import argparse
import math
import statistics
import sys

import kevo

KERNELS = [
    "matmul:M=1024,N=1024,K=1024,dtype=bf16",
    "softmax:R=1024,C=2048,dtype=bf16",
    "rmsnorm:R=2048,C=1024,dtype=bf16",
]
STRATEGIES = ["ga", "islands", "map-elites", "random"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=400)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--target", default="trn2")
    ap.add_argument("--out", default="strategies.png")
    ap.add_argument("--kernels", nargs="*", default=KERNELS)
    a = ap.parse_args(argv)

    curves = {}  # (kernel, strategy) -> list of best-so-far curves (one per seed), in ms
    for spec in a.kernels:
        for strategy in STRATEGIES:
            for seed in range(a.seeds):
                r = kevo.search(kevo.workload(spec), target=a.target, budget=a.budget, seed=seed, algorithm=strategy)
                curve = [x / 1e6 for x in r.best_so_far()]
                if r.best is not None:  # the verified winner's figure ends the curve
                    curve[-1] = min(curve[-1], r.best.latency_ns / 1e6)
                curves.setdefault((spec, strategy), []).append(curve)
                print(f"{spec:42s} {strategy:10s} seed {seed}: "
                      f"{r.best.latency_ns / 1e3 if r.best else math.nan:10.1f} us "
                      f"({100 * r.best.fraction_of_peak if r.best else 0:.1f}% of peak)", flush=True)

    print(f"\nmedian final best over {a.seeds} seeds, {a.budget} evaluations, {a.target}:")
    for spec in a.kernels:
        row = "  ".join(f"{s}={statistics.median(c[-1] for c in curves[(spec, s)]) * 1e3:.1f}us" for s in STRATEGIES)
        print(f"  {spec}: {row}")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(a.kernels), figsize=(5 * len(a.kernels), 4), squeeze=False)
    for ax, spec in zip(axes[0], a.kernels):
        for strategy in STRATEGIES:
            cs = curves[(spec, strategy)]
            n = min(len(c) for c in cs)
            xs = list(range(1, n + 1))
            med = [statistics.median(c[i] for c in cs) for i in range(n)]
            lo = [min(c[i] for c in cs) for i in range(n)]
            hi = [max(c[i] for c in cs) for i in range(n)]
            ax.plot(xs, med, label=strategy)
            ax.fill_between(xs, lo, hi, alpha=0.15)
        ax.set_title(spec.split(":")[0])
        ax.set_xlabel("evaluations")
        ax.set_ylabel("best latency so far (ms)")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
