"""Synthetic training data, identical on every rank: drawn on the CPU from (seed, step) only.

A model with an embedding reads token ids and, with a head, predicts the next token; a model without them
reads and regresses hidden states, so any ModelSpec fragment can be trained.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from planner.spec.model import ModelSpec


@dataclass
class Batch:
    inputs: torch.Tensor     # (m * b, s) token ids, or (m * b, s, hidden) hidden states
    targets: torch.Tensor    # (m * b, s) next-token ids, or (m * b, s, hidden) regression targets
    microbatch_size: int

    def microbatch(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        rows = slice(index * self.microbatch_size, (index + 1) * self.microbatch_size)
        return self.inputs[rows], self.targets[rows]


def synthetic_batch(spec: ModelSpec, num_microbatches: int, *, seed: int, step: int,
                    dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> Batch:
    generator = torch.Generator(device="cpu").manual_seed(seed * 7_919 + step)
    rows = num_microbatches * spec.micro_batch_size
    if spec.layers[0].kind == "embedding":
        tokens = torch.randint(0, spec.vocab_size, (rows, spec.seq_len + 1), generator=generator)
        inputs = tokens[:, :-1]
        next_tokens = tokens[:, 1:]
    else:
        inputs = torch.randn(rows, spec.seq_len, spec.hidden_size, generator=generator).to(dtype)
        next_tokens = None
    if spec.layers[-1].kind == "head":
        targets = next_tokens if next_tokens is not None else torch.randint(
            0, spec.vocab_size, (rows, spec.seq_len), generator=generator)
    else:
        targets = torch.randn(rows, spec.seq_len, spec.hidden_size, generator=generator).to(dtype)
    return Batch(inputs.contiguous().to(device), targets.contiguous().to(device), spec.micro_batch_size)
