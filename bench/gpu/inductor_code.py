#!/usr/bin/env python3
"""What torch.compile (Inductor) emits for the row kernels of bench/gpu/baselines.py (RMSNorm,
softmax, LayerNorm on [R, C] bf16): writes each generated module to OUT/inductor_<name>.py and
the launch configurations Inductor's autotuners hold after a run to OUT/inductor_configs.txt,
so that kevo's row schedule space (docs/GPU.md) can be compared with Inductor's structure.
Usage: inductor_code.py OUT_DIR [R] [C]. Skips (exit 77) without torch or a CUDA device."""
import gc
import os
import sys


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    R = int(sys.argv[2]) if len(sys.argv) > 2 else 8192
    C = int(sys.argv[3]) if len(sys.argv) > 3 else 8192
    try:
        import torch
        import torch.nn.functional as F
        from torch._inductor.utils import run_and_get_code
    except Exception as e:  # noqa: BLE001
        print(f"SKIP: cannot import torch's Inductor ({e})")
        return 77
    if not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        return 77
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    bf = torch.bfloat16
    X = torch.randn(R, C, device="cuda", dtype=bf)
    gamma = (1 + 0.1 * torch.randn(C, device="cuda")).to(bf)
    beta = (0.1 * torch.randn(C, device="cuda")).to(bf)

    def rms(x):  # the same function as baselines.py
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * gamma

    fns = {"rmsnorm": rms, "softmax": lambda x: torch.softmax(x, dim=-1),
           "layernorm": lambda x: F.layer_norm(x, (C,), gamma, beta, 1e-5)}
    for name, f in fns.items():
        _, codes = run_and_get_code(torch.compile(f), X)
        with open(os.path.join(out, f"inductor_{name}.py"), "w") as fh:
            fh.write("\n\n# ---- next module ----\n\n".join(codes))
        print(name, "modules:", len(codes))
    lines = []
    for o in gc.get_objects():
        t = type(o)
        if t.__name__ in ("CachingAutotuner", "DebugAutotuner"):
            fn = getattr(getattr(o, "fn", None), "__name__", "?")
            configs = [str(c) for c in (getattr(o, "configs", None) or [])]
            chosen = [str(getattr(l, "config", "?")) for l in (getattr(o, "launchers", None) or [])]
            lines.append(f"{fn}: configs {configs}; launchers {chosen}")
    with open(os.path.join(out, "inductor_configs.txt"), "w") as fh:
        fh.write("\n".join(sorted(lines)) + "\n")
    print("\n".join(sorted(lines)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
