"""Shrink a realistic ModelSpec to CPU scale while keeping its layer pattern and its proportions.

What is kept: the number and order of layers and their kinds (so a plan for the full model is a valid plan
for the scaled one), grouped-query ratios, MoE top-k and shared experts, sliding windows and attention chunks
relative to the sequence, Mamba's expansion factor, and the head's cost relative to a block (the vocabulary shrinks by
the same factor as the hidden size, so a 256k-vocabulary head stays heavy). For a hybrid plan (``parallel``), what its
axes split stays divisible: key/value heads (and with them the query heads, the group kept), MLP and expert widths
and the vocabulary by TP, the heads of linear attention and Mamba-2 by TP x CP (Mamba-2's B/C groups by TP, and
over CP or repeated across it), the experts by EP, the sequence by 2 CP x TP (``executor.running.scope``'s rules).
"""

from __future__ import annotations

from dataclasses import replace

from planner.errors import SpecError
from planner.parallel.config import ParallelConfig
from planner.spec.model import (
    AttentionMixer,
    DenseMLP,
    LayerSpec,
    LinearAttentionMixer,
    Mamba2Mixer,
    MambaMixer,
    ModelSpec,
)

MIN_WIDTH = 8
MIN_VOCAB = 256


def _scaled(value: int, factor: float, minimum: int = MIN_WIDTH) -> int:
    return max(minimum, round(value * factor))


