"""Mamba-2 (state-space duality) mixers, as in Nemotron-H.

Projections follow HF's ``Mamba2Mixer``/``NemotronHMamba2Mixer``: one input projection to
``z, x, B, C, dt`` (``2·d_inner + 2·groups·N + heads`` wide, ``d_inner = heads·head_dim``), a depthwise causal
convolution over ``x, B, C``, the SSD scan, a gated RMSNorm (``y · silu(z)``) and the output projection.

SSD FLOPs (Dao & Gu 2024, "Transformers are SSMs", Sec. 6, the chunked algorithm with chunk ``Q``), per token:
the diagonal blocks compute ``C·Bᵀ`` once per group over ``Q/2`` causal positions (``groups·Q·N``) and apply
it to ``x`` per head (``heads·Q·P``); the chunk states ``Bᵀ·x`` (``2·N·P`` per head) and the state-to-output
``C·h`` (``2·N·P`` per head) make the low-rank part. Linear in the sequence length. Backward is twice the
forward plus the chunk states, which ``mamba_chunk_scan_combined`` recomputes rather than stores.
"""

from __future__ import annotations

from planner.cost.primitives import FP32_BYTES, causal_conv1d, elementwise, linear, rms_norm
from planner.cost.work import Cost, Kernel, saved, weights
from planner.spec.model import Mamba2Mixer

CHUNK_SIZE = 128   # Nemotron-H's chunk_size


def ssd_flops_per_token(mixer: Mamba2Mixer, seq_len: int) -> float:
    chunk = min(CHUNK_SIZE, seq_len)
    heads, head_dim, state = mixer.num_heads, mixer.head_dim, mixer.state_size
    return mixer.n_groups * chunk * state + heads * (chunk * head_dim + 4 * state * head_dim)


def ssd_scan(mixer: Mamba2Mixer, *, batch: int, seq_len: int, dtype_bytes: int) -> Cost:
    tokens = batch * seq_len
    inner = mixer.num_heads * mixer.head_dim
    group_width = 2 * mixer.n_groups * mixer.state_size       # B and C
    flops = tokens * ssd_flops_per_token(mixer, seq_len)
    inputs = dtype_bytes * tokens * (inner + group_width) + FP32_BYTES * tokens * mixer.num_heads   # x, B, C, dt
    outputs = dtype_bytes * tokens * inner
    state_recompute = 2.0 * tokens * mixer.num_heads * mixer.state_size * mixer.head_dim
    return Cost(forward=(Kernel(flops, inputs + outputs),),
                backward_input=(Kernel(2 * flops, 2 * inputs + 2 * outputs, recomputed_flops=state_recompute),),
                activation_bytes=outputs)


def mamba2_cost(mixer: Mamba2Mixer, *, hidden: int, batch: int, seq_len: int, dtype_bytes: int) -> Cost:
    tokens = batch * seq_len
    inner = mixer.num_heads * mixer.head_dim
    conv_channels = inner + 2 * mixer.n_groups * mixer.state_size
    in_width = inner + conv_channels + mixer.num_heads            # z, (x, B, C), dt
    return (linear(tokens, hidden, in_width, dtype_bytes) + saved(dtype_bytes * tokens * hidden)
            + saved(dtype_bytes * tokens * inner)                 # z, for the gated norm's backward
            + causal_conv1d(tokens, conv_channels, mixer.conv_kernel, dtype_bytes)
            + ssd_scan(mixer, batch=batch, seq_len=seq_len, dtype_bytes=dtype_bytes)
            + weights(3 * mixer.num_heads)                        # A_log, D and dt_bias
            + elementwise(2 * tokens * inner, tokens * inner, 4, dtype_bytes)   # y · silu(z)
            + rms_norm(tokens, inner, dtype_bytes)
            + linear(tokens, inner, hidden, dtype_bytes) + saved(dtype_bytes * tokens * inner))
