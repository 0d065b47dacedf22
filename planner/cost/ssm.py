"""Selective state-space mixers: Mamba-2 (state-space duality, as in Nemotron-H and Granite 4.0-H) and Mamba-1
(the selective scan, as in Mamba, Falcon-Mamba and Jamba).

Projections follow HF's ``Mamba2Mixer``/``NemotronHMamba2Mixer``: one input projection to
``z, x, B, C, dt`` (``2·d_inner + 2·groups·N + heads`` wide, ``d_inner = heads·head_dim``), a depthwise causal
convolution over ``x, B, C``, the SSD scan, a gated RMSNorm (``y · silu(z)``) and the output projection.

SSD FLOPs (Dao & Gu 2024, "Transformers are SSMs", Sec. 6, the chunked algorithm with chunk ``Q``), per token:
the diagonal blocks compute ``C·Bᵀ`` once per group over ``Q/2`` causal positions (``groups·Q·N``) and apply
it to ``x`` per head (``heads·Q·P``); the chunk states ``Bᵀ·x`` (``2·N·P`` per head) and the state-to-output
``C·h`` (``2·N·P`` per head) make the low-rank part. Linear in the sequence length. Backward is twice the
forward plus the chunk states, which ``mamba_chunk_scan_combined`` recomputes rather than stores.

Mamba-1 (Gu & Dao 2023, "Mamba", Sec. 3.3 and Alg. 2; projections as HF's ``MambaMixer``): ``in_proj`` to
``x`` and the gate ``z`` (``2·d_inner``), a depthwise causal convolution over ``x``, ``x_proj`` to the step
size's ``dt_rank`` latent and ``B``, ``C`` (``state_size`` each), ``dt_proj`` back to ``d_inner`` (with a
bias), the scan with ``A`` (``d_inner x N``) and ``D``, ``y · silu(z)`` and ``out_proj``. The scan's FLOPs are
those of ``mamba_ssm``'s own counter (``selective_scan_flop_jit``: ``9·B·L·D·N``, discretising ``exp(Δ·A)``
and ``Δ·B·x``, updating ``h`` and reading ``C·h``, plus ``B·L·D`` each for the ``D`` skip and the ``z`` gate).
The fused kernel keeps no states: its backward re-runs the forward scan (counted as recomputed) and costs
twice the forward's FLOPs; it saves ``x``, ``Δ``, ``B``, ``C`` and ``z``.
"""

from __future__ import annotations

from planner.cost.primitives import FP32_BYTES, causal_conv1d, elementwise, linear, rms_norm
from planner.cost.work import Cost, Kernel, saved, weights
from planner.spec.model import Mamba2Mixer, MambaMixer

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
    return (linear(tokens, hidden, in_width, dtype_bytes)
            + saved(dtype_bytes * tokens * hidden, fp8_bytes=tokens * hidden)
            + saved(dtype_bytes * tokens * inner)                 # z, for the gated norm's backward
            + causal_conv1d(tokens, conv_channels, mixer.conv_kernel, dtype_bytes)
            + ssd_scan(mixer, batch=batch, seq_len=seq_len, dtype_bytes=dtype_bytes)
            + weights(3 * mixer.num_heads)                        # A_log, D and dt_bias
            + elementwise(2 * tokens * inner, tokens * inner, 4, dtype_bytes)   # y · silu(z)
            + rms_norm(tokens, inner, dtype_bytes)
            + linear(tokens, inner, hidden, dtype_bytes, parallel="row")
            + saved(dtype_bytes * tokens * inner, fp8_bytes=tokens * inner))


SELECTIVE_SCAN_FLOPS_PER_STATE = 9   # mamba_ssm's selective_scan_flop_jit


def selective_scan(mixer: MambaMixer, *, tokens: int, dtype_bytes: int) -> Cost:
    inner, state = mixer.inner_size, mixer.state_size
    flops = tokens * inner * (SELECTIVE_SCAN_FLOPS_PER_STATE * state + 2)   # + the D skip and the z gate
    inputs = dtype_bytes * tokens * (3 * inner + 2 * state)                # x, dt, z, B, C
    outputs = dtype_bytes * tokens * inner
    return Cost(forward=(Kernel(flops, inputs + outputs),),
                backward_input=(Kernel(2 * flops, 2 * inputs + 2 * outputs, recomputed_flops=flops),),
                activation_bytes=inputs)


def mamba_cost(mixer: MambaMixer, *, hidden: int, batch: int, seq_len: int, dtype_bytes: int) -> Cost:
    tokens = batch * seq_len
    inner, state = mixer.inner_size, mixer.state_size
    return (linear(tokens, hidden, 2 * inner, dtype_bytes, bias=mixer.proj_bias)
            + saved(dtype_bytes * tokens * hidden, fp8_bytes=tokens * hidden)
            + causal_conv1d(tokens, inner, mixer.conv_kernel, dtype_bytes, bias=mixer.conv_bias)
            + linear(tokens, inner, mixer.dt_rank + 2 * state, dtype_bytes)
            + saved(0.0, fp8_bytes=tokens * inner)                 # x_proj's FP8 cast of the scan's input x
            + linear(tokens, mixer.dt_rank, inner, dtype_bytes, bias=True)
            + saved(dtype_bytes * tokens * mixer.dt_rank, fp8_bytes=tokens * mixer.dt_rank)
            + selective_scan(mixer, tokens=tokens, dtype_bytes=dtype_bytes)
            + weights(inner * state + inner)                               # A_log and D
            + linear(tokens, inner, hidden, dtype_bytes, bias=mixer.proj_bias, parallel="row")
            + saved(dtype_bytes * tokens * inner, fp8_bytes=tokens * inner))
