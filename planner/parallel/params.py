"""How each layer's parameters are held under TP and EP: sharded by TP, replicated, or sharded by EP x ETP.

The split follows Megatron-LM's ``megatron/training/theoretical_memory_usage.py``
(``compute_weight_and_optimizer_memory``): attention, dense-MLP and shared-expert weights are TP-sharded;
layer norms and the MoE router are replicated on every TP rank, and so (as Megatron-Core's modules hold them, and
the executor: ``tests/executor/test_hybrid_execution.py`` compares the two) are the biases of the row-parallel
output projections, QK-norms, a learned position table and MLA's down-projections (``_replicated_mixer``); routed
experts are sharded over expert tensor x expert model parallelism (expert TP ``etp``, TP by default as in
Megatron-Core), but for their output biases, whole on an expert's TP ranks (``expert_whole``); the vocabulary
embedding and the output layer are TP-sharded (vocab-parallel). With tied embeddings the first and the last
pipeline stage each hold the table (Megatron keeps a copy on both and all-reduces its gradient).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.cost.analytic import layer_parameters
from planner.cost.primitives import norm
from planner.spec.model import (AttentionMixer, DenseMLP, LayerSpec, LinearAttentionMixer, MambaMixer, ModelSpec,
                                MoEMLP, sublayer_norms)


@dataclass(frozen=True)
class LayerParams:
    """A layer's parameters by how they are held: split over TP, whole on every TP rank, routed experts' split over
    EP and expert TP, and routed experts' held whole by an expert's expert-TP ranks (the output projections'
    biases, added once after the experts' partial sums)."""

    tp_sharded: int
    replicated: int
    expert: int
    expert_whole: int = 0

    @property
    def total(self) -> int:
        return self.tp_sharded + self.replicated + self.expert + self.expert_whole

    def experts_per_gpu(self, ep: int, etp: int) -> float:
        return self.expert / (etp * ep) + self.expert_whole / ep

    def per_gpu(self, tp: int, ep: int, etp: int) -> float:
        """Parameters one GPU holds of this layer under TP, EP and expert TP."""
        return self.tp_sharded / tp + self.replicated + self.experts_per_gpu(ep, etp)


def _replicated_mixer(mixer, hidden: int) -> int:
    """What a mixer holds whole on every TP rank: the bias of its row-parallel output projection (added once, after
    the reduction), its QK-norms, gated delta-net's output norm (one head wide, shared by the heads) and MLA's
    down-projections with their norms, which Megatron-Core duplicates on every TP rank (``MLASelfAttention``,
    ``linear_q_down_proj`` / ``linear_kv_down_proj`` with ``parallel_mode="duplicated"``)."""
    if isinstance(mixer, AttentionMixer):
        if mixer.is_latent:
            query = (hidden + 1) * mixer.q_lora_rank if mixer.q_lora_rank else 0
            return query + hidden * (mixer.kv_lora_rank + mixer.rope_head_dim) + mixer.kv_lora_rank
        return hidden * mixer.output_bias + 2 * mixer.head_dim * mixer.qk_norm
    if isinstance(mixer, LinearAttentionMixer):
        return mixer.head_dim if mixer.variant == "gated_delta" else 0
    if isinstance(mixer, MambaMixer):
        return hidden * mixer.proj_bias
    return 0


def _replicated_and_expert(layer: LayerSpec, spec: ModelSpec) -> tuple[int, int, int]:
    """(replicated, expert, expert_whole) of ``LayerParams``; the rest of the layer is TP-sharded."""
    hidden = spec.hidden_size
    per_norm = norm(spec.norm, 0, hidden, 0).params   # a norm's weights as the cost model counts them
    if layer.kind == "embedding":   # a learned position table is not split by vocabulary
        return (spec.position_embeddings or 0) * hidden, 0, 0
    if layer.kind == "head":
        return per_norm, 0, 0                         # the final norm
    norms = ((layer.mixer is not None) + (layer.mlp is not None)) * sublayer_norms(layer, spec.block_norms)
    replicated, expert = norms * per_norm + _replicated_mixer(layer.mixer, hidden), 0
    if isinstance(layer.mlp, DenseMLP):   # an activation's learned scalars (xIELU's), the down projection's bias
        replicated += layer.mlp.activation_parameters + hidden * layer.mlp.bias
    if isinstance(layer.mlp, MoEMLP):
        mlp = layer.mlp
        replicated += (hidden + mlp.bias) * mlp.num_experts   # the router
        if mlp.latent_size:                          # a latent MoE's projections, duplicated as the router
            replicated += 2 * hidden * mlp.latent_size + (hidden + mlp.latent_size if mlp.bias else 0)
        matrices = 3 if mlp.gated else 2             # gate, up and down; up and down without a gate
        expert = matrices * mlp.expert_width(hidden) * mlp.expert_intermediate_size * mlp.num_experts
        if mlp.bias:                                 # the gate's and up projection's biases split with them
            expert += (matrices - 1) * mlp.expert_intermediate_size * mlp.num_experts
            return replicated, expert, mlp.expert_width(hidden) * mlp.num_experts   # the output biases whole
    return replicated, expert, 0


def layer_params(spec: ModelSpec) -> list[LayerParams]:
    """Per layer of ``spec``: its parameters split by how TP and EP shard them."""
    result = []
    for layer, total in zip(spec.layers, layer_parameters(spec)):
        replicated, expert, whole = _replicated_and_expert(layer, spec)
        result.append(LayerParams(tp_sharded=total - replicated - expert - whole, replicated=replicated,
                                  expert=expert, expert_whole=whole))
    return result
