"""A Mamba-2 mixer (Dao & Gu 2024): input projection, short causal conv, selective scan, gated norm.

The scan runs as a plain recurrence over time, h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t^T and
y_t = C_t h_t + D x_t, which equals the SSD chunked algorithm exactly and is fast enough at CPU scale.

Under tensor parallelism (``shard``) it is split by heads and groups, as Megatron-Core's ``MambaMixer``: every head's
scan is independent, so only the gated norm over the whole inner width (its sum of squares) and the output
projection (row-parallel) need the group.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from executor.model.linear import Linear
from executor.model.init import fill_, normal_, uniform_
from executor.model.norm import RMSNorm
from executor.model.tensor_parallel import SequenceGroup, gather_sequence, split_parameter
from planner.spec.model import Mamba2Mixer


class Mamba2(nn.Module):
    tensor_parallel = None

    def __init__(self, hidden_size: int, mixer: Mamba2Mixer):
        super().__init__()
        self.num_heads = mixer.num_heads
        self.head_dim = mixer.head_dim
        self.state_size = mixer.state_size
        self.n_groups = mixer.n_groups
        self.inner = self.num_heads * self.head_dim
        conv_channels = self.inner + 2 * self.n_groups * self.state_size
        self.in_proj = Linear(hidden_size, self.inner + conv_channels + self.num_heads)
        self.conv = nn.Conv1d(conv_channels, conv_channels, mixer.conv_kernel, groups=conv_channels,
                              padding=mixer.conv_kernel - 1)
        self.A_log = nn.Parameter(torch.empty(self.num_heads))
        self.dt_bias = nn.Parameter(torch.empty(self.num_heads))
        self.D = nn.Parameter(torch.empty(self.num_heads))
        self.norm = RMSNorm(self.inner)
        self.out_proj = Linear(self.inner, hidden_size)

    def init_weights(self, generator: torch.Generator) -> None:
        normal_(self.in_proj.weight, generator)
        bound = 1.0 / math.sqrt(self.conv.kernel_size[0])
        uniform_(self.conv.weight, generator, -bound, bound)
        fill_(self.conv.bias, 0.0)
        uniform_(self.A_log, generator, 0.0, math.log(16.0))
        fill_(self.dt_bias, 0.0)
        fill_(self.D, 1.0)
        self.norm.init_weights(generator)
        normal_(self.out_proj.weight, generator)

    def shard(self, tp: SequenceGroup) -> None:
        """Split by heads and groups: the fused input projection's gate, values, B, C and dt rows and the conv's
        value, B and C channels each keep this rank's heads or groups; A, dt's bias, D and the norm's scale by head;
        the output projection row-parallel. Heads and groups must both divide by the group's size."""
        group_width = self.n_groups * self.state_size
        split_parameter(self.in_proj, "weight", 0, tp,
                        blocks=[self.inner, self.inner, group_width, group_width, self.num_heads])
        for name in ("weight", "bias"):
            split_parameter(self.conv, name, 0, tp, blocks=[self.inner, group_width, group_width])
        for name in ("A_log", "dt_bias", "D"):
            split_parameter(self, name, 0, tp)
        split_parameter(self.norm, "weight", 0, tp)
        self.norm.features_split_over = tp
        split_parameter(self.out_proj, "weight", 1, tp)
        self.out_proj.tensor_parallel = tp
        self.num_heads //= tp.size
        self.n_groups //= tp.size
        self.inner //= tp.size
        channels = self.inner + 2 * self.n_groups * self.state_size
        self.conv.in_channels = self.conv.out_channels = self.conv.groups = channels
        self.tensor_parallel = tp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = gather_sequence(x, self.tensor_parallel)
        batch, seq_len, _ = x.shape
        gate, conv_input, dt = torch.split(
            self.in_proj(x), [self.inner, self.conv.in_channels, self.num_heads], dim=-1)
        # Causal: the conv pads both sides; keeping the first seq_len outputs drops the look-ahead.
        conv_output = F.silu(self.conv(conv_input.transpose(1, 2))[..., :seq_len].transpose(1, 2))
        group_width = self.n_groups * self.state_size
        values, input_matrix, output_matrix = torch.split(
            conv_output, [self.inner, group_width, group_width], dim=-1)
        values = values.view(batch, seq_len, self.num_heads, self.head_dim)
        heads_per_group = self.num_heads // self.n_groups
        input_matrix = input_matrix.view(batch, seq_len, self.n_groups, self.state_size) \
            .repeat_interleave(heads_per_group, dim=2)                                # (b, s, h, n)
        output_matrix = output_matrix.view(batch, seq_len, self.n_groups, self.state_size) \
            .repeat_interleave(heads_per_group, dim=2)
        dt = F.softplus(dt + self.dt_bias)                                             # (b, s, h)
        decay = torch.exp(dt * -torch.exp(self.A_log))                                 # (b, s, h)
        state = x.new_zeros(batch, self.num_heads, self.head_dim, self.state_size)
        outputs = []
        for t in range(seq_len):
            write = (dt[:, t, :, None] * values[:, t])[..., None] * input_matrix[:, t, :, None, :]
            state = decay[:, t, :, None, None] * state + write
            outputs.append((state @ output_matrix[:, t, :, :, None]).squeeze(-1))
        y = torch.stack(outputs, dim=1) + self.D[:, None] * values                   # (b, s, h, p)
        y = self.norm(y.reshape(batch, seq_len, self.inner) * F.silu(gate))
        return self.out_proj(y)
