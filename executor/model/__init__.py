"""Torch modules for every layer kind a ModelSpec can hold, built deterministically per layer."""

from executor.model.build import build_layers, layer_parameter_counts, resolve_dtype
from executor.model.scale import scale_spec

__all__ = ["build_layers", "layer_parameter_counts", "resolve_dtype", "scale_spec"]
