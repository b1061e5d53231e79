#!/usr/bin/env python3
"""kevo ProcessRunner worker for a real AWS Trainium / Inferentia2 instance.

UNTESTED HERE: kevo's CI machines have no Neuron device. This worker follows the protocol in
docs/PROTOCOL.md and the Neuron SDK's documented tools; expect to adapt paths and flags to your
SDK version. Run it on a trn1/trn2/inf2 instance with the Neuron SDK (neuronx-cc, nki, torch-neuronx):

    kevo search ... --runner cmd:"python3 examples/runners/trainium_worker.py" --eval-timeout 600

For each request (one JSON line on stdin) it
  1. writes the NKI source kevo emitted ("nki") to a work directory as kernel.py,
  2. builds random inputs from the kernel text's tensor declarations ("kernel", .kir),
  3. benchmarks the kernel with nki.benchmark (legacy API) when available, or times repeated
     calls of the @nki.jit kernel on the device otherwise, and optionally captures a profile
     with neuron-profile / neuron-explorer when KEVO_NEURON_PROFILE=1,
  4. answers one JSON line on stdout: {"v":1,"id":...,"status":"ok","latency_ns":[...],...}.
Anything that goes wrong becomes a status (error, crashed, incorrect) for that candidate; logs go
to stderr only, because stdout carries the protocol.
"""
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback

PROTOCOL = 1
WORK = os.environ.get("KEVO_WORKER_DIR") or tempfile.mkdtemp(prefix="kevo-trn-")
WARMUP = int(os.environ.get("KEVO_WARMUP", "5"))


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


KIR_HEADER = re.compile(r"kernel\s+\w+\s*\((.*?)\)\s*->\s*\((.*?)\)", re.S)
KIR_TENSOR = re.compile(r"(\w+)\s*:\s*(\w+)\s*\[([^\]]*)\]")


def tensor_specs(kernel_text):
    """(role, name, dtype, shape) of each input and output of a .kir kernel (docs/KIR.md), e.g.
    kernel matmul(A: bf16[K=256, M=256], B: bf16[K, N=512]) -> (C: bf16[M, N]) { ... }"""
    m = KIR_HEADER.search(kernel_text)
    if not m:
        raise ValueError("kernel text has no 'kernel name(...) -> (...)' header")
    dims, specs = {}, []
    for role, group in (("input", m.group(1)), ("output", m.group(2))):
        for t in KIR_TENSOR.finditer(group):
            shape = []
            for d in t.group(3).split(","):
                d = d.strip()
                if "=" in d:
                    name, size = d.split("=", 1)
                    dims[name.strip()] = int(size)
                    d = name.strip()
                shape.append(dims[d])
            specs.append((role, t.group(1), t.group(2), shape))
    return specs


def numpy_dtype(np, name):
    import ml_dtypes  # bfloat16 / fp8 for numpy, shipped with the Neuron SDK's jax/torch stacks
    # kevo's fp8_e4m3 is the IEEE-style E4M3 (largest finite 240) NeuronCore-v2/v3 store,
    # ml_dtypes.float8_e4m3 (ml_dtypes >= 0.5); fp8_e4m3fn is OCP's E4M3FN (448), trn3 and later.
    return {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16,
            "fp8_e4m3": ml_dtypes.float8_e4m3, "fp8_e4m3fn": ml_dtypes.float8_e4m3fn}[name]


