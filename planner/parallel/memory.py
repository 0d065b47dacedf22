"""Memory of one GPU of each pipeline rank under a parallel configuration, composed from ``planner.memory``.

Model state (``planner.memory.state``) for the parameters a GPU holds, which follow ``planner.parallel.params``
(TP-sharded, replicated, EP x ETP-sharded; tied embeddings on both pipeline ends); with ``sharding`` ``optimizer``
(the distributed optimizer) its optimizer state covers a ``1/(dp·cp)`` shard of the dense and a ``1/expert_dp``
shard of the expert parameters (Megatron's ``docs/.../dist_optimizer.md``); with ``full`` (ZeRO-3, FSDP2) the
weights and gradients are sharded the same way, at FSDP2's precision (``FULLY_SHARDED_ADAM``), and the layer being
computed is gathered whole: two layers' bf16 weights (the one running and the one prefetched) and one layer's
unsharded gradients are held beside the shards (``fsdp_unit_bytes``).

Activations: a stage's layers keep, per micro-batch in flight, what ``planner.parallel.cost.layer_times``
says (Korthikanti et al. 2022: everything sequence-parallel over TP and split over CP; under full
recomputation only each layer's input), the schedule decides how many micro-batches are in flight
(``planner.memory.activations``), and the backward of one layer at a time allocates more: a recomputed layer's whole
activations back, the loss's gradient buffers (``planner.parallel.evaluate.backward_workspace_bytes``). Buffers and
overhead: ``planner.memory.buffers``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from planner.memory.buffers import buffer_bytes, overhead_bytes
from planner.memory.state import FULLY_SHARDED_ADAM, MIXED_PRECISION_ADAM, ModelState, model_state
from planner.parallel.config import ParallelConfig
from planner.parallel.params import LayerParams
from planner.spec.model import ModelSpec, MoEMLP


@dataclass(frozen=True)
class GpuMemory:
    """One GPU's memory (bytes); every GPU of a pipeline rank holds the same."""

    pipeline_rank: int
    params: float
    gradients: float
    optimizer: float
    activations: float
    buffers: float
    overhead: float
    capacity: int

    @property
    def total(self) -> float:
        return self.params + self.gradients + self.optimizer + self.activations + self.buffers + self.overhead

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    def to_dict(self) -> dict:
        return {"pipeline_rank": self.pipeline_rank, "params_bytes": round(self.params),
                "gradients_bytes": round(self.gradients), "optimizer_bytes": round(self.optimizer),
                "activations_bytes": round(self.activations), "buffers_bytes": round(self.buffers),
                "overhead_bytes": round(self.overhead), "total_bytes": round(self.total),
                "capacity_bytes": self.capacity, "fits": self.fits}


def held_parameters(layers: list[LayerParams], config: ParallelConfig) -> tuple[float, float]:
    """(dense, expert) parameters one GPU computes with of ``layers``, after TP, EP and expert TP (before any
    data-parallel sharding)."""
    dense = sum(layer.tp_sharded / config.tp + layer.replicated for layer in layers)
    expert = sum(layer.experts_per_gpu(config.ep, config.etp) for layer in layers)
    return dense, expert


def optimizer_parameters(dense: float, expert: float, config: ParallelConfig) -> float:
    """The held parameters whose optimizer state (and step) one GPU keeps: a data-parallel shard of them when the
    optimizer is sharded (``sharding`` ``optimizer`` or ``full``), all of them with ``none``."""
    if config.sharding != "none":
        return dense / (config.dp * config.cp) + expert / config.expert_dp
    return dense + expert


def state_of(dense: float, expert: float, config: ParallelConfig,
             gradient_bytes: int = MIXED_PRECISION_ADAM.gradient) -> ModelState:
    """The model state one GPU keeps for ``dense`` and ``expert`` held parameters under ``config.sharding``. Without
    full sharding the main gradients are ``gradient_bytes`` each: Megatron-Core keeps them in the dtype it reduces
    them in (``_ParamAndGradBuffer``: fp32 with ``grad_reduce_in_fp32``, else the parameters' bf16;
    ``CostOptions.grad_reduce_bytes``)."""
    kept = optimizer_parameters(dense, expert, config)
    if config.sharding == "full":
        return model_state(kept, FULLY_SHARDED_ADAM)
    return model_state(dense + expert, replace(MIXED_PRECISION_ADAM, gradient=gradient_bytes),
                       optimizer_parameters=kept)


def layer_state_bytes(params: list[LayerParams], config: ParallelConfig,
                      gradient_bytes: int = MIXED_PRECISION_ADAM.gradient) -> list[float]:
    """Model state each layer costs one GPU of the pipeline rank holding it; a tied table is counted on both
    ends even when one rank holds both (``rank_params`` counts it once), which only errs on the safe side."""
    return [state_of(*held_parameters([layer], config), config, gradient_bytes).total for layer in params]


def fsdp_unit_bytes(params: list[LayerParams], config: ParallelConfig) -> float:
    """Full sharding only: what FSDP2 holds gathered beside the shards when it wraps each layer (torchtitan's
    ``fully_shard`` per transformer block): the running layer's and the prefetched next layer's bf16 weights, and
    the running layer's unsharded fp32 gradients until their reduce-scatter; the largest of ``params``."""
    if config.sharding != "full" or not params:
        return 0.0
    largest = max(sum(held_parameters([layer], config)) for layer in params)
    return largest * (2 * MIXED_PRECISION_ADAM.weight + MIXED_PRECISION_ADAM.gradient)


@lru_cache(maxsize=16)
def _max_routed_width(spec: ModelSpec) -> int:
    return max((layer.mlp.top_k * layer.mlp.expert_width(spec.hidden_size) for layer in spec.layers
                if isinstance(layer.mlp, MoEMLP)), default=0)


def gpu_buffer_bytes(spec: ModelSpec, config: ParallelConfig, seq_len: int, params: list[LayerParams]) -> float:
    """Communication buffers of one GPU of a pipeline rank holding ``params`` (any rank: every layer's)."""
    return buffer_bytes(gpus=config.num_gpus, tp=config.tp, cp=config.cp, ep=config.ep,
                        tokens=config.microbatch_size * seq_len, hidden_size=spec.hidden_size,
                        routed_width=_max_routed_width(spec)) + fsdp_unit_bytes(params, config)


def gpu_memory(*, pipeline_rank: int, params: list[LayerParams], activation_peak: float, backward_workspace: float,
               spec: ModelSpec, config: ParallelConfig, seq_len: int, capacity: int,
               gradient_bytes: int = MIXED_PRECISION_ADAM.gradient) -> GpuMemory:
    state = state_of(*held_parameters(params, config), config, gradient_bytes)
    activations = activation_peak + backward_workspace
    return GpuMemory(pipeline_rank=pipeline_rank, params=state.weights, gradients=state.gradients,
                     optimizer=state.optimizer, activations=activations,
                     buffers=gpu_buffer_bytes(spec, config, seq_len, params), overhead=overhead_bytes(activations),
                     capacity=capacity)
