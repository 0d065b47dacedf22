"""The projection every executor model uses: ``nn.Linear`` without bias whose weight gradient can be
deferred to a later W step (see ``executor.backward``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from executor.backward import collecting_store, weight_grad


class _DeferrableLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
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
                store.record(weight, x, grad_output)
        return grad_input, grad_weight


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return _DeferrableLinear.apply(x, weight)


class Linear(nn.Linear):
    def __init__(self, in_features: int, out_features: int):
        super().__init__(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight)
