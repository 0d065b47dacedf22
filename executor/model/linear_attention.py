"""Linear attention mixers: gated delta-net (Qwen3-Next) and lightning attention (MiniMax-01).

Both keep a (head_dim x head_dim) state per head instead of a key/value cache. At the small scale the
executor runs on, the gated delta rule is evaluated step by step (the recurrence itself, no chunking) and
lightning attention in its parallel form with an explicit decay mask; both are exact, just not the
chunked kernels a production run would use. Gated delta-net first runs q, k and v through a short causal
depthwise convolution without bias and a SiLU, as Qwen3-Next does (``conv_kernel`` taps), and ends in
a per-head gated norm; lightning attention ends, as MiniMax-01 does, in a norm over all heads and a sigmoid
output gate.

Under tensor parallelism (``shard``) both are split by heads, as attention is: every head's recurrence is
independent, so only lightning's norm over all heads (its sum of squares) and the output projection (row-parallel)
need the group. Under context parallelism (``use_positions``) the conv and the recurrence run on every token of the
CP rank's share of the heads, as Megatron-Core runs gated delta-net (``executor.model.context_parallel``): q, k, v
(and gated delta's beta and decay inputs) go to the heads' ranks, the output comes back before the output gate; the
projections are token-local.
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
from planner.spec.model import LinearAttentionMixer


class LinearAttention(nn.Module):
    tensor_parallel = None
    first_head = 0   # this rank's first head under TP (lightning's decay slopes are per global head)
    layout = None    # the sequence layout under context parallelism (``use_positions``)

    def __init__(self, hidden_size: int, mixer: LinearAttentionMixer):
        super().__init__()
        self.variant = mixer.variant
        self.all_heads = mixer.num_heads
        self.num_heads = mixer.num_heads
        self.head_dim = mixer.head_dim
        # Queries and keys may have fewer heads than values (Qwen3-Next); they are broadcast over them.
        self.num_key_heads = getattr(mixer, "key_heads", mixer.num_heads)
        inner = self.num_heads * self.head_dim
        self.q_proj = Linear(hidden_size, self.num_key_heads * self.head_dim)
        self.k_proj = Linear(hidden_size, self.num_key_heads * self.head_dim)
        self.v_proj = Linear(hidden_size, inner)
        self.gate_proj = Linear(hidden_size, inner)
        self.o_proj = Linear(inner, hidden_size)
        # Qwen3-Next normalises each head with one shared scale; MiniMax-01 normalises all heads together.
        self.out_norm = RMSNorm(self.head_dim if self.variant == "gated_delta" else inner)
        if self.variant == "gated_delta":
            # Per-token write strength (beta) and decay (alpha = exp(g)), parameterised as in Mamba-2.
            self.beta_proj = Linear(hidden_size, self.num_heads)
            self.decay_proj = Linear(hidden_size, self.num_heads)
            self.A_log = nn.Parameter(torch.empty(self.num_heads))
            self.dt_bias = nn.Parameter(torch.empty(self.num_heads))
            channels = 2 * self.num_key_heads * self.head_dim + inner   # q, k and v
            self.conv = nn.Conv1d(channels, channels, mixer.conv_kernel, groups=channels, bias=False,
                                  padding=mixer.conv_kernel - 1)

    def init_weights(self, generator: torch.Generator) -> None:
        for projection in (self.q_proj, self.k_proj, self.v_proj, self.gate_proj, self.o_proj):
            normal_(projection.weight, generator)
        self.out_norm.init_weights(generator)
        if self.variant == "gated_delta":
            normal_(self.beta_proj.weight, generator)
            normal_(self.decay_proj.weight, generator)
            uniform_(self.A_log, generator, 0.0, math.log(16.0))
            fill_(self.dt_bias, 0.0)
            bound = 1.0 / math.sqrt(self.conv.kernel_size[0])
            uniform_(self.conv.weight, generator, -bound, bound)

    def shard(self, tp: SequenceGroup) -> None:
        """Split by heads: queries and keys by key heads, values, the gate and (gated delta) beta, the decay and
        its parameters by heads, the conv's q, k and v channels likewise; the output projection row-parallel.
        Gated delta's per-head norm stays whole; lightning's norm over all heads is split with them."""
        key_width, width = self.num_key_heads * self.head_dim, self.num_heads * self.head_dim
        for projection in (self.q_proj, self.k_proj, self.v_proj, self.gate_proj):
            split_parameter(projection, "weight", 0, tp)
        split_parameter(self.o_proj, "weight", 1, tp)
        self.o_proj.tensor_parallel = tp
        if self.variant == "gated_delta":
            for projection in (self.beta_proj, self.decay_proj):
                split_parameter(projection, "weight", 0, tp)
            for name in ("A_log", "dt_bias"):
                split_parameter(self, name, 0, tp)
            split_parameter(self.conv, "weight", 0, tp, blocks=[key_width, key_width, width])
            channels = (2 * key_width + width) // tp.size
            self.conv.in_channels = self.conv.out_channels = self.conv.groups = channels
        else:
            split_parameter(self.out_norm, "weight", 0, tp)
            self.out_norm.features_split_over = tp
        self.first_head = tp.rank * self.num_heads // tp.size
        self.num_heads //= tp.size
        self.num_key_heads //= tp.size
        self.tensor_parallel = tp

    def use_positions(self, layout) -> None:
        """Under context parallelism: run the whole sequence on this CP rank's share of the heads (module doc)."""
        if layout.cp is not None:
            self.layout = layout

    def _heads(self, x: torch.Tensor, heads: int, value_heads: int) -> torch.Tensor:
        batch, seq_len, _ = x.shape
        x = x.view(batch, seq_len, heads, self.head_dim).transpose(1, 2)
        return x.repeat_interleave(value_heads // heads, dim=1) if heads != value_heads else x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = gather_sequence(x, self.tensor_parallel)
        gated = self.variant == "gated_delta"
        parts = [self.q_proj(x), self.k_proj(x), self.v_proj(x)]
        if gated:
            parts += [self.beta_proj(x), self.decay_proj(x)]   # write strengths and decays, one a head
        cp = self.layout.cp if self.layout is not None else None
        key_heads, heads, first_head = self.num_key_heads, self.num_heads, self.first_head
        if cp is not None:
            blocks = [part.shape[-1] for part in parts]
            parts = torch.split(sequence_to_heads(torch.cat(parts, dim=-1), self.layout, blocks),
                                [block // cp.size for block in blocks], dim=-1)
            key_heads, heads = key_heads // cp.size, heads // cp.size
            first_head += cp.rank * heads
        query, key, value = parts[:3]
        if gated:
            query, key, value = self._short_conv(query, key, value, cp)
        batch, seq_len, _ = query.shape
        query = self._heads(query, key_heads, heads)
        key = self._heads(key, key_heads, heads)
        value = self._heads(value, heads, heads)
        if gated:
            out = self._gated_delta(query, key, value, *parts[3:], cp)
        else:
            out = self._lightning(query, key, value, first_head)
        out = out.transpose(1, 2)                                                      # (b, s, h, d)
        if gated:
            # Qwen3-Next's gated norm: norm(o) * silu(z), per head.
            out = self.out_norm(out).reshape(batch, seq_len, heads * self.head_dim)
        else:
            out = out.reshape(batch, seq_len, heads * self.head_dim)
        if cp is not None:
            out = heads_to_sequence(out, self.layout, [self.num_heads * self.head_dim])
        if gated:
            return self.o_proj(out * F.silu(self.gate_proj(x)))
        # MiniMax-01: norm over all heads, then a sigmoid output gate.
        return self.o_proj(self.out_norm(out) * torch.sigmoid(self.gate_proj(x)))

    def _short_conv(self, query, key, value, cp=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """silu(causal depthwise conv) over the concatenated q, k, v channels, split back; (b, s, width) each."""
        seq_len = query.shape[1]
        mixed = torch.cat((query, key, value), dim=-1).transpose(1, 2)
        key_width = self.num_key_heads * self.head_dim
        weight = head_share(self.conv.weight, cp, [key_width, key_width, self.num_heads * self.head_dim])
        # The conv pads both sides; keeping the first seq_len outputs drops the look-ahead.
        mixed = F.silu(F.conv1d(mixed, weight, padding=self.conv.padding, groups=weight.shape[0])[..., :seq_len])
        return tuple(torch.split(mixed.transpose(1, 2), [query.shape[-1], key.shape[-1], value.shape[-1]], dim=-1))

    def _gated_delta(self, query, key, value, beta_logits, decay_logits, cp=None) -> torch.Tensor:
        """S_t = a_t S_{t-1} + b_t (v_t - a_t S_{t-1} k_t) k_t^T,  o_t = S_t q_t  (Yang et al. 2024)."""
        query = F.normalize(query, dim=-1) / math.sqrt(self.head_dim)
        key = F.normalize(key, dim=-1)
        beta = torch.sigmoid(beta_logits).transpose(1, 2)                             # (b, h, s)
        log_decay = -torch.exp(head_share(self.A_log, cp))[:, None] * F.softplus(
            decay_logits.transpose(1, 2) + head_share(self.dt_bias, cp)[:, None])     # (b, h, s)
        decay = torch.exp(log_decay)
        batch, heads, seq_len, dim = query.shape
        state = query.new_zeros(batch, heads, dim, dim)                                # (b, h, d_v, d_k)
        outputs = []
        for t in range(seq_len):
            a_t = decay[:, :, t, None, None]
            k_t, v_t = key[:, :, t], value[:, :, t]
            predicted = (state @ k_t.unsqueeze(-1)).squeeze(-1)
            correction = beta[:, :, t, None] * (v_t - decay[:, :, t, None] * predicted)
            state = a_t * state + correction.unsqueeze(-1) * k_t.unsqueeze(-2)
            outputs.append((state @ query[:, :, t].unsqueeze(-1)).squeeze(-1))
        return torch.stack(outputs, dim=2)

    def _lightning(self, query, key, value, first_head: int | None = None) -> torch.Tensor:
        """o_i = sum_{j<=i} lambda_h^(i-j) (q_i . k_j) v_j with ALiBi-style per-head decay slopes (``first_head``:
        the global index of the first head here, this TP rank's by default)."""
        first_head = self.first_head if first_head is None else first_head
        query, key, value = F.silu(query), F.silu(key), F.silu(value)
        heads, seq_len = query.shape[1], query.shape[2]
        slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / self.all_heads)
                               for h in range(first_head, first_head + heads)],
                              device=query.device, dtype=query.dtype)
        positions = torch.arange(seq_len, device=query.device)
        distance = (positions[:, None] - positions[None, :]).to(query.dtype)
        decay = torch.where(distance >= 0, torch.exp(-slopes[:, None, None] * distance.clamp(min=0)),
                            torch.zeros((), dtype=query.dtype, device=query.device))
        scores = (query @ key.transpose(-1, -2)) * decay / math.sqrt(self.head_dim)
        return scores @ value
