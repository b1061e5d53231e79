"""The Python module (`import kevo`): kernels, targets, spaces, eval, lower, reference evaluation on
NumPy arrays, searches (determinism, verified winners, progress, interruption), Python runners,
and typed errors for bad input."""
import math
import os
import signal
import threading
import time

import numpy as np
import pytest

import kevo

ASAN = bool(os.environ.get("KEVO_ASAN"))
MM = "matmul:M=256,N=256,K=256,dtype=bf16"
KIR = """
kernel mm_relu(A: bf16[M=128, K=256], B: bf16[K, N=512]) -> (C: fp32[M, N]) {
  acc[m, n] = sum(k) A[m, k] * B[k, n]
  C[m, n] = relu(acc[m, n])
}
"""


def test_version_and_catalogues():
    assert kevo.__version__.count(".") == 2
    assert "trn2" in kevo.targets()
    assert "matmul" in kevo.workloads()
    t = kevo.load_target("trn2")
    assert t.name == "trn2" and not t.host
    assert kevo.load_target("host").host


def test_kernels_parse_and_describe():
    k = kevo.parse_kernel(KIR)
    assert k.name == "mm_relu"
    assert k.dims == {"M": 128, "K": 256, "N": 512}
    roles = {t["name"]: t["role"] for t in k.tensors}
    assert roles["A"] == "input" and roles["C"] == "output" and roles["acc"] == "temp"
    # the canonical text parses back to the same kernel
    assert kevo.parse_kernel(k.text).text == k.text
    w = kevo.workload(MM)
    assert w.name == "matmul" and w.dims["M"] == 256


# a scalar op (no loop index to lay on the partitions): a kernel kevo cannot schedule (a typed
# ScheduleError, not a crash)
UNSCHED = "kernel scalar(x: fp32[]) -> (y: fp32[]) {\n  y[] = x[] * 2\n}\n"


@pytest.mark.parametrize(
    "call, exc, fragment",
    [
        (lambda: kevo.parse_kernel("kernel k(A: bf16[M=4]) -> (C: bf16[M]) { C[m] = A[q] }"), kevo.ParseError, "<kir>:1:"),
        (lambda: kevo.workload("matmul:M=-3"), kevo.NotFoundError, "workload 'matmul:M=-3'"),
        (lambda: kevo.load_target("trn9"), kevo.NotFoundError, "trn9"),
        (lambda: kevo.eval(MM, "tile m=banana"), kevo.ParseError, "banana"),
        (lambda: kevo.eval(MM, runner="warp"), kevo.NotFoundError, "sim, cpu, cmd:COMMAND"),
        (lambda: kevo.eval(MM, runner="cpu", target="trn2x"), kevo.NotFoundError, "trn2x"),
        (lambda: kevo.search(MM, budget=0), kevo.Error, "budget"),
        (lambda: kevo.search(MM, threads=-1), kevo.Error, "threads"),
        (lambda: kevo.search(MM, algorithm="annealing"), kevo.Error, "annealing"),
        (lambda: kevo.search(MM, budget=5, seed_schedules=["tile q=3"]), kevo.Error, "<seed schedule 1>"),
        (lambda: kevo.Space(MM).parse("order q r s"), kevo.ParseError, "order"),
        (lambda: kevo.Space(MM).print([0]), kevo.ScheduleError, "not in the schedule space"),
        (lambda: kevo.Space(UNSCHED), kevo.ScheduleError, "op 'y': has no loop index to lay out"),
        (lambda: kevo.eval(UNSCHED), kevo.ScheduleError, "[no_layout]"),
        (lambda: kevo.search(UNSCHED, budget=4), kevo.ScheduleError, "[no_layout]"),
        (lambda: kevo.parse_kernel(KIR).reference({"A": np.zeros((3, 3))}), kevo.Error, "shape (3, 3)"),
        (lambda: kevo.parse_kernel(KIR).reference({"Z": np.zeros(3)}), kevo.Error, "'Z' is not an input"),
    ],
)
def test_bad_input_raises_typed_located_errors(call, exc, fragment):
    with pytest.raises(exc) as e:
        call()
    assert isinstance(e.value, kevo.Error)
    assert fragment in str(e.value)
    assert "\n" not in str(e.value)


def test_wrong_types_are_type_errors():
    with pytest.raises(TypeError):
        kevo.eval(42)
    with pytest.raises(TypeError):
        kevo.eval(MM, runner=3.5)


