"""The model-state layer of ``planner.memory`` against Megatron-LM's own formula, computed here by hand.

Megatron's ``megatron/training/theoretical_memory_usage.py``: ``num_bytes_per_parameter = 18`` without the
distributed optimizer, ``6 + 12 / data_parallel_size`` with it. GPT-3 175B as trained in Narayanan et al. 2021
(Table 1): 174.6 B parameters, TP 8 x PP 16 on 1536 GPUs, so DP 12 and 174.6e9 / 128 parameters per GPU.
"""

import pytest

from planner.memory import MIXED_PRECISION_ADAM, model_state, single_dtype_state

GPT3_PARAMETERS = 174.6e9
TP, PP, GPUS = 8, 16, 1536
DP = GPUS // (TP * PP)
PER_GPU = GPT3_PARAMETERS / (TP * PP)


def test_gpt3_175b_without_the_distributed_optimizer_is_18_bytes_per_parameter():
    state = model_state(PER_GPU)
    assert state.total == pytest.approx(PER_GPU * 18)
    assert state.total / 2 ** 30 == pytest.approx(22.87, abs=0.01)   # 1.364e9 x 18 B


def test_gpt3_175b_with_the_distributed_optimizer_is_6_plus_12_over_dp_bytes_per_parameter():
    state = model_state(PER_GPU, optimizer_parameters=PER_GPU / DP)
    assert DP == 12
    assert state.total == pytest.approx(PER_GPU * (6 + 12 / DP))
    assert state.weights == pytest.approx(2 * PER_GPU) and state.gradients == pytest.approx(4 * PER_GPU)
    assert state.total / 2 ** 30 == pytest.approx(8.89, abs=0.01)   # 1.364e9 x 7 B


def test_a_single_dtype_run_keeps_weights_gradients_and_adams_moments_in_its_dtype():
    assert model_state(1000, single_dtype_state(4, adam=True)).total == 1000 * 4 * 4
    assert model_state(1000, single_dtype_state(2, adam=False)).total == 1000 * 2 * 2
    assert MIXED_PRECISION_ADAM.total == 18
