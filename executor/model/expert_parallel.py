"""Expert parallelism, as Megatron-Core's all-to-all token dispatcher runs it (Lepikhin et al. 2020, "GShard";
Megatron-Core ``MoEAlltoAllTokenDispatcher``).

An EP group is ``ep`` data-parallel replicas of a pipeline rank (``planner.parallel.mapping``: carved out of
``dp x cp``); each holds ``num_experts / ep`` of every MoE layer's experts and routes its own tokens. A token's
``top_k`` choices are sorted by expert, so by the rank that holds it; one all-to-all sends each rank the tokens
its experts chose (``ep_dispatch``), the experts run on what arrived, and the reverse all-to-all brings the
results back in the order they left (``ep_combine``), where they are weighed and summed per token. Gradients
take the same two exchanges in reverse. An expert's gradient then holds every token of its EP group, so it is
summed over the expert-data-parallel group (the replicas holding the same experts) instead of over all of DP.

With MoE parallel folding (Liu et al. 2025, "MoE Parallel Folding"; Megatron-Core's ``--expert-tensor-parallel-size
1`` under TP: the plan's ``etp`` 1 < ``tp``) the EP group is carved out of ``tp x cp x dp`` (TP ranks included) and
the experts are not split over TP (``fold_experts``): each TP rank routes its own sequence-parallel tokens, without
gathering the sequence, and its EP group runs them on whole experts; the shared experts stay a TP-split dense block.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from executor.model.groups import ParallelGroup


class ExpertParallel(ParallelGroup):
    """One rank's place in its EP group."""

    def __init__(self, group, rank: int, size: int, folded: bool = False):
        super().__init__(group, rank, size, "ep")
        self.folded = folded   # MoE parallel folding: experts whole, each TP rank routing its own tokens

    def local_experts(self, num_experts: int) -> range:
        share = num_experts // self.size
        return range(self.rank * share, (self.rank + 1) * share)

    def exchange(self, x: torch.Tensor, output_splits: list[int], input_splits: list[int], op: str) -> torch.Tensor:
        """Rows ``input_splits[r]`` of ``x`` go to rank r; rows from rank r arrive as ``output_splits[r]``."""
        out = x.new_empty((sum(output_splits), *x.shape[1:]))
        self.timed(op, lambda: dist.all_to_all_single(out, x.contiguous(), output_splits, input_splits,
                                                      group=self.group), out)
        return out


class _Exchange(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, output_splits, input_splits, ep: ExpertParallel, op: str):
        ctx.splits, ctx.ep, ctx.op = (output_splits, input_splits), ep, op
        return ep.exchange(x, output_splits, input_splits, op)

    @staticmethod
    def backward(ctx, grad):
        output_splits, input_splits = ctx.splits
        return ctx.ep.exchange(grad, input_splits, output_splits, f"{ctx.op}_backward"), None, None, None, None


def dispatch_to_experts(tokens: torch.Tensor, weights: torch.Tensor, chosen: torch.Tensor, experts: dict,
                        num_experts: int, ep: ExpertParallel) -> torch.Tensor:
    """The routed experts' weighed sum for every token, the experts spread over ``ep`` (``experts``: this rank's,
    by global index)."""
    top_k = chosen.shape[-1]
    slot_expert = chosen.reshape(-1)
    order = torch.argsort(slot_expert, stable=True)          # slots by expert, so by the rank holding it
    sorted_expert = slot_expert[order]
    per_rank = num_experts // ep.size
    send = torch.bincount(sorted_expert // per_rank, minlength=ep.size)
    receive = torch.empty_like(send)
    ep.timed("ep_counts", lambda: dist.all_to_all_single(receive, send, group=ep.group), send)
    send_splits, receive_splits = send.tolist(), receive.tolist()
    arrived_expert = ep.exchange(sorted_expert, receive_splits, send_splits, "ep_counts")
    arrived = _Exchange.apply(tokens[order // top_k], receive_splits, send_splits, ep, "ep_dispatch")
    # zeros that depend on what arrived: a rank its peers sent no token still takes part in both exchanges'
    # backward (all-to-alls every rank of the group must join), instead of leaving its peers waiting
    results = arrived * 0
    for index, expert in experts.items():
        rows = torch.nonzero(arrived_expert == index, as_tuple=True)[0]
        if rows.numel():
            results = results.index_add(0, rows, expert(arrived[rows]))
    returned = _Exchange.apply(results, send_splits, receive_splits, ep, "ep_combine")
    weighed = returned * weights.reshape(-1)[order, None]
    return torch.zeros_like(tokens).index_add(0, order // top_k, weighed)


def fold_experts(layer: torch.nn.Module) -> None:
    """MoE parallel folding for every MoE block of ``layer`` (``MoE.fold``), before TP splits the layer."""
    for module in list(layer.modules()):
        fold = getattr(module, "fold", None)
        if fold is not None:
            fold()


def shard_experts(layer: torch.nn.Module, ep: ExpertParallel) -> None:
    """Keep this rank's share of every MoE block's experts in ``layer`` (``MoE.keep_experts``)."""
    for module in list(layer.modules()):
        keep = getattr(module, "keep_experts", None)
        if keep is not None:
            keep(ep)


def expert_parameters(layers) -> set[int]:
    """ids of the parameters of experts spread over an EP group (their gradients are summed over expert DP)."""
    return {id(p) for layer in layers for p in layer.parameters() if getattr(p, "expert_parallel", False)}