def test_full_space_reads_what_the_searched_space_refuses():
    text = "transpose A=strided; load A@k x2 dma=pair"
    with pytest.raises(kevo.ParseError, match="--space full"):
        kevo.Space(MM).parse(text)
    full = kevo.Space(MM, full=True)
    g = full.parse(text)
    assert "dma=pair" in full.print(g)
    assert len(full.genes) == len(kevo.Space(MM).genes)


def test_space_round_trip_and_sampling():
    s = kevo.Space(MM, "trn2")
    names = [g["name"] for g in s.genes]
    assert len(names) == len(set(names)) > 5
    g = s.default()
    text = s.print(g)
    assert s.parse(text) == g
    a, b = s.sample(11), s.sample(11)
    assert a == b  # deterministic in the seed
    assert s.print(a)
    assert 0 < s.validity(50, 1) <= 1
    assert s.log10_size > 3


def test_space_over_a_split_view():
    text = "kernel vs(X: fp32[N=16384]) -> (S: fp32[]) {\n  S[] = sum(i) X[i]\n}\n"
    s = kevo.Space(kevo.parse_kernel(text), "trn2")
    assert s.splits == ["i = 128*i_o + i_i (N = N_o x N_i; 128 x 128)"]
    assert s.kernel.text == text
    assert "S[] = sum(i_o, i_i) X[i_o, i_i]" in s.scheduled_kernel.text
    assert "i_o" in s.print(s.default())
    m = kevo.eval(text, "layout p=i_o f=i_i; tile i_o=128 i_i=64")
    assert m.ok
    # a matmul keeps its kernel as written
    mm = kevo.Space(MM, "trn2")
    assert mm.splits == [] and mm.scheduled_kernel.text == mm.kernel.text


def test_eval_and_lower():
    m = kevo.eval(MM)
    assert m.ok and m.latency_ns > 0 and 0 < m.fraction_of_peak <= 1
    assert m.bottleneck and "tensor" in m.engines
    assert m.schedule == kevo.Space(MM).print(kevo.Space(MM).default())
    p = kevo.lower(MM, nki=True)
    assert p.instructions > 0 and p.flops == 2 * 256 * 256 * 256
    assert p.nki and "nki" in p.nki
    with pytest.raises(kevo.ScheduleError) as e:
        kevo.lower("matmul:M=4096,N=4096,K=4096,dtype=fp32", "tile m=128 n=512 k=128; block m=32 n=8 k=32; load A@root x1; load B@root x1")
    assert "overflow" in str(e.value) or "sbuf" in str(e.value).lower()


def test_reference_on_numpy_arrays():
    k = kevo.parse_kernel(KIR)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 256)).astype(np.float32)
    b = rng.standard_normal((256, 512)).astype(np.float32)
    out = k.reference({"A": a, "B": b})
    assert set(out) == {"C"}
    assert out["C"].shape == (128, 512) and out["C"].dtype == np.float32

    def bf16(x):  # the kernel stores A and B as bf16: round like the hardware (nearest even)
        u = x.view(np.uint32).astype(np.uint64)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
        return u.astype(np.uint32).view(np.float32)

    want = np.maximum(bf16(a).astype(np.float64) @ bf16(b).astype(np.float64), 0)
    np.testing.assert_allclose(out["C"], want, rtol=1e-4, atol=1e-3)
    # inputs not given are random in the seed
    r1, r2 = k.reference(seed=5), k.reference(seed=5)
    np.testing.assert_array_equal(r1["C"], r2["C"])


def test_search_is_verified_and_deterministic():
    r1 = kevo.search(MM, budget=80, seed=4, population=16)
    r2 = kevo.search(MM, budget=80, seed=4, population=16)
    assert r1.best is not None
    assert r1.verification["ok"] and r1.verification["method"] in ("interpreter", "reduced_shape")
    assert r1.evaluations == 80 == len(r1.history)
    assert r1.stop_reason == "evaluations" and not r1.interrupted
    assert r1.best.schedule == r2.best.schedule and r1.best.latency_ns == r2.best.latency_ns
    assert r1.history_hash == r2.history_hash
    # the winner is the fastest valid schedule in the history (the sim runner is deterministic)
    assert r1.best.latency_ns == min(e.latency_ns for e in r1.history if e.ok)
    curve = r1.best_so_far()
    assert curve == sorted(curve, reverse=True) and curve[-1] == r1.best.latency_ns
    arr = r1.history_array()
    assert arr.shape == (80,) and arr["best_so_far_ns"][-1] == r1.best.latency_ns
    assert r1.history_dicts()[0]["id"] == 0
    assert any(o["name"] == "mutate" for o in r1.operators)


