"""Model specifications: the layer-level description of a heterogeneous LLM (``adaptis.model/v1``)."""

from planner.spec.model import (
    AttentionMixer,
    DenseMLP,
    LayerSpec,
    LinearAttentionMixer,
    Mamba2Mixer,
    MambaMixer,
    ModelSpec,
    MoEMLP,
    load_model_spec,
)

__all__ = [
    "AttentionMixer",
    "DenseMLP",
    "LayerSpec",
    "LinearAttentionMixer",
    "Mamba2Mixer",
    "MambaMixer",
    "ModelSpec",
    "MoEMLP",
    "load_model_spec",
]
