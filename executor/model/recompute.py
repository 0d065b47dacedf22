"""Activation recomputation as a plan's stages ask it (``ParallelConfig.recompute``), as Megatron-LM does it
(Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", Sec. 5): ``full`` keeps
only each layer's input and runs the layer's forward again in its backward; ``selective`` does that for the core
attention only (the softmax over the scores and its product with the values, whose activations grow with the
square of the sequence), keeping the projections' and the MLP's.

Built on torch's non-reentrant ``torch.utils.checkpoint``: the forward run again in the backward only refills the
saved tensors, the gradients are those of the first run. A forward with side effects besides its output (the MoE
balancing loss's report) asks ``recomputing`` to make them once.
"""

from __future__ import annotations

from collections.abc import Callable

from torch.utils.checkpoint import checkpoint

_recomputing = False


def recomputing() -> bool:
    """True while a checkpointed forward runs again inside a backward."""
    return _recomputing


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