def test_seed_schedule_is_evaluated_first():
    s = kevo.Space(MM)
    text = s.print(s.sample(3))
    r = kevo.search(MM, budget=10, seed_schedules=[text])
    assert r.history[0].schedule == text


def test_progress_callback_sees_every_evaluation_and_can_stop():
    seen = []

    def progress(n, budget, best, last):
        seen.append((n, best, last["status"]))
        return n >= 7

    r = kevo.search(MM, budget=500, progress=progress, population=4)
    assert r.interrupted and r.stop_reason == "requested"
    assert 7 <= r.evaluations < 500
    assert [n for n, _, _ in seen] == list(range(1, len(seen) + 1))
    assert r.best is not None  # the winner is still named (and verified)


def test_progress_exception_propagates_without_crashing():
    def progress(n, budget, best, last):
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        kevo.search(MM, budget=50, progress=progress)


def test_python_runner():
    calls = []

    def runner(c):
        calls.append(c.schedule_text)
        assert c.kernel_name == "matmul" and c.target_name == "trn2"
        p = c.program
        # a stand-in cost model: time of the bytes moved at 100 GB/s plus the flops at 50 TFLOP/s
        return (p["hbm_bytes_read"] + p["hbm_bytes_written"]) / 100.0 + p["flops"] / 50e3

    runner.kevo_deterministic = True
    r = kevo.search(MM, runner=runner, budget=40, seed=2)
    assert r.runner == "python:test_python_runner.<locals>.runner"
    assert len(calls) == r.valid  # invalid schedules never reach the runner
    assert r.best is not None and r.best.latency_ns > 0
    m = kevo.eval(MM, runner=runner)
    assert m.ok and m.samples_ns == [m.latency_ns]


def test_candidate_nki_inside_the_call_only():
    kept = []

    def runner(c):
        assert "def " in c.nki()  # the emitted NKI kernel, while kevo's program is alive
        kept.append(c)
        return 1000.0

    assert kevo.eval(MM, runner=runner).ok
    c = kept[0]
    assert c.schedule_text and c.program["instructions"] > 0  # texts and figures survive the call
    with pytest.raises(kevo.Error, match="inside the runner"):
        c.nki()


def test_python_runner_failures_are_measurements_not_crashes():
    n = {"i": 0}

    def flaky(c):
        n["i"] += 1
        kind = n["i"] % 5
        if kind == 0:
            raise RuntimeError("device fell over")
        if kind == 1:
            return "garbage"
        if kind == 2:
            return {"status": "timeout", "message": "took too long"}
        if kind == 3:
            return float("nan")
        return [1000.0, 1100.0, 900.0]

    r = kevo.search(MM, runner=flaky, budget=25, seed=1)
    statuses = {e.status for e in r.history}
    assert {"error", "timeout", "ok"} <= statuses
    reasons = " ".join(e.reason for e in r.history)
    assert "device fell over" in reasons and "not a finite positive number" in reasons
    assert r.best is None or r.best.latency_ns == 1000.0


def test_ctrl_c_stops_a_search_with_a_result():
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals need the main thread")

    def slow(c):
        time.sleep(0.02)
        return 1000.0 + len(c.schedule_text)

    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    t0 = time.monotonic()
    try:
        r = kevo.search(MM, runner=slow, budget=100000, population=8)
    finally:
        timer.cancel()
    assert time.monotonic() - t0 < 30
    assert r.interrupted and r.stop_reason == "requested"
    assert 0 < r.evaluations < 100000


def test_kevo_error_hierarchy():
    for e in (kevo.ParseError, kevo.NotFoundError, kevo.ScheduleError, kevo.RunnerError, kevo.NoResultError):
        assert issubclass(e, kevo.Error) and issubclass(e, Exception)
    with pytest.raises(kevo.NoResultError):
        kevo.search(MM, runner=lambda c: None, budget=5, require_best=True)


