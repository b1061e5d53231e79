# Triton kernel emitted by kevo for attention on h200 (docs/GPU.md): one schedule, every size a constant.
# kernel:   attention B=1 H=16 S=4096 D=128 bf16 causal
# schedule: block_m=64 block_n=64 warps=4 stages=3 order=heavy_first
import torch
import triton
import triton.language as tl

INPUTS = ("Q", "K", "V", )
OUTPUTS = ("O", )


@triton.jit
def _attn_block(acc, l_i, m_i, q, k_ptrs, v_ptrs, start_n, offs_m, offs_n,
                QK_SCALE: tl.constexpr, D: tl.constexpr, MASKED: tl.constexpr):
    k = tl.load(k_ptrs + start_n * D)
    qk = tl.dot(q, k)
    if MASKED:
        qk = qk * QK_SCALE + tl.where(offs_m[:, None] >= start_n + offs_n[None, :], 0.0, -1.0e6)
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        qk = qk - m_ij[:, None]
    else:
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * QK_SCALE)
        qk = qk * QK_SCALE - m_ij[:, None]
    p = tl.math.exp2(qk)
    alpha = tl.math.exp2(m_i - m_ij)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    v = tl.load(v_ptrs + start_n * D)
    acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_ij


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, S: tl.constexpr, D: tl.constexpr, QK_SCALE: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, HEAVY_FIRST: tl.constexpr):
    # one program per BLOCK_M query rows of one (batch, head)
    if HEAVY_FIRST:  # causal rows further down have more blocks: start them first
        start_m = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        start_m = tl.program_id(0)
    base = tl.program_id(1).to(tl.int64) * S * D
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + base + offs_m[:, None] * D + offs_d[None, :])
    k_ptrs = k_ptr + base + offs_n[None, :] * D + offs_d[:, None]  # K^T tile [D, BLOCK_N]
    v_ptrs = v_ptr + base + offs_n[:, None] * D + offs_d[None, :]  # V tile [BLOCK_N, D]
    m_i = tl.zeros([BLOCK_M], tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    if CAUSAL:
        hi = start_m * BLOCK_M
    else:
        hi = S
    for start_n in range(0, hi, BLOCK_N):
        acc, l_i, m_i = _attn_block(acc, l_i, m_i, q, k_ptrs, v_ptrs, start_n, offs_m, offs_n, QK_SCALE, D, False)
    if CAUSAL:
        for start_n in range(start_m * BLOCK_M, (start_m + 1) * BLOCK_M, BLOCK_N):
            acc, l_i, m_i = _attn_block(acc, l_i, m_i, q, k_ptrs, v_ptrs, start_n, offs_m, offs_n, QK_SCALE, D, True)
    acc = acc / l_i[:, None]
    tl.store(o_ptr + base + offs_m[:, None] * D + offs_d[None, :], acc.to(tl.bfloat16))


def launch(Q, K, V, O):
    attention_kernel[(64, 16)](Q, K, V, O, S=4096, D=128, QK_SCALE=0.12751743082459868,  # scale * log2(e)
                            BLOCK_M=64, BLOCK_N=64, CAUSAL=True, HEAVY_FIRST=True, num_warps=4, num_stages=3)
