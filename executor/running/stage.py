"""One pipeline stage on one rank: its layers, and F / B / I / W for one micro-batch at a time.

The stage keeps, per micro-batch in flight, the tensors its backward needs. On a rank that splits backwards
into I and W, a stage that starts with the embedding runs it as a prologue: the embedding output becomes the
detached leaf at which I stops, so even the first stage has a real input-gradient step and only the
embedding's (cheap) weight gradient waits for W. Where every backward is a full B the split buys nothing, and
the embedding stays in the body: one autograd pass per B instead of two.

Under context parallelism and tensor parallelism with sequence parallelism (``layout``,
``executor.model.context_parallel.SequenceLayout``) the stage sees its rank's tokens of the sequence: the first
stage takes those tokens of the data, the last those of the targets, and their loss weighs 1/(tp cp) of the
micro-batch's, so that the group's losses and their gradients sum to the micro-batch's. A vocabulary-parallel
embedding or head (TP) takes the CP share instead, whole: the head's loss is then the same on every TP rank, its
gradient weighs 1/cp, and each rank reports 1/tp of it (``report_share``).

``recompute`` (``executor.model.recompute``): ``full`` runs every layer's forward again in its backward (the head
excepted, as Megatron's), ``selective`` what ``recompute_modules`` name (Megatron-Core's; by default the core
attention of every attention layer).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from executor.model.backward import WeightGradStore, backward_full, backward_input, backward_weight
from executor.model.layers import Embedding, Head
from executor.model.mlp import weigh_balancing_losses
from executor.model.recompute import apply_recompute_modules, checkpointed
from executor.model.context_parallel import SequenceLayout
from executor.running.sharding import gathered_call
from planner.parallel.cost import CostOptions


@dataclass
class InFlight:
    body_input: torch.Tensor
    output: torch.Tensor
    prologue_output: torch.Tensor | None = None
    deferred: WeightGradStore | None = None


class StageRunner:
    def __init__(self, index: int, layers: list[nn.Module], *, is_first: bool, is_last: bool, loss_scale: float,
                 split_backward: bool = True, layout: SequenceLayout | None = None, recompute: str = "none",
                 recompute_modules: tuple[str, ...] = CostOptions().recompute_modules):
        self.index = index
        self.recompute = recompute
        if recompute == "selective":
            apply_recompute_modules(layers, recompute_modules)
        self.is_first, self.is_last = is_first, is_last
        self.layout = layout
        self.moe = weigh_balancing_losses(layers, loss_scale)
        tp = layout.tp if layout is not None else None
        self.vocabulary_parallel = (tp is not None and isinstance(layers[0], Embedding),
                                    tp is not None and isinstance(layers[-1], Head))
        self.loss_scale = loss_scale / (layout.shards if layout is not None else 1)
        self.report_share = 1.0
        if self.vocabulary_parallel[1]:
            self.loss_scale *= tp.size
            self.report_share = 1.0 / tp.size
        starts_with_embedding = isinstance(layers[0], Embedding)
        self.prologue = layers[0] if split_backward and starts_with_embedding and len(layers) > 1 else None
        self.body = layers[1:] if self.prologue is not None else layers
        self.in_flight: dict[int, InFlight] = {}
        # full sharding (``executor.running.sharding``): per layer of ``layers``, the units its passes gather
        self.layer_units: list[list] | None = None

    @property
    def layers(self) -> list[nn.Module]:
        """The stage's layer modules in model order."""
        return ([self.prologue] if self.prologue is not None else []) + list(self.body)

    def forward(self, microbatch: int, stage_input: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self.layout is not None:
            embeds, heads = self.vocabulary_parallel
            targets = self.layout.take(targets, sequence_parallel=not heads)
            stage_input = self.layout.take(stage_input, sequence_parallel=not embeds) if self.is_first else stage_input
        units = self.layer_units or [[] for _ in self.layers]
        prologue_output = None
        if self.prologue is not None:
            # whole for its forward only: the embedding's weight gradient needs the tokens, not the weights
            prologue_output = gathered_call(units[0], self.prologue, stage_input, backward=False)
            body_input = prologue_output.detach().requires_grad_()
        elif stage_input.is_floating_point() and not self.is_first:
            body_input = stage_input.detach().requires_grad_()
        else:
            body_input = stage_input   # token ids or data: nothing to differentiate
        hidden = body_input
        for layer, layer_units in zip(self.body, units[len(units) - len(self.body):]):
            if isinstance(layer, Head):
                hidden = gathered_call(layer_units, layer, hidden, targets, self.loss_scale)
            elif self.recompute == "full":
                hidden = gathered_call(layer_units, partial(checkpointed, layer), hidden)
            else:   # an embedding's weight gradient needs the tokens, not the weights
                hidden = gathered_call(layer_units, layer, hidden, backward=not isinstance(layer, Embedding))
        if self.is_last and not isinstance(self.body[-1], Head):
            # A model without a head regresses synthetic hidden targets.
            hidden = F.mse_loss(hidden, targets) * self.loss_scale
        self.in_flight[microbatch] = InFlight(body_input, hidden, prologue_output)
        return hidden

    def _input_grad(self, state: InFlight) -> torch.Tensor | None:
        return None if self.is_first else state.body_input.grad

    def _finish_prologue(self, state: InFlight) -> None:
        if state.prologue_output is not None:
            backward_full(state.prologue_output, state.body_input.grad)

    def backward(self, microbatch: int, grad_output: torch.Tensor | None) -> torch.Tensor | None:
        """Full backward (B): parameter gradients accumulate; returns the gradient for the previous stage."""
        state = self.in_flight.pop(microbatch)
        backward_full(state.output, grad_output)
        self._finish_prologue(state)
        return self._input_grad(state)

    def backward_input(self, microbatch: int, grad_output: torch.Tensor | None) -> torch.Tensor | None:
        """I: only the gradient the previous stage needs; weight gradients wait for ``backward_weight``."""
        state = self.in_flight[microbatch]
        state.deferred = backward_input(state.output, grad_output)
        return self._input_grad(state)

    def backward_weight(self, microbatch: int) -> None:
        state = self.in_flight.pop(microbatch)
        backward_weight(state.deferred)
        self._finish_prologue(state)

    def check_drained(self) -> None:
        if self.in_flight:
            raise RuntimeError(f"stage {self.index} ends the step with micro-batches {sorted(self.in_flight)} "
                               f"still waiting for their backward")
