#!/usr/bin/env python3
"""kevo GPU worker: compiles, checks and times Triton kernels emitted by kevo (docs/GPU.md).

Speaks kevo's worker protocol v1 (docs/PROTOCOL.md) on stdin/stdout, one JSON object per line.
Besides the protocol's fields a GPU request carries
  "triton":  the emitted Python module (INPUTS, OUTPUTS, launch(**tensors)),
  "problem": the kernel as kevo classified it (family, sizes, dtype, tensors with roles).
For each request the worker
  1. writes the module to its cache folder and imports it (Triton's @jit reads source files),
  2. builds the inputs once per problem (seeded) and the reference with PyTorch on the device
     (torch.matmul, torch.softmax, F.layer_norm, F.scaled_dot_product_attention, in fp32),
  3. runs the kernel once into NaN-filled outputs and compares within the dtype's tolerance (its
     absolute part at the reference's own scale, its rms),
  4. times it: warm-up, then `repeats` samples, each between two CUDA events with the L2 flushed
     before it by writing a 256 MiB buffer (as triton.testing.do_bench does).
Statuses: ok; invalid (the kernel does not fit the device: Triton's OutOfResources); error (a
compile error or a Python exception); incorrect (outputs disagree); crashed (a CUDA error such as
an illegal memory access: the CUDA context is unusable, so the worker answers and exits, and
kevo starts a new one for the next candidate). Hangs are kevo's to end: it kills the worker's
process group after the candidate's timeout.
Logs go to stderr. Usage: kevo search ... --target h200 --runner 'cmd:python3 examples/runners/triton_worker.py'
"""
import hashlib
import importlib.util
import json
import math
import os
import sys
import time
import traceback

FLUSH_BYTES = 256 * 1024 * 1024
WARMUP = 3
CACHE_DIR = os.environ.get("KEVO_TRITON_CACHE", os.path.join(os.environ.get("TMPDIR", "/tmp"), "kevo_triton_modules"))


def log(*a):
    print("triton_worker:", *a, file=sys.stderr, flush=True)


def reply(rid, status, latency=None, message="", profile=None):
    r = {"v": 1, "id": rid, "status": status, "message": message}
    if latency is not None:
        r["latency_ns"] = latency
    if profile is not None:
        r["profile"] = profile
    sys.stdout.write(json.dumps(r) + "\n")
    sys.stdout.flush()


try:
    import torch
    import torch.nn.functional as F
    import triton
    HAVE = torch.cuda.is_available()
    WHY = "" if HAVE else "torch sees no CUDA device"
except Exception as e:  # noqa: BLE001 -- any import failure is reported per request
    HAVE, WHY = False, f"cannot import torch/triton: {e}"

DT = {}
if HAVE:
    DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def tolerance(p):
    """(atol, rtol) for comparing an output with the fp32 reference rounded to the storage dtype;
    atol is relative to the reference's own scale, its rms (see check())."""
    dt = p["dtype"]
    if dt == "fp32":
        return (1e-4, 1e-4)
    return (3e-2, 3e-2) if dt == "bf16" else (1e-2, 1e-2)


def check(out, ref, p):
    """(number of bad elements, first bad flat index or -1, max |diff|, atol used). An element
    passes when |out - ref| <= atol * rms(ref) + rtol * |ref| and out is finite. The absolute part
    is at the tensor's own scale, as kevo's oracle checks (docs/VERIFY.md): with atol = 3e-2 fixed,
    a non-causal attention's outputs (rms 0.027 at S = 4096, D = 128, randn inputs) 10% off
    everywhere passed, not one element of 524,288 beyond the tolerance."""
    atol, rtol = tolerance(p)
    finite = torch.isfinite(ref)
    rms = float(ref[finite].double().pow(2).mean().sqrt().item()) if bool(finite.any()) else 0.0
    abs_tol = atol * rms
    err = (out - ref).abs()
    bad = err > abs_tol + rtol * ref.abs()
    bad |= ~torch.isfinite(out)
    nbad = int(bad.sum().item())
    max_err = float(torch.nan_to_num(err, nan=float("inf")).max().item())
    first = int(bad.flatten().nonzero()[0].item()) if nbad else -1
    return nbad, first, max_err, abs_tol


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


# (names only: without torch every request is answered "error" with WHY before these are used)
ACTS = {"none": lambda x: x, "gelu": gelu_tanh, "gelu_erf": lambda x: F.gelu(x), "relu": lambda x: F.relu(x),
        "silu": lambda x: F.silu(x)}


