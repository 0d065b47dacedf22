"""The four layer kinds of a ModelSpec as modules: embedding, decoder, standalone MLP, head.

Every layer maps hidden states (b, s, hidden) to hidden states, except the embedding (token ids in) and
the head (hidden states and labels in, the micro-batch's loss out).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from executor.model.attention import LatentAttention, build_attention, soft_capped
from executor.model.init import layer_generator, normal_
from executor.model.linear import linear
from executor.model.linear_attention import LinearAttention
from executor.model.mamba import Mamba
from executor.model.mamba2 import Mamba2
from executor.model.mlp import GatedMLP, MoE, build_mlp
from executor.model.recompute import checkpointed, without_output
from executor.model.norm import build_norm
from executor.model.tensor_parallel import (SequenceGroup, gather_sequence, reduce_scatter_sequence, split_parameter,
                                            vocab_parallel_cross_entropy)
from planner.spec.model import AttentionMixer, LayerSpec, LinearAttentionMixer, Mamba2Mixer, MambaMixer, ModelSpec


def init_embedding_table(table: torch.Tensor, seed: int, device: torch.device | str = "cpu") -> None:
    """The embedding table is layer 0's first draw; a tied head on another rank repeats the same draw."""
    normal_(table, layer_generator(seed, 0, device))


class Embedding(nn.Module):
    """The token table, plus a learned absolute-position table when the model has one (GPT-2)."""

    token_positions = None
    tensor_parallel = None

    def __init__(self, vocab_size: int, hidden_size: int, positions: int | None = None,
                 multiplier: float | None = None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, hidden_size))
        self.positions = nn.Parameter(torch.empty(positions, hidden_size)) if positions else None
        self.multiplier = multiplier   # ``ModelSpec.embedding_multiplier``: the token rows scaled (Gemma, Granite)

    def init_weights(self, seed: int, layer_index: int, device: torch.device | str = "cpu") -> None:
        generator = layer_generator(seed, 0, device)
        normal_(self.weight, generator)   # the draw init_embedding_table repeats for a tied head
        if self.positions is not None:
            normal_(self.positions, generator)

    def shard(self, tp: SequenceGroup) -> None:
        """Vocabulary-parallel (Megatron's ``VocabParallelEmbedding``): this rank keeps its rows of the table; a
        token's row comes from the rank that holds it, the others add zeros, and the sum is reduce-scattered to the
        ranks' sequence slices. A learned position table stays whole, added to the slice."""
        split_parameter(self, "weight", 0, tp)
        self.tensor_parallel = tp

    def use_positions(self, layout) -> None:
        """The positions of the tokens this rank holds between blocks
        (``executor.model.context_parallel.SequenceLayout``)."""
        self.token_positions = layout.positions()

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        tp = self.tensor_parallel
        if tp is None:
            hidden = F.embedding(token_ids, self.weight)
        else:
            first, end = tp.vocabulary_slice(self.weight.shape[0] * tp.size)
            elsewhere = (token_ids < first) | (token_ids >= end)
            rows = F.embedding((token_ids - first).masked_fill(elsewhere, 0), self.weight)
            hidden = reduce_scatter_sequence(rows.masked_fill(elsewhere[..., None], 0.0), tp)
        if self.multiplier is not None:
            hidden = hidden * self.multiplier
        if self.positions is None:
            return hidden
        if self.token_positions is not None:
            return hidden + self.positions[self.token_positions.to(self.positions.device)]
        return hidden + self.positions[:token_ids.shape[-1]]


def build_mixer(hidden_size: int, mixer) -> nn.Module:
    if isinstance(mixer, AttentionMixer):
        return build_attention(hidden_size, mixer)
    if isinstance(mixer, LinearAttentionMixer):
        return LinearAttention(hidden_size, mixer)
    if isinstance(mixer, Mamba2Mixer):
        return Mamba2(hidden_size, mixer)
    if isinstance(mixer, MambaMixer):
        return Mamba(hidden_size, mixer)
    raise TypeError(f"unknown mixer {mixer!r}")


