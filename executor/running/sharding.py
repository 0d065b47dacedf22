"""Full sharding (``sharding`` ``full``: ZeRO-3, Rajbhandari et al. 2020, Sec. 5.3; PyTorch's FSDP) inside the
pipeline: between its uses a layer's parameters are 1/n on each of the n ranks that shard them.

Each layer of a pipeline stage on a rank keeps its parameters in one flat buffer (FSDP's ``FlatParameter``; one unit
a block, as torchtitan applies ``fully_shard``) whose storage is freed between uses, and 1/n of it as the flat shard
the optimizer updates. A layer's buffers are all-gathered from the shards just before its forward and freed after it
(FSDP's reshard after forward), gathered again when the backward reaches the layer's output and freed once it has
passed the layer's input (``gathered_call``): one layer is whole at a time, one collective a layer and pass, not
prefetched. The weights autograd saved in the forward are views of that storage, so the backward's gather refills
what they read. W replays recorded inputs and output gradients (``executor.model.backward``) and needs no weights,
nor does an embedding's weight gradient (its prologue's, ``executor.running.stage``). The gradients of the step's
micro-batches accumulate whole, and are reduce-scattered into the shards' gradients once, at the step's end, before
the optimizer steps on the shards: how ``torch.distributed.pipelining`` runs FSDP2 inside a schedule (it syncs
gradients and reshards at the last backward only). Dense parameters are sharded over the data-parallel group
(dp x cp), experts over the expert-data-parallel group where it has more than one rank, as Megatron-Core shards them;
each collective is an event (``dp_all_gather``, ``dp_reduce_scatter``, ``edp_...``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from executor.model.expert_parallel import expert_parameters


class ShardedParameters:
    """Some of a layer's parameters, fully sharded over ``group``; ``name`` is the group's in the events, ``timer``
    (``executor.model.groups.ParallelGroup``) times and records their collectives (set by the runtime that runs
    them)."""

    def __init__(self, parameters: list[nn.Parameter], group, name: str, timer=None):
        self.parameters, self.group, self.name, self.timer = parameters, group, name, timer
        size, index = dist.get_world_size(group), dist.get_rank(group)
        numel = sum(parameter.numel() for parameter in parameters)
        self.shard_numel = -(-numel // size)
        first = parameters[0]
        self.full = torch.zeros(self.shard_numel * size, dtype=first.dtype, device=first.device)
        offset = 0
        with torch.no_grad():
            for parameter in parameters:
                count = parameter.numel()
                self.full[offset:offset + count].copy_(parameter.reshape(-1))
                # the parameter becomes a view of the flat buffer (keeping its own autograd identity)
                parameter.data = self.full[offset:offset + count].view_as(parameter)
                offset += count
            self.shard = nn.Parameter(self.full[index * self.shard_numel:(index + 1) * self.shard_numel].clone())
        self.gathered = True
        self.release()

    @property
    def _bytes(self) -> int:
        return self.full.numel() * self.full.element_size()

    def gather(self, record: bool = True) -> None:
        """Make the parameters whole: every rank's shard all-gathered into the flat buffer."""
        if self.gathered:
            return
        self.full.untyped_storage().resize_(self._bytes)

        def all_gather() -> None:
            dist.all_gather_single(self.full.data, self.shard.data, group=self.group)

        if record:
            self.timer.timed(f"{self.name}_all_gather", all_gather, self.full)
        else:
            all_gather()
        self.gathered = True

    def release(self) -> None:
        """Free the whole parameters' storage (their shard stays)."""
        if self.gathered:
            self.full.untyped_storage().resize_(0)
            self.gathered = False

    def reduce_gradients(self) -> None:
        """Sum the parameters' gradients over the group into the shard's gradient (each rank gets its part), and drop
        the whole gradients."""
        flat = self.shard.data.new_zeros(self.full.shape)
        offset = 0
        for parameter in self.parameters:
            count = parameter.numel()
            if parameter.grad is not None:
                flat[offset:offset + count].copy_(parameter.grad.reshape(-1))
                parameter.grad = None
            offset += count
        reduced = torch.empty_like(self.shard.data)
        self.timer.timed(f"{self.name}_reduce_scatter",
                         lambda: dist.reduce_scatter_single(reduced, flat, group=self.group), flat)
        self.shard.grad = reduced


class _OnBackward(torch.autograd.Function):
    """A tensor, unchanged; when the backward reaches it, each of ``units`` runs ``method`` (``gather`` on a layer's
    output: before the backward runs through the layer; ``release`` on its input: once it has passed through it, as
    the autograd engine runs a node after every node created after it that feeds it, the layer's)."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, units: list[ShardedParameters], method: str) -> torch.Tensor:
        ctx.units, ctx.method = units, method
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        for unit in ctx.units:
            getattr(unit, ctx.method)()
        return grad, None, None


def gathered_call(units: list[ShardedParameters], call, layer_input: torch.Tensor, *args, backward: bool = True):
    """``call(layer_input, *args)``, a layer's forward, with ``units`` (the layer's, ``shard_stages``) whole around it
    and freed after; when autograd records it and ``backward``, its backward gathers them again before running through
    the layer and frees them once past the layer's input (an input without a gradient leaves that to the action's
    end)."""
    if not units:
        return call(layer_input, *args)
    if backward and layer_input.requires_grad:
        layer_input = _OnBackward.apply(layer_input, units, "release")
    for unit in units:
        unit.gather()
    try:
        output = call(layer_input, *args)
    finally:
        for unit in units:
            unit.release()
    return _OnBackward.apply(output, units, "gather") if backward and output.requires_grad else output


def shard_stages(runners: dict, groups: dict, expert_data_parallel: int) -> dict[int, list[list[ShardedParameters]]]:
    """Per stage of ``runners`` (the stages on this rank), per layer of it (``runner.layers``' order), the sharded
    units the layer's passes gather: one per layer (a block, as torchtitan applies ``fully_shard`` block by block,
    and as the planner charges the gathers) and group, its dense parameters over ``groups["dp"]``, its experts
    spread over EP (``expert_parameters``) over ``groups["edp"]`` where that group has more than one rank (else they
    stay whole). A parameter two layers of the rank share (a tied table with both ends here) is sharded once, with
    the first, and gathered for both."""
    experts = expert_parameters([layer for runner in runners.values() for layer in runner.layers])
    owner: dict[int, ShardedParameters] = {}
    units: dict[int, list[list[ShardedParameters]]] = {}
    for stage in sorted(runners):
        units[stage] = []
        for layer in runners[stage].layers:
            parameters = list({id(p): p for p in layer.parameters()}.values())
            fresh = [p for p in parameters if id(p) not in owner]
            for name, part in (("dp", [p for p in fresh if id(p) not in experts]),
                               ("edp", [p for p in fresh if id(p) in experts and expert_data_parallel > 1])):
                if part:
                    unit = ShardedParameters(part, groups[name], name)
                    owner.update({id(p): unit for p in part})
            units[stage].append(list({id(owner[id(p)]): owner[id(p)] for p in parameters if id(p) in owner}.values()))
    return units


def stage_units(layer_units: list[list[ShardedParameters]]) -> list[ShardedParameters]:
    """Every unit of one stage's layers (``shard_stages``' lists) once, in layer order."""
    return list({id(unit): unit for units in layer_units for unit in units}.values())


def sharded_units(units: dict[int, list[list[ShardedParameters]]]) -> list[ShardedParameters]:
    """Every unit of ``shard_stages``' answer once, in stage order (the order every rank of a group reduces them in)."""
    return stage_units([layer for stage in sorted(units) for layer in units[stage]])