def _multiple(value: int, of: int) -> int:
    """The least multiple of ``of`` that is at least ``value``."""
    return -(-value // of) * of


def _even(value: int) -> int:
    return max(2, value - value % 2)


def _grouped_heads(heads: int, kv_heads: int, target_heads: int) -> tuple[int, int]:
    """Largest (heads, kv_heads) with heads <= target keeping heads / kv_heads where it fits."""
    group = min(heads // kv_heads, target_heads)
    kv = max(1, target_heads // group)
    return kv * group, kv


class _Scaler:
    def __init__(self, spec: ModelSpec, hidden_size: int, head_dim: int, seq_len: int, max_experts: int,
                 tp: int = 1, ep: int = 1, cp: int = 1):
        self.tp, self.ep, self.cp = tp, ep, cp
        self.factor = hidden_size / spec.hidden_size
        self.seq_factor = seq_len / spec.seq_len
        self.hidden_size, self.head_dim, self.seq_len, self.max_experts = hidden_size, head_dim, seq_len, max_experts
        self.target_heads = max(1, hidden_size // head_dim)

    def attention(self, mixer: AttentionMixer) -> AttentionMixer:
        window, chunk = (None if span is None else max(1, round(span * self.seq_factor))
                         for span in (mixer.window, mixer.chunk))
        if getattr(mixer, "kv_lora_rank", None):
            rope = _even(round(self.head_dim * mixer.rope_head_dim / mixer.head_dim))
            heads = _multiple(self.target_heads, self.tp)
            return replace(mixer, num_heads=heads, num_kv_heads=heads,
                           head_dim=self.head_dim, window=window, chunk=chunk,
                           rope_head_dim=min(rope, self.head_dim - 2),
                           v_head_dim=_scaled(mixer.value_dim, self.head_dim / mixer.head_dim, 2),
                           kv_lora_rank=_scaled(mixer.kv_lora_rank, self.factor),
                           q_lora_rank=_scaled(mixer.q_lora_rank, self.factor) if mixer.q_lora_rank else None)
        heads, kv_heads = _grouped_heads(mixer.num_heads, mixer.num_kv_heads, self.target_heads)
        if kv_heads % self.tp:
            heads, kv_heads = heads // kv_heads * _multiple(kv_heads, self.tp), _multiple(kv_heads, self.tp)
        changes = {"num_heads": heads, "num_kv_heads": kv_heads, "head_dim": self.head_dim, "window": window,
                   "chunk": chunk}
        if getattr(mixer, "v_head_dim", None) is not None:
            changes["v_head_dim"] = _scaled(mixer.v_head_dim, self.head_dim / mixer.head_dim, 2)
        return replace(mixer, **changes)

    def linear_attention(self, mixer: LinearAttentionMixer) -> LinearAttentionMixer:
        """Heads (and key heads) that TP x CP splits: under CP the recurrent mixers trade tokens for heads
        (``planner.parallel.search.context_parallel_limit``)."""
        shards = self.tp * self.cp
        key_heads = getattr(mixer, "num_key_heads", None)
        if key_heads is None:
            return replace(mixer, num_heads=_multiple(self.target_heads, shards), head_dim=self.head_dim)
        heads, key_heads = _grouped_heads(mixer.num_heads, key_heads, self.target_heads)
        if key_heads % shards:
            heads, key_heads = heads // key_heads * _multiple(key_heads, shards), _multiple(key_heads, shards)
        return replace(mixer, num_heads=heads, head_dim=self.head_dim, num_key_heads=key_heads)

    def selective_scan(self, mixer: MambaMixer) -> MambaMixer:
        """Mamba-1 keeps its expansion factor and the ratio of dt_rank to the hidden size."""
        original_hidden = self.hidden_size / self.factor
        return replace(mixer, inner_size=max(MIN_WIDTH, round(mixer.inner_size / original_hidden * self.hidden_size)),
                       dt_rank=max(1, round(mixer.dt_rank * self.factor)), state_size=min(mixer.state_size, 16))

    def mamba(self, mixer: Mamba2Mixer) -> Mamba2Mixer:
        """Mamba-2 keeps its expansion factor; its heads split over TP x CP, its B/C groups over TP, and a TP rank's
        groups over CP or repeated across it (``planner.parallel.search.context_parallel_limit``)."""
        expand = mixer.num_heads * mixer.head_dim / (self.hidden_size / self.factor)
        heads = _multiple(max(1, round(expand * self.hidden_size / self.head_dim)), self.tp * self.cp)
        splittable = [g for g in range(self.tp, min(mixer.n_groups, heads) + 1, self.tp)
                      if heads % g == 0 and ((g // self.tp) % self.cp == 0 or self.cp % (g // self.tp) == 0)]
        groups = max(splittable or [g for g in range(1, min(mixer.n_groups, heads) + 1) if heads % g == 0])
        return replace(mixer, num_heads=heads, head_dim=self.head_dim, state_size=min(mixer.state_size, 16),
                       n_groups=groups)

    def width(self, value: int) -> int:
        return _multiple(_scaled(value, self.factor), self.tp)

    def mlp(self, mlp):
        if isinstance(mlp, DenseMLP):
            return replace(mlp, intermediate_size=self.width(mlp.intermediate_size))
        experts = min(mlp.num_experts, max(self.max_experts, self.ep))
        experts -= experts % self.ep
        top_k = min(mlp.top_k, experts)
        # group-limited routing keeps its groups where the fewer experts allow, and enough of them for top-k
        groups = max(g for g in range(1, min(mlp.router_groups, experts) + 1) if experts % g == 0)
        group_topk = max(min(mlp.router_group_topk, groups, top_k), -(-top_k // (experts // groups)))
        return replace(mlp, num_experts=experts, top_k=top_k, router_groups=groups, router_group_topk=group_topk,
                       expert_intermediate_size=self.width(mlp.expert_intermediate_size),
                       shared_intermediate_size=(self.width(mlp.shared_intermediate_size)
                                                 if mlp.shared_intermediate_size else 0),
                       latent_size=self.width(mlp.latent_size) if mlp.latent_size else None)

    def mixer(self, mixer):
        if isinstance(mixer, AttentionMixer):
            return self.attention(mixer)
        if isinstance(mixer, LinearAttentionMixer):
            return self.linear_attention(mixer)
        if isinstance(mixer, MambaMixer):
            return self.selective_scan(mixer)
        return self.mamba(mixer)

    def layer(self, layer: LayerSpec) -> LayerSpec:
        return LayerSpec(kind=layer.kind, mixer=self.mixer(layer.mixer) if layer.mixer else None,
                         mlp=self.mlp(layer.mlp) if layer.mlp else None)


def scale_spec(spec: ModelSpec, *, hidden_size: int = 64, head_dim: int = 16, seq_len: int = 32,
               vocab_size: int | None = None, max_experts: int = 8, micro_batch_size: int | None = None,
               parallel: ParallelConfig | None = None) -> ModelSpec:
    """A CPU-sized copy of ``spec`` with the same layer pattern, that ``parallel``'s axes can split (see the module
    docstring)."""
    for name, value in (("hidden_size", hidden_size), ("head_dim", head_dim), ("seq_len", seq_len),
                        ("max_experts", max_experts)):
        if value < 1:
            raise SpecError(name, f"must be >= 1, got {value}")
    if head_dim > hidden_size:
        raise SpecError("head_dim", f"must be <= hidden_size ({hidden_size}), got {head_dim}")
    tp, cp, ep = (parallel.tp, parallel.cp, parallel.ep) if parallel is not None else (1, 1, 1)
    scaler = _Scaler(spec, hidden_size, head_dim, seq_len, max_experts, tp, ep, cp)
    if vocab_size is None:
        vocab_size = _multiple(min(spec.vocab_size, _scaled(spec.vocab_size, scaler.factor, MIN_VOCAB)), tp)
    seq_len = _multiple(seq_len, tp * (2 * cp if cp > 1 else 1))
    # Scaled layers that were identical stay identical, so repeat-folding and plan layouts still apply.
    scaled_layers: dict[LayerSpec, LayerSpec] = {}
    layers = tuple(scaled_layers.setdefault(layer, scaler.layer(layer)) for layer in spec.layers)
    positions = None if spec.position_embeddings is None else seq_len   # learned positions: as many as used
    return replace(spec, name=f"{spec.name}-scaled-h{hidden_size}", hidden_size=hidden_size, vocab_size=vocab_size,
                   seq_len=seq_len, layers=layers, position_embeddings=positions,
                   micro_batch_size=spec.micro_batch_size if micro_batch_size is None else micro_batch_size)
