"""The executor trains exactly like a single process: after pipelined steps, every parameter of every
layer equals a one-process full-batch reference trained on the same data, for many plan shapes."""

from __future__ import annotations

import pytest
import torch

from executor.running.launch import run_plan
from executor.running.reference import initial_state, reference_training
from executor_plans import every_kind_spec, gpipe, list_schedule, modern_kinds_spec, one_f_one_b

SEED = 3
LR = 0.5


def run_and_compare(tmp_path, plan, spec, *, steps=1, optimizer="sgd", lr=LR, dtype="fp64", rtol=1e-6, atol=1e-10,
                    lookahead="causal"):
    checkpoint = tmp_path / "layers"
    result = run_plan(plan, spec, seed=SEED, steps=steps, optimizer=optimizer, lr=lr, dtype=dtype,
                      checkpoint_dir=str(checkpoint), timeout_s=240, lookahead=lookahead)
    torch_dtype = torch.float64 if dtype == "fp64" else torch.float32
    expected, expected_losses, expected_balancing = reference_training(
        spec, num_microbatches=plan.num_microbatches, steps=steps, seed=SEED, lr=lr, optimizer=optimizer,
        dtype=torch_dtype)
    before = initial_state(spec, seed=SEED, dtype=torch_dtype)
    assert result.losses == pytest.approx(expected_losses, rel=rtol * 10)
    assert result.balancing_losses == pytest.approx(expected_balancing, rel=rtol * 10)
    compared = 0
    for layer, reference in expected.items():
        pipelined = torch.load(checkpoint / f"layer{layer:04d}.pt")
        assert pipelined.keys() == reference.keys(), f"layer {layer} parameter names differ"
        for name, value in reference.items():
            # Compare the update, not the weights: a wrong gradient must not hide behind the initial values.
            got, want = pipelined[name] - before[layer][name], value - before[layer][name]
            assert want.abs().max() > 0, f"layer {layer} {name} was not trained by the reference"
            torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=lambda m: f"layer {layer} {name}: {m}")
            compared += 1
    return result, compared


def test_gpipe_two_ranks_matches_single_process(tmp_path):
    spec = every_kind_spec()
    plan = gpipe([[0, 1, 2, 3], [4, 5, 6, 7]], [0, 1], num_microbatches=3)
    _, compared = run_and_compare(tmp_path, plan, spec)
    assert compared > 40


# When receives are posted: causally (the default), all at the step's start, one compute ahead, just before the wait.
@pytest.mark.parametrize("lookahead", ["causal", "step", 1, 0])
def test_1f1b_three_ranks_uneven_stages_matches_single_process(tmp_path, lookahead):
    spec = every_kind_spec()
    plan = one_f_one_b([[0, 1], [2, 3, 4, 5], [6, 7]], num_microbatches=4)
    run_and_compare(tmp_path, plan, spec, lookahead=lookahead)


def test_interleaved_two_chunks_matches_single_process(tmp_path):
    spec = every_kind_spec()
    plan = list_schedule([[0, 1], [2, 3], [4, 5], [6, 7]], [0, 1, 0, 1], num_microbatches=4,
                         strategy="interleaved-1f1b")
    run_and_compare(tmp_path, plan, spec)


def test_zero_bubble_split_backward_matches_single_process(tmp_path):
    spec = every_kind_spec()
    plan = list_schedule([[0, 1, 2], [3, 4], [5, 6, 7]], [0, 1, 2], num_microbatches=4, split_backward=True,
                         strategy="zb-h1")
    assert any(a.type == "W" for a in plan.actions[0])
    run_and_compare(tmp_path, plan, spec)


def test_v_shape_split_backward_with_adamw_over_two_steps_matches(tmp_path):
    spec = every_kind_spec()
    plan = list_schedule([[0, 1], [2, 3], [4, 5], [6, 7]], [0, 1, 1, 0], num_microbatches=3, split_backward=True,
                         strategy="zb-v")
    run_and_compare(tmp_path, plan, spec, steps=2, optimizer="adamw", lr=1e-2)


def test_non_cyclic_placement_with_tied_embeddings_across_ranks_matches(tmp_path):
    spec = every_kind_spec(tie_embeddings=True)
    # Embedding on device 2, head on device 0: their shared table's gradient is all-reduced across ranks.
    plan = list_schedule([[0], [1, 2, 3], [4], [5, 6], [7]], [2, 1, 1, 2, 0], num_microbatches=2,
                         strategy="custom")
    run_and_compare(tmp_path, plan, spec)


def test_float32_run_is_close_to_float64_reference_semantics(tmp_path):
    spec = every_kind_spec()
    plan = one_f_one_b([[0, 1, 2, 3], [4, 5, 6, 7]], num_microbatches=2)
    run_and_compare(tmp_path, plan, spec, dtype="fp32", rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("schedule", ["interleaved-1f1b", "zb-h1", "zb-v"])
def test_planner_baseline_plans_train_exactly(tmp_path, schedule):
    from planner.baselines import build_baseline
    from planner.cluster import load_cluster_preset
    from planner.cost import analytic_profile

    spec = every_kind_spec()
    cluster = load_cluster_preset("cpu-host")
    plan = build_baseline(schedule, analytic_profile(spec, cluster), 2, 4, cluster=cluster)
    run_and_compare(tmp_path, plan, spec)


def test_modern_layer_kinds_two_ranks_match_single_process(tmp_path):
    spec = modern_kinds_spec()
    plan = gpipe([[0, 1, 2], [3, 4, 5, 6]], [0, 1], num_microbatches=3)
    _, compared = run_and_compare(tmp_path, plan, spec)
    assert compared > 40


def test_modern_layer_kinds_split_backward_with_tied_positions_table_matches(tmp_path):
    spec = modern_kinds_spec(tie_embeddings=True)
    plan = list_schedule([[0, 1], [2, 3], [4, 5, 6]], [0, 1, 2], num_microbatches=3, split_backward=True,
                         strategy="zb-h1")
    run_and_compare(tmp_path, plan, spec, steps=2, optimizer="adamw", lr=1e-2)
