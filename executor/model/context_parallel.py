"""Context parallelism: the sequence split over a CP group, with causal load balancing, and the tokens each rank of
a TP x CP group holds.

Megatron-Core's split (``get_batch_on_this_cp_rank``; Liu et al. 2023, "Ring Attention", for the exchange): the
sequence is cut into ``2 cp`` chunks and CP rank r holds chunks r and 2cp-1-r, so that under a causal mask every
rank has as much attention work as the others. Everything but the mixers is token-local. Attention all-gathers the
keys and values of the group (Megatron's ``cp_comm_type="allgather"``; backward: reduce-scatter of their
gradients) and masks by the tokens' global positions. The recurrent mixers (Mamba-2, gated delta-net, lightning
attention) run as Megatron-Core runs Mamba-2 and gated delta-net under CP (``megatron/core/ssm/
mamba_context_parallel.py``, ``gated_delta_net/gdn.py``): after their token-local input projections, an all-to-all
over the CP group trades the rank's tokens of every head for every token of the rank's share of the heads, in
sequence order (``sequence_to_heads``); the convolution and the scan run over the whole sequence on those heads,
with the rank's slice of the per-head parameters; a second all-to-all brings the output back to the rank's tokens
(``heads_to_sequence``). Gradients take the same exchanges in reverse. Within the rank's CP tokens, sequence
parallelism gives each TP rank a contiguous slice. Every parameter then sees only the rank's tokens (or heads), so
gradients are summed over the data-parallel ranks and the CP ranks together (Megatron's data-parallel group with
context parallelism).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from executor.model.tensor_parallel import SequenceGroup


def context_positions(seq_len: int, rank: int, size: int) -> torch.Tensor:
    """Global positions of the tokens CP rank ``rank`` of ``size`` holds, in the order it holds them."""
    if size == 1:
        return torch.arange(seq_len)
    chunk = seq_len // (2 * size)
    first, second = rank, 2 * size - 1 - rank
    return torch.cat([torch.arange(first * chunk, (first + 1) * chunk),
                      torch.arange(second * chunk, (second + 1) * chunk)])


@dataclass
class SequenceLayout:
    """The tokens of a micro-batch one rank holds between blocks: its CP share, then its TP (sequence-parallel)
    slice of that; ``tp`` and ``cp`` are None where the group has one rank."""

    seq_len: int
    tp: SequenceGroup | None = None
    cp: SequenceGroup | None = None
    tp_cp: SequenceGroup | None = None   # with both: the TP x CP group, every rank holding part of a micro-batch

    @property
    def tokens(self) -> SequenceGroup | None:
        """The group whose ranks hold the parts of a micro-batch's tokens between blocks (TP x CP, TP, CP or none)."""
        if self.tp is not None and self.cp is not None:
            return self.tp_cp
        return self.tp or self.cp

    @property
    def shards(self) -> int:
        """Ranks the micro-batch's tokens are spread over: each rank's loss weighs 1/shards of the micro-batch's."""
        return (self.tp.size if self.tp else 1) * (self.cp.size if self.cp else 1)

    def context_positions(self, cp_rank: int | None = None) -> torch.Tensor:
        """Positions of a CP rank's tokens (this rank's by default), as attention holds them after the TP gather."""
        if self.cp is None:
            return torch.arange(self.seq_len)
        return context_positions(self.seq_len, self.cp.rank if cp_rank is None else cp_rank, self.cp.size)

    def key_positions(self) -> torch.Tensor:
        """Positions of the keys attention holds after the CP gather: every CP rank's tokens, in rank order."""
        if self.cp is None:
            return torch.arange(self.seq_len)
        return torch.cat([self.context_positions(rank) for rank in range(self.cp.size)])

    def positions(self) -> torch.Tensor:
        """Positions of the tokens this rank holds between blocks."""
        own = self.context_positions()
        if self.tp is None:
            return own
        share = len(own) // self.tp.size
        return own[self.tp.rank * share:(self.tp.rank + 1) * share]

    def take(self, data: torch.Tensor, sequence_parallel: bool = True) -> torch.Tensor:
        """This rank's tokens of a (b, s, ...) micro-batch: its slice, or (``sequence_parallel`` False: for the
        vocabulary-parallel embedding and head, which see the whole TP group's tokens) its CP share."""
        positions = self.positions() if sequence_parallel else self.context_positions()
        return data.index_select(1, positions.to(data.device))

    def place(self, layer: nn.Module) -> None:
        """Tell every part of ``layer`` that depends on positions where its tokens are (``use_positions``)."""
        for module in list(layer.modules()):
            use = getattr(module, "use_positions", None)
            if use is not None:
                use(self)


