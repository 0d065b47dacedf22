"""The vocabulary ends of the model: the embedding lookup and the head (final norm, projection, loss).

The embedding is a gather: no FLOPs, ``tokens·hidden`` rows read and written, so it is memory-bound and
tiny; it has no input gradient (its input is token ids) and its weight gradient scatter-adds the incoming
rows into the fp32 gradient of the table. The head is the final norm (RMSNorm or LayerNorm), the ``hidden x vocab`` projection
(``2·T·h·V`` FLOPs per pass, which with a 256k vocabulary outweighs a whole decoder layer) and softmax
cross-entropy over the logits in fp32, which keeps the probabilities (``4·T·V`` bytes) for the backward.
"""

from __future__ import annotations

from planner.cost.primitives import FP32_BYTES, GRAD_ACCUMULATE_BYTES, linear, norm
from planner.cost.work import Cost, Kernel, saved

TOKEN_ID_BYTES = 8                   # int64 token ids
CROSS_ENTROPY_FLOPS_PER_LOGIT = 5    # max, exp, sum, log and the target pick
LOSS_BYTES = 4                       # the head's output is one fp32 loss


def embedding_cost(*, vocab: int, hidden: int, tokens: int, dtype_bytes: int, positions: int | None = None) -> Cost:
    """The token lookup; with learned absolute ``positions`` (GPT-2) a second table's rows are gathered and
    added (Radford et al. 2019, as GPT-1: ``h0 = U·We + Wp``)."""
    rows = tokens * hidden
    cost = Cost(forward=(Kernel(0.0, dtype_bytes * 2 * rows + TOKEN_ID_BYTES * tokens),),
                backward_weight=(Kernel(rows, dtype_bytes * rows + GRAD_ACCUMULATE_BYTES * rows
                                        + TOKEN_ID_BYTES * tokens),),
                activation_bytes=TOKEN_ID_BYTES * tokens,
                params=vocab * hidden, active_params=vocab * hidden)
    if positions is None:
        return cost
    table = positions * hidden
    return cost + Cost(forward=(Kernel(rows, dtype_bytes * 3 * rows),),
                       backward_weight=(Kernel(rows, dtype_bytes * rows + GRAD_ACCUMULATE_BYTES * rows),),
                       params=table, active_params=table)


def cross_entropy(tokens: int, vocab: int, dtype_bytes: int) -> Cost:
    logits = tokens * vocab
    return Cost(forward=(Kernel(CROSS_ENTROPY_FLOPS_PER_LOGIT * logits, (dtype_bytes + FP32_BYTES) * logits),),
                backward_input=(Kernel(2.0 * logits, (FP32_BYTES + dtype_bytes) * logits),),
                activation_bytes=FP32_BYTES * logits)


def head_cost(*, vocab: int, hidden: int, tokens: int, dtype_bytes: int, norm_kind: str = "rmsnorm") -> Cost:
    return (norm(norm_kind, tokens, hidden, dtype_bytes) + saved(dtype_bytes * tokens * hidden)
            + linear(tokens, hidden, vocab, dtype_bytes, fp8=False) + cross_entropy(tokens, vocab, dtype_bytes))
