# %% [markdown]
# # kevo from a notebook
# Run cell by cell in Jupyter / VS Code (each `# %%` is a cell), or as a script:
# `python3 examples/python/notebook.py`.

# %%
import numpy as np

import kevo

kernel = kevo.parse_kernel("""
kernel mlp_up(X: bf16[T=512, D=1024], W: bf16[D, F=2048]) -> (Y: bf16[T, F]) {
  h[t, f] = sum(d) X[t, d] * W[d, f]
  Y[t, f] = gelu(h[t, f])
}
""")
print(kernel, kernel.dims)

# %% The schedule space kevo derived for this kernel on trn2
space = kevo.Space(kernel, "trn2")
print(f"{len(space.genes)} genes, 10^{space.log10_size:.1f} schedules, "
      f"{100 * space.validity(100, 0):.0f}% of random ones valid")
default = space.print(space.default())
print("default schedule:", default)

# %% Measure the default schedule on the simulated NeuronCore
m = kevo.eval(kernel, default, target="trn2")
print(f"default: {m.latency_ns / 1e3:.1f} us, {100 * m.fraction_of_peak:.1f}% of peak, bottleneck {m.bottleneck}")
print(m.profile)

# %% Search, with a progress line every 50 evaluations
def progress(n, budget, best_ns, last):
    if n % 50 == 0:
        print(f"  {n}/{budget}: best {best_ns / 1e3:.1f} us")

result = kevo.search(kernel, target="trn2", budget=300, seed=0, progress=progress)
best = result.best
print(f"best: {best.latency_ns / 1e3:.1f} us ({100 * best.fraction_of_peak:.1f}% of peak), "
      f"verified by {result.verification['method']}; speed-up over default {m.latency_ns / best.latency_ns:.2f}x")
print(best.schedule)

# %% The history as a NumPy structured array (or result.history_dicts() for pandas)
h = result.history_array()
print(f"{h['ok'].mean():.0%} of evaluations valid; best reached after {int(np.argmin(h['best_so_far_ns']))} evaluations")

# %% The winner's tile program and its NKI source
prog = kevo.lower(kernel, best.schedule, target="trn2", nki=True)
print(f"{prog.instructions} instructions, SBUF {prog.sbuf_bytes_per_partition // 1024} KiB/partition")
print(prog.nki.splitlines()[0])

# %% The reference evaluator on NumPy arrays: what every schedule is checked against
rng = np.random.default_rng(0)
x = rng.standard_normal((512, 1024)).astype(np.float32)
w = (rng.standard_normal((1024, 2048)) / 32).astype(np.float32)
y = kernel.reference({"X": x, "W": w})["Y"]
print("Y", y.shape, y.dtype, f"mean {y.mean():.4f}")