def load_kernel(path):
    spec = importlib.util.spec_from_file_location("kevo_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fns = [v for k, v in vars(mod).items() if callable(v) and getattr(v, "__module__", "") == "kevo_kernel"]
    if not fns:
        raise RuntimeError("no kernel function in the emitted NKI source")
    return fns[-1]


def benchmark(kernel_fn, inputs, repeats):
    """Latency samples in ns, from nki.benchmark when the SDK has it, else device wall time."""
    try:
        import nki
        bench = getattr(nki, "benchmark", None)
    except ImportError:
        bench = None
    if bench is not None:
        # Legacy API: nki.benchmark(warmup, iters) wraps the kernel and records percentiles in us.
        bk = bench(warmup=WARMUP, iters=repeats)(kernel_fn)
        bk(*inputs)
        lat = bk.benchmark_result.nc_latency
        return [lat.get_latency_percentile(p) * 1000.0 for p in (1, 10, 25, 50, 75, 90, 99)][:max(1, repeats)]
    import torch
    import torch_xla.core.xla_model as xm  # torch-neuronx runs kernels through XLA devices
    dev = xm.xla_device()
    args = [torch.from_numpy(x.astype("float32")).to(dev) for x in inputs]
    for _ in range(WARMUP):
        kernel_fn(*args)
    xm.mark_step()
    xm.wait_device_ops()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        kernel_fn(*args)
        xm.mark_step()
        xm.wait_device_ops()
        samples.append(float(time.perf_counter_ns() - t0))
    return samples


def profile_summary(path):
    """Optional: capture a device profile of the kernel's NEFF and keep the headline figures."""
    if os.environ.get("KEVO_NEURON_PROFILE") != "1":
        return None
    neffs = [os.path.join(WORK, f) for f in os.listdir(WORK) if f.endswith(".neff")]
    if not neffs:
        return None
    out = os.path.join(WORK, "profile.json")
    try:
        subprocess.run(["neuron-profile", "capture", "-n", neffs[-1], "-s", os.path.join(WORK, "profile.ntff")],
                       check=True, stdout=sys.stderr, stderr=sys.stderr, timeout=600)
        subprocess.run(["neuron-profile", "view", "-n", neffs[-1], "-s", os.path.join(WORK, "profile.ntff"),
                        "--output-format", "summary-json", "--output-file", out],
                       check=True, stdout=sys.stderr, stderr=sys.stderr, timeout=600)
        with open(out) as f:
            summary = json.load(f)
        keep = ("mfu_estimated_percent", "mbu_estimated_percent", "tensor_engine_active_time_percent")
        flat = summary[0] if isinstance(summary, list) and summary else summary
        return ", ".join("%s=%s" % (k, flat[k]) for k in keep if isinstance(flat, dict) and k in flat)
    except Exception as e:  # profiling is a bonus; never fail the measurement for it
        log("profile failed:", e)
        return None


def handle(req):
    rid = req["id"]
    if not req.get("nki"):
        return {"v": PROTOCOL, "id": rid, "status": "error", "message": "request has no NKI source"}
    case = os.path.join(WORK, "case_%d" % rid)
    os.makedirs(case, exist_ok=True)
    path = os.path.join(case, "kernel.py")
    with open(path, "w") as f:
        f.write(req["nki"])
    with open(os.path.join(case, "schedule.txt"), "w") as f:
        f.write(req.get("schedule", ""))
    import numpy as np
    rng = np.random.default_rng(rid)
    inputs = [rng.uniform(-1, 1, size=shape).astype(numpy_dtype(np, dt))
              for role, _, dt, shape in tensor_specs(req.get("kernel", "")) if role == "input"]
    try:
        fn = load_kernel(path)
    except Exception as e:
        return {"v": PROTOCOL, "id": rid, "status": "invalid", "message": "cannot load kernel: %s" % e}
    try:
        samples = benchmark(fn, inputs, int(req.get("repeats", 10)))
    except Exception as e:
        log(traceback.format_exc())
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        return {"v": PROTOCOL, "id": rid, "status": "error", "message": "neuron: " + msg[:500]}
    resp = {"v": PROTOCOL, "id": rid, "status": "ok", "latency_ns": samples, "message": ""}
    prof = profile_summary(case)
    if prof:
        resp["profile"] = prof
    return resp


def main():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
        except ValueError:
            log("not a request:", line[:200])
            continue
        if req.get("v") != PROTOCOL:
            reply({"v": PROTOCOL, "id": req.get("id", 0), "status": "error",
                   "message": "worker speaks protocol %d, request has %r" % (PROTOCOL, req.get("v"))})
            continue
        try:
            reply(handle(req))
        except Exception as e:
            log(traceback.format_exc())
            reply({"v": PROTOCOL, "id": req.get("id", 0), "status": "error", "message": "worker: %s" % e})


if __name__ == "__main__":
    main()
