"""The projection every executor model uses: ``nn.Linear`` (bias-free unless asked) whose weight gradient can
be deferred to a later W step (see ``executor.model.backward``)."""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from executor.model.backward import collecting_store, weight_grad
from executor.model.init import normal_
from executor.model.tensor_parallel import reduce_scatter_sequence


class _DeferrableLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        # The parameter itself, for W: under recomputation (``executor.model.recompute``) ``saved_tensors`` gives
        # the recomputed forward's alias of it, whose ``.grad`` is not the parameter's.
        ctx.parameter = weight
        return F.linear(x, weight)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad_input = grad_output @ weight if ctx.needs_input_grad[0] else None
        grad_weight = None
        if ctx.needs_input_grad[1]:
            store = collecting_store()
            if store is None:
                grad_weight = weight_grad(x, grad_output)
            else:
                store.record(ctx.parameter, x, grad_output)
        return grad_input, grad_weight


_deferral_enabled = True


def enable_weight_grad_deferral(enabled: bool) -> None:
    """Whether projections record a graph node able to defer its weight gradient (needed for I / W).

    A rank whose program has only F and B turns it off: the Python autograd node costs about a tenth of a
    small decoder layer's compute on a CPU, and native ``F.linear`` gives the same gradients in a full
    backward. Correctness never depends on it: without deferral, I simply computes the weight gradients
    too and the W that follows has nothing left to do.
    """
    global _deferral_enabled
    _deferral_enabled = enabled


@contextmanager
def weight_grad_deferral(enabled: bool):
    """``enable_weight_grad_deferral(enabled)`` for the ``with`` block, the previous setting restored after."""
    previous = _deferral_enabled
    enable_weight_grad_deferral(enabled)
    try:
        yield
    finally:
        enable_weight_grad_deferral(previous)


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    if _deferral_enabled:
        return _DeferrableLinear.apply(x, weight)
    return F.linear(x, weight)


class Linear(nn.Linear):
    """A projection whose weight gradient may be deferred; an optional bias (Qwen2's q/k/v, GPT-2's projections)
    gets its gradient with the input gradient, as the other small non-matmul parameters do.

    A row-parallel projection (``tensor_parallel`` set by its block's ``shard``) reduce-scatters its partial
    sums over the TP group before the bias, which is added once, whole."""

    tensor_parallel = None
    partial_sum_of = None   # a split MoE expert's output projection: its TP group sums the ranks' outputs

    def __init__(self, in_features: int, out_features: int, bias: bool = False):
        super().__init__(in_features, out_features, bias=bias)

    def init_weights(self, generator: torch.Generator) -> None:
        normal_(self.weight, generator)
        if self.bias is not None:
            normal_(self.bias, generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = reduce_scatter_sequence(linear(x, self.weight), self.tensor_parallel)
        if self.bias is None or (self.partial_sum_of is not None and self.partial_sum_of.rank != 0):
            return out
        return out + self.bias