def _block(norm: nn.Module, block: nn.Module, x: torch.Tensor, modules: frozenset[str]) -> torch.Tensor:
    """``block(norm(x))`` under selective recomputation's ``modules`` (``executor.model.recompute``): ``mlp`` runs a
    dense MLP ``block`` again in the backward; ``layernorm`` the norm before latent attention or an MoE (the ones
    Transformer Engine does not fuse into the next projection), whose output is then not kept."""
    if not torch.is_grad_enabled():
        return block(norm(x))
    if "layernorm" in modules and isinstance(block, (LatentAttention, MoE)):
        return without_output(norm, block, x)
    if "mlp" in modules and isinstance(block, GatedMLP):
        return checkpointed(block, norm(x))
    return block(norm(x))


class _PreNormBlock(nn.Module):
    """A layer of pre-norm blocks (``_block``), which takes selective recomputation's modules for them; each block's
    output is scaled by the model's ``residual_multiplier`` before the residual add (Granite's)."""

    recompute_modules: frozenset[str] = frozenset()
    residual_multiplier: float | None = None

    def scaled(self, out: torch.Tensor) -> torch.Tensor:
        return out if self.residual_multiplier is None else out * self.residual_multiplier

    def use_recompute_modules(self, modules) -> None:
        self.recompute_modules = frozenset(modules)


