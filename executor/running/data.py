"""Synthetic training data, identical on every rank: drawn on the CPU from (seed, step, micro-batch) only.

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
    first_microbatch: int = 0   # the step's index of the batch's first micro-batch

    def microbatch(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Micro-batch ``index`` of the step (``first_microbatch`` onwards)."""
        first = (index - self.first_microbatch) * self.microbatch_size
        rows = slice(first, first + self.microbatch_size)
        return self.inputs[rows], self.targets[rows]


def synthetic_batch(spec: ModelSpec, num_microbatches: int, *, seed: int, step: int,
                    dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
                    first_microbatch: int = 0) -> Batch:
    """Micro-batches ``first_microbatch`` .. ``first_microbatch + num_microbatches - 1`` of step ``step``. Each is
    drawn from a generator of its own (seed, step, index), so a data-parallel replica draws only its own and is
    given the values the one-process reference draws for them."""
    parts = [_microbatch(spec, seed=seed, step=step, index=index, dtype=dtype)
             for index in range(first_microbatch, first_microbatch + num_microbatches)]
    inputs = torch.cat([part[0] for part in parts]).contiguous().to(device)
    targets = torch.cat([part[1] for part in parts]).contiguous().to(device)
    return Batch(inputs, targets, spec.micro_batch_size, first_microbatch)


def _microbatch(spec: ModelSpec, *, seed: int, step: int, index: int,
                dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator(device="cpu").manual_seed((seed * 7_919 + step) * 1_000_003 + index)
    rows = spec.micro_batch_size
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
    return inputs, targets