def _to_heads(x: torch.Tensor, layout: SequenceLayout, blocks: list[int]) -> torch.Tensor:
    cp = layout.cp
    batch, tokens, _ = x.shape
    shares = [block.chunk(cp.size, dim=-1) for block in x.split(blocks, dim=-1)]
    sent = torch.stack([torch.cat([share[rank] for share in shares], dim=-1) for rank in range(cp.size)])
    arrived = cp.all_to_all(sent)                            # (cp, b, s/cp, width/cp): rank r's tokens, this share
    in_rank_order = arrived.transpose(0, 1).reshape(batch, cp.size * tokens, -1)
    return in_rank_order.index_select(1, torch.argsort(layout.key_positions()).to(x.device))


def _to_sequence(y: torch.Tensor, layout: SequenceLayout, blocks: list[int]) -> torch.Tensor:
    cp = layout.cp
    batch, seq_len, width = y.shape
    in_rank_order = y.index_select(1, layout.key_positions().to(y.device))
    sent = in_rank_order.reshape(batch, cp.size, seq_len // cp.size, width).transpose(0, 1)
    arrived = cp.all_to_all(sent)                            # (cp, b, s/cp, width): rank r's share, this rank's tokens
    shares = [part.split([block // cp.size for block in blocks], dim=-1) for part in arrived]
    return torch.cat([shares[rank][index] for index in range(len(blocks)) for rank in range(cp.size)], dim=-1)


class _HeadExchange(torch.autograd.Function):
    """``_to_heads`` and ``_to_sequence``, each the other's adjoint (both are permutations of the group's values)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, layout: SequenceLayout, blocks: list[int], to_heads: bool) -> torch.Tensor:
        ctx.layout, ctx.blocks, ctx.to_heads = layout, blocks, to_heads
        return (_to_heads if to_heads else _to_sequence)(x, layout, blocks)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return (_to_sequence if ctx.to_heads else _to_heads)(grad, ctx.layout, ctx.blocks), None, None, None


def sequence_to_heads(x: torch.Tensor, layout: SequenceLayout, blocks: list[int]) -> torch.Tensor:
    """(b, s/cp, sum(blocks)): this CP rank's tokens as it holds them, channels in ``blocks`` (each block's channels
    head by head) -> (b, s, sum(blocks)/cp): every token in sequence order, for this rank's share of each block (its
    r-th of cp equal parts). Megatron-Core's ``_all_to_all_cp2hp`` and ``_undo_attention_load_balancing``."""
    return _HeadExchange.apply(x, layout, list(blocks), True)


def heads_to_sequence(y: torch.Tensor, layout: SequenceLayout, blocks: list[int]) -> torch.Tensor:
    """The inverse of ``sequence_to_heads``: (b, s, sum(blocks)/cp) -> (b, s/cp, sum(blocks))."""
    return _HeadExchange.apply(y, layout, list(blocks), False)


def head_share(parameter: torch.Tensor | None, cp: SequenceGroup | None, blocks: list[int] | None = None,
               repeats: list[int] | None = None) -> torch.Tensor | None:
    """This CP rank's rows of a per-head ``parameter`` (its first dimension in ``blocks``, whole by default), sliced
    in the forward so that its gradient reaches the whole parameter, as Megatron-Core's ``get_parameter_local_cp``
    does. A block repeated r times before the exchange (``repeats``: Mamba-2's groups when fewer than the CP ranks)
    gives rank i the rows of share i // r."""
    if cp is None or parameter is None:
        return parameter
    blocks = blocks or [parameter.shape[0]]
    repeats = repeats or [1] * len(blocks)
    parts = []
    for block, repeat in zip(parameter.split(blocks), repeats):
        size = block.shape[0] * repeat // cp.size
        start = cp.rank // repeat * size
        parts.append(block[start:start + size])
    return torch.cat(parts) if len(parts) > 1 else parts[0]