class Decoder(_PreNormBlock):
    """A residual block, x + mixer(...), then x + mlp(...) when the layer has an MLP, each sublayer's norms placed as
    the model's ``block_norms`` says (``planner.spec.model.BLOCK_NORMS``): ``pre``, x + f(norm(x)); ``post``,
    x + norm(f(x)); ``sandwich``, x + norm(f(norm(x)))."""

    def __init__(self, hidden_size: int, layer: LayerSpec, norm: str = "rmsnorm", block_norms: str = "pre",
                 residual_multiplier: float | None = None):
        super().__init__()
        self.residual_multiplier = residual_multiplier
        before, after = block_norms in ("pre", "sandwich"), block_norms in ("post", "sandwich")

        def norms(present: bool) -> tuple[nn.Module | None, nn.Module | None]:
            if not present:
                return None, None
            return (build_norm(norm, hidden_size) if before else nn.Identity(),
                    build_norm(norm, hidden_size) if after else None)

        self.mixer_norm, self.mixer_post_norm = norms(True)
        self.mixer = build_mixer(hidden_size, layer.mixer)
        self.mlp_norm, self.mlp_post_norm = norms(layer.mlp is not None)
        self.mlp = build_mlp(hidden_size, layer.mlp) if layer.mlp is not None else None

    def init_weights(self, seed: int, layer_index: int, device: torch.device | str = "cpu") -> None:
        generator = layer_generator(seed, layer_index, device)
        for part in (self.mixer_norm, self.mixer, self.mixer_post_norm, self.mlp_norm, self.mlp, self.mlp_post_norm):
            if part is not None and not isinstance(part, nn.Identity):
                part.init_weights(generator)

    def _sublayer(self, norm: nn.Module, block: nn.Module, post_norm: nn.Module | None,
                  x: torch.Tensor) -> torch.Tensor:
        out = _block(norm, block, x, self.recompute_modules)
        return self.scaled(out if post_norm is None else post_norm(out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self._sublayer(self.mixer_norm, self.mixer, self.mixer_post_norm, x)
        if self.mlp is not None:
            x = x + self._sublayer(self.mlp_norm, self.mlp, self.mlp_post_norm, x)
        return x


class MLPLayer(_PreNormBlock):
    """A standalone pre-norm MLP block (Nemotron-H's ``-`` layers)."""

    def __init__(self, hidden_size: int, layer: LayerSpec, norm: str = "rmsnorm",
                 residual_multiplier: float | None = None):
        super().__init__()
        self.residual_multiplier = residual_multiplier
        self.norm = build_norm(norm, hidden_size)
        self.mlp = build_mlp(hidden_size, layer.mlp)

    def init_weights(self, seed: int, layer_index: int, device: torch.device | str = "cpu") -> None:
        generator = layer_generator(seed, layer_index, device)
        self.norm.init_weights(generator)
        self.mlp.init_weights(generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.scaled(_block(self.norm, self.mlp, x, self.recompute_modules))


class Head(nn.Module):
    """Final norm, vocabulary projection and token-mean cross-entropy times ``loss_scale``.

    With tied embeddings the projection reuses the embedding table: the same Parameter when both live on
    one rank (``share_table``), else an identically initialised copy whose gradient the runtime
    all-reduces with the embedding's before the optimizer step.
    """

    tensor_parallel = None

    def __init__(self, hidden_size: int, vocab_size: int, tied: bool, norm: str = "rmsnorm",
                 logits_multiplier: float | None = None, softcap: float | None = None):
        super().__init__()
        self.logits_multiplier, self.softcap = logits_multiplier, softcap   # Granite's; Gemma 2's final soft-cap
        self.tied = tied
        self.norm = build_norm(norm, hidden_size)
        self.weight = nn.Parameter(torch.empty(vocab_size, hidden_size))

    def share_table(self, embedding: Embedding) -> None:
        self.weight = embedding.weight

    def init_weights(self, seed: int, layer_index: int, device: torch.device | str = "cpu") -> None:
        generator = layer_generator(seed, layer_index, device)
        self.norm.init_weights(generator)
        if self.tied:
            init_embedding_table(self.weight, seed, device)
        else:
            normal_(self.weight, generator)

    def shard(self, tp: SequenceGroup) -> None:
        """Vocabulary-parallel (Megatron's output layer and ``vocab_parallel_cross_entropy``): this rank keeps its
        rows of the projection; the norm runs on its sequence slice, the sequence is all-gathered, and the
        cross-entropy of the logits of its vocabulary slice is reduced over the group. Every rank of the group
        then has the loss of all its tokens (``labels``: those tokens, not a slice)."""
        split_parameter(self, "weight", 0, tp)
        self.tensor_parallel = tp

    def _scaled(self, logits: torch.Tensor) -> torch.Tensor:
        """The logits times ``logits_multiplier``, then soft-capped, ``c * tanh(z / c)`` (a vocabulary slice alike)."""
        if self.logits_multiplier is not None:
            logits = logits * self.logits_multiplier
        return soft_capped(logits, self.softcap)

    def forward(self, x: torch.Tensor, labels: torch.Tensor, loss_scale: float = 1.0) -> torch.Tensor:
        if self.tensor_parallel is not None:
            logits = linear(gather_sequence(self.norm(x), self.tensor_parallel), self.weight)
            if logits.dtype in (torch.float16, torch.bfloat16):
                logits = logits.float()
            logits = self._scaled(logits)
            losses = vocab_parallel_cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                                  self.tensor_parallel)
            return losses.mean().to(x.dtype) * loss_scale
        logits = linear(self.norm(x), self.weight)
        # Half-precision logits are upcast for a stable softmax; float32/float64 stay as they are.
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()
        logits = self._scaled(logits)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        return loss.to(x.dtype) * loss_scale


def build_layer(spec: ModelSpec, index: int) -> nn.Module:
    """The module of layer ``index`` with uninitialised storage (call ``init_weights(seed, index)``)."""
    layer = spec.layers[index]
    if layer.kind == "embedding":
        return Embedding(spec.vocab_size, spec.hidden_size, spec.position_embeddings, spec.embedding_multiplier)
    if layer.kind == "head":
        return Head(spec.hidden_size, spec.vocab_size, tied=spec.tie_embeddings and spec.layers[0].kind == "embedding",
                    norm=spec.norm, logits_multiplier=spec.logits_multiplier, softcap=spec.logits_softcap)
    if layer.kind == "mlp":
        return MLPLayer(spec.hidden_size, layer, spec.norm, spec.residual_multiplier)
    return Decoder(spec.hidden_size, layer, spec.norm, spec.block_norms, spec.residual_multiplier)
