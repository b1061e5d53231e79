# Triton kernel emitted by kevo for rmsnorm on h200 (docs/GPU.md): one schedule, every size a constant.
# kernel:   rmsnorm [8192, 8192] bf16
# schedule: block_c=8192 rows=1 warps=16 passes=2 stages=1 cache=keep store=normal program=row
import torch
import triton
import triton.language as tl

INPUTS = ("X", "gamma", )
OUTPUTS = ("Y", )


@triton.jit
def row_kernel(x_ptr, gamma_ptr, beta_ptr, y_ptr, R: tl.constexpr, C: tl.constexpr,
               BLOCK_C: tl.constexpr, ROWS: tl.constexpr, EPS: tl.constexpr):
    # rmsnorm over the last dimension, ROWS rows per program
    cols = tl.arange(0, BLOCK_C)
    rows = tl.program_id(0)
    # pass 1: row statistics over BLOCK_C-column chunks (elementwise partials, reduced once); X stays in L2
    s1 = tl.zeros((BLOCK_C,), tl.float32)
    for c0 in range(0, C, BLOCK_C):
        c = c0 + cols
        x = tl.load(x_ptr + rows * C + c, eviction_policy="evict_last").to(tl.float32)
        s1 += x * x
    rstd = tl.rsqrt(tl.sum(s1, axis=0) / C + EPS)
    # pass 2: the output
    for c0 in range(0, C, BLOCK_C):
        c = c0 + cols
        x = tl.load(x_ptr + rows * C + c, eviction_policy="evict_first").to(tl.float32)
        tl.store(y_ptr + rows * C + c, (x * rstd * tl.load(gamma_ptr + c, eviction_policy="evict_last").to(tl.float32)).to(tl.bfloat16))


def launch(X, gamma, Y):
    row_kernel[(8192,)](X, gamma, X, Y, R=8192, C=8192, BLOCK_C=8192, ROWS=1, EPS=1e-06, num_warps=16, num_stages=1)
