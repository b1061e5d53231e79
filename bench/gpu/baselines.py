#!/usr/bin/env python3
"""Vendor and PyTorch baselines for kevo's GPU rows (docs/GPU.md, docs/RESULTS.md), timed the way
kevo's Triton worker times candidates (examples/runners/triton_worker.py: CUDA events around each
call, L2 flushed by writing 256 MiB before each sample, warm-up first; median of the samples).

Rows (issue 23): matmul bf16 2048^3, 4096^3, 8192^3 (cuBLAS via torch.matmul); matmul + bias +
GELU 4096^3 (cuBLAS then eager bias and GELU; torch.compile of the same); RMSNorm, softmax,
LayerNorm on [8192, 8192] bf16 (eager, torch.compile, and a torch clone of X for the copy
bandwidth of the same bytes); causal attention B=1 H=16 S=4096 D=128 bf16 (SDPA).
Writes JSON (--json FILE) and prints markdown rows. Usage: baselines.py [--json out.json] [--repeats N]
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "runners"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile rows")
    ap.add_argument("--only", default="", help="comma-separated row names")
    a = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001
        print(f"SKIP: cannot import torch ({e})")
        return 77
    if not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        return 77
    import triton_worker as w  # the same timing function as kevo's worker

    torch.manual_seed(0)
    dev, bf = "cuda", torch.bfloat16
    rows = []

    def bench(row, impl, fn, flops=0.0, nbytes=0.0):
        t0 = time.time()
        try:
            fn()
            torch.cuda.synchronize()
            s = w.time_fn(fn, a.repeats)
            med = sorted(s)[len(s) // 2]
            r = {"row": row, "impl": impl, "median_ns": med, "min_ns": min(s), "samples": len(s)}
            if flops:
                r["tflops"] = flops / med * 1e-3
            if nbytes:
                r["gbytes_per_s"] = nbytes / med
        except Exception as e:  # noqa: BLE001
            r = {"row": row, "impl": impl, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        r["setup_s"] = round(time.time() - t0, 1)
        rows.append(r)
        print(json.dumps(r), flush=True)

    def comp(f):
        return torch.compile(f) if not a.no_compile else None

    want = set(x for x in a.only.split(",") if x)

    def on(name):
        return not want or name in want

    for n in (2048, 4096, 8192):
        name = f"matmul {n}^3"
        if not on(f"matmul{n}") and not (n == 4096 and on("matmul4096_nt")):
            continue
        A = torch.randn(n, n, device=dev, dtype=bf)
        B = torch.randn(n, n, device=dev, dtype=bf) / math.sqrt(n)
        bench(name, "cuBLAS (torch.matmul)", lambda: torch.matmul(A, B), 2.0 * n ** 3)
        if n == 4096:  # what kevo's a_layout/b_layout=transposed_copy adds to each call (docs/GPU.md)
            Bt = torch.empty_like(B)
            bench(f"transposed copy {n}x{n} bf16", "Bt.copy_(B.t()) (layout gene's copy)", lambda: Bt.copy_(B.t()), 0,
                  2.0 * n * n * 2)
            del Bt
            if on("matmul4096_nt") or not want:
                Bnk = B.t().contiguous()  # B stored [N, K] (kevo's layout=nt row)
                bench(f"matmul {n}^3 nt (B stored [N, K])", "cuBLAS (torch.matmul(A, B.t()))", lambda: torch.matmul(A, Bnk.t()),
                      2.0 * n ** 3)
                del Bnk
        del A, B
    if on("matmul_gelu"):
        n = 4096
        A = torch.randn(n, n, device=dev, dtype=bf)
        W = torch.randn(n, n, device=dev, dtype=bf) / math.sqrt(n)
        bias = (0.1 * torch.randn(n, device=dev)).to(bf)

        def eager():
            return F.gelu(torch.matmul(A, W) + bias, approximate="tanh")
        bench("matmul+bias+gelu 4096^3", "cuBLAS + eager bias, GELU", eager, 2.0 * n ** 3)
        bench("matmul+bias+gelu 4096^3", "cuBLAS (torch.matmul) alone", lambda: torch.matmul(A, W), 2.0 * n ** 3)
        c = comp(eager)
        if c:
            bench("matmul+bias+gelu 4096^3", "torch.compile", c, 2.0 * n ** 3)
        del A, W
    R = C = 8192
    X = torch.randn(R, C, device=dev, dtype=bf)
    gamma = (1 + 0.1 * torch.randn(C, device=dev)).to(bf)
    beta = (0.1 * torch.randn(C, device=dev)).to(bf)
    nbytes = 2.0 * R * C * 2
    if any(on(x) for x in ("rmsnorm", "softmax", "layernorm")):
        bench("copy [8192, 8192] bf16", "torch clone (copy bandwidth)", lambda: X.clone(), 0, nbytes)

    def rms(x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * gamma

    fns = {"rmsnorm": rms, "softmax": lambda x: torch.softmax(x, dim=-1),
           "layernorm": lambda x: F.layer_norm(x, (C,), gamma, beta, 1e-5)}
    for name, f in fns.items():
        if not on(name):
            continue
        bench(f"{name} [8192, 8192] bf16", "eager", lambda: f(X), 0, nbytes)
        c = comp(f)
        if c:
            bench(f"{name} [8192, 8192] bf16", "torch.compile", lambda: c(X), 0, nbytes)
    del X
    if on("attention"):
        for S in (4096,):
            B_, H, D = 1, 16, 128
            q, k, v = (torch.randn(B_, H, S, D, device=dev, dtype=bf) for _ in range(3))
            fl = 4.0 * B_ * H * S * S * D / 2
            bench(f"causal attention B=1 H=16 S={S} D=128", "SDPA (is_causal)",
                  lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), fl)
    meta = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "repeats": a.repeats}
    try:
        import triton
        meta["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        pass
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"meta": meta, "rows": rows}, fh, indent=1)
    print(f"\n{meta}\n\n| row | baseline | median | figure |\n|---|---|---|---|")
    for r in rows:
        fig = f"{r['tflops']:.0f} TFLOP/s" if "tflops" in r else (f"{r['gbytes_per_s']:.0f} GB/s" if "gbytes_per_s" in r else r.get("error", ""))
        med = f"{r['median_ns'] / 1e3:.1f} us" if "median_ns" in r else "-"
        print(f"| {r['row']} | {r['impl']} | {med} | {fig} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
