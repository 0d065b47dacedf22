"""Softmax attention: grouped-query, sliding-window and multi-head latent attention (MLA).

Core FLOPs (Dao 2023, "FlashAttention-2", Sec. 4; Narayanan et al. 2021, eq. 2 counts 4·b·s²·h for the
full square): ``Q·Kᵀ`` is ``2·b·s·k̄·heads·d_qk`` and ``P·V`` is ``2·b·s·k̄·heads·d_v`` where ``k̄`` is the
mean number of keys a causal query sees — ``(s + 1) / 2`` without a window (the "1/2 for causal"), and
``≈ window`` once the window is much shorter than the sequence, so a window caps the quadratic growth; chunked
attention (Llama 4) restarts the causal triangle every ``chunk`` tokens, ``≈ (chunk + 1) / 2``.
For ``d_qk = d_v = d`` this is ``4·b·s·k̄·heads·d``.

Backward: ``dV = Pᵀ·dO``, ``dP = dO·Vᵀ``, ``dQ = dS·K`` and ``dK = dSᵀ·Q`` are twice the forward FLOPs
(the model FLOPs). FlashAttention keeps no ``s x s`` matrix, so it re-computes ``S = Q·Kᵀ`` in the backward;
that extra ``Q·Kᵀ`` is counted as time, not as model FLOPs.

Activations (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
Sec. 4.1, with FlashAttention, i.e. their selective-recompute count without the ``5·a·s²·b`` term): the
projection input, Q, K and V after the rotary embedding, the attention output (also the output
projection's input) and the fp32 log-sum-exp per query and head. MLA also keeps its latent vectors.

Variants that add parameters and little work: biases on the projections (Qwen2's on q, k and v; GPT-2's and
gpt-oss's on the output too), a per-head RMSNorm of queries and keys (Qwen3, "QK-norm", Henry et al. 2020
and Dehghani et al. 2023 Sec. 3.1) and attention sinks (gpt-oss, OpenAI 2025 model card Sec. 2.2; Xiao et
al. 2024): one learned logit per head joins each query's softmax denominator, which the fused kernel adds
while it rescales the row, so ``heads`` parameters and ``2·T·heads`` FLOPs each way.
"""

from __future__ import annotations

from planner.cost.primitives import FP32_BYTES, elementwise, linear, rms_norm
from planner.cost.work import AttentionShape, Cost, Kernel, saved
from planner.spec.model import AttentionMixer

ROTARY_FLOPS_PER_ELEMENT = 3   # x·cos + rotate(x)·sin


def key_span(seq_len: int, window: int | None, chunk: int | None = None) -> int:
    """The most keys one query attends: the window, the chunk or the whole sequence."""
    local = window if window is not None else chunk
    return seq_len if local is None else min(local, seq_len)


def mean_keys_per_query(seq_len: int, window: int | None, chunk: int | None = None) -> float:
    """Mean over queries ``i = 1..s`` of the keys a causal query attends: ``min(i, w)`` with a window; with chunks
    of ``c`` tokens, the query's place in its own chunk (``((i - 1) mod c) + 1``)."""
    span = key_span(seq_len, window, chunk)
    if chunk is not None and window is None:
        whole, rest = divmod(seq_len, span)
        return (whole * span * (span + 1) / 2 + rest * (rest + 1) / 2) / seq_len
    return (span * (span + 1) / 2 + (seq_len - span) * span) / seq_len


def core_inputs(*, tokens: int, heads: int, kv_heads: int, qk_dim: int, v_dim: int) -> tuple[int, int, int]:
    """The elements of the queries, keys and values the fused attention kernel reads (and keeps for its backward)."""
    return tokens * heads * qk_dim, tokens * kv_heads * qk_dim, tokens * kv_heads * v_dim


