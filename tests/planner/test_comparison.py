"""Comparisons judge throughput: tokens per second (per GPU), and say when the batch or the GPUs differ."""

import pytest

from planner.comparison import plan_gpus, step_tokens, throughput_difference


def test_a_faster_step_of_the_same_batch_on_the_same_gpus_is_faster():
    before = {"iteration_ms": 100.0, "tokens_per_s": 40_960.0, "gpus": 8}   # 4,096 tokens a step
    after = {"iteration_ms": 80.0, "tokens_per_s": 51_200.0, "gpus": 8}
    difference = throughput_difference(before, after)
    assert difference["tokens_per_s_ratio"] == pytest.approx(100.0 / 80.0)
    assert (difference["faster"], difference["slower"], difference["batch_changed"], difference["note"]) == \
        (True, False, False, "")


def test_halving_the_batch_shortens_the_step_but_is_slower_per_token_and_says_why():
    # Half the micro-batches: 2,048 tokens in 60 ms (a larger bubble share) against 4,096 in 100 ms.
    before = {"iteration_ms": 100.0, "tokens_per_s": 40_960.0, "gpus": 8}
    after = {"iteration_ms": 60.0, "tokens_per_s": 2_048 / 0.060, "gpus": 8}
    difference = throughput_difference(before, after)
    assert after["iteration_ms"] < before["iteration_ms"] and difference["slower"] is True
    assert difference["batch_changed"] and "4,096 → 2,048 tokens a step" in difference["note"]


def test_more_gpus_are_judged_per_gpu():
    before = {"iteration_ms": 100.0, "tokens_per_s": 40_960.0, "gpus": 8}
    after = {"iteration_ms": 60.0, "tokens_per_s": 4_096 / 0.060, "gpus": 16}   # 1.67x the tokens/s on 2x the GPUs
    difference = throughput_difference(before, after)
    assert difference["tokens_per_s_ratio"] == pytest.approx(100 / 60)
    assert difference["per_gpu_ratio"] == pytest.approx(100 / 60 / 2) and difference["slower"] is True
    assert "the GPU count changed (8 → 16)" in difference["note"]


def test_an_unknown_throughput_judges_nothing():
    difference = throughput_difference({"iteration_ms": 10.0, "tokens_per_s": None, "gpus": 2},
                                       {"iteration_ms": 9.0, "tokens_per_s": 100.0, "gpus": 2})
    assert (difference["faster"], difference["slower"], difference["tokens_per_s_ratio"]) == (None, None, None)
    assert step_tokens({"iteration_ms": 50.0, "tokens_per_s": 2_000.0}) == pytest.approx(100.0)


def test_a_hybrid_plan_counts_every_gpu_of_its_configuration():
    assert plan_gpus({"num_devices": 4, "parallel": {"tp": 2, "cp": 1, "pp": 4, "dp": 8, "ep": 4}}) == 64
    assert plan_gpus({"num_devices": 4}) == 4