class Problem:
    """Inputs, preallocated outputs and the fp32 reference of one problem, built once."""

    def __init__(self, p):
        self.p = p
        g = torch.Generator(device="cuda").manual_seed(1234)
        dev = "cuda"
        self.inputs, self.outputs = {}, {}
        roles = {}
        for t in p["tensors"]:
            shape, dt = tuple(t["shape"]), DT[t["dtype"]]
            if t["output"]:
                self.outputs[t["name"]] = torch.empty(shape, dtype=dt, device=dev)
                continue
            x = torch.randn(shape, generator=g, device=dev, dtype=torch.float32)
            if t["role"] == "B":
                x = x / math.sqrt(p["K"])
            elif t["role"] == "gamma":
                x = 1.0 + 0.1 * x
            elif t["role"] in ("beta", "bias"):
                x = 0.1 * x
            self.inputs[t["name"]] = x.to(dt)
            roles[t["role"]] = self.inputs[t["name"]]
        out_name = [t["name"] for t in p["tensors"] if t["output"]][0]
        self.out_name = out_name
        with torch.no_grad():
            self.ref = self.reference(roles).to(DT[p["dtype"]])
        torch.cuda.synchronize()

    def reference(self, r):
        p = self.p
        if p["family"] == "matmul":
            a, b = r["A"].float(), r["B"].float()
            if p["a_trans"]:
                a = a.t()
            if p["b_trans"]:
                b = b.t()
            c = torch.matmul(a, b)
            if p["bias"]:
                c = c + r["bias"].float()
            return ACTS[p["act"]](c)
        if p["family"] == "row":
            x = r["X"].float()
            if p["op"] == "softmax":
                return torch.softmax(x, dim=-1)
            if p["op"] == "rmsnorm":
                return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + p["eps"]) * r["gamma"].float()
            return F.layer_norm(x, (p["C"],), r["gamma"].float(), r["beta"].float(), p["eps"])
        q, k, v = r["Q"].float(), r["K"].float(), r["V"].float()
        outs = []
        for h in range(q.shape[1]):  # head by head: the fp32 score matrix of all heads at once is large
            outs.append(F.scaled_dot_product_attention(q[:, h:h + 1], k[:, h:h + 1], v[:, h:h + 1],
                                                       is_causal=p["causal"], scale=p["scale"]))
        return torch.cat(outs, dim=1)

    def tensors(self):
        d = dict(self.inputs)
        d.update(self.outputs)
        return d


_problem_key, _problem = None, None
_flush = None


def get_problem(p):
    global _problem_key, _problem
    key = json.dumps(p, sort_keys=True)
    if key != _problem_key:
        _problem, _problem_key = None, None
        torch.cuda.empty_cache()
        _problem = Problem(p)
        _problem_key = key
    return _problem


def load_module(src):
    h = hashlib.sha256(src.encode()).hexdigest()[:20]
    os.makedirs(CACHE_DIR, exist_ok=True)
    path = os.path.join(CACHE_DIR, f"kevo_{h}.py")
    if not os.path.exists(path):
        tmp = path + f".{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(src)
        os.replace(tmp, path)
    name = f"kevo_{h}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules[name] = mod
    return mod


def time_fn(fn, repeats, warmup=WARMUP):
    """Latency samples in ns: each sample one call between CUDA events, L2 flushed before it."""
    global _flush
    if _flush is None:
        _flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    for i in range(repeats):
        _flush.zero_()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return [max(s.elapsed_time(e) * 1e6, 1.0) for s, e in zip(starts, ends)]


def cuda_poisoned():
    try:
        torch.cuda.synchronize()
        torch.zeros(1, device="cuda").add_(1).item()
        return False
    except Exception:  # noqa: BLE001
        return True


def is_cuda_error(e):
    s = f"{type(e).__name__}: {e}"
    return "CUDA error" in s or "cudaError" in s or "illegal memory access" in s or "CUDA_ERROR" in s


def handle(req):
    rid = req["id"]
    if not HAVE:
        return reply(rid, "error", message=WHY)
    src, p = req.get("triton"), req.get("problem")
    if not isinstance(src, str) or not src or not isinstance(p, dict):
        return reply(rid, "error", message="request has no 'triton' source or 'problem' (kevo search --target <gpu> sends them)")
    repeats = max(1, min(int(req.get("repeats", 10)), 1000))
    stage = "building the problem"
    try:
        prob = get_problem(p)
        stage = "compiling"
        t0 = time.time()
        mod = load_module(src)
        ts = prob.tensors()
        for o in prob.outputs.values():
            o.fill_(float("nan"))
        mod.launch(**ts)  # the first call compiles
        torch.cuda.synchronize()
        compile_s = time.time() - t0
        stage = "checking"
        out = prob.outputs[prob.out_name].float()
        ref = prob.ref.float()
        nbad, idx, max_err, abs_tol = check(out, ref, p)
        if nbad:
            rtol = tolerance(p)[1]
            return reply(rid, "incorrect",
                         message=f"{nbad} of {out.numel()} outputs differ from the PyTorch reference beyond {abs_tol:.3g} + {rtol}*|ref| "
                                 f"(max |diff| {max_err:.3g}; first at flat index {idx}: {out.flatten()[idx].item():.6g} vs "
                                 f"{ref.flatten()[idx].item():.6g})")
        stage = "timing"
        samples = time_fn(lambda: mod.launch(**ts), repeats)
        med = sorted(samples)[len(samples) // 2]
        prof = {"compile_s": round(compile_s, 3), "max_abs_err": max_err}
        if p.get("flops"):
            prof["tflops"] = round(p["flops"] / med * 1e-3, 1)
        if p.get("min_bytes"):
            prof["gbytes_per_s"] = round(p["min_bytes"] / med, 1)
        return reply(rid, "ok", latency=samples, profile=prof)
    except Exception as e:  # noqa: BLE001 -- every failure becomes a typed status
        msg = f"{stage}: {type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"[:2000]
        if is_cuda_error(e) or cuda_poisoned():
            reply(rid, "crashed", message=msg + " (CUDA context lost; worker exits, kevo starts a new one)")
            log("CUDA error, exiting:", msg)
            sys.stdout.flush()
            os._exit(3)
        name = type(e).__name__
        log(traceback.format_exc().strip().splitlines()[-1])
        if name == "OutOfResources":
            return reply(rid, "invalid", message=msg)
        return reply(rid, "error", message=msg)


def main():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
            rid = req["id"]
        except Exception as e:  # noqa: BLE001
            log("bad request:", e)
            return 2
        try:
            handle(req)
        except SystemExit:
            raise
        except Exception as e:  # noqa: BLE001
            reply(rid, "error", message=f"worker: {type(e).__name__}: {e}"[:2000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