def attention_core(*, batch: int, seq_len: int, heads: int, kv_heads: int, qk_dim: int, v_dim: int,
                   window: int | None, dtype_bytes: int, chunk: int | None = None) -> Cost:
    tokens = batch * seq_len
    keys = mean_keys_per_query(seq_len, window, chunk)
    score_flops = 2.0 * tokens * keys * heads * qk_dim
    value_flops = 2.0 * tokens * keys * heads * v_dim
    queries, keys_, values = core_inputs(tokens=tokens, heads=heads, kv_heads=kv_heads, qk_dim=qk_dim, v_dim=v_dim)
    outputs = tokens * heads * v_dim
    logsumexp = FP32_BYTES * tokens * heads
    span = float(key_span(seq_len, window, chunk))
    return Cost(
        forward=(Kernel(score_flops + value_flops,
                        dtype_bytes * (queries + keys_ + values + outputs) + logsumexp,
                        shape=AttentionShape(max(qk_dim, v_dim), span),
                        output_bytes=dtype_bytes * outputs + logsumexp),),
        backward_input=(Kernel(2 * (score_flops + value_flops),
                               dtype_bytes * (2 * (queries + keys_ + values) + 2 * outputs) + logsumexp,
                               recomputed_flops=score_flops, shape=AttentionShape(max(qk_dim, v_dim), span, True)),),
        activation_bytes=dtype_bytes * (queries + keys_ + values + outputs) + logsumexp)


def _query_key_value_projections(mixer: AttentionMixer, hidden: int, tokens: int, dtype_bytes: int) -> Cost:
    """Fused QKV projection of grouped-query attention, with the rotary embedding on Q and K (unless the model has
    no rotary positions)."""
    heads, kv_heads, qk_dim = mixer.num_heads, mixer.num_kv_heads, mixer.head_dim
    width = heads * qk_dim + kv_heads * qk_dim + kv_heads * mixer.value_dim
    rotated = tokens * (heads + kv_heads) * qk_dim
    cost = (linear(tokens, hidden, width, dtype_bytes, bias=mixer.qkv_bias,
                   parts=(heads * qk_dim, kv_heads * qk_dim, kv_heads * mixer.value_dim))
            + saved(dtype_bytes * tokens * hidden, fp8_bytes=tokens * hidden))
    if mixer.rotary:
        cost += elementwise(rotated, rotated, ROTARY_FLOPS_PER_ELEMENT, dtype_bytes)
    if mixer.qk_norm:
        cost += (rms_norm(tokens * heads, qk_dim, dtype_bytes, scale_width=qk_dim)
                 + rms_norm(tokens * kv_heads, qk_dim, dtype_bytes, scale_width=qk_dim))
    return cost


def _sinks(heads: int, tokens: int) -> Cost:
    return Cost(forward=(Kernel(2.0 * tokens * heads, 0.0),), backward_input=(Kernel(2.0 * tokens * heads, 0.0),),
                params=heads, active_params=heads)


def _latent_projections(mixer: AttentionMixer, hidden: int, tokens: int, dtype_bytes: int) -> Cost:
    """MLA (DeepSeek-V2, Sec. 2.1): queries from a normed ``q_lora_rank`` latent (or straight from the hidden
    state), keys and values up-projected from a normed ``kv_lora_rank`` latent; the rotary key part
    (``rope_head_dim``) comes straight from the hidden state and is shared by all heads."""
    rope = mixer.rope_head_dim
    kv_rank = mixer.kv_lora_rank
    cost = mla_hidden_input(hidden, tokens, dtype_bytes)
    if mixer.q_lora_rank is None:
        cost += _mla_query_up(mixer, hidden, tokens, dtype_bytes)
    else:
        q_rank = mixer.q_lora_rank
        cost += (linear(tokens, hidden, q_rank, dtype_bytes) + rms_norm(tokens, q_rank, dtype_bytes)
                 + _mla_query_up(mixer, hidden, tokens, dtype_bytes)
                 + saved(dtype_bytes * tokens * q_rank, fp8_bytes=tokens * q_rank))
    cost += (linear(tokens, hidden, kv_rank + rope, dtype_bytes) + rms_norm(tokens, kv_rank, dtype_bytes)
             + _mla_key_value_up(mixer, tokens, dtype_bytes)
             + saved(dtype_bytes * tokens * kv_rank, fp8_bytes=tokens * kv_rank))
    return cost + _mla_rotary(mixer, tokens, dtype_bytes)


