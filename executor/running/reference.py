"""The single-process training a pipelined run must equal, and the check that it did.

``reference_training`` trains the whole model in one process on the data every rank draws
(``executor.running.data``); ``compare_to_reference`` reads the layers a run saved (``RunConfig.checkpoint_dir``)
and measures how far the run's updates are from the reference's. The exactness tests and
``python -m executor run --verify`` both judge a run by it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from executor.model.build import build_layers, resolve_dtype
from executor.model.layers import Head
from executor.model.mlp import take_balancing_loss, weigh_balancing_losses
from executor.running.data import synthetic_batch
from executor.running.runtime import zero_unreached_gradients
from planner.errors import SpecError
from planner.spec.model import ModelSpec

LayerStates = dict[int, dict[str, torch.Tensor]]

# How far a run may be from the reference, relative to the reference's largest update of a tensor (and to its
# loss), by the run's dtype: pipelining reorders sums, which float64 rounds a million times finer than float32.
VERIFY_TOLERANCE = {torch.float64: 1e-5, torch.float32: 1e-3}


def reference_training(spec: ModelSpec, *, num_microbatches: int, steps: int, seed: int, lr: float, optimizer: str,
                       dtype=torch.float64, data_parallel: int = 1) -> tuple[LayerStates, list[float], list[float]]:
    """Train the whole model in one process (no pipeline) by plain gradient accumulation: each micro-batch's
    loss over 1/m, run through every layer and back, then one optimizer step. Per-layer state, and per step the
    loss and the MoE balancing loss (None without one).

    The language-model loss alone would give the same gradient on the full batch at once; an MoE balancing
    loss is a statistic of each micro-batch's routing, so the reference takes them one by one too.

    ``data_parallel`` replicas of the pipeline each take ``num_microbatches`` consecutive micro-batches of one
    step's batch and average their gradients, which is this accumulation over all ``num_microbatches *
    data_parallel`` of them."""
    total_microbatches = num_microbatches * data_parallel
    modules = build_layers(spec, range(spec.num_layers), seed=seed, dtype=dtype)
    moe = weigh_balancing_losses(modules.values(), 1.0 / total_microbatches)
    params = list({id(p): p for m in modules.values() for p in m.parameters()}.values())
    opt = torch.optim.AdamW(params, lr=lr) if optimizer == "adamw" else torch.optim.SGD(params, lr=lr)
    losses, balancing_losses = [], []
    for step in range(steps):
        batch = synthetic_batch(spec, total_microbatches, seed=seed, step=step, dtype=dtype)
        step_loss = 0.0
        for microbatch in range(total_microbatches):
            hidden, targets = batch.microbatch(microbatch)
            for index in range(spec.num_layers):
                layer = modules[index]
                hidden = layer(hidden, targets) if isinstance(layer, Head) else layer(hidden)
            if not isinstance(modules[spec.num_layers - 1], Head):
                hidden = torch.nn.functional.mse_loss(hidden, targets)
            (hidden / total_microbatches).backward()
            step_loss += hidden.item() / total_microbatches
        zero_unreached_gradients(params)
        opt.step()
        opt.zero_grad()
        losses.append(step_loss)
        balancing_losses.append(take_balancing_loss(moe))
    state = {index: {k: v.detach().clone() for k, v in m.state_dict().items()} for index, m in modules.items()}
    return state, losses, balancing_losses


def initial_state(spec: ModelSpec, *, seed: int, dtype=torch.float64) -> LayerStates:
    modules = build_layers(spec, range(spec.num_layers), seed=seed, dtype=dtype)
    return {index: {k: v.detach().clone() for k, v in m.state_dict().items()} for index, m in modules.items()}


@dataclass(frozen=True)
class Verification:
    """How far a run's saved layers are from the reference's, over every tensor of every layer."""

    largest_difference: float   # max |run update - reference update| over every element
    largest_relative: float     # the worst tensor's largest difference over its largest reference update
    compared: int               # tensors compared
    worst: str                  # the tensor of largest_relative: "layer N name"
    losses: list[float]         # the reference's, per step
    balancing_losses: list[float | None]

    def loss_relative(self, losses: list[float | None], balancing_losses: list[float | None]) -> float:
        """The largest relative difference between a run's per-step losses (and MoE balancing losses) and
        the reference's: inf where one of them has a loss the other lacks."""
        if len(losses) != len(self.losses) or len(balancing_losses) != len(self.balancing_losses):
            return math.inf
        relative = 0.0
        for run, reference in zip(losses + balancing_losses, self.losses + self.balancing_losses):
            if run is None or reference is None:
                relative = max(relative, 0.0 if run is reference else math.inf)
            else:
                relative = max(relative, _relative(abs(run - reference), abs(reference)))
        return relative


def compare_to_reference(checkpoint_dir: str | Path, spec: ModelSpec, *, num_microbatches: int, data_parallel: int,
                         steps: int, seed: int, lr: float, optimizer: str, dtype) -> Verification:
    """Train the reference with the run's settings and compare it with the ``layerNNNN.pt`` files the run
    saved in ``checkpoint_dir``. Updates are compared, not weights: a wrong gradient must not hide behind the
    initial values, which are the same on both sides. Raises ``SpecError`` naming the layer whose file is
    missing or whose tensors are not the reference's."""
    dtype = resolve_dtype(dtype)
    expected, losses, balancing_losses = reference_training(
        spec, num_microbatches=num_microbatches, steps=steps, seed=seed, lr=lr, optimizer=optimizer, dtype=dtype,
        data_parallel=data_parallel)
    before = initial_state(spec, seed=seed, dtype=dtype)
    largest_difference, largest_relative, worst, compared = 0.0, 0.0, "", 0
    for layer, reference in expected.items():
        path = Path(checkpoint_dir) / f"layer{layer:04d}.pt"
        if not path.is_file():
            raise SpecError("checkpoint_dir", f"layer {layer}: the run saved no {path.name} in {checkpoint_dir}")
        saved = torch.load(path, weights_only=True, map_location="cpu")
        if saved.keys() != reference.keys():
            raise SpecError("checkpoint_dir", f"layer {layer}: {path.name} holds {sorted(saved)}, the reference's "
                                              f"layer holds {sorted(reference)}")
        for name, value in reference.items():
            initial = before[layer][name].double()
            run_update, reference_update = saved[name].double() - initial, value.double() - initial
            difference = (run_update - reference_update).abs().max().item()
            if math.isnan(difference):   # a diverged run: NaN would lose every comparison below
                difference = math.inf
            relative = _relative(difference, reference_update.abs().max().item())
            largest_difference = max(largest_difference, difference)
            if relative > largest_relative or not worst:
                largest_relative, worst = relative, f"layer {layer} {name}"
            compared += 1
    return Verification(largest_difference, largest_relative, compared, worst, losses, balancing_losses)


def verify_tolerance(dtype) -> float:
    """The largest relative difference ``--verify`` accepts of a run in ``dtype``."""
    if resolve_dtype(dtype) not in VERIFY_TOLERANCE:
        raise SpecError("dtype", f"verification compares float64 or float32 runs (half precision rounds each "
                                 f"update too coarsely to tell a wrong gradient from rounding), got {dtype}")
    return VERIFY_TOLERANCE[resolve_dtype(dtype)]


def _relative(difference: float, scale: float) -> float:
    """``difference`` over ``scale``; a tensor the reference left alone must be left alone exactly."""
    if math.isnan(difference):
        return math.inf
    if difference == 0:
        return 0.0
    return difference / scale if scale > 0 else math.inf
