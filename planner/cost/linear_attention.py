"""Linear attention with a per-head ``d x d`` recurrent state: gated delta-net (Qwen3-Next) and lightning
attention (MiniMax-01), both computed chunk-wise.

Chunked form (Yang et al. 2024, "Gated Linear Attention Transformers with Hardware-Efficient Training",
Sec. 3.3; Qin et al. 2024, "Lightning Attention-2", Sec. 3): the sequence is cut into chunks of ``C`` tokens.
Per token and value head, the intra-chunk part is causal attention over ``C/2`` keys on average,
``C·(d_k + d_v)`` FLOPs, and the inter-chunk part reads the running state (``q·S``, ``2·d_k·d_v``) and adds
to it (``kᵀ·v``, ``2·d_k·d_v``). The delta rule (Yang et al. 2024, "Parallelizing Linear Transformers with
the Delta Rule over Sequence Length", Sec. 3.2) also corrects the values against the state (``w·S``,
``2·d_k·d_v``) and builds the chunk's triangular (UT) transform (``C·d_k``). Everything is linear in the
sequence length. Backward is twice the forward, plus the chunk states that the kernels (flash-linear-
attention) recompute instead of storing.

Projections follow the HF modules: gated delta-net has a fused q/k/v/z projection, a beta/decay projection,
a short causal convolution over q, k and v (no bias), a gated RMSNorm and the output projection; lightning attention
has a fused q/k/v projection, a sigmoid output gate, a norm and the output projection.
"""

from __future__ import annotations

from planner.cost.primitives import FP32_BYTES, causal_conv1d, elementwise, linear, rms_norm
from planner.cost.work import Cost, Kernel, saved, weights
from planner.spec.model import LinearAttentionMixer

CHUNK_SIZE = 64               # flash-linear-attention's chunk for both kernels


def core_flops_per_token(mixer: LinearAttentionMixer, seq_len: int) -> float:
    chunk = min(CHUNK_SIZE, seq_len)
    d = mixer.head_dim
    per_head = chunk * (d + d) + 4 * d * d
    if mixer.variant == "gated_delta":
        per_head += 2 * d * d + chunk * d
    return mixer.num_heads * per_head


def linear_attention_core(mixer: LinearAttentionMixer, *, batch: int, seq_len: int, dtype_bytes: int) -> Cost:
    tokens = batch * seq_len
    d = mixer.head_dim
    flops = tokens * core_flops_per_token(mixer, seq_len)
    queries_keys = tokens * 2 * mixer.key_heads * d
    values = outputs = tokens * mixer.num_heads * d
    decays = FP32_BYTES * tokens * mixer.num_heads * 2   # per-token decay and (delta) beta
    state_recompute = 2.0 * tokens * mixer.num_heads * d * d
    return Cost(
        forward=(Kernel(flops, dtype_bytes * (queries_keys + values + outputs) + decays),),
        backward_input=(Kernel(2 * flops, dtype_bytes * 2 * (queries_keys + values + outputs) + decays,
                               recomputed_flops=state_recompute),),
        activation_bytes=dtype_bytes * (queries_keys + values + outputs) + decays)


def _gated_delta_projections(mixer: LinearAttentionMixer, hidden: int, tokens: int, dtype_bytes: int) -> Cost:
    d, heads, key_heads = mixer.head_dim, mixer.num_heads, mixer.key_heads
    qkv = 2 * key_heads * d + heads * d
    return (linear(tokens, hidden, qkv + heads * d, dtype_bytes)      # q, k, v and the output gate z
            + linear(tokens, hidden, 2 * heads, dtype_bytes)          # beta and the decay's step size
            # one input projection in Megatron-Core (GatedDeltaNet's in_proj), so one FP8 cast of its input
            + saved(dtype_bytes * tokens * hidden, fp8_bytes=tokens * hidden)
            + causal_conv1d(tokens, qkv, mixer.conv_kernel, dtype_bytes, bias=False)
            + weights(2 * heads)                                      # A_log and dt_bias
            + saved(dtype_bytes * tokens * heads * d))                # z, for the gated norm's backward


def _lightning_projections(mixer: LinearAttentionMixer, hidden: int, tokens: int, dtype_bytes: int) -> Cost:
    width = mixer.num_heads * mixer.head_dim
    return (linear(tokens, hidden, 3 * width, dtype_bytes)            # q, k, v
            + linear(tokens, hidden, width, dtype_bytes)              # sigmoid output gate
            + saved(dtype_bytes * tokens * hidden, fp8_bytes=tokens * hidden)
            + saved(dtype_bytes * tokens * width))                    # the gate, for its backward


def linear_attention_cost(mixer: LinearAttentionMixer, *, hidden: int, batch: int, seq_len: int,
                          dtype_bytes: int) -> Cost:
    tokens = batch * seq_len
    width = mixer.num_heads * mixer.head_dim
    if mixer.variant == "gated_delta":
        projections = _gated_delta_projections(mixer, hidden, tokens, dtype_bytes)
        norm = rms_norm(tokens, width, dtype_bytes, scale_width=mixer.head_dim)   # heads share one scale
    else:
        projections = _lightning_projections(mixer, hidden, tokens, dtype_bytes)
        norm = rms_norm(tokens, width, dtype_bytes)
    gate = elementwise(2 * tokens * width, tokens * width, 4, dtype_bytes)
    output = (linear(tokens, width, hidden, dtype_bytes, parallel="row")
              + saved(dtype_bytes * tokens * width, fp8_bytes=tokens * width))
    return (projections + linear_attention_core(mixer, batch=batch, seq_len=seq_len, dtype_bytes=dtype_bytes)
            + norm + gate + output)
