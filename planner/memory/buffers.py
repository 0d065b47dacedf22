"""Memory beside model state and activations: communication buffers, the CUDA context, allocator overhead.

NCCL's communicators (``NCCL_BUFFSIZE`` 4 MiB per channel and peer: a few hundred MiB per GPU once TP, DP and PP
groups are built), Megatron's global buffer for the sequence-parallel all-gather (one full ``tokens/cp x hidden``
activation), the MoE dispatcher's permuted-token buffers (in and out), the CUDA context with cuBLAS workspaces
(~1 GiB), and the caching allocator's fragmentation, taken as Megatron's 5 % on top of activations
(``compute_activation_memory_without_sp``'s ``overhead_factor``). The pure-PP planner counts none of them.
"""

from __future__ import annotations

NCCL_BUFFER_BYTES = 512 << 20
CUDA_CONTEXT_BYTES = 1 << 30
ALLOCATOR_OVERHEAD = 0.05
ACTIVATION_DTYPE_BYTES = 2   # bf16 activations cross the buffers


def buffer_bytes(*, gpus: int, tp: int, cp: int, ep: int, tokens: int, hidden_size: int, routed_width: int) -> float:
    """Communication buffers of one GPU; ``tokens`` of one micro-batch; ``routed_width`` the most values a token sends
    its experts in any MoE layer (``top_k`` copies of ``MoEMLP.expert_width``), 0 without MoE layers."""
    buffers = NCCL_BUFFER_BYTES if gpus > 1 else 0
    if tp > 1:
        buffers += tokens / cp * hidden_size * ACTIVATION_DTYPE_BYTES
    if routed_width and ep > 1:
        buffers += 2 * tokens / (tp * cp) * routed_width * ACTIVATION_DTYPE_BYTES
    return buffers


def overhead_bytes(activations: float) -> float:
    """The CUDA context and the allocator's fragmentation on top of ``activations``."""
    return CUDA_CONTEXT_BYTES + ALLOCATOR_OVERHEAD * activations
