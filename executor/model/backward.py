"""The zero-bubble backward split: I computes input gradients now, W the matmul weight gradients later.

As in the Zero Bubble implementation (sail-sg, ``WeightGradStore``): every projection in the executor's
models is a ``executor.model.linear.Linear``, whose backward either computes its weight gradient at once
(B, a full backward) or, while a store is collecting (I), records (weight, input, output gradient) and
returns only the input gradient. W replays the records: one matmul per projection, no graph walk, nothing
on the input route computed twice. Parameters outside matmuls (norm scales, convolution taps, SSM decay
terms) are a negligible share of the work and get their gradients during I. Record and replay happen in
one process, one micro-batch at a time, so a module-level "collecting" slot is enough — and, unlike a
thread-local, it is seen by the autograd engine's device threads on CUDA.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch


class WeightGradStore:
    """The deferred weight gradients of one stage x micro-batch."""

    def __init__(self):
        self._records: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def record(self, weight: torch.Tensor, layer_input: torch.Tensor, grad_output: torch.Tensor) -> None:
        self._records.append((weight, layer_input, grad_output))

    def __len__(self) -> int:
        return len(self._records)

    @torch.no_grad()
    def flush(self) -> None:
        """Accumulate every recorded weight gradient into ``weight.grad`` and drop the saved tensors.

        Without autograd: a recorded layer input is an activation that requires grad, and a product with it
        would give ``weight.grad`` a graph holding every micro-batch's activations until the optimizer step.
        """
        for weight, layer_input, grad_output in self._records:
            if weight.grad is None:
                weight.grad = weight_grad(layer_input, grad_output)
            else:
                # Accumulate in place, inside the matmul (as autograd's AccumulateGrad does for B): a new
                # gradient tensor plus an add per projection cost about as much as the small matmuls.
                weight.grad.addmm_(_rows(grad_output).T, _rows(layer_input))
        self._records.clear()


_collecting: WeightGradStore | None = None


def collecting_store() -> WeightGradStore | None:
    return _collecting


@contextmanager
def deferring_weight_grads(store: WeightGradStore):
    global _collecting
    _collecting = store
    try:
        yield store
    finally:
        _collecting = None


def _rows(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.reshape(-1, tensor.shape[-1])


def weight_grad(layer_input: torch.Tensor, grad_output: torch.Tensor) -> torch.Tensor:
    """dL/dW for y = x W^T, summed over every leading (batch, sequence) dimension."""
    return _rows(grad_output).T @ _rows(layer_input)


def backward_full(output: torch.Tensor, grad_output: torch.Tensor | None) -> None:
    """B: every gradient now."""
    torch.autograd.backward(output, grad_output)


def backward_input(output: torch.Tensor, grad_output: torch.Tensor | None) -> WeightGradStore:
    """I: input gradients (and the small non-matmul parameter gradients); matmul weights wait in the store."""
    store = WeightGradStore()
    with deferring_weight_grads(store):
        torch.autograd.backward(output, grad_output)
    return store


def backward_weight(store: WeightGradStore) -> None:
    """W: the matmul weight gradients ``backward_input`` deferred."""
    store.flush()
