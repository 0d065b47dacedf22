"""A Mamba-1 mixer (Gu & Dao 2023, "Mamba", Alg. 2; parameter layout as HF's ``MambaMixer``): input projection to
x and the gate z, short causal conv over x, ``x_proj`` to the step size's low-rank latent and B, C, ``dt_proj``
back to a step size per channel, the selective scan with a diagonal A per channel and state, and the output
projection.

The scan runs as a plain recurrence over time, h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t and y_t = C_t h_t + D x_t,
which is what the fused kernel computes, and is fast enough at CPU scale.

Under tensor parallelism (``shard``) it is split by channels: every channel's scan is independent, so only
``x_proj``, which mixes every channel into the step size's latent and B, C (its partial sums summed over the
group), and the output projection (row-parallel) need the group.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from executor.model.init import fill_, uniform_
from executor.model.linear import Linear
from executor.model.tensor_parallel import SequenceGroup, all_reduce, gather_sequence, split_parameter
from planner.spec.model import MambaMixer


class Mamba(nn.Module):
    tensor_parallel = None

    def __init__(self, hidden_size: int, mixer: MambaMixer):
        super().__init__()
        self.inner = mixer.inner_size
        self.state_size = mixer.state_size
        self.dt_rank = mixer.dt_rank
        self.in_proj = Linear(hidden_size, 2 * self.inner, bias=mixer.proj_bias)
        self.conv = nn.Conv1d(self.inner, self.inner, mixer.conv_kernel, groups=self.inner,
                              padding=mixer.conv_kernel - 1, bias=mixer.conv_bias)
        self.x_proj = Linear(self.inner, self.dt_rank + 2 * self.state_size)
        self.dt_proj = Linear(self.dt_rank, self.inner, bias=True)
        self.A_log = nn.Parameter(torch.empty(self.inner, self.state_size))
        self.D = nn.Parameter(torch.empty(self.inner))
        self.out_proj = Linear(self.inner, hidden_size, bias=mixer.proj_bias)

    def init_weights(self, generator: torch.Generator) -> None:
        self.in_proj.init_weights(generator)
        bound = 1.0 / math.sqrt(self.conv.kernel_size[0])
        uniform_(self.conv.weight, generator, -bound, bound)
        if self.conv.bias is not None:
            fill_(self.conv.bias, 0.0)
        self.x_proj.init_weights(generator)
        self.dt_proj.init_weights(generator)
        # S4D-real initialisation (Mamba, Sec. 3.6): A = -(1, 2, ..., N) for every channel.
        with torch.no_grad():
            self.A_log.copy_(torch.log(torch.arange(1, self.state_size + 1, dtype=torch.float32)).expand_as(self.A_log))
        fill_(self.D, 1.0)
        self.out_proj.init_weights(generator)

    def shard(self, tp: SequenceGroup) -> None:
        """Split by channels: the input projection's value and gate rows, the conv, ``dt_proj``'s rows, A and D
        keep this rank's channels; ``x_proj`` takes them as its input features; the output projection is
        row-parallel."""
        for name in ("weight", "bias"):
            split_parameter(self.in_proj, name, 0, tp, blocks=[self.inner, self.inner])
            split_parameter(self.conv, name, 0, tp)
            split_parameter(self.dt_proj, name, 0, tp)
        split_parameter(self.x_proj, "weight", 1, tp)
        for name in ("A_log", "D"):
            split_parameter(self, name, 0, tp)
        split_parameter(self.out_proj, "weight", 1, tp)
        self.out_proj.tensor_parallel = tp
        self.inner //= tp.size
        self.conv.in_channels = self.conv.out_channels = self.conv.groups = self.inner
        self.tensor_parallel = tp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = gather_sequence(x, self.tensor_parallel)
        batch, seq_len, _ = x.shape
        values, gate = torch.split(self.in_proj(x), [self.inner, self.inner], dim=-1)
        # Causal: the conv pads both sides; keeping the first seq_len outputs drops the look-ahead.
        values = F.silu(self.conv(values.transpose(1, 2))[..., :seq_len].transpose(1, 2))      # (b, s, d)
        latent, input_matrix, output_matrix = torch.split(
            all_reduce(self.x_proj(values), self.tensor_parallel), [self.dt_rank, self.state_size, self.state_size],
            dim=-1)
        dt = F.softplus(self.dt_proj(latent))                                                  # (b, s, d)
        decay = torch.exp(dt[..., None] * -torch.exp(self.A_log))                              # (b, s, d, n)
        state = x.new_zeros(batch, self.inner, self.state_size)
        outputs = []
        for t in range(seq_len):
            state = decay[:, t] * state + (dt[:, t] * values[:, t])[..., None] * input_matrix[:, t, None, :]
            outputs.append((state @ output_matrix[:, t, :, None]).squeeze(-1))
        y = torch.stack(outputs, dim=1) + self.D * values
        return self.out_proj(y * F.silu(gate))
