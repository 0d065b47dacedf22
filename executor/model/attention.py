"""Causal softmax attention: grouped-query heads, rotary positions, optional sliding window, optional biases,
QK-norm and attention sinks, and multi-head latent attention (DeepSeek-V2/V3 MLA) when the mixer sets
``kv_lora_rank``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from executor.model.linear import Linear
from executor.model.init import normal_
from executor.model.norm import RMSNorm
from executor.model.recompute import checkpointed, without_output
from executor.model.tensor_parallel import SequenceGroup, gather_sequence, split_parameter
from planner.spec.model import AttentionMixer

ROPE_BASE = 10_000.0


def apply_rotary(x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
    """Rotary position embedding (Su et al. 2021), half-split layout as in Llama; x is (b, heads, s, d), its tokens at
    ``positions`` (0 .. s-1 by default)."""
    seq_len, head_dim = x.shape[-2], x.shape[-1]
    half = head_dim // 2
    # The angles in float32 for bf16/fp16/fp32 runs (as Llama's and Megatron's rotary tables), in float64 for a float64
    # run: float32 sines differ between the CPU and CUDA by an ulp (6e-8), which a float64 check must not see.
    angle_dtype = torch.promote_types(x.dtype, torch.float32)
    inv_freq = ROPE_BASE ** (-torch.arange(half, device=x.device, dtype=angle_dtype) / max(half, 1))
    if positions is None:
        positions = torch.arange(seq_len, device=x.device)
    angles = positions.to(device=x.device, dtype=angle_dtype)[:, None] * inv_freq[None, :]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., :half], x[..., half:2 * half]
    rotated = torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)
    # An odd width leaves its last channel unrotated.
    return torch.cat([rotated, x[..., 2 * half:]], dim=-1) if head_dim % 2 else rotated


def local_attention_mask(seq_len: int, window: int | None, device: torch.device, positions=None,
                         chunk: int | None = None) -> torch.Tensor:
    """Boolean (queries, keys) mask, True where query i may attend key j: j <= i, and i - j < ``window`` when set,
    and i and j in the same block of ``chunk`` tokens when set (Llama 4's chunked attention), for tokens at
    ``positions`` ((query positions, key positions); 0 .. s-1 for both by default)."""
    queries, keys = positions if positions is not None else (torch.arange(seq_len),) * 2
    queries, keys = queries.to(device)[:, None], keys.to(device)[None, :]
    allowed = queries >= keys
    if window is not None:
        allowed &= queries - keys < window
    if chunk is not None:
        allowed &= queries // chunk == keys // chunk
    return allowed


def causal_attention(query, key, value, window: int | None, positions=None, chunk: int | None = None,
                     scale: float | None = None, softcap: float | None = None) -> torch.Tensor:
    """Causal attention, windowed or chunked when set; ``positions`` (query positions, key positions) where the keys
    are not the queries' own sequence in order (context parallelism); ``scale`` the scores' (default
    ``head_dim ** -0.5``); ``softcap`` soft-caps them (``soft_capped``)."""
    seq_len = key.shape[-2]
    if softcap is not None:
        return attention_with_sinks(query, key, value, window, None, positions, chunk, scale, softcap)
    local = window if window is not None else chunk
    if positions is not None or (local is not None and local < seq_len):
        mask = local_attention_mask(seq_len, window, query.device, positions, chunk)
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scale)
    return F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scale)


def soft_capped(values: torch.Tensor, softcap: float | None) -> torch.Tensor:
    """``c * tanh(v / c)`` (Gemma 2's soft-capping of attention scores and of logits, Gemma Team 2024, Sec. 2), or the
    values."""
    return values if softcap is None else softcap * torch.tanh(values / softcap)


def attention_with_sinks(query, key, value, window: int | None, sinks: torch.Tensor | None, positions=None,
                         chunk: int | None = None, scale: float | None = None,
                         softcap: float | None = None) -> torch.Tensor:
    """Attention with its scores written out: gpt-oss's attention sinks (OpenAI 2025, gpt-oss model card Sec. 2.2),
    each head's learned logit joining every query's softmax as one more key whose value is zero, so a head can
    attend to nothing; and soft-capped scores (``soft_capped``), which no fused kernel of torch's takes."""
    batch, heads, seq_len, head_dim = query.shape
    scores = soft_capped((query @ key.transpose(-1, -2)) * (head_dim ** -0.5 if scale is None else scale), softcap)
    keys = key.shape[-2]
    allowed = local_attention_mask(keys, window, query.device, positions, chunk)
    scores = scores.masked_fill(~allowed, float("-inf"))
    if sinks is None:
        return torch.softmax(scores, dim=-1) @ value
    sink = sinks.to(scores.dtype).view(1, heads, 1, 1).expand(batch, heads, seq_len, 1)
    probabilities = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    return probabilities @ value


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    batch, seq_len, width = x.shape
    return x.reshape(batch, seq_len, heads, width // heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    batch, heads, seq_len, width = x.shape
    return x.transpose(1, 2).reshape(batch, seq_len, heads * width)


class Attention(nn.Module):
    """Multi-head / grouped-query attention (Llama, Gemma, Mixtral, Qwen, gpt-oss, GPT-2, Nemotron-H's attention
    layers), with the mixer's optional biases, per-head QK RMSNorm (before the rotary embedding, as Qwen3, or after it,
    as Hunyuan) and sinks; without the rotary embedding where the model has none (GPT-2's learned positions, Jamba)."""

    tensor_parallel = None
    context_parallel = None
    positions = None    # (query positions, key positions) under context parallelism
    recompute_core = False   # selective recomputation (``executor.model.recompute``)

    def __init__(self, hidden_size: int, mixer: AttentionMixer):
        super().__init__()
        self.num_heads = mixer.num_heads
        self.num_kv_heads = mixer.num_kv_heads
        self.window, self.chunk = mixer.window, mixer.chunk
        value_dim = getattr(mixer, "value_dim", mixer.head_dim)
        self.q_proj = Linear(hidden_size, self.num_heads * mixer.head_dim, bias=mixer.qkv_bias)
        self.k_proj = Linear(hidden_size, self.num_kv_heads * mixer.head_dim, bias=mixer.qkv_bias)
        self.v_proj = Linear(hidden_size, self.num_kv_heads * value_dim, bias=mixer.qkv_bias)
        self.o_proj = Linear(self.num_heads * value_dim, hidden_size, bias=mixer.output_bias)
        self.q_norm = RMSNorm(mixer.head_dim) if mixer.qk_norm else None
        self.k_norm = RMSNorm(mixer.head_dim) if mixer.qk_norm else None
        self.sinks = nn.Parameter(torch.empty(self.num_heads)) if mixer.sinks else None
        self.rotary = mixer.rotary
        self.qk_norm_after_rotary = mixer.qk_norm_after_rotary
        self.softmax_scale, self.softcap = mixer.softmax_scale, mixer.softcap

    def use_recompute_modules(self, modules) -> None:
        """Selective recomputation's modules (``executor.model.recompute``): ``core_attn``."""
        self.recompute_core = "core_attn" in modules

    def init_weights(self, generator: torch.Generator) -> None:
        for projection in (self.q_proj, self.k_proj, self.v_proj, self.o_proj):
            projection.init_weights(generator)
        for norm in (self.q_norm, self.k_norm):
            if norm is not None:
                norm.init_weights(generator)
        if self.sinks is not None:
            normal_(self.sinks, generator, std=1.0)

    def shard(self, tp: SequenceGroup) -> None:
        """Split by heads (Megatron's ``SelfAttention``): the query, key and value projections and their biases by
        output features, query heads and key/value groups alike, so each rank keeps its heads' groups; the sinks
        by head; the output projection by input features (row-parallel), its bias whole. The QK norms, shared
        by every head, stay whole."""
        for projection in (self.q_proj, self.k_proj, self.v_proj):
            split_parameter(projection, "weight", 0, tp)
            split_parameter(projection, "bias", 0, tp)
        split_parameter(self.o_proj, "weight", 1, tp)
        self.o_proj.tensor_parallel = tp
        if self.sinks is not None:
            split_parameter(self, "sinks", 0, tp)
        self.num_heads //= tp.size
        self.num_kv_heads //= tp.size
        self.tensor_parallel = tp

    def use_positions(self, layout) -> None:
        """Under context parallelism: the queries are this CP rank's tokens, the keys and values every CP rank's
        (all-gathered), each at its global position (``executor.model.context_parallel``)."""
        if layout.cp is not None:
            self.context_parallel = layout.cp
            self.positions = (layout.context_positions(), layout.key_positions())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = gather_sequence(x, self.tensor_parallel)
        query_positions, key_positions = self.positions or (None, None)
        query = split_heads(self.q_proj(x), self.num_heads)
        key = split_heads(gather_sequence(self.k_proj(x), self.context_parallel), self.num_kv_heads)
        if self.q_norm is not None and not self.qk_norm_after_rotary:
            query, key = self.q_norm(query), self.k_norm(key)
        if self.rotary:
            query, key = apply_rotary(query, query_positions), apply_rotary(key, key_positions)
        if self.q_norm is not None and self.qk_norm_after_rotary:   # Hunyuan's order
            query, key = self.q_norm(query), self.k_norm(key)
        value = split_heads(gather_sequence(self.v_proj(x), self.context_parallel), self.num_kv_heads)
        group = self.num_heads // self.num_kv_heads
        if group > 1:
            key = key.repeat_interleave(group, dim=1)
            value = value.repeat_interleave(group, dim=1)
        if self.recompute_core:
            attended = checkpointed(self._core, query, key, value)
        else:
            attended = self._core(query, key, value)
        return self.o_proj(merge_heads(attended))

    def _core(self, query, key, value):
        if self.sinks is not None:
            return attention_with_sinks(query, key, value, self.window, self.sinks, self.positions, self.chunk,
                                        self.softmax_scale, self.softcap)
        return causal_attention(query, key, value, self.window, self.positions, self.chunk, self.softmax_scale,
                                self.softcap)


class LatentAttention(nn.Module):
    """DeepSeek MLA: keys and values up-projected per head from a compressed latent; a shared rotary key.

    head_dim = non-rotary part + ``rope_head_dim``; queries come from a ``q_lora_rank`` latent when set.

    Under TP (``shard``) the up-projections and the output projection are split by heads, as Megatron-Core's
    ``MLASelfAttention``; the down-projections and their norms stay whole (their gradients summed over the group).
    Under CP every rank projects its tokens' latents, all-gathers them and up-projects every key and value.
    """

    tensor_parallel = None
    context_parallel = None
    positions = None    # (query positions, key positions) under context parallelism
    recompute_core = recompute_up = False   # selective recomputation (``executor.model.recompute``)

    def __init__(self, hidden_size: int, mixer: AttentionMixer):
        super().__init__()
        self.num_heads = mixer.num_heads
        self.window, self.chunk = mixer.window, mixer.chunk
        self.softmax_scale, self.softcap = mixer.softmax_scale, mixer.softcap
        self.rope_dim = mixer.rope_head_dim
        self.nope_dim = mixer.head_dim - mixer.rope_head_dim
        self.value_dim = mixer.value_dim
        query_width = self.num_heads * mixer.head_dim
        if mixer.q_lora_rank:
            self.q_down = Linear(hidden_size, mixer.q_lora_rank)
            self.q_norm = RMSNorm(mixer.q_lora_rank)
            self.q_up = Linear(mixer.q_lora_rank, query_width)
        else:
            self.q_down, self.q_norm = None, None
            self.q_up = Linear(hidden_size, query_width)
        self.kv_down = Linear(hidden_size, mixer.kv_lora_rank + self.rope_dim)
        self.kv_norm = RMSNorm(mixer.kv_lora_rank)
        self.kv_up = Linear(mixer.kv_lora_rank, self.num_heads * (self.nope_dim + self.value_dim))
        self.o_proj = Linear(self.num_heads * self.value_dim, hidden_size)

    def use_recompute_modules(self, modules) -> None:
        """Selective recomputation's modules (``executor.model.recompute``): ``core_attn``, and ``mla_up_proj`` (the
        queries' and the keys' and values' up-projections with their latents' norms, fused into them in
        Transformer Engine, and the rotary embedding: Megatron-Core's ``qkv_up_proj_and_rope_apply``)."""
        self.recompute_core = "core_attn" in modules
        self.recompute_up = "mla_up_proj" in modules

    def init_weights(self, generator: torch.Generator) -> None:
        for part in (self.q_down, self.q_up, self.kv_down, self.kv_up, self.o_proj):
            if part is not None:
                normal_(part.weight, generator)
        for norm in (self.q_norm, self.kv_norm):
            if norm is not None:
                norm.init_weights(generator)

    def shard(self, tp: SequenceGroup) -> None:
        split_parameter(self.q_up, "weight", 0, tp)
        split_parameter(self.kv_up, "weight", 0, tp)
        split_parameter(self.o_proj, "weight", 1, tp)
        self.o_proj.tensor_parallel = tp
        self.num_heads //= tp.size
        self.tensor_parallel = tp

    def use_positions(self, layout) -> None:
        if layout.cp is not None:
            self.context_parallel = layout.cp
            self.positions = (layout.context_positions(), layout.key_positions())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = gather_sequence(x, self.tensor_parallel)
        query_latent = self.q_down(x) if self.q_down is not None else x
        latents = gather_sequence(self.kv_down(x), self.context_parallel)
        if self.recompute_up:
            attended = without_output(self._up_projections, self._attend, query_latent, latents)
        else:
            attended = self._attend(*self._up_projections(query_latent, latents))
        return self.o_proj(merge_heads(attended))

    def _up_projections(self, query_latent: torch.Tensor, latents: torch.Tensor):
        """(queries, keys, values) of every head from the query latent (or the hidden state) and the key-value
        latents with the shared rotary key."""
        query_positions, key_positions = self.positions or (None, None)
        query_input = self.q_norm(query_latent) if self.q_norm is not None else query_latent
        query = split_heads(self.q_up(query_input), self.num_heads)
        query = torch.cat([query[..., :self.nope_dim], apply_rotary(query[..., self.nope_dim:], query_positions)],
                          dim=-1)
        latent, shared_rope_key = torch.split(latents, [self.kv_norm.weight.shape[0], self.rope_dim], -1)
        keys_values = split_heads(self.kv_up(self.kv_norm(latent)), self.num_heads)
        key_nope, value = torch.split(keys_values, [self.nope_dim, self.value_dim], dim=-1)
        rope_key = apply_rotary(shared_rope_key.unsqueeze(1), key_positions).expand(-1, self.num_heads, -1, -1)
        return query, torch.cat([key_nope, rope_key], dim=-1), value

    def _attend(self, query, key, value):
        if self.recompute_core:
            return checkpointed(self._core, query, key, value)
        return self._core(query, key, value)

    def _core(self, query, key, value):
        return causal_attention(query, key, value, self.window, self.positions, self.chunk, self.softmax_scale,
                                self.softcap)


def build_attention(hidden_size: int, mixer: AttentionMixer) -> nn.Module:
    if getattr(mixer, "kv_lora_rank", None):
        return LatentAttention(hidden_size, mixer)
    return Attention(hidden_size, mixer)
