#!/usr/bin/env python3
"""A search strategy written in Python, run by kevo's engine beside the built-in GA.

A strategy is any object with ask(n, ctx) and tell(results). The engine keeps everything around
it: the journal, dedup of genomes the run has seen, the budget, parallel evaluation, and the
reference check of the winner. This one is a (1+lambda) evolution strategy: it keeps the best
genome and asks for n mutants of it, each changing one to three genes; after `patience` batches
without a gain it restarts from a random genome (keeping the best it found).

    python3 examples/python/custom_strategy.py [--budget 400] [--seeds 3]
"""
import argparse
import random
import statistics
import sys

import kevo


class OnePlusLambda:
    name = "one_plus_lambda"

    def __init__(self, patience=6):
        self.patience = patience
        self.parent = None   # (fitness, genome) the mutants come from
        self.stall = 0

    def ask(self, n, ctx):
        rng = random.Random(ctx.rng_seed(ctx.generation))  # reproducible: drawn from the run's seed
        if self.parent is None or self.stall >= self.patience:
            self.stall = 0
            if self.parent is not None:
                self.parent = None  # restart: the next batch is random, the run's best is kept by kevo
            return [ctx.random(rng.getrandbits(63)) for _ in range(n)]
        genes = [g for g in ctx.genes if g["kind"] != "permutation"]
        tries = 0
        while ctx.size < n and tries < 20 * n:
            tries += 1
            child = list(self.parent[1])
            for g in rng.sample(genes, k=min(len(genes), rng.randint(1, 3))):
                child[g["offset"]] = rng.randrange(g["choices"])
            ctx.offer(child, label="mutant")
        return None

    def tell(self, results):
        improved = False
        for r in results:
            if r["status"] == "ok" and (self.parent is None or r["fitness"][0] < self.parent[0]):
                self.parent = (r["fitness"][0], r["genome"])
                improved = True
        self.stall = 0 if improved else self.stall + 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=400)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--workload", default="matmul:M=1024,N=1024,K=1024,dtype=bf16")
    a = ap.parse_args(argv)

    finals = {"ga": [], "one_plus_lambda": []}
    for seed in range(1, a.seeds + 1):
        for name in finals:
            algorithm = "ga" if name == "ga" else OnePlusLambda()
            r = kevo.search(a.workload, "trn2", budget=a.budget, seed=seed, algorithm=algorithm)
            if r.best is None:
                print(f"{name} seed {seed}: nothing verified ({r.verification.get('message')})")
                return 1
            finals[name].append(r.best.fraction_of_peak)
            print(f"{name:>15} seed {seed}: {100 * r.best.fraction_of_peak:.1f}% of peak "
                  f"after {r.evaluations} evaluations")
    for name, xs in finals.items():
        print(f"{name:>15}: median {100 * statistics.median(xs):.1f}% of peak over {len(xs)} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
