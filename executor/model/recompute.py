"""Activation recomputation as a plan's stages ask it (``ParallelConfig.recompute``), as Megatron-LM does it
(Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", Sec. 5): ``full`` keeps
only each layer's input and runs the layer's forward again in its backward; ``selective`` runs again what the plan's
recompute modules name (``planner.parallel.cost.executor_options``; Megatron-Core's ``--recompute-modules``, whose
default is the core attention: the softmax over the scores and its product with the values, whose activations grow
with the square of the sequence), keeping the rest. Each module class takes the names it runs again
(``use_recompute_modules``):

- ``core_attn`` (``Attention``, ``LatentAttention``), ``mlp`` (a dense MLP block, ``Decoder`` and ``MLPLayer``),
  ``moe`` and ``shared_experts`` (``MoE``) run under ``checkpointed``, as Megatron-Core runs them under its
  ``checkpoint``: the module's input is kept, everything inside it dropped, the collectives inside run again.
- ``moe_act`` (the routed experts' activation, ``GatedMLP``), ``layernorm`` (the norm before latent attention and the
  one before an MoE, ``Decoder`` and ``MLPLayer``) and ``mla_up_proj`` (latent attention's up-projections with their
  norms and the rotary embedding) run under ``WithoutOutput``, Megatron-Core's ``CheckpointWithoutOutput``: their
  output, which the next module saves, is freed after the forward and rebuilt when the backward reaches that
  module, so only their inputs are kept.

Under TP the blocks gather their sequence-parallel input and their projections save what they gathered (Transformer
Engine's keep the shard and gather it again in the backward), so there ``layernorm``, which frees the norm's shard,
frees little. Within ``moe`` the experts' activation is not also run ``WithoutOutput``: the MoE's checkpoint already
drops it (the planner charges Megatron-Core's nested re-run of it, a tiny elementwise kernel, which this executor
skips).

Built on torch's non-reentrant ``torch.utils.checkpoint``: the forward run again in the backward only refills the
saved tensors, the gradients are those of the first run. A forward with side effects besides its output (the MoE
balancing loss's report) asks ``recomputing`` to make them once.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.checkpoint import checkpoint

_recomputing = False


def recomputing() -> bool:
    """True while a checkpointed forward runs again inside a backward."""
    return _recomputing


def apply_recompute_modules(layers, modules) -> None:
    """Selective recomputation of ``modules`` in every module of ``layers`` that runs one of them again (each class
    takes the names it runs, its ``use_recompute_modules``; module doc)."""
    for layer in layers:
        for module in layer.modules():
            taker = getattr(module, "use_recompute_modules", None)
            if taker is not None:
                taker(modules)


def checkpointed(function: Callable, *args):
    """``function(*args)``, its activations dropped and recomputed in the backward."""
    calls = 0

    def run(*inputs):
        global _recomputing
        nonlocal calls
        calls += 1
        previous, _recomputing = _recomputing, calls > 1
        try:
            return function(*inputs)
        finally:
            _recomputing = previous

    return checkpoint(run, *args, use_reentrant=False)


def _own_storage(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``, copied where it is a view of a larger storage (a split's part), so that freeing its storage frees
    it alone."""
    whole = tensor.storage_offset() == 0 and tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()
    return tensor if whole and tensor.is_contiguous() else tensor.contiguous().clone()


def _as_tuple(outputs) -> tuple[torch.Tensor, ...]:
    return tuple(_own_storage(output) for output in (outputs if isinstance(outputs, tuple) else (outputs,)))


class WithoutOutput:
    """Megatron-Core's ``CheckpointWithoutOutput`` (``megatron/core/tensor_parallel/random.py``): ``function`` runs
    without a graph; once its consumer has run (and saved the outputs, as a projection saves its input), ``discard``
    frees the outputs' storage. When the backward reaches the consumer's output, ``function`` runs again from its
    inputs, with autograd, and its outputs' bytes go back into the freed storage before the consumer's backward reads
    them; ``function``'s own backward then runs through that second graph. Only the inputs are kept in between.

    Under a ``checkpointed`` module (``moe`` around ``moe_act``) it is not used: that checkpoint drops it all."""

    def __init__(self, function: Callable):
        self.function = function
        self.context = None   # the autograd node's, which saves the inputs
        self.needs_grad: tuple[bool, ...] = ()
        self.storages: list = []
        self.detached: tuple[torch.Tensor, ...] = ()
        self.recomputed: tuple[torch.Tensor, ...] | None = None

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return _WithoutOutput.apply(self, *inputs)

    def discard(self, after: torch.Tensor) -> None:
        """Free the outputs' storage; rebuild it when the gradient of ``after`` (the consumer's output) arrives."""
        if not after.requires_grad:
            self.release()
            return
        for storage in self.storages:
            storage.resize_(0)
        after.register_hook(self._rebuild)

    def _rebuild(self, _gradient=None) -> None:
        if self.recomputed is not None:
            return
        self.detached = tuple(tensor.detach().requires_grad_(needs)
                              for tensor, needs in zip(self.context.saved_tensors, self.needs_grad))
        with torch.enable_grad():
            self.recomputed = _as_tuple(self.function(*self.detached))
        for storage, again in zip(self.storages, self.recomputed):
            if storage.nbytes() == 0:
                storage.resize_(again.untyped_storage().nbytes())
                storage.copy_(again.untyped_storage())   # the storage's bytes: the saved tensors' versions stay

    def backward(self, gradients) -> tuple[torch.Tensor | None, ...]:
        self._rebuild()
        pairs = [(output, gradient) for output, gradient in zip(self.recomputed, gradients)
                 if gradient is not None and output.requires_grad]
        if pairs:
            torch.autograd.backward([output for output, _ in pairs], [gradient for _, gradient in pairs])
        grads = tuple(tensor.grad if tensor.requires_grad else None for tensor in self.detached)
        self.release()
        return grads

    def release(self) -> None:
        self.context, self.needs_grad, self.storages, self.detached, self.recomputed = None, (), [], (), None


class _WithoutOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, run: WithoutOutput, *inputs):
        ctx.run, run.context = run, ctx
        ctx.save_for_backward(*inputs)
        run.needs_grad = tuple(tensor.requires_grad for tensor in inputs)
        with torch.no_grad():
            outputs = _as_tuple(run.function(*inputs))
        run.storages = [output.untyped_storage() for output in outputs]
        return outputs

    @staticmethod
    def backward(ctx, *gradients):
        return (None, *ctx.run.backward(gradients))


def held_bytes(forward: Callable[[], torch.Tensor], parameters=()) -> tuple[torch.Tensor, int]:
    """(``forward()``, the activation bytes autograd keeps for its backward once it has run: the distinct storages of
    every tensor it saved, as they stand then, but those of ``parameters``, which stay whatever is saved; a storage
    ``WithoutOutput`` freed counts nothing)."""
    weights = {parameter.untyped_storage().data_ptr() for parameter in parameters}
    storages = {}

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in weights:
            storages[storage.data_ptr()] = storage
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        output = forward()
    return output, sum(storage.nbytes() for storage in storages.values())


def without_output(producer: Callable, consumer: Callable, *inputs: torch.Tensor):
    """``consumer(*producer(*inputs))``, ``producer``'s outputs not kept between the forward and the backward
    (``WithoutOutput``); plainly so where autograd is off."""
    if not torch.is_grad_enabled():
        outputs = producer(*inputs)
        return consumer(*(outputs if isinstance(outputs, tuple) else (outputs,)))
    run = WithoutOutput(producer)
    result = consumer(*run(*inputs))
    run.discard(after=result)
    return result