@pytest.mark.skipif(ASAN, reason="the subprocess would need the sanitizer runtime preloaded again")
def test_readme_one_liner(tmp_path):
    import subprocess
    import sys

    code = ("import kevo; print(kevo.search(kevo.workload('matmul:M=512,N=512,K=512,dtype=bf16'), "
            "target='trn2', budget=200).best.fraction_of_peak)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    v = float(out.stdout.strip())
    assert 0 < v <= 1


class Knapsackish:
    """A toy problem with every gene kind: minimise a weighted sum that depends on all of them."""

    name = "toy"
    deterministic = True
    genes = [
        kevo.Gene.ordinal("x", [1, 2, 4, 8, 16]),
        kevo.Gene.categorical("mode", ["slow", "fast", "odd"]),
        kevo.Gene.permutation("order", ["a", "b", "c", "d"]),
        kevo.Gene.boolean("flag"),
    ]

    def __init__(self):
        self.calls = 0

    def evaluate(self, g):
        self.calls += 1
        x, mode, perm, flag = g[0], g[1], g[2:6], g[6]
        if mode == 2:
            return None  # "odd" is invalid
        inversions = sum(1 for i in range(4) for j in range(i + 1, 4) if perm[i] > perm[j])
        return abs([1, 2, 4, 8, 16][x] - 5) * 10 + (0 if mode == 1 else 5) + inversions + flag


def test_evolve_a_python_problem():
    p = Knapsackish()
    r1 = kevo.evolve(p, budget=300, seed=5, population=16)
    r2 = kevo.evolve(Knapsackish(), budget=300, seed=5, population=16)
    assert r1.problem == "toy" and r1.evaluations == len(r1.history) <= 300
    assert p.calls == r1.evaluations
    assert r1.history_hash == r2.history_hash  # deterministic
    assert r1.best.fitness == [10.0]  # x=4 (index 2), fast, identity permutation, flag off
    assert r1.best.genome == [2, 1, 0, 1, 2, 3, 0]
    invalid = [h for h in r1.history if h.status != "ok"]
    assert invalid and all("None" in h.reason for h in invalid)
    # Without the history: the same run (same hash, best and counts), nothing kept per evaluation.
    seen = []
    r3 = kevo.evolve(Knapsackish(), budget=300, seed=5, population=16, history=False,
                     progress=lambda n, b, best: seen.append(n))
    assert r3.history == [] and r3.history_hash == r1.history_hash and r3.best == r1.best
    assert (r3.evaluations, r3.valid) == (r1.evaluations, r1.valid)
    assert seen == list(range(1, r1.evaluations + 1))


def test_evolve_continuous_genes():
    class Fit:
        genes = [kevo.Gene.continuous("x", -3.0, 3.0), kevo.Gene.continuous("lr", 1e-5, 1.0, log=True)]

        def evaluate(self, g):
            x = kevo.Gene.value(self.genes[0], g[0])
            lr = kevo.Gene.value(self.genes[1], g[1])
            return (x - 1.5) ** 2 + (math.log10(lr) + 3.0) ** 2

    r = kevo.evolve(Fit(), budget=800, seed=2, population=16)
    assert r.best.fitness[0] < 0.01
    x = kevo.Gene.value(Fit.genes[0], r.best.genome[0])
    lr = kevo.Gene.value(Fit.genes[1], r.best.genome[1])
    assert abs(x - 1.5) < 0.1 and 5e-4 < lr < 2e-3
    assert kevo.Gene.value(Fit.genes[1], 0) == pytest.approx(1e-5)
    assert kevo.Gene.value(Fit.genes[1], kevo.Gene.STEPS) == 1.0

    # The spec helpers refuse what the engine would (Gene.value once divided by lo = 0) ...
    with pytest.raises(kevo.Error, match="'lr'.*lo > 0"):
        kevo.Gene.continuous("lr", 0.0, 1.0, log=True)
    with pytest.raises(kevo.Error, match="'x'.*lo <= hi"):
        kevo.Gene.continuous("x", 2.0, 1.0)
    with pytest.raises(kevo.Error, match="'lr'.*lo > 0"):
        kevo.Gene.value({"name": "lr", "kind": "continuous", "lo": 0.0, "hi": 1.0, "log": True}, 5)

    # ... and so does the engine, for a spec written by hand.
    class Bad:
        genes = [{"name": "lr", "kind": "continuous", "lo": 0.0, "hi": 1.0, "log": True, "group": ""}]

        def evaluate(self, g):
            return 0.0

    with pytest.raises(kevo.Error, match="'lr'.*lo > 0"):
        kevo.evolve(Bad())


def test_evolve_bad_problems():
    class NoGenes:
        def evaluate(self, g):
            return 0.0

    with pytest.raises(TypeError):
        kevo.evolve(NoGenes())

    class BadKind:
        genes = [{"name": "x", "kind": "complex"}]

        def evaluate(self, g):
            return 0.0

    with pytest.raises(kevo.Error, match="kind 'complex'"):
        kevo.evolve(BadKind())

    class Raises:
        genes = [kevo.Gene.ordinal("x", [1, 2, 3])]

        def evaluate(self, g):
            if g[0] == 0:
                raise ZeroDivisionError("nope")
            return float(g[0] + 1)

    r = kevo.evolve(Raises(), budget=20, population=4, algorithm="exhaustive")
    assert r.best.genome == [1] and r.best.fitness == [2.0]
    assert any("ZeroDivisionError" in h.reason for h in r.history)


# ---------------------------------------------------------------- strategies written in Python


class CoordinateDescent:
    """A strategy of a researcher's own: sweeps one gene of the best genome at a time."""

    name = "coordinate"

    def __init__(self):
        self.best = None  # (fitness, genome)
        self.told = 0
        self.asked = 0

    def ask(self, n, ctx):
        self.asked += 1
        if self.best is None:
            return [ctx.random(ctx.rng_seed(1) + i) for i in range(n)]
        base = self.best[1]
        offered = 0
        for gene in ctx.genes:
            if gene["kind"] == "permutation":
                continue
            for v in range(gene["choices"]):
                g = list(base)
                g[gene["offset"]] = v
                if ctx.offer(g, label="sweep"):
                    offered += 1
                if ctx.size >= n:
                    return None
        # every neighbour is known: fresh random genomes keep the run going
        for i in range(n):
            ctx.offer(ctx.random(ctx.rng_seed(ctx.generation * 1000 + i)), label="random")
        return None

    def tell(self, results):
        self.told += len(results)
        for r in results:
            if r["status"] == "ok" and (self.best is None or r["fitness"][0] < self.best[0]):
                self.best = (r["fitness"][0], r["genome"])


def test_python_strategy_runs_deterministically():
    s1, s2 = CoordinateDescent(), CoordinateDescent()
    r1 = kevo.evolve(Knapsackish(), budget=120, seed=3, population=8, algorithm=s1)
    r2 = kevo.evolve(Knapsackish(), budget=120, seed=3, population=8, algorithm=s2)
    assert r1.evaluations == 120 and s1.told == 120 and s1.asked > 1
    assert r1.history_hash == r2.history_hash
    ops = {h.operator for h in r1.history}
    assert "python" in ops and "sweep" in ops  # returned genomes and offered ones are labelled
    assert r1.best.fitness[0] == s1.best[0]
    # coordinate sweeps of the non-permutation genes reach x=4, fast, flag off: 10 + inversions
    assert r1.best.fitness[0] <= 16.0


def test_python_strategy_searches_kernels():
    s = CoordinateDescent()
    r = kevo.search("matmul:M=256,N=256,K=256,dtype=bf16", "trn2", budget=40, seed=1, population=8, algorithm=s)
    assert r.evaluations == 40 and s.told == 40
    assert r.best is not None and r.verification["ok"]


def test_python_strategy_errors():
    class Raises(CoordinateDescent):
        def tell(self, results):
            raise ValueError("strategy bug")

    with pytest.raises(ValueError, match="strategy bug"):
        kevo.evolve(Knapsackish(), budget=50, population=4, algorithm=Raises())

    class BadGenome(CoordinateDescent):
        def ask(self, n, ctx):
            return [[0, 1]]

    with pytest.raises(kevo.Error, match="has 2 values, the space's genomes have 7"):
        kevo.evolve(Knapsackish(), budget=50, population=4, algorithm=BadGenome())

    kept = []

    class KeepsContext(CoordinateDescent):
        def ask(self, n, ctx):
            kept.append(ctx)
            return super().ask(n, ctx)

    kevo.evolve(Knapsackish(), budget=10, population=4, algorithm=KeepsContext())
    with pytest.raises(kevo.Error, match="only usable inside the ask"):
        kept[0].offer([0] * 7)

    with pytest.raises(TypeError):
        kevo.evolve(Knapsackish(), algorithm=object())


def test_python_strategy_state_goes_into_snapshots(tmp_path):
    class Stateful(CoordinateDescent):
        saves = 0

        def save(self):
            Stateful.saves += 1
            return repr(self.best).encode()

        def load(self, data):
            raise AssertionError("a fresh run loads nothing")

    r = kevo.search("matmul:M=256,N=256,K=256,dtype=bf16", "trn2", budget=24, seed=2, population=8,
                    algorithm=Stateful(), checkpoint_dir=str(tmp_path / "ck"))
    assert r.evaluations == 24 and Stateful.saves >= 1

    class BadSave(CoordinateDescent):
        def save(self):
            return 42

        def load(self, data):
            pass

    with pytest.raises(TypeError, match="save\\(\\) must return bytes or str"):
        kevo.search("matmul:M=256,N=256,K=256,dtype=bf16", "trn2", budget=24, seed=2, population=8,
                    algorithm=BadSave(), checkpoint_dir=str(tmp_path / "ck2"))
