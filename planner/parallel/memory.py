"""Memory of one GPU of each pipeline rank under a parallel configuration, composed from ``planner.memory``.

Model state (``planner.memory.state``) for the parameters a GPU holds, which follow ``planner.parallel.params``
(TP-sharded, replicated, EP x ETP-sharded; tied embeddings on both pipeline ends); with the distributed optimizer
its optimizer state covers a ``1/(dp·cp)`` shard of the dense and a ``1/expert_dp`` shard of the expert
parameters (Megatron's ``docs/.../dist_optimizer.md``).

Activations: a stage's layers keep, per micro-batch in flight, what ``planner.parallel.cost.layer_times``
says (Korthikanti et al. 2022: everything sequence-parallel over TP and split over CP; under full
recomputation only each layer's input), the schedule decides how many micro-batches are in flight
(``planner.memory.activations``), and a fully recomputed stage needs one layer's whole activations back during
its backward. Buffers and overhead: ``planner.memory.buffers``.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.memory.buffers import buffer_bytes, overhead_bytes
from planner.memory.state import model_state
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
    """(dense, expert) parameters one GPU holds of ``layers``."""
    dense = sum(layer.tp_sharded / config.tp + layer.replicated for layer in layers)
    expert = sum(layer.expert / (config.tp * config.ep) for layer in layers)
    return dense, expert


def optimizer_parameters(dense: float, expert: float, config: ParallelConfig) -> float:
    """The held parameters whose optimizer state (and step) one GPU keeps: a shard with the distributed
    optimizer, all of them without."""
    if config.distributed_optimizer:
        return dense / (config.dp * config.cp) + expert / config.expert_dp
    return dense + expert


def layer_state_bytes(params: list[LayerParams], config: ParallelConfig) -> list[float]:
    """Model state each layer costs one GPU of the pipeline rank holding it; a tied table is counted on both
    ends even when one rank holds both (``rank_params`` counts it once), which only errs on the safe side."""
    states = []
    for layer in params:
        dense, expert = held_parameters([layer], config)
        kept = optimizer_parameters(dense, expert, config)
        states.append(model_state(dense + expert, optimizer_parameters=kept).total)
    return states


def gpu_buffer_bytes(spec: ModelSpec, config: ParallelConfig, seq_len: int) -> float:
    top_k = max((layer.mlp.top_k for layer in spec.layers if isinstance(layer.mlp, MoEMLP)), default=0)
    return buffer_bytes(gpus=config.num_gpus, tp=config.tp, cp=config.cp, ep=config.ep,
                        tokens=config.microbatch_size * seq_len, hidden_size=spec.hidden_size, top_k=top_k)


def gpu_memory(*, pipeline_rank: int, params: list[LayerParams], activation_peak: float, recompute_workspace: float,
               spec: ModelSpec, config: ParallelConfig, seq_len: int, capacity: int) -> GpuMemory:
    dense, expert = held_parameters(params, config)
    state = model_state(dense + expert, optimizer_parameters=optimizer_parameters(dense, expert, config))
    activations = activation_peak + recompute_workspace
    return GpuMemory(pipeline_rank=pipeline_rank, params=state.weights, gradients=state.gradients,
                     optimizer=state.optimizer, activations=activations,
                     buffers=gpu_buffer_bytes(spec, config, seq_len), overhead=overhead_bytes(activations),
                     capacity=capacity)
