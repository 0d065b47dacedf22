"""What the cost model adds up: kernels per pass, the bytes held for backward, and the parameters.

A layer's cost is the sum of its parts' costs (projections, attention core, norms, ...). Each part lists the
kernels it runs in the forward pass (F), the input-gradient pass (B) and the weight-gradient pass (W); the
roofline turns every kernel into time on its own, because a memory-bound kernel does not overlap the
compute-bound one that follows it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gemm:
    """A matrix product's shape, ``[m, k] x [k, n]``, for the whole micro-batch (before any split): what sets its
    efficiency on a GPU (``planner.cost.roofline.kernel_efficiency``). ``token_dim`` (0, 1 or 2 for m, n, k) holds
    the tokens, which context parallelism divides; ``tp_dim`` the dimension tensor parallelism divides (a column-
    parallel layer's outputs, a row-parallel one's inputs), None where the weight is replicated over TP and its
    tokens are divided instead (sequence parallelism). ``experts`` > 0: one grouped GEMM over that many experts,
    its token dimension the routed tokens of all of them."""

    m: float
    n: float
    k: float
    token_dim: int
    tp_dim: int | None
    experts: int = 0


@dataclass(frozen=True)
class AttentionShape:
    """The fused attention kernel's shape: head dimension, the keys a query sees at most (the sequence, or the
    window), and whether it is the backward kernel."""

    head_dim: int
    keys: float
    backward: bool = False


@dataclass(frozen=True)
class Kernel:
    """One kernel: the FLOPs the model needs, FLOPs it re-executes (e.g. FlashAttention's recomputed scores),
    and the bytes it moves to and from device memory. ``fp8`` marks a GEMM that FP8 training runs in FP8 (a linear
    layer Transformer Engine covers); ``fp8_cast_bytes`` is what casting its operands to FP8 then moves. ``shape``
    is a GEMM's or fused attention's shape, where the rate depends on it."""

    flops: float = 0.0
    bytes: float = 0.0
    recomputed_flops: float = 0.0
    fp8: bool = False
    fp8_cast_bytes: float = 0.0
    shape: Gemm | AttentionShape | None = None


@dataclass(frozen=True)
class Cost:
    forward: tuple[Kernel, ...] = ()
    backward_input: tuple[Kernel, ...] = ()
    backward_weight: tuple[Kernel, ...] = ()
    activation_bytes: float = 0.0   # held from the forward until the backward of this micro-batch
    # what FP8 training adds to ``activation_bytes`` (negative: it holds less), where the recipe keeps a GEMM's
    # input as its FP8 cast (``saved``'s ``fp8_bytes``; ``planner.parallel.cost.LayerWork.held_bytes``)
    fp8_activation_delta: float = 0.0
    params: int = 0
    active_params: int = 0          # parameters one token goes through (differs from params for MoE)

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(forward=self.forward + other.forward,
                    backward_input=self.backward_input + other.backward_input,
                    backward_weight=self.backward_weight + other.backward_weight,
                    activation_bytes=self.activation_bytes + other.activation_bytes,
                    fp8_activation_delta=self.fp8_activation_delta + other.fp8_activation_delta,
                    params=self.params + other.params,
                    active_params=self.active_params + other.active_params)

    @staticmethod
    def total(costs: "list[Cost] | tuple[Cost, ...]") -> "Cost":
        result = Cost()
        for cost in costs:
            result = result + cost
        return result

    def model_flops(self) -> float:
        """FLOPs of F + B + W without recomputation: the numerator of MFU."""
        return sum(kernel.flops for kernel in self.forward + self.backward_input + self.backward_weight)


def saved(nbytes: float, *, fp8_bytes: float | None = None) -> Cost:
    """Tensors a part keeps for its backward (its inputs, or intermediates the gradient needs). ``fp8_bytes``: what
    FP8 training holds instead, where the tensor is kept only as the input of GEMMs that run in FP8. Transformer
    Engine's linear layers (``Linear``, ``LayerNormLinear``, ``LayerNormMLP``, ``GroupedLinear``) keep that input as
    its FP8 cast, one byte an element, for the weight-gradient GEMM (``_Linear.forward`` saves ``inputmat``, the
    FP8 tensor, under ``fp8``; ``inputmat_no_fp8`` otherwise); a tensor another kernel needs in BF16 too (a
    norm's or activation's backward, the attention core's) is held in BF16 all the same, and the FP8 copy comes on
    top of it (``fp8_bytes`` of a zero ``nbytes``)."""
    return Cost(activation_bytes=nbytes, fp8_activation_delta=0.0 if fp8_bytes is None else fp8_bytes - nbytes)


def weights(count: int) -> Cost:
    """Parameters that cost no separate kernel (biases, gates and decays applied inside a fused kernel)."""
    return Cost(params=count, active_params=count)
