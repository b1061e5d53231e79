#!/usr/bin/env python3
"""kevo's winning row kernel against torch.compile, compiled afresh several times (docs/GPU.md).
torch.compile's time for a row kernel depends on the launch configuration Inductor's autotuner
picks when it compiles (it benchmarks its candidate configurations once, at compile time), so one
compile is one draw. This compiles the baseline ROUNDS times with Inductor's caches off, each
time timing the compiled function and kevo's module alternately (the worker's timing: CUDA events,
256 MiB L2 flush, medians of REPEATS samples), and records the configuration Inductor launched.
Usage: compare_compile.py OP KEVO_MODULE [ROUNDS] [--json OUT]   (OP: rmsnorm | layernorm | softmax)
"""
import gc
import importlib.util
import json
import os
import sys

os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "runners"))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--json")]
    out = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--json=")), "")
    if len(args) < 2:
        print(__doc__)
        return 2
    op, path = args[0], args[1]
    rounds = int(args[2]) if len(args) > 2 else 5
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001
        print(f"SKIP: cannot import torch ({e})")
        return 77
    if not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        return 77
    import triton_worker as w
    spec = importlib.util.spec_from_file_location("kevo_winner", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    R = C = 8192
    torch.manual_seed(0)
    bf = torch.bfloat16
    X = torch.randn(R, C, device="cuda", dtype=bf)
    gamma = (1 + 0.1 * torch.randn(C, device="cuda")).to(bf)
    beta = (0.1 * torch.randn(C, device="cuda")).to(bf)
    Y = torch.empty_like(X)

    def rms(x):  # as bench/gpu/baselines.py
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * gamma

    fns = {"rmsnorm": rms, "softmax": lambda x: torch.softmax(x, dim=-1),
           "layernorm": lambda x: F.layer_norm(x, (C,), gamma, beta, 1e-5)}
    f = fns[op]
    names = {"X": X, "gamma": gamma, "beta": beta, "Y": Y}
    params = list(mod.INPUTS) + list(mod.OUTPUTS)
    kevo = lambda: mod.launch(**{p: names[p] for p in params})  # noqa: E731
    kevo()
    ref = f(X).float()
    err = (Y.float() - ref).abs().max().item()
    med = lambda s: sorted(s)[len(s) // 2] / 1e3  # noqa: E731
    rows = []
    seen = set()
    for i in range(rounds):
        torch._dynamo.reset()
        c = torch.compile(f)
        c(X)
        torch.cuda.synchronize()
        launched = []
        for o in gc.get_objects():
            if type(o).__name__ in ("CachingAutotuner", "DebugAutotuner") and id(o) not in seen:
                seen.add(id(o))
                for ln in (getattr(o, "launchers", None) or []):
                    launched.append(str(getattr(ln, "config", "?")))
        tc = med(w.time_fn(lambda: c(X), 30))
        tk = med(w.time_fn(kevo, 30))
        rows.append({"round": i, "torch_compile_us": tc, "kevo_us": tk, "ratio": tc / tk, "inductor_launched": launched})
        print(json.dumps(rows[-1]), flush=True)
    summ = {"op": op, "kevo_module": path, "max_abs_err_vs_torch": err,
            "torch_compile_us": [r["torch_compile_us"] for r in rows], "kevo_us": [r["kevo_us"] for r in rows],
            "median_ratio": sorted(r["ratio"] for r in rows)[len(rows) // 2]}
    print(json.dumps(summ))
    if out:
        with open(out, "w") as fh:
            json.dump({"summary": summ, "rounds": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
