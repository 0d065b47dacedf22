"""Refuse runs that cannot fit (what this executor cannot run as planned at all: ``executor.running.scope``): a
realistic ModelSpec must be scaled (``executor.model.scale_spec``) first.

The estimate is per GPU: one rank of a pipeline rank's TP x CP x DP group (every rank of a pure pipeline plan).
Its parameters are those of its pipeline rank's layers that it holds (``planner.parallel.memory.held_parameters``:
TP- and EP-sharded, norms and routers replicated), their model state in the run's dtype and optimizer
(``planner.memory.model_state``: weights, gradients and Adam's two moments in that dtype, no master copy), the
optimizer state a data-parallel shard of it under ``sharding`` ``optimizer`` or ``full``
(``planner.parallel.memory.optimizer_parameters``, as ``ZeroRedundancyOptimizer`` and the flat shards keep it); with
``full`` the weights are the shards plus one layer's whole weights while it runs, and the gradients accumulate
whole over the step (``executor.running.sharding``). Activations: those of the micro-batches its order
keeps in flight at its peak (``planner.memory.activation_peaks``: a GPipe rank holds every micro-batch, a 1F1B rank
at most one per stage from it to the end), ~16 hidden-sized tensors per layer and token, sequence-parallel over TP
and split over CP (Korthikanti et al. 2022), and the head's vocabulary-parallel logits; a stage that recomputes
``full`` keeps each layer's input alone, and its rank one layer's activations more while that layer's backward
rebuilds them (selective recomputation is not counted: the estimate stays above it). It is meant to catch a 70B
model on a laptop (or a TP8 stage's whole state counted on one GPU), not to budget memory to the last megabyte.
"""

from __future__ import annotations

import os

import torch

from executor.model.build import layer_parameter_counts
from executor.running.scope import world_size
from planner.errors import SpecError
from planner.memory import activation_peaks, model_state, single_dtype_state, stage_activation_bytes
from planner.parallel.config import ParallelConfig
from planner.parallel.memory import held_parameters, optimizer_parameters
from planner.parallel.params import LayerParams, layer_params
from planner.plan import Plan
from planner.spec.model import ModelSpec

USABLE_FRACTION = 0.8
ACTIVATION_TENSORS_PER_LAYER = 16
GIB = 1024 ** 3


def rank_bytes(plan: Plan, spec: ModelSpec, rank: int, dtype: torch.dtype, optimizer: str,
               counts: list[int] | None = None) -> int:
    """Estimated peak bytes of one GPU of pipeline rank ``rank`` (module doc)."""
    counts = counts if counts is not None else layer_parameter_counts(spec)
    config = plan.parallel_config()
    element = torch.empty((), dtype=dtype).element_size()
    precision = single_dtype_state(element, adam=optimizer == "adamw")
    layers = [layer for stage in plan.stages_on(rank) for layer in plan.stages[stage].layers]
    split = layer_params(spec)
    held = [held_layer_parameters(split[layer], counts[layer], config) for layer in layers]
    dense, expert = sum(part[0] for part in held), sum(part[1] for part in held)
    kept = optimizer_parameters(dense, expert, config)
    state = model_state(dense + expert, precision, optimizer_parameters=kept).total
    if config.sharding == "full":
        # the flat shards stay; a layer is whole only while it runs
        state += precision.weight * (kept + max(sum(part) for part in held) - dense - expert)
    per_layer = layer_activation_bytes(spec, element, config)
    full = fully_recomputed_layers(plan, spec)
    # such a layer keeps its input alone (Korthikanti et al. 2022, Sec. 5), one hidden-sized tensor split as the
    # activations are, and its activations are rebuilt for its backward, one layer at a time
    layer_input = spec.micro_batch_size * spec.seq_len * spec.hidden_size * element / (config.tp * config.cp)
    held_bytes = [layer_input if index in full else nbytes for index, nbytes in enumerate(per_layer)]
    activations = activation_peaks(plan, stage_activation_bytes(plan, held_bytes))[rank]
    rebuilt = [per_layer[layer] for layer in layers if layer in full]
    return round(state + activations + max(rebuilt, default=0.0))


