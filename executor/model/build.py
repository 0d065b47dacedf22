"""Materialise the layers of a ModelSpec as initialised torch modules, and count them without memory."""

from __future__ import annotations

import torch
from torch import nn

from executor.model.layers import Embedding, Head, build_layer
from planner.spec.model import ModelSpec

DTYPES = {"fp64": torch.float64, "float64": torch.float64, "fp32": torch.float32, "float32": torch.float32,
          "bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}


def resolve_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {name!r}")
    return DTYPES[name]


def build_layers(spec: ModelSpec, indices, *, seed: int, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32, draw_on_device: bool = False) -> dict[int, nn.Module]:
    """Initialised modules for the given layer indices, keyed by index.

    Built on the meta device first so nothing is allocated twice, initialised in float32 on the CPU from
    the per-layer generator, then moved: layer i's values never depend on where or beside what it lives.
    A head tied to an embedding built in the same call shares its table.

    ``draw_on_device``: initialise on ``device`` from a generator there instead, where no value is compared (a
    profile): the CPU draws about 10^8 values a second, minutes for a full-size MoE layer, a GPU in milliseconds.
    """
    modules: dict[int, nn.Module] = {}
    home = torch.device(device) if draw_on_device else torch.device("cpu")
    for index in indices:
        with torch.device("meta"):
            module = build_layer(spec, index)
        module = module.to_empty(device=home)
        module.init_weights(seed, index, home)
        modules[index] = module.to(device=device, dtype=dtype)
    tie_tables(modules)
    return modules


def tie_tables(modules: dict[int, nn.Module]) -> None:
    """A tied head beside its embedding (layer 0) shares its table: the same Parameter (again after both were
    split over TP, ``executor.model.tensor_parallel``)."""
    embedding = modules.get(0)
    for module in modules.values():
        if isinstance(module, Head) and module.tied and isinstance(embedding, Embedding):
            module.share_table(embedding)


def layer_parameter_counts(spec: ModelSpec) -> list[int]:
    """Parameters of every layer, counted on the meta device (no memory, exact for any size)."""
    # Identical layers repeat (61 DeepSeek-V3 blocks share 2 shapes): count each distinct one once.
    by_layer: dict = {}
    counts = []
    for index, layer in enumerate(spec.layers):
        if layer not in by_layer:
            with torch.device("meta"):
                module = build_layer(spec, index)
            by_layer[layer] = sum(parameter.numel() for parameter in module.parameters())
        counts.append(by_layer[layer])
    return counts
