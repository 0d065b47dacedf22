"""Refuse runs that cannot fit (what this executor cannot run as planned at all: ``executor.running.scope``): a
realistic ModelSpec must be scaled (``executor.model.scale_spec``) first.

The estimate per rank is the model state of its layers (``planner.memory.model_state`` with the run's dtype
and optimizer: weights, gradients and Adam's two moments in that dtype, no master copy), plus the activations
of the micro-batches its order keeps in flight at its peak (``planner.memory.activation_peaks``: a GPipe rank
holds every micro-batch, a 1F1B rank at most one per stage from it to the end), using ~16 hidden-sized tensors
per layer and token and the head's logits. It is meant to catch a 70B model on a laptop, not to budget memory
to the last megabyte.
"""

from __future__ import annotations

import os

import torch

from executor.model.build import layer_parameter_counts
from executor.running.scope import world_size
from planner.errors import SpecError
from planner.memory import activation_peaks, model_state, single_dtype_state, stage_activation_bytes
from planner.plan import Plan
from planner.spec.model import ModelSpec

USABLE_FRACTION = 0.8
ACTIVATION_TENSORS_PER_LAYER = 16
GIB = 1024 ** 3


def rank_bytes(plan: Plan, spec: ModelSpec, rank: int, dtype: torch.dtype, optimizer: str,
               counts: list[int] | None = None) -> int:
    counts = counts if counts is not None else layer_parameter_counts(spec)
    element = torch.empty((), dtype=dtype).element_size()
    layers = [layer for stage in plan.stages_on(rank) for layer in plan.stages[stage].layers]
    state = model_state(sum(counts[layer] for layer in layers), single_dtype_state(element, adam=optimizer == "adamw"))
    activations = activation_peaks(plan, stage_activation_bytes(plan, layer_activation_bytes(spec, element)))[rank]
    return state.total + activations


def layer_activation_bytes(spec: ModelSpec, element: int) -> list[int]:
    """Estimated bytes one micro-batch keeps on each layer until its backward there ends."""
    tokens = spec.micro_batch_size * spec.seq_len
    per_layer = tokens * spec.hidden_size * element * ACTIVATION_TENSORS_PER_LAYER
    logits = tokens * spec.vocab_size * 4 * 2   # float32 logits and their gradient
    return [per_layer + (logits if layer.kind == "head" and index == spec.num_layers - 1 else 0)
            for index, layer in enumerate(spec.layers)]


def device_capacity_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_capacity(plan: Plan, spec: ModelSpec, *, device: torch.device, dtype: torch.dtype, optimizer: str,
                   ranks: list[int] | None = None) -> None:
    """Raise ``SpecError('model', ...)`` if the ranks' estimated memory exceeds the device's.

    On a CPU all ranks of this host share its memory, so their estimates are summed.
    """
    ranks = list(range(plan.num_devices)) if ranks is None else ranks
    counts = layer_parameter_counts(spec)
    needs = {rank: rank_bytes(plan, spec, rank, dtype, optimizer, counts) for rank in ranks}
    capacity = device_capacity_bytes(device) * USABLE_FRACTION
    if device.type == "cuda":
        worst = max(needs, key=needs.get)
        if needs[worst] > capacity:
            raise SpecError("model", f"{spec.name!r} needs ~{needs[worst] / GIB:.1f} GiB on rank {worst} "
                                     f"(parameters, gradients, optimizer state, activations) but the GPU has "
                                     f"{capacity / GIB:.1f} GiB usable; scale it down (executor.model.scale_spec, "
                                     f"CLI --scale) or spread it over more devices")
        return
    total = sum(needs.values())
    if ranks != list(range(plan.num_devices)):
        # One rank launched alone (torchrun): assume the other local ranks are as large.
        total *= int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    elif plan.parallel is not None:
        # every CP x DP replica of a pipeline holds about its state (a TP group splits it over its ranks)
        total *= plan.parallel.dp * plan.parallel.cp
    if total > capacity:
        raise SpecError("model", f"{spec.name!r} needs ~{total / GIB:.1f} GiB across {world_size(plan)} CPU ranks "
                                 f"(parameters, gradients, optimizer state, activations) but this host has "
                                 f"{capacity / GIB:.1f} GiB usable; scale it down with "
                                 f"executor.model.scale_spec(spec) (CLI: --scale)")