def fully_recomputed_layers(plan: Plan, spec: ModelSpec) -> set[int]:
    """The layers of stages that recompute ``full``, the head excepted (``executor.running.stage``)."""
    config = plan.parallel_config()
    return {layer for index, stage in enumerate(plan.stages) if config.recompute_of(index) == "full"
            for layer in stage.layers if spec.layers[layer].kind != "head"}


def held_layer_parameters(split: LayerParams, count: int, config: ParallelConfig) -> tuple[float, float]:
    """(dense, expert) parameters of one layer that one GPU holds under ``config``: the executor's own ``count`` of
    the layer, split as the planner splits it (``split``: ``planner.parallel.params.layer_params``)."""
    if not split.total:
        return float(count), 0.0
    dense, expert = held_parameters([split], config)
    return dense * count / split.total, expert * count / split.total


def layer_activation_bytes(spec: ModelSpec, element: int, config: ParallelConfig | None = None) -> list[float]:
    """Estimated bytes one micro-batch keeps on each layer of one GPU until its backward there ends: sequence-parallel
    over TP and split over CP, the head's logits split by vocabulary over TP."""
    shards = config.tp * config.cp if config is not None else 1
    tokens = spec.micro_batch_size * spec.seq_len
    per_layer = tokens * spec.hidden_size * element * ACTIVATION_TENSORS_PER_LAYER / shards
    logits = tokens * spec.vocab_size * 4 * 2 / shards   # float32 logits and their gradient
    return [per_layer + (logits if layer.kind == "head" and index == spec.num_layers - 1 else 0)
            for index, layer in enumerate(spec.layers)]


def device_capacity_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_capacity(plan: Plan, spec: ModelSpec, *, device: torch.device, dtype: torch.dtype, optimizer: str,
                   ranks: list[int] | None = None) -> None:
    """Raise ``SpecError('model', ...)`` if the estimated memory of a GPU of ``ranks`` (pipeline ranks, all of them by
    default) exceeds the device's.

    On a CPU all ranks of this host share its memory, so their estimates are summed: every GPU of each pipeline rank
    (its TP x CP x DP group) holds as much as the one estimated.
    """
    ranks = list(range(plan.num_devices)) if ranks is None else ranks
    counts = layer_parameter_counts(spec)
    needs = {rank: rank_bytes(plan, spec, rank, dtype, optimizer, counts) for rank in ranks}
    capacity = device_capacity_bytes(device) * USABLE_FRACTION
    config = plan.parallel_config()
    if device.type == "cuda":
        worst = max(needs, key=needs.get)
        where = (f"each GPU of pipeline rank {worst} ({config.short()})" if plan.parallel is not None
                 else f"rank {worst}")
        if needs[worst] > capacity:
            raise SpecError("model", f"{spec.name!r} needs ~{needs[worst] / GIB:.1f} GiB on {where} "
                                     f"(parameters, gradients, optimizer state, activations) but the GPU has "
                                     f"{capacity / GIB:.1f} GiB usable; scale it down (executor.model.scale_spec, "
                                     f"CLI --scale) or spread it over more devices")
        return
    total = sum(needs.values())
    if ranks != list(range(plan.num_devices)):
        # One rank launched alone (torchrun): assume the other local ranks are as large.
        total *= int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    else:
        total *= config.tp * config.cp * config.dp
    if total > capacity:
        raise SpecError("model", f"{spec.name!r} needs ~{total / GIB:.1f} GiB across {world_size(plan)} CPU ranks "
                                 f"(parameters, gradients, optimizer state, activations) but this host has "
                                 f"{capacity / GIB:.1f} GiB usable; scale it down with "
                                 f"executor.model.scale_spec(spec) (CLI: --scale)")
