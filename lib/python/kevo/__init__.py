"""kevo: evolutionary search for fast compute kernels, from Python.

A kernel's algorithm (``Kernel``) is written once; its schedule is searched. Everything heavy runs
in C++ with the GIL released; Python is called only for progress callbacks and Python runners.

    >>> import kevo
    >>> k = kevo.workload("matmul:M=512,N=512,K=512,dtype=bf16")
    >>> r = kevo.search(k, target="trn2", budget=200)
    >>> r.best.fraction_of_peak  # verified against the reference evaluator

Bad input raises a ``kevo.Error`` subclass whose message names where and what.
See docs/PYTHON.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

from . import _kevo
from ._kevo import (  # noqa: F401  (re-exported)
    AskContext,
    Candidate,
    Error,
    Kernel,
    NoResultError,
    NotFoundError,
    ParseError,
    RunnerError,
    ScheduleError,
    Space,
    Target,
    load_target,
    parse_kernel,
    targets,
    workload,
    workloads,
)

__version__: str = _kevo.__version__

__all__ = [
    "AskContext", "Candidate", "Error", "Evaluation", "EvolveResult", "Gene", "Individual", "evolve", "Kernel", "Measurement", "NoResultError", "NotFoundError", "ParseError",
    "Program", "RunnerError", "ScheduleError", "SearchResult", "Space", "Target", "eval", "load_target", "lower",
    "parse_kernel", "search", "targets", "workload", "workloads", "Model", "ModelKernel", "import_onnx", "from_torch",
]

KernelLike = Union[Kernel, str]
TargetLike = Union[Target, str]
RunnerLike = Union[str, Callable[[Candidate], Any]]
ScheduleLike = Union[str, Sequence[int], None]


@dataclass(frozen=True)
class Measurement:
    """One measured schedule. ``latency_ns`` is the median of ``samples_ns``."""

    status: str
    message: str
    latency_ns: float
    samples_ns: List[float]
    p10_ns: float
    p90_ns: float
    fraction_of_peak: float
    roofline_ns: float
    bytes_moved: float
    bottleneck: str
    profile: str
    engines: Dict[str, float]
    schedule: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class Program:
    """A lowered tile program's figures (and its NKI source when asked for)."""

    kernel: str
    target: str
    schedule: str
    instructions: int
    dma_instructions: int
    sbuf_bytes_per_partition: int
    psum_bytes_per_partition: int
    hbm_bytes_read: int
    hbm_bytes_written: int
    flops: int
    buffers: int
    nki: Optional[str] = None


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of a search (a row of its history)."""

    id: int
    schedule: str
    status: str
    reason: str
    latency_ns: float
    fraction_of_peak: float
    operator: str
    generation: int
    measurement: Optional[Measurement] = None
    verification: Optional[Dict[str, Any]] = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _evaluation(d: Dict[str, Any]) -> Evaluation:
    d = dict(d)
    m = d.pop("measurement", None)
    return Evaluation(measurement=Measurement(**m) if m is not None else None, **d)


@dataclass(frozen=True)
class SearchResult:
    """What ``search`` found. ``best`` is the fastest schedule that verified against the reference
    evaluator (``verification`` says how); ``None`` when none did. ``interrupted`` is True when
    Ctrl-C (or a progress callback returning True) stopped the search: the result is still valid."""

    kernel: str
    target: str
    runner: str
    best: Optional[Evaluation]
    verification: Dict[str, Any]
    evaluations: int
    valid: int
    wall_seconds: float
    stop_reason: str
    interrupted: bool
    deterministic: bool
    history_hash: int
    history: List[Evaluation]
    rejected: List[Evaluation]
    operators: List[Dict[str, Any]] = field(default_factory=list)
    #: with a Python runner: {"calls": candidates measured, "seconds": wall time kevo spent in the
    #: runner, its callable included}
    python_runner: Optional[Dict[str, Any]] = None

    def history_dicts(self) -> List[Dict[str, Any]]:
        """The history as a list of plain dicts (for pandas.DataFrame or json)."""
        return [
            {k: getattr(e, k) for k in ("id", "schedule", "status", "reason", "latency_ns", "fraction_of_peak",
                                        "operator", "generation")}
            for e in self.history
        ]

    def history_array(self):
        """The history as a NumPy structured array (id, latency_ns, fraction_of_peak, ok, best_so_far_ns)."""
        import numpy as np

        rows = []
        best = math.inf
        for e in self.history:
            if e.ok and e.latency_ns < best:
                best = e.latency_ns
            rows.append((e.id, e.latency_ns, e.fraction_of_peak, e.ok, best))
        dtype = [("id", "u8"), ("latency_ns", "f8"), ("fraction_of_peak", "f8"), ("ok", "?"), ("best_so_far_ns", "f8")]
        return np.array(rows, dtype=dtype)

    def best_so_far(self) -> List[float]:
        """Best valid latency after each evaluation (inf before the first valid one)."""
        out, best = [], math.inf
        for e in self.history:
            if e.ok and e.latency_ns < best:
                best = e.latency_ns
            out.append(best)
        return out


def _integer(name: str, value: Any, lo: int, hi: int) -> int:
    """``value`` as an int in [lo, hi], else a kevo.Error naming the argument (pybind11's own
    message for an int out of its C++ type's range lists every overload instead)."""
    try:
        i = int(value)
    except (TypeError, ValueError, OverflowError):
        raise TypeError(f"{name} must be an integer, not {type(value).__name__} {value!r}") from None
    if not lo <= i <= hi:
        raise Error(f"{name} must be an integer in [{lo}, {hi}], not {i}")
    return i


_U64 = (1 << 64) - 1
_I32 = (1 << 31) - 1


def _check_continuous(name: str, lo: float, hi: float, log: bool) -> None:
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        raise Error(f"continuous gene '{name}' needs finite lo <= hi (got lo={lo}, hi={hi})")
    if log and lo <= 0:
        raise Error(f"log-scaled continuous gene '{name}' needs lo > 0 (got {lo})")


class Gene:
    """Gene specifications for problems written in Python (``kevo.evolve``). A genome is a list of
    ints: for each gene the index of its choice (a permutation gene takes len(labels) slots; a
    continuous gene its position 0..2**24 in [lo, hi]: ``Gene.value(spec, genome[i])`` is the real)."""

    STEPS = 1 << 24

    @staticmethod
    def continuous(name: str, lo: float, hi: float, log: bool = False, group: str = "") -> Dict[str, Any]:
        """A bounded real in [lo, hi]; ``log`` spreads it geometrically (lo > 0)."""
        _check_continuous(name, float(lo), float(hi), bool(log))
        return {"name": name, "kind": "continuous", "lo": float(lo), "hi": float(hi), "log": bool(log), "group": group}

    @staticmethod
    def value(spec: Dict[str, Any], position: int) -> float:
        """The real value of a continuous gene's position (as the C++ ``Gene::real``)."""
        lo, hi = float(spec["lo"]), float(spec["hi"])
        _check_continuous(spec.get("name", ""), lo, hi, bool(spec.get("log")))
        p = min(max(int(position), 0), Gene.STEPS)
        if p >= Gene.STEPS:
            return hi
        t = p / Gene.STEPS
        return lo * (hi / lo) ** t if spec.get("log") else lo + (hi - lo) * t

    @staticmethod
    def categorical(name: str, labels: Sequence[str], group: str = "") -> Dict[str, Any]:
        return {"name": name, "kind": "categorical", "labels": [str(x) for x in labels], "group": group}

    @staticmethod
    def ordinal(name: str, values: Sequence[int], group: str = "") -> Dict[str, Any]:
        return {"name": name, "kind": "ordinal", "values": [int(v) for v in values], "group": group}

    @staticmethod
    def permutation(name: str, items: Sequence[str], group: str = "") -> Dict[str, Any]:
        return {"name": name, "kind": "permutation", "labels": [str(x) for x in items], "group": group}

    @staticmethod
    def boolean(name: str, group: str = "") -> Dict[str, Any]:
        return {"name": name, "kind": "boolean", "group": group}


@dataclass(frozen=True)
class Individual:
    """One evaluation of ``evolve``: the genome, its fitness (minimised) or why it failed."""

    id: int
    genome: List[int]
    status: str
    reason: str
    fitness: List[float]
    operator: str
    generation: int


@dataclass(frozen=True)
class EvolveResult:
    problem: str
    best: Optional[Individual]
    evaluations: int
    valid: int
    stop_reason: str
    interrupted: bool
    history_hash: int
    history: List[Individual]


def _strategy_arg(algorithm: Any) -> Any:
    """A built-in strategy's name, or a strategy object (``ask(n, ctx)`` and ``tell(results)``)."""
    if isinstance(algorithm, str):
        return algorithm
    if hasattr(algorithm, "ask") and hasattr(algorithm, "tell"):
        return algorithm
    raise TypeError("algorithm must be a built-in strategy's name or an object with ask(n, ctx) and tell(results)")


def evolve(problem: Any, *, budget: int = 1000, seed: int = 0, population: int = 32, algorithm: Any = "ga",
           time_limit: float = 0.0, seeds: Iterable[Sequence[int]] = (),
           progress: Optional[Callable[[int, int, float], Optional[bool]]] = None,
           history: bool = True) -> EvolveResult:
    """Runs kevo's evolution engine on a problem written in Python: an object with ``genes`` (a list
    of ``kevo.Gene.*`` specs) and ``evaluate(genome) -> float | list[float] | None`` (minimised;
    None or an exception marks the genome invalid, with the reason; NumPy scalars count as numbers).
    Optional attributes: ``name``, ``deterministic`` (True: same genome, same fitness). Ctrl-C
    (inside ``evaluate`` or a strategy too) or progress returning a true value stops it with a
    result. Same seed and a deterministic problem give the same history.

    ``algorithm`` names a built-in strategy or is a strategy written in Python: an object with
    ``ask(n, ctx)`` (offer up to n genomes with ``ctx.offer(genome)`` or return them) and
    ``tell(results)`` (the evaluations as dicts, in proposal order); optional ``name``, and
    ``save() -> bytes`` with ``load(bytes)`` for resumable state (docs/PYTHON.md).

    ``history=False`` keeps no per-evaluation record (``history`` comes back empty; ``best``,
    ``history_hash`` and the counts are the same): a run of millions of cheap evaluations then
    needs constant memory."""
    d = _kevo._evolve(problem, _integer("budget", budget, 0, _U64), _integer("seed", seed, 0, _U64),
                      _integer("population", population, 0, _I32), _strategy_arg(algorithm), float(time_limit),
                      [list(map(int, g)) for g in seeds], progress, bool(history))
    d["history"] = [Individual(**x) for x in d["history"]]
    d["best"] = Individual(**d["best"]) if d["best"] is not None else None
    return EvolveResult(**d)


def lower(kernel: KernelLike, schedule: ScheduleLike = None, target: TargetLike = "trn2", nki: bool = False) -> Program:
    """Lowers a schedule (text, genome, or None for the default) into a tile program.
    Raises ScheduleError when the schedule cannot run (the message says why)."""
    return Program(**_kevo._lower(kernel, schedule, target, nki))


def eval(kernel: KernelLike, schedule: ScheduleLike = None, target: TargetLike = "trn2",  # noqa: A001
         runner: RunnerLike = "sim", timeout: float = 300.0) -> Measurement:
    """Measures one schedule with a runner: "sim", "cpu" (target "host"), "cmd:COMMAND", or a
    Python callable ``f(candidate) -> latency_ns | [samples] | {"latency_ns": ..} | {"status": ..}``."""
    if isinstance(target, str) and target == "trn2" and runner == "cpu":
        target = "host"
    return Measurement(**_kevo._eval(kernel, schedule, target, runner, float(timeout)))


ProgressFn = Callable[[int, int, float, Dict[str, Any]], Optional[bool]]


def search(kernel: KernelLike, target: TargetLike = "trn2", runner: RunnerLike = "sim", *, budget: int = 2000,
           seed: int = 0, threads: int = 1, population: int = 32, algorithm: Any = "ga", time_limit: float = 0.0,
           seed_schedules: Iterable[str] = (), progress: Optional[ProgressFn] = None, timeout: float = 300.0,
           verify_candidates: int = 8, checkpoint_dir: str = "", resume: bool = False,
           require_best: bool = False) -> SearchResult:
    """Searches schedules of ``kernel`` on ``target`` (the CLI's ``kevo search``, with its own
    defaults: the CLI uses seed 1, one thread per core and a GA population of 16).

    progress(evaluations, budget, best_latency_ns, last_evaluation_dict) is called after every
    evaluation; returning a true value stops the search. Ctrl-C stops it too (inside a Python
    runner or strategy as well; a ``cmd:`` runner's worker is killed at once): the batch in
    flight finishes, the winner is verified, and the result comes back with ``interrupted=True``.
    ``timeout`` is seconds per candidate of a ``cmd:`` runner: 0 (adaptive) or in [0.001, 86400].
    ``checkpoint_dir`` keeps the run's journal and snapshots; ``resume=True`` reopens the run
    recorded there (same arguments but ``budget``, ``time_limit`` and ``threads``) and goes on to
    ``budget``.
    With ``require_best=True`` a search that verified nothing raises NoResultError.
    ``algorithm`` is a built-in strategy's name or a Python strategy object (see ``evolve``).
    Same seed and a deterministic runner give the same result."""
    if isinstance(target, str) and target == "trn2" and runner == "cpu":
        target = "host"
    if isinstance(seed_schedules, (str, bytes)):
        raise TypeError("seed_schedules must be a list of schedule texts, not a single str (write [text])")
    d = _kevo._search(kernel, target, runner, _integer("budget", budget, 0, _U64), _integer("seed", seed, 0, _U64),
                      _integer("threads", threads, 0, _I32), _integer("population", population, 0, _I32),
                      _strategy_arg(algorithm), float(time_limit), [str(s) for s in seed_schedules], progress,
                      float(timeout), _integer("verify_candidates", verify_candidates, -(1 << 63), (1 << 63) - 1),
                      str(checkpoint_dir), bool(resume))
    d["history"] = [_evaluation(x) for x in d["history"]]
    d["rejected"] = [_evaluation(x) for x in d["rejected"]]
    d["best"] = _evaluation(d["best"]) if d["best"] is not None else None
    r = SearchResult(**d)
    if require_best and r.best is None:
        why = r.verification.get("message") or f"no valid schedule in {r.evaluations} evaluations"
        raise NoResultError(f"search of {r.kernel} on {r.target}: no verified schedule ({why})")
    return r


# ---------------------------------------------------------------- whole models (docs/MODEL.md)


@dataclass
class ModelKernel:
    """One distinct kernel of an imported model. ``instances`` say where in the graph it runs: the
    ONNX nodes it covers and which ONNX value each kernel tensor is (``inputs``/``outputs``: lists
    of dicts with tensor, value, shape and initializer)."""

    kind: str
    op: str
    shape: str
    hash: str
    count: int
    kernel: Kernel
    instances: List[Dict[str, Any]]

    def bindings(self, instance: int = 0) -> Dict[str, Dict[str, Any]]:
        """Kernel tensor name -> its binding (value, shape, initializer) in one instance."""
        i = _integer("instance", instance, 0, len(self.instances) - 1)
        inst = self.instances[i]
        return {b["tensor"]: b for b in inst["inputs"] + inst["outputs"]}


@dataclass
class Model:
    """An ONNX model as kevo kernels (``kevo model`` on the command line).

    ``not_expressed`` lists every node no kernel covers, with the reason. ``weights`` holds the
    initializers the kernels read (NumPy float32). With a target, ``table`` holds each kernel's
    default-schedule time (``default_ns``, ``total_ns`` = x count) and ``share`` of ``total_ns``."""

    file: str
    producer: str
    opset: int
    nodes: int
    kernels: List[ModelKernel]
    not_expressed: List[Dict[str, str]]
    weights: Dict[str, Any]
    table: Optional[List[Dict[str, Any]]] = None
    total_ns: Optional[float] = None

    def kernels_of(self, kind: str) -> List[ModelKernel]:
        return [k for k in self.kernels if k.kind == kind]

    def reference(self, kernel: ModelKernel, inputs: Dict[str, Any], instance: int = 0) -> Dict[str, Any]:
        """Reference outputs of ``kernel`` (kevo's evaluator), given ONNX-shaped arrays for its
        non-weight inputs by kernel tensor name; weights are taken from the model unless ``inputs``
        names them too (a weight stored as external data must be passed). Outputs come back in the
        ONNX values' shapes."""
        import numpy as np

        b = kernel.bindings(instance)
        feed = {}
        dims = kernel.kernel.dims
        for t in kernel.kernel.tensors:
            if t["role"] != "input":
                continue
            name = t["name"]
            value = b[name]["value"]
            if b[name]["initializer"] and value in self.weights and name not in inputs:
                arr = self.weights[value]
            elif name in inputs:
                arr = inputs[name]
            elif b[name]["initializer"]:
                raise ValueError(f"kernel tensor '{name}' reads initializer '{value}', whose data kevo could not read "
                                 "(external data or a type it does not convert): pass it in inputs")
            else:
                raise ValueError(f"kernel tensor '{name}' (ONNX value '{value}') is missing from inputs")
            feed[name] = np.asarray(arr, dtype=np.float32).reshape([dims[d] for d in t["dims"]])
        out = kernel.kernel.reference(feed)
        return {k: v.reshape(b[k]["shape"]) if b[k]["shape"] else v for k, v in out.items()}


def import_onnx(path: str, *, dims: Optional[Dict[str, int]] = None, dtype: Optional[str] = None,
                target: Optional[TargetLike] = None, runner: RunnerLike = "sim") -> Model:
    """Imports an ONNX model file into kevo kernels (the C++ importer; raises ParseError with a
    located one-line message for a bad file). ``dims`` binds dynamic dimensions by name; ``dtype``
    sets every kernel tensor's storage dtype; with ``target`` the kernel table is measured too."""
    d = _kevo._import_onnx(str(path), {str(k): _integer(f"dims['{k}']", v, 0, (1 << 63) - 1) for k, v in (dims or {}).items()}, dtype or "", target, runner)
    d["kernels"] = [ModelKernel(**k) for k in d["kernels"]]
    return Model(**d)


def from_torch(module: Any, example_inputs: Any, *, dims: Optional[Dict[str, int]] = None, dtype: Optional[str] = None,
               target: Optional[TargetLike] = None, runner: RunnerLike = "sim", opset: int = 13,
               path: Optional[str] = None) -> Model:
    """A PyTorch ``nn.Module`` as kevo kernels: exported with ``torch.onnx.export`` (eval mode,
    constant folding, ``opset``; 13 suits Debian's torch 1.13) to ``path`` or a temporary file,
    then imported like ``import_onnx``. ``example_inputs`` is a tensor or a tuple of tensors."""
    import os
    import tempfile

    import torch  # noqa: F401  (a clear ImportError when PyTorch is missing)

    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    was_training = module.training
    module.eval()
    tmp = None
    try:
        if path is None:
            fd, tmp = tempfile.mkstemp(suffix=".onnx", prefix="kevo-")
            os.close(fd)
        out = path or tmp
        import warnings

        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)  # torch's own asserts traced as constants
            torch.onnx.export(module, args, out, opset_version=opset, do_constant_folding=True)
        return import_onnx(out, dims=dims, dtype=dtype, target=target, runner=runner)
    finally:
        if was_training:
            module.train()
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
