"""The vocabulary ends of the model: the embedding lookup and the head (final norm, projection, loss).

The embedding is a gather: no FLOPs, ``tokens·hidden`` rows read and written, so it is memory-bound and
tiny; it has no input gradient (its input is token ids) and its weight gradient scatter-adds the incoming
rows into the fp32 gradient of the table. The head is the final norm (RMSNorm or LayerNorm), the ``hidden x vocab`` projection
(``2·T·h·V`` FLOPs per pass, which with a 256k vocabulary outweighs a whole decoder layer) and softmax
cross-entropy over the logits in fp32, which keeps the probabilities (``4·T·V`` bytes) for the backward; the
frameworks run it as a chain of PyTorch ops, each a pass over the logits (``cross_entropy``), so with a large
vocabulary it takes a tenth of a small model's step.
"""

from __future__ import annotations

from planner.cost.primitives import FP32_BYTES, GRAD_ACCUMULATE_BYTES, elementwise, linear, norm
from planner.cost.work import Cost, Kernel, saved

TOKEN_ID_BYTES = 8                   # int64 token ids
CROSS_ENTROPY_FLOPS_PER_LOGIT = 5    # max, exp, sum, log and the target pick
LOSS_BYTES = 4                       # the head's output is one fp32 loss
# Megatron's cross-entropy (``cross_entropy``) casts the logits to fp32 (read in the model's dtype, written in fp32),
# then takes the row max (read), subtracts it in place (read, write), exponentiates in place (read, write), sums
# (read) and divides by the sum in place (read, write): eight fp32 accesses after the cast. Its backward subtracts
# one at each target (a gather) and scales the softmax by the loss's gradient in place (read, write), and the
# cast's backward returns the gradient in the model's dtype (read fp32, write): 38 bytes a logit forward, 14
# backward in BF16. torchtitan's ``F.cross_entropy(pred.flatten(0, 1).float(), labels)`` (not compiled in its
# December 2024 benchmarks: "compiling loss function causes CUDA errors") moves about as much: the cast, PyTorch's
# log-softmax (max, sum and output passes: three reads, one write), and in the backward the NLL's zero-filled
# gradient, the log-softmax backward (two passes) and the cast back: about 48 bytes a logit against 52, so one count
# serves both.
CROSS_ENTROPY_FORWARD_FP32_ACCESSES = 8
CROSS_ENTROPY_BACKWARD_FP32_ACCESSES = 3
# What the loss's backward allocates per logit beside the softmax it kept, at its peak, without TP and with the logits
# split over TP, by how the loss is computed (``CostOptions.cross_entropy``):
# - "fused": Megatron's ``_VocabParallelCrossEntropy.backward`` writes the gradient into the kept softmax in place, and
#   the cast's backward returns it in the model's dtype (2 bytes).
# - "eager": two fp32 logit-sized gradients (8 bytes). PyTorch's ``F.cross_entropy`` on fp32 logits a rank holds whole
#   is ``log_softmax`` and ``nll_loss``: nll's backward writes a zero-filled fp32 gradient and log-softmax's backward a
#   second one beside it, before the cast back frees both. This project's executor runs that without TP, and under TP
#   its own vocabulary-parallel function, whose backward clones the kept softmax and scales the clone
#   (``executor/model/tensor_parallel.py``).
# - "pytorch": PyTorch's loss as torchtitan runs it: ``F.cross_entropy`` as "eager" without TP; with TP > 1 torchtitan
#   keeps the logits split over the vocabulary and computes the loss under ``loss_parallel()`` (its default,
#   ``ParallelDims.loss_parallel_enabled``). That runs ``torch.distributed.tensor.parallel.loss``'s decomposed
#   log-softmax, whose backward (``_nll_loss_and_log_softmax_backward``) is ``(zeros_like(x) + exp(x)) *
#   grad_output``: the zero-filled gradient, ``exp(x)`` and their sum live at once, three fp32 buffers (12 bytes).
#   Its forward peaks lower: the fp32 logits, the shifted logits and their ``exp`` beside the BF16 logits (14).
LOSS_BACKWARD_BYTES = {"fused": (2, 2), "eager": (2 * FP32_BYTES, 2 * FP32_BYTES),
                       "pytorch": (2 * FP32_BYTES, 3 * FP32_BYTES)}


def loss_backward_bytes(cross_entropy: str, tp: int) -> int:
    """Bytes per logit the loss's backward allocates beside the kept softmax (``LOSS_BACKWARD_BYTES``), for the loss
    ``cross_entropy`` with the logits split over ``tp`` ranks."""
    return LOSS_BACKWARD_BYTES[cross_entropy][tp > 1]


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
    """Softmax cross-entropy as Megatron's ``vocab_parallel_cross_entropy`` runs it (``megatron/core/
    tensor_parallel/cross_entropy.py``; Megatron-LM's 2021 code the same): one PyTorch op per step, each a pass
    over the logits in device memory (``CROSS_ENTROPY_FORWARD_FP32_ACCESSES``), the softmax kept for the backward."""
    logits = tokens * vocab
    forward = (dtype_bytes + FP32_BYTES * (1 + CROSS_ENTROPY_FORWARD_FP32_ACCESSES)) * logits
    backward = (FP32_BYTES * CROSS_ENTROPY_BACKWARD_FP32_ACCESSES + dtype_bytes) * logits
    return Cost(forward=(Kernel(CROSS_ENTROPY_FLOPS_PER_LOGIT * logits, forward),),
                backward_input=(Kernel(2.0 * logits, backward),),
                activation_bytes=FP32_BYTES * logits)


SOFTCAP_FLOPS_PER_LOGIT = 3   # z / c, tanh, times c


def head_cost(*, vocab: int, hidden: int, tokens: int, dtype_bytes: int, norm_kind: str = "rmsnorm",
              softcap: bool = False) -> Cost:
    """The final norm, the vocabulary projection and the cross-entropy; with ``softcap`` (Gemma 2's final logit
    soft-capping, ``ModelSpec.logits_softcap``) a pointwise pass over the logits between the last two, its output kept
    for its backward. (A logits multiplier, Granite's, folds into the projection's epilogue: no pass of its own.)"""
    cost = (norm(norm_kind, tokens, hidden, dtype_bytes) + saved(dtype_bytes * tokens * hidden)
            + linear(tokens, hidden, vocab, dtype_bytes, fp8=False) + cross_entropy(tokens, vocab, dtype_bytes))
    if softcap:
        logits = tokens * vocab
        cost = cost + elementwise(logits, logits, SOFTCAP_FLOPS_PER_LOGIT, dtype_bytes) + saved(dtype_bytes * logits)
    return cost