def mla_hidden_input(hidden: int, tokens: int, dtype_bytes: int) -> Cost:
    """What MLA keeps of its input, the normed hidden state: it feeds two projections, Megatron-Core's
    ``linear_q(_down)_proj`` and ``linear_kv_down_proj``, which keep it in BF16 or, in FP8, each its own FP8 cast
    of it. Megatron-Core's ``recompute_modules`` ``layernorm`` frees it (``planner.cost.analytic``)."""
    return saved(dtype_bytes * tokens * hidden, fp8_bytes=2 * tokens * hidden)


def _mla_query_up(mixer: AttentionMixer, hidden: int, tokens: int, dtype_bytes: int) -> Cost:
    """The queries' projection: from the normed ``q_lora_rank`` latent, or from the hidden state without one."""
    return linear(tokens, mixer.q_lora_rank or hidden, mixer.num_heads * mixer.head_dim, dtype_bytes)


def _mla_key_value_up(mixer: AttentionMixer, tokens: int, dtype_bytes: int) -> Cost:
    return linear(tokens, mixer.kv_lora_rank,
                  mixer.num_heads * (mixer.head_dim - mixer.rope_head_dim + mixer.value_dim), dtype_bytes)


def _mla_rotary(mixer: AttentionMixer, tokens: int, dtype_bytes: int) -> Cost:
    rotated = tokens * (mixer.num_heads + 1) * mixer.rope_head_dim
    return elementwise(rotated, rotated, ROTARY_FLOPS_PER_ELEMENT, dtype_bytes)


def mla_up_projections(mixer: AttentionMixer, hidden: int, tokens: int, dtype_bytes: int) -> Cost:
    """What Megatron-Core's ``recompute_modules`` ``mla_up_proj`` re-runs in the backward (``MLASelfAttention``'s
    ``qkv_up_proj_and_rope_apply`` under ``CheckpointWithoutOutput``: the queries' projection, from the latent or
    the hidden state, the keys' and values' up-projection and the rotary embedding), and as its activations what it
    frees: the queries, keys and values the attention kernel would keep, discarded after the forward and rebuilt
    before the kernel's backward."""
    cost = (_mla_query_up(mixer, hidden, tokens, dtype_bytes) + _mla_key_value_up(mixer, tokens, dtype_bytes)
            + _mla_rotary(mixer, tokens, dtype_bytes))
    inputs = core_inputs(tokens=tokens, heads=mixer.num_heads, kv_heads=mixer.num_kv_heads, qk_dim=mixer.head_dim,
                         v_dim=mixer.value_dim)
    return cost + saved(dtype_bytes * sum(inputs))


def attention_cost(mixer: AttentionMixer, *, hidden: int, batch: int, seq_len: int, dtype_bytes: int) -> Cost:
    tokens = batch * seq_len
    projections = (_latent_projections if mixer.is_latent else _query_key_value_projections)(
        mixer, hidden, tokens, dtype_bytes)
    core = attention_core(batch=batch, seq_len=seq_len, heads=mixer.num_heads, kv_heads=mixer.num_kv_heads,
                          qk_dim=mixer.head_dim, v_dim=mixer.value_dim, window=mixer.window,
                          dtype_bytes=dtype_bytes, chunk=mixer.chunk)
    # The output projection's input is the attention output, already held by the core (in BF16, for its
    # backward); FP8 training keeps the projection's FP8 cast of it besides.
    width = mixer.num_heads * mixer.value_dim
    output = (linear(tokens, width, hidden, dtype_bytes, bias=mixer.output_bias, parallel="row")
              + saved(0.0, fp8_bytes=tokens * width))
    cost = projections + core + output
    return cost + _sinks(mixer.num_heads, tokens) if mixer.sinks else cost
