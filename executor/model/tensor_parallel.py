"""Tensor parallelism with sequence parallelism, as Megatron-LM runs it (Shoeybi et al. 2019, "Megatron-LM", Sec. 3;
Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", Sec. 4.2.2).

Between the split blocks every rank of a TP group holds a slice of the sequence, ``(b, s / tp, h)``: norms,
residual additions and pipeline transfers run on it. A split block (attention, a dense MLP) all-gathers the
sequence (backward: reduce-scatter), runs its column-parallel projections on its share of heads or intermediate
width, and its row-parallel output projection's partial sums are reduce-scattered back to sequence slices
(backward: all-gather), the output bias added after. Each layer kind says what it splits (``shard`` on the
module, with ``split_parameter``); a parameter left whole (norms, the embedding, the head, row-parallel biases)
sees only this rank's tokens or heads, so its gradient is summed over the group before the optimizer step
(Megatron-Core's ``allreduce_sequence_parallel_gradients``; ``replicated_parameters``).

These are Megatron's layers rather than ``torch.distributed.tensor.parallel``'s styles: the executor's
projections defer their weight gradients to a separate W step (``executor.model.linear``), which DTensor's
``nn.Linear`` plans do not, and every collective here is timed as an event of its own.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from executor.model.groups import ParallelGroup

class SequenceGroup(ParallelGroup):
    """One rank's place in a group that splits the sequence: its TP group (``name`` "tp", sequence parallelism) or
    its CP group ("cp", ``executor.model.context_parallel``)."""

    def __init__(self, group, rank: int, size: int, name: str = "tp"):
        super().__init__(group, rank, size, name)

    def all_reduce(self, tensor: torch.Tensor, op=dist.ReduceOp.SUM) -> torch.Tensor:
        """The sum (or ``op``) of ``tensor`` over the group (a statistic of the group's tokens; no gradient)."""
        summed = tensor.clone()
        self.timed(f"{self.name}_all_reduce", lambda: dist.all_reduce(summed, op=op, group=self.group), summed)
        return summed

    def vocabulary_slice(self, vocab_size: int) -> tuple[int, int]:
        """The rows of a vocabulary-parallel table this rank holds: [first, end)."""
        share = vocab_size // self.size
        return self.rank * share, (self.rank + 1) * share

    def all_gather_sequence(self, x: torch.Tensor) -> torch.Tensor:
        """(b, s/tp, ...) slices of the group -> (b, s, ...), in rank order."""
        local = x.transpose(0, 1).contiguous()
        gathered = local.new_empty((local.shape[0] * self.size, *local.shape[1:]))
        self.timed(f"{self.name}_all_gather", lambda: dist.all_gather_single(gathered, local, group=self.group),
                   gathered)
        return gathered.transpose(0, 1)

    def all_to_all(self, x: torch.Tensor) -> torch.Tensor:
        """Block r of ``x`` (its first dimension, one block per rank) to rank r; block r of the result from rank r."""
        x = x.contiguous()
        out = torch.empty_like(x)
        self.timed(f"{self.name}_all_to_all", lambda: dist.all_to_all_single(out, x, group=self.group), x)
        return out

    def reduce_scatter_sequence(self, x: torch.Tensor) -> torch.Tensor:
        """(b, s, ...) partial sums -> this rank's (b, s/tp, ...) slice of their sum over the group."""
        full = x.transpose(0, 1).contiguous()
        scattered = full.new_empty((full.shape[0] // self.size, *full.shape[1:]))
        self.timed(f"{self.name}_reduce_scatter",
                   lambda: dist.reduce_scatter_single(scattered, full, op=dist.ReduceOp.SUM, group=self.group), full)
        return scattered.transpose(0, 1)


class _Collective(torch.autograd.Function):
    """A collective over the group whose gradient is its adjoint over the same group (Megatron's mappings): the
    sequence's all-gather and reduce-scatter are each other's, a sum's gradient is the sum of the gradients."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, tp: SequenceGroup, op: str, adjoint: str) -> torch.Tensor:
        ctx.tp, ctx.adjoint = tp, adjoint
        return getattr(tp, op)(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return getattr(ctx.tp, ctx.adjoint)(grad), None, None, None


def gather_sequence(x: torch.Tensor, tp: SequenceGroup | None) -> torch.Tensor:
    """Enter a split block: the whole sequence from the group's slices (identity without TP)."""
    return x if tp is None else _Collective.apply(x, tp, "all_gather_sequence", "reduce_scatter_sequence")


def reduce_scatter_sequence(x: torch.Tensor, tp: SequenceGroup | None) -> torch.Tensor:
    """Leave a split block: this rank's sequence slice of the group's partial sums (identity without TP)."""
    return x if tp is None else _Collective.apply(x, tp, "reduce_scatter_sequence", "all_gather_sequence")


def all_reduce(x: torch.Tensor, tp: SequenceGroup | None) -> torch.Tensor:
    """The sum of ``x`` over the group that every rank's output depends on, differentiable (identity without TP)."""
    return x if tp is None else _Collective.apply(x, tp, "all_reduce", "all_reduce")


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Cross-entropy over logits split by vocabulary (Megatron-LM's ``_VocabParallelCrossEntropy``): the maximum,
    the target's logit and the sum of exponentials are reduced over the group, so no rank holds every logit; each
    token's loss is the same on every rank, and the gradient of a rank's logits is its part of softmax - one-hot."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, tp: SequenceGroup) -> torch.Tensor:
        first, end = tp.vocabulary_slice(logits.shape[-1] * tp.size)
        maximum = tp.all_reduce(logits.max(dim=-1).values, op=dist.ReduceOp.MAX)
        shifted = logits - maximum[:, None]
        elsewhere = (targets < first) | (targets >= end)
        local = (targets - first).masked_fill(elsewhere, 0)
        rows = torch.arange(len(targets), device=logits.device)
        target_logit = tp.all_reduce(shifted[rows, local].masked_fill(elsewhere, 0.0))
        exponentials = shifted.exp()
        total = tp.all_reduce(exponentials.sum(dim=-1))
        ctx.save_for_backward(exponentials / total[:, None], elsewhere, local)
        return total.log() - target_logit

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        softmax, elsewhere, local = ctx.saved_tensors
        grad = softmax.clone()
        rows = torch.arange(len(local), device=grad.device)
        grad[rows, local] -= (~elsewhere).to(grad.dtype)
        return grad * grad_loss[:, None], None, None


def vocab_parallel_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, tp: SequenceGroup) -> torch.Tensor:
    """Each token's cross-entropy from this rank's vocabulary slice of its logits (N, V/tp) and the targets (N)."""
    return _VocabParallelCrossEntropy.apply(logits, targets, tp)


def split_parameter(module: nn.Module, name: str, dim: int, tp: SequenceGroup,
                    blocks: list[int] | None = None) -> None:
    """Keep this rank's ``1/tp`` of ``module.<name>`` along ``dim``; ``full_state_dict`` puts it back together. (A
    split along the output features of a head-major projection is a split by heads.) ``blocks``: the sizes of the
    consecutive blocks along ``dim`` that are each split (a fused projection's parts), else one block."""
    whole = getattr(module, name)
    if whole is None:
        return
    rows = [torch.cat([torch.chunk(torch.arange(start, start + size), tp.size)[rank]
                       for start, size in zip(_starts(blocks), blocks)]) for rank in range(tp.size)] if blocks else None
    kept = (torch.chunk(whole.detach(), tp.size, dim=dim)[tp.rank] if rows is None
            else whole.detach().index_select(dim, rows[tp.rank].to(whole.device)))
    part = nn.Parameter(kept.clone())
    part.tensor_parallel_dim = dim
    part.tensor_parallel_rows = rows
    setattr(module, name, part)


def _starts(sizes: list[int]) -> list[int]:
    return [sum(sizes[:index]) for index in range(len(sizes))]


def shard_layer(layer: nn.Module, tp: SequenceGroup) -> None:
    """Split every part of ``layer`` that has a tensor-parallel form (``shard(tp)``) for this rank of ``tp``."""
    for module in list(layer.modules()):
        shard = getattr(module, "shard", None)
        if shard is not None:
            shard(tp)


def replicated_parameters(layers) -> list[nn.Parameter]:
    """The parameters a TP group holds whole, whose gradients are partial sums (see the module docstring); not a
    folded MoE's experts, which each rank of an EP group holds alone (``executor.model.expert_parallel``)."""
    unique = {id(p): p for layer in layers for p in layer.parameters()}
    return [p for p in unique.values()
            if not hasattr(p, "tensor_parallel_dim") and not getattr(p, "outside_tensor_parallel", False)]


def full_state_dict(layer: nn.Module, tp: SequenceGroup | None, ep=None) -> dict[str, torch.Tensor]:
    """``layer``'s state as one process holds it: split parameters all-gathered over the TP group, and with ``ep``
    (``executor.model.expert_parallel.ExpertParallel``) every rank's experts gathered over the EP group (every rank
    of the groups must call it)."""
    state = layer.state_dict(keep_vars=True)
    full, experts = {}, {}
    for name, value in state.items():
        dim = getattr(value, "tensor_parallel_dim", None)
        spread = getattr(value, "expert_parallel", False)
        value = value.detach()
        if tp is not None and dim is not None:
            rows = getattr(state[name], "tensor_parallel_rows", None)
            parts = [torch.empty_like(value) for _ in range(tp.size)]
            dist.all_gather(parts, value.contiguous(), group=tp.group)
            value = torch.cat(parts, dim=dim)
            if rows is not None:   # each rank's rows back in their places
                value = torch.empty_like(value).index_copy_(dim, torch.cat(rows).to(value.device), value)
        (experts if spread else full)[name] = value.cpu()
    if ep is not None:
        gathered = [None] * ep.size
        dist.all_gather_object(gathered, experts, group=ep.group)
        experts = {name: value for part in gathered for name, value in part.items()}
    return {**full, **experts}
