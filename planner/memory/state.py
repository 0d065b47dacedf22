"""Model state: the bytes a GPU keeps for the parameters it holds (weights, gradients, optimizer state).

Megatron-LM's accounting (``megatron/training/theoretical_memory_usage.py``, ``num_bytes_per_parameter``):
with mixed precision and Adam, bf16 weights (2 bytes) and fp32 main gradients (4 bytes) for every parameter a
GPU holds, and fp32 master weights plus Adam's two moments (12 bytes) for the parameters whose optimizer state
it keeps: all of them (18 bytes per parameter), or a ``1/DP`` shard of them with the distributed optimizer
(ZeRO-1, Rajbhandari et al. 2020: ``6 + 12/DP`` bytes per parameter). The sharding enters as which parameters'
optimizer state a GPU keeps (``optimizer_parameters``); the precision as a ``StatePrecision``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StatePrecision:
    """Bytes per parameter of each part of the model state."""

    weight: int
    gradient: int
    optimizer: int

    @property
    def total(self) -> int:
        return self.weight + self.gradient + self.optimizer


# bf16 weights, fp32 main gradients, Adam's fp32 master copy and two moments (Megatron's 2 + 4 + 12)
MIXED_PRECISION_ADAM = StatePrecision(weight=2, gradient=4, optimizer=12)
# Full sharding (ZeRO-3): FSDP2 as torchtitan applies it (``MixedPrecisionPolicy(param_dtype=bfloat16,
# reduce_dtype=float32)``) keeps fp32 sharded parameters, which are the master weights, fp32 sharded gradients and
# Adam's two moments: 4 + 4 + 8 bytes per parameter of the shard; the bf16 weights exist only while gathered.
FULLY_SHARDED_ADAM = StatePrecision(weight=4, gradient=4, optimizer=8)


def single_dtype_state(element_bytes: int, *, adam: bool) -> StatePrecision:
    """Weights, gradients and (with Adam) both moments in one dtype, no master copy: the executor's eager
    training (``torch.optim.AdamW`` or SGD on parameters of that dtype)."""
    return StatePrecision(weight=element_bytes, gradient=element_bytes, optimizer=2 * element_bytes if adam else 0)


@dataclass(frozen=True)
class ModelState:
    weights: float
    gradients: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer


def model_state(parameters: float, precision: StatePrecision = MIXED_PRECISION_ADAM, *,
                optimizer_parameters: float | None = None) -> ModelState:
    """The model state of ``parameters`` held parameters; ``optimizer_parameters`` are those whose optimizer
    state this GPU keeps (all of them unless the optimizer is sharded)."""
    kept = parameters if optimizer_parameters is None else optimizer_parameters
    return ModelState(weights=precision.weight * parameters, gradients=precision.gradient * parameters,
                      optimizer=precision.optimizer * kept)


# A profile's ``param_bytes`` are bf16 weights; the pure-PP planner counts model state against them in whole
# multiples (18 bytes per parameter = 9 x param_bytes).
GRADIENT_BYTES_PER_PARAM_BYTE = MIXED_PRECISION_ADAM.gradient // MIXED_PRECISION_ADAM.weight
OPTIMIZER_BYTES_PER_PARAM_BYTE = MIXED_PRECISION_ADAM.optimizer // MIXED_PRECISION_ADAM.weight
MODEL_STATE_BYTES_PER_PARAM_BYTE = MIXED_PRECISION_ADAM.total // MIXED_PRECISION_ADAM.weight
