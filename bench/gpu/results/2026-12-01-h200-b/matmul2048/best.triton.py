# Triton kernel emitted by kevo for matmul on h200 (docs/GPU.md): one schedule, every size a constant.
# kernel:   matmul 2048x2048x2048 bf16 nn
# schedule: block_m=128 block_n=256 block_k=64 warps=8 stages=3 group_m=8 split_k=1 program=tile a_layout=as_stored b_layout=as_stored
import torch
import triton
import triton.language as tl

INPUTS = ("A", "B", )
OUTPUTS = ("C", )


@triton.jit
def matmul_kernel(a_ptr, b_ptr, bias_ptr, c_ptr,
                  M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr):
    # one program per BLOCK_M x BLOCK_N output tile (and K slice), launched in groups of GROUP_M
    # tile rows so that neighbouring programs share A and B tiles in L2
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_am = offs_m
    offs_bn = offs_n
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * K + offs_k[None, :] * 1
    b_ptrs = b_ptr + offs_k[:, None] * N + offs_bn[None, :] * 1
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, K // SPLIT_K, BLOCK_K):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * 1
        b_ptrs += BLOCK_K * N
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.bfloat16))



_workspace = {}


def launch(A, B, C):
    matmul_kernel[(128, 1)](A, B, C, C, M=2048, N=2048, K=2048, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, num_warps=8, num_stages=3)
