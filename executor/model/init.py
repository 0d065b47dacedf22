"""Deterministic parameter initialisation.

Every layer draws its parameters from its own generator seeded by (run seed, layer index), so a layer's
weights are identical whichever rank builds it and whichever other layers share its stage. That is what
makes a pipelined run comparable, parameter for parameter, with a single-process reference.
"""

from __future__ import annotations

import torch

INIT_STD = 0.02


def layer_generator(seed: int, layer_index: int, device: torch.device | str = "cpu") -> torch.Generator:
    """The layer's generator: on the CPU for every run (values shared by each rank and the reference); on another
    device only where nothing compares values (a profile, ``build_layers(draw_on_device=True)``)."""
    # Large odd multiplier keeps (seed, layer) pairs from colliding for any realistic depth.
    return torch.Generator(device=device).manual_seed(seed * 1_000_003 + layer_index)


def normal_(tensor: torch.Tensor, generator: torch.Generator, std: float = INIT_STD) -> None:
    """Fill in float32 on the generator's device (the CPU but for profiles), then copy: the values do not depend on
    the target device or dtype."""
    values = torch.empty(tensor.shape, dtype=torch.float32, device=generator.device)
    values.normal_(0.0, std, generator=generator)
    with torch.no_grad():
        tensor.copy_(values)


def uniform_(tensor: torch.Tensor, generator: torch.Generator, low: float, high: float) -> None:
    values = torch.empty(tensor.shape, dtype=torch.float32, device=generator.device)
    values.uniform_(low, high, generator=generator)
    with torch.no_grad():
        tensor.copy_(values)


def fill_(tensor: torch.Tensor, value: float) -> None:
    with torch.no_grad():
        tensor.fill_(value)
