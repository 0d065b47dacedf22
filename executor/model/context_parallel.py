"""Context parallelism: the sequence split over a CP group, with causal load balancing, and the tokens each rank of
a TP x CP group holds.

Megatron-Core's split (``get_batch_on_this_cp_rank``; Liu et al. 2023, "Ring Attention", for the exchange): the
sequence is cut into ``2 cp`` chunks and CP rank r holds chunks r and 2cp-1-r, so that under a causal mask every
rank has as much attention work as the others. Everything but attention is token-local. Attention all-gathers the
keys and values of the group (Megatron's ``cp_comm_type="allgather"``; backward: reduce-scatter of their
gradients) and masks by the tokens' global positions. Within the rank's CP tokens, sequence parallelism gives each
TP rank a contiguous slice. Every parameter then sees only the rank's tokens, so gradients are summed over the
data-parallel ranks and the CP ranks together (Megatron's data-parallel group with context parallelism).
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
