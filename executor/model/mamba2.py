"""A Mamba-2 mixer (Dao & Gu 2024): input projection, short causal conv, selective scan, gated norm.

The scan runs as a plain recurrence over time, h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t^T and
y_t = C_t h_t + D x_t, which equals the SSD chunked algorithm exactly and is fast enough at CPU scale.

Under tensor parallelism (``shard``) it is split by heads and groups, as Megatron-Core's ``MambaMixer``: every head's
scan is independent, so only the gated norm over the whole inner width (its sum of squares) and the output
projection (row-parallel) need the group. Under context parallelism (``use_positions``) the conv and the scan run on
every token of the CP rank's share of the heads, as Megatron-Core's ``MambaContextParallel`` runs them
(``executor.model.context_parallel.sequence_to_heads``): the values, B, C and dt go to the heads' ranks, the scan's
output comes back; the gate stays with its tokens, and the norm and projections are token-local. A CP group larger
than the groups of B and C repeats each group over consecutive ranks.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from executor.model.context_parallel import head_share, heads_to_sequence, sequence_to_heads
from executor.model.linear import Linear
from executor.model.init import fill_, normal_, uniform_
from executor.model.norm import RMSNorm
from executor.model.tensor_parallel import SequenceGroup, gather_sequence, split_parameter
from planner.spec.model import Mamba2Mixer


class Mamba2(nn.Module):
    tensor_parallel = None
    layout = None   # the sequence layout under context parallelism (``use_positions``)

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

    def use_positions(self, layout) -> None:
        """Under context parallelism: scan the whole sequence on this CP rank's share of the heads (module doc)."""
        if layout.cp is not None:
            self.layout = layout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = gather_sequence(x, self.tensor_parallel)
        batch, tokens, _ = x.shape
        gate, conv_input, dt = torch.split(
            self.in_proj(x), [self.inner, self.conv.in_channels, self.num_heads], dim=-1)
        cp = self.layout.cp if self.layout is not None else None
        heads, groups, inner, repeat = self.num_heads, self.n_groups, self.inner, 1
        group_width = self.n_groups * self.state_size
        if cp is not None:
            # Megatron-Core's pre_conv_ssm: B and C repeated group by group where the groups are fewer than the ranks
            repeat = max(1, cp.size // self.n_groups)
            values, input_matrix, output_matrix = torch.split(conv_input, [inner, group_width, group_width], dim=-1)
            input_matrix, output_matrix = (matrix.view(batch, tokens, self.n_groups, self.state_size)
                                           .repeat_interleave(repeat, dim=2).flatten(2)
                                           for matrix in (input_matrix, output_matrix))
            blocks = [inner, group_width * repeat, group_width * repeat, heads]
            conv_input, dt = torch.split(
                sequence_to_heads(torch.cat([values, input_matrix, output_matrix, dt], dim=-1), self.layout, blocks),
                [(inner + 2 * group_width * repeat) // cp.size, heads // cp.size], dim=-1)
            heads, groups, inner = heads // cp.size, self.n_groups * repeat // cp.size, inner // cp.size
        seq_len = conv_input.shape[1]
        conv_blocks, repeats = [self.inner, group_width, group_width], [1, repeat, repeat]
        weight = head_share(self.conv.weight, cp, conv_blocks, repeats)
        bias = head_share(self.conv.bias, cp, conv_blocks, repeats)
        # Causal: the conv pads both sides; keeping the first seq_len outputs drops the look-ahead.
        conv_output = F.silu(F.conv1d(conv_input.transpose(1, 2), weight, bias, padding=self.conv.padding,
                                      groups=weight.shape[0])[..., :seq_len].transpose(1, 2))
        values, input_matrix, output_matrix = torch.split(
            conv_output, [inner, groups * self.state_size, groups * self.state_size], dim=-1)
        values = values.view(batch, seq_len, heads, self.head_dim)
        input_matrix = input_matrix.view(batch, seq_len, groups, self.state_size) \
            .repeat_interleave(heads // groups, dim=2)                                # (b, s, h, n)
        output_matrix = output_matrix.view(batch, seq_len, groups, self.state_size) \
            .repeat_interleave(heads // groups, dim=2)
        dt = F.softplus(dt + head_share(self.dt_bias, cp))                             # (b, s, h)
        decay = torch.exp(dt * -torch.exp(head_share(self.A_log, cp)))                 # (b, s, h)
        state = x.new_zeros(batch, heads, self.head_dim, self.state_size)
        outputs = []
        for t in range(seq_len):
            write = (dt[:, t, :, None] * values[:, t])[..., None] * input_matrix[:, t, :, None, :]
            state = decay[:, t, :, None, None] * state + write
            outputs.append((state @ output_matrix[:, t, :, :, None]).squeeze(-1))
        y = torch.stack(outputs, dim=1) + head_share(self.D, cp)[:, None] * values   # (b, s, h, p)
        y = y.reshape(batch, seq_len, inner)
        if cp is not None:
            y = heads_to_sequence(y, self.layout, [self.inner])                        # Megatron's post_conv_ssm
        y = self.norm(y * F.silu(gate))
        return self.out_proj(y)
