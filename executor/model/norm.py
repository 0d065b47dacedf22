"""The block norms: RMSNorm (Zhang & Sennrich 2019), the pre-norm of most families, and LayerNorm (Ba et al. 2016)
with a bias, GPT-2's and Phi-3.5-MoE's (``ModelSpec.norm``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from executor.model.init import fill_
from executor.model.tensor_parallel import all_reduce


class RMSNorm(nn.Module):
    """``features_split_over``: a TP group over which the normalised features are split (Mamba-2's gated norm under
    TP), whose sum of squares is then the group's."""

    features_split_over = None

    def __init__(self, size: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(size))

    def init_weights(self, generator: torch.Generator) -> None:
        fill_(self.weight, 1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tp = self.features_split_over
        if tp is None:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        mean_square = all_reduce(x.pow(2).sum(-1, keepdim=True), tp) / (x.shape[-1] * tp.size)
        return x * torch.rsqrt(mean_square + self.eps) * self.weight


class LayerNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(size))
        self.bias = nn.Parameter(torch.empty(size))

    def init_weights(self, generator: torch.Generator) -> None:
        fill_(self.weight, 1.0)
        fill_(self.bias, 0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


def build_norm(kind: str, size: int) -> nn.Module:
    """The norm a model's blocks and head use: ``rmsnorm`` or ``layernorm``."""
    return LayerNorm(size) if kind == "layernorm" else RMSNorm(size)
