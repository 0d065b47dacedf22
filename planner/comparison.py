"""Comparing two training steps (predicted or observed) by what a user buys: tokens per second, per GPU.

An iteration time compares two plans only when they train the same tokens on the same GPUs. Halving the
micro-batches halves the iteration and the tokens with it (and usually loses throughput to a larger bubble), doubling
them does the reverse, and a plan on more GPUs is faster but not cheaper. So a comparison says when the global batch
(tokens a step) or the GPU count differs, and judges "faster" by tokens per second per GPU, which equals tokens per
second when the GPUs are the same. Used by the plan editor, a plan's difference from its parent, and the compare page.
"""

from __future__ import annotations

SAME = 1e-9   # relative: two token counts or throughputs closer than this are equal


def step_tokens(metrics: dict) -> float | None:
    """Tokens one step trains, from its throughput and its time (None where either is unknown)."""
    tokens_per_s, iteration_ms = metrics.get("tokens_per_s"), metrics.get("iteration_ms")
    if not tokens_per_s or not iteration_ms:
        return None
    return tokens_per_s * iteration_ms / 1e3


def plan_gpus(plan_doc: dict) -> int:
    """GPUs a plan document uses: its pipeline devices, times TP, CP and DP for a hybrid (v2) plan."""
    parallel = plan_doc.get("parallel")
    if not parallel:
        return plan_doc["num_devices"]
    return parallel["tp"] * parallel["cp"] * parallel["pp"] * parallel["dp"]


def _differs(before: float | None, after: float | None) -> bool:
    return before is not None and after is not None and abs(after - before) > SAME * max(abs(before), abs(after))


def throughput_difference(before: dict, after: dict) -> dict:
    """``after`` against ``before``, each ``{"iteration_ms", "tokens_per_s", "gpus"}``: the throughput change (total
    and per GPU), whether the global batch or the GPU count changed, whether ``after`` is faster per token (None when
    a throughput is unknown) and, where iteration times do not compare, a sentence saying why."""
    tokens_before, tokens_after = step_tokens(before), step_tokens(after)
    rate_before, rate_after = before.get("tokens_per_s"), after.get("tokens_per_s")
    known = bool(rate_before) and bool(rate_after)
    per_gpu_ratio = (rate_after / after["gpus"]) / (rate_before / before["gpus"]) if known else None
    batch_changed, gpus_changed = _differs(tokens_before, tokens_after), before["gpus"] != after["gpus"]
    notes = []
    if batch_changed:
        notes.append(f"the global batch changed ({tokens_before:,.0f} → {tokens_after:,.0f} tokens a step), so the "
                     f"iteration time does not compare: tokens/s does")
    if gpus_changed:
        notes.append(f"the GPU count changed ({before['gpus']} → {after['gpus']}): tokens/s per GPU compares")
    return {"tokens_per_s": rate_after - rate_before if known else None,
            "tokens_per_s_ratio": rate_after / rate_before if known else None,
            "per_gpu_ratio": per_gpu_ratio, "batch_changed": batch_changed, "gpus_changed": gpus_changed,
            "faster": None if per_gpu_ratio is None else per_gpu_ratio > 1 + SAME,
            "slower": None if per_gpu_ratio is None else per_gpu_ratio < 1 - SAME,
            "note": "; ".join(notes)}
