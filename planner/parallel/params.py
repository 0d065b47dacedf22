"""How each layer's parameters are held under TP and EP: sharded by TP, replicated, or sharded by EP x ETP.

The split follows Megatron-LM's ``megatron/training/theoretical_memory_usage.py``
(``compute_weight_and_optimizer_memory``): attention, dense-MLP and shared-expert weights are TP-sharded;
layer norms and the MoE router are replicated on every TP rank; routed experts are sharded over expert
tensor x expert model parallelism (expert TP ``etp``, TP by default as in Megatron-Core); the vocabulary
embedding and the output layer are TP-sharded (vocab-parallel). With tied embeddings the first and the last
pipeline stage each hold the table (Megatron keeps a copy on both and all-reduces its gradient).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.cost.analytic import layer_parameters
from planner.spec.model import DenseMLP, LayerSpec, ModelSpec, MoEMLP, sublayer_norms


@dataclass(frozen=True)
class LayerParams:
    tp_sharded: int
    replicated: int
    expert: int

    @property
    def total(self) -> int:
        return self.tp_sharded + self.replicated + self.expert

    def per_gpu(self, tp: int, ep: int, etp: int) -> float:
        """Parameters one GPU holds of this layer under TP, EP and expert TP."""
        return self.tp_sharded / tp + self.replicated + self.expert / (etp * ep)


def _replicated_and_expert(layer: LayerSpec, spec: ModelSpec) -> tuple[int, int]:
    hidden = spec.hidden_size
    per_norm = 2 * hidden if spec.norm == "layernorm" else hidden   # a LayerNorm's bias too
    if layer.kind == "embedding":
        return 0, 0
    if layer.kind == "head":
        return per_norm, 0                            # the final norm
    norms = ((layer.mixer is not None) + (layer.mlp is not None)) * sublayer_norms(layer, spec.block_norms)
    replicated, expert = norms * per_norm, 0
    if isinstance(layer.mlp, DenseMLP):   # an activation's learned scalars (xIELU's)
        replicated += layer.mlp.activation_parameters
    if isinstance(layer.mlp, MoEMLP):
        mlp = layer.mlp
        replicated += hidden * mlp.num_experts       # the router
        if mlp.latent_size:                          # a latent MoE's projections, duplicated as the router
            replicated += 2 * hidden * mlp.latent_size + (hidden + mlp.latent_size if mlp.bias else 0)
        matrices = 3 if mlp.gated else 2             # gate, up and down; up and down without a gate
        expert = matrices * mlp.expert_width(hidden) * mlp.expert_intermediate_size * mlp.num_experts
    return replicated, expert


def layer_params(spec: ModelSpec) -> list[LayerParams]:
    """Per layer of ``spec``: its parameters split by how TP and EP shard them."""
    result = []
    for layer, total in zip(spec.layers, layer_parameters(spec)):
        replicated, expert = _replicated_and_expert(layer, spec)
        result.append(LayerParams(tp_sharded=total - replicated - expert, replicated=replicated, expert=expert))
    return result
