"""Memory of one GPU of each pipeline rank under a parallel configuration.

Model state (Megatron-LM ``megatron/training/theoretical_memory_usage.py``, ``num_bytes_per_parameter``; the
distributed optimizer's layout in Megatron's ``docs/.../dist_optimizer.md``): bf16 parameters (2 bytes) and
fp32 main gradients (4 bytes) for every parameter the GPU holds; fp32 master weights and Adam's two moments
(12 bytes) for each of them, or for a ``1/(dp·cp)`` shard of the dense and a ``1/expert_dp`` shard of the
expert parameters with the distributed optimizer (ZeRO-1, Rajbhandari et al. 2020). Which parameters a GPU
holds follows ``planner.parallel.params`` (TP-sharded, replicated, EP x ETP-sharded; tied embeddings on
both pipeline ends).

Activations: a stage's layers keep, per micro-batch in flight, what ``planner.parallel.cost.layer_times``
says (Korthikanti et al. 2022: everything sequence-parallel over TP and split over CP; under full
recomputation only each layer's input), the schedule decides how many micro-batches are in flight
(``planner.memory.activation_peaks`` scans each pipeline rank's order), and a fully recomputed stage needs
one layer's whole activations back during its backward.

Buffers and overhead: NCCL's communicators (``NCCL_BUFFSIZE`` 4 MiB per channel and peer: a few hundred MiB
per GPU once TP, DP and PP groups are built), Megatron's global buffer for the sequence-parallel all-gather
(one full ``tokens/cp x hidden`` activation), the MoE dispatcher's permuted-token buffers (in and out), the
CUDA context with cuBLAS workspaces (~1 GiB), and the caching allocator's fragmentation, taken as
Megatron's 5 % on top of activations (``compute_activation_memory_without_sp``'s ``overhead_factor``).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.parallel.config import ParallelConfig
from planner.parallel.params import LayerParams
from planner.spec.model import ModelSpec, MoEMLP

PARAM_BYTES, GRAD_BYTES, OPTIMIZER_BYTES = 2, 4, 12
NCCL_BUFFER_BYTES = 512 << 20
CUDA_CONTEXT_BYTES = 1 << 30
ALLOCATOR_OVERHEAD = 0.05


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


def model_state_bytes(dense: float, expert: float, config: ParallelConfig) -> tuple[float, float, float]:
    """(params, gradients, optimizer) bytes for the parameters a GPU holds."""
    held = dense + expert
    if config.distributed_optimizer:
        optimizer = OPTIMIZER_BYTES * (dense / (config.dp * config.cp) + expert / config.expert_dp)
    else:
        optimizer = OPTIMIZER_BYTES * held
    return PARAM_BYTES * held, GRAD_BYTES * held, optimizer


def buffer_bytes(spec: ModelSpec, config: ParallelConfig, seq_len: int) -> float:
    dtype_bytes = 2
    tokens = config.microbatch_size * seq_len
    buffers = NCCL_BUFFER_BYTES if config.num_gpus > 1 else 0
    if config.tp > 1:
        buffers += tokens / config.cp * spec.hidden_size * dtype_bytes
    top_k = max((layer.mlp.top_k for layer in spec.layers if isinstance(layer.mlp, MoEMLP)), default=0)
    if top_k and config.ep > 1:
        buffers += 2 * tokens / (config.tp * config.cp) * top_k * spec.hidden_size * dtype_bytes
    return buffers


def gpu_memory(*, pipeline_rank: int, params: list[LayerParams], activation_peak: float, recompute_workspace: float,
               spec: ModelSpec, config: ParallelConfig, seq_len: int, capacity: int) -> GpuMemory:
    dense, expert = held_parameters(params, config)
    param_bytes, grad_bytes, optimizer_bytes = model_state_bytes(dense, expert, config)
    activations = activation_peak + recompute_workspace
    return GpuMemory(pipeline_rank=pipeline_rank, params=param_bytes, gradients=grad_bytes, optimizer=optimizer_bytes,
                     activations=activations, buffers=buffer_bytes(spec, config, seq_len),
                     overhead=CUDA_CONTEXT_BYTES + ALLOCATOR_OVERHEAD * activations, capacity=capacity)
