# Triton kernel emitted by kevo for softmax on h200 (docs/GPU.md): one schedule, every size a constant.
# kernel:   softmax [8192, 8192] bf16
# schedule: block_c=8192 rows=1 warps=16 passes=1 stages=1 cache=normal store=normal program=row
import torch
import triton
import triton.language as tl

INPUTS = ("X", )
OUTPUTS = ("Y", )


@triton.jit
def row_kernel(x_ptr, gamma_ptr, beta_ptr, y_ptr, R: tl.constexpr, C: tl.constexpr,
               BLOCK_C: tl.constexpr, ROWS: tl.constexpr, EPS: tl.constexpr):
    # softmax over the last dimension, ROWS rows per program
    cols = tl.arange(0, BLOCK_C)
    rows = tl.program_id(0)
    # one pass: the whole row is in registers
    x = tl.load(x_ptr + rows * C + cols).to(tl.float32)
    mx = tl.max(x, axis=0)
    den = tl.sum(tl.exp(x - mx), axis=0)
    tl.store(y_ptr + rows * C + cols, (tl.exp(x - mx) / den).to(tl.bfloat16))


def launch(X, Y):
    row_kernel[(8192,)](X, X, X, Y, R=8192, C=8192, BLOCK_C=8192, ROWS=1, EPS=0, num_warps=16, num_stages=1)
