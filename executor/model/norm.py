"""RMSNorm (Zhang & Sennrich 2019), the pre-norm used by every decoder family the planner knows."""

from __future__ import annotations

import torch
from torch import nn

from executor.model.init import fill_


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(size))

    def init_weights(self, generator: torch.Generator) -> None:
        fill_(self.weight, 1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
