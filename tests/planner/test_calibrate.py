"""Closed loop: observed per-action timings pull the profile toward reality, and re-planning gains from it."""

from dataclasses import replace

import pytest

from planner.baselines import build_baseline
from planner.calibrate import (after_warmup, fit_kernel_overhead, fit_message_overhead, measure_message_overhead,
                               recalibrate, with_message_overhead)
from planner.cluster import Link, load_cluster_preset
from planner.cost import analytic_profile
from planner.errors import SpecError
from planner.search import search_plan
from planner.simulator import simulate
from planner.spec.presets import load_model_preset
from tests.planner.search_profiles import hybrid_profile, small_cluster

DEVICES, MICROBATCHES = 4, 8
# The "real" hardware: the head and the MLPs are slower than the analytic profile says, mixers faster.
SECRET_FACTORS = {"head": 1.8, "mlp": 1.35, "decoder": 0.8, "embedding": 1.0}


def observed_events(plan, real_profile, cluster):
    """What the executor would report: every action's timing, from running the plan on the real costs."""
    return [{"type": "action", "rank": entry["device"], "device": entry["device"], "action": entry["action"],
             "stage": entry["stage"], "kind": entry["type"], "microbatch": entry["microbatch"], "step": 0,
             "start_ms": entry["start_ms"], "end_ms": entry["end_ms"]}
            for entry in simulate(plan, real_profile, cluster).timeline()] + [{"type": "run_finished", "summary": {}}]


def test_replanning_on_the_recalibrated_profile_predicts_reality_better():
    cluster = small_cluster()
    assumed = hybrid_profile()
    real = assumed.scaled([SECRET_FACTORS[layer.kind] for layer in assumed.layers])
    first = search_plan(assumed, DEVICES, MICROBATCHES, cluster=cluster, max_evaluations=80)
    first_error = abs(first.iteration_ms - simulate(first.plan, real, cluster).iteration_ms)

    calibrated = recalibrate(assumed, first.plan, observed_events(first.plan, real, cluster))
    second = search_plan(calibrated, DEVICES, MICROBATCHES, cluster=cluster, max_evaluations=80)
    second_real_ms = simulate(second.plan, real, cluster).iteration_ms
    second_error = abs(second.iteration_ms - second_real_ms)

    assert calibrated.source == "calibrated"
    assert second_error < first_error / 10
    assert second_real_ms <= simulate(first.plan, real, cluster).iteration_ms + 1e-9


def test_each_stage_is_scaled_to_its_observed_time_in_predicted_proportions():
    cluster = small_cluster()
    assumed = hybrid_profile()
    real = assumed.scaled([SECRET_FACTORS[layer.kind] for layer in assumed.layers])
    plan = search_plan(assumed, DEVICES, MICROBATCHES, cluster=cluster, max_evaluations=40).plan
    calibrated = recalibrate(assumed, plan, observed_events(plan, real, cluster))
    for stage in plan.stages:
        for part in ("forward", "backward_input", "backward_weight"):
            observed = sum(getattr(real.layers[index], part) for index in stage.layers)
            fitted = [getattr(calibrated.layers[index], part) for index in stage.layers]
            assumed_parts = [getattr(assumed.layers[index], part) for index in stage.layers]
            assert sum(fitted) == pytest.approx(observed)
            if sum(assumed_parts):
                assert [value / sum(fitted) for value in fitted] == pytest.approx(
                    [value / sum(assumed_parts) for value in assumed_parts])


def test_a_full_backward_scales_both_backward_parts():
    assumed = hybrid_profile()
    from planner.plan import Action, Plan, Stage
    plan = Plan(1, 1, [Stage(tuple(range(assumed.num_layers)), 0)], [[Action(0, "F", 0), Action(0, "B", 0)]])
    forward = sum(layer.forward for layer in assumed.layers)
    backward = sum(layer.backward for layer in assumed.layers)
    events = [{"action": "0F0", "start_ms": 0.0, "end_ms": 2 * forward},
              {"action": "0B0", "start_ms": 2 * forward, "end_ms": 2 * forward + 0.5 * backward}]
    calibrated = recalibrate(assumed, plan, events)
    assert sum(layer.forward for layer in calibrated.layers) == pytest.approx(2 * forward)
    assert sum(layer.backward_input for layer in calibrated.layers) == pytest.approx(
        0.5 * sum(layer.backward_input for layer in assumed.layers))
    assert sum(layer.backward_weight for layer in calibrated.layers) == pytest.approx(
        0.5 * sum(layer.backward_weight for layer in assumed.layers))


@pytest.mark.parametrize("event, field", [
    ({"action": "9F0", "start_ms": 0, "end_ms": 1}, "observed_events[0].action"),
    ({"action": "F0", "start_ms": 0, "end_ms": 1}, "observed_events[0].action"),
    ({"action": "0F0", "start_ms": 2, "end_ms": 1}, "observed_events[0].end_ms"),
    ({"action": "0F0", "start_ms": "0", "end_ms": 1}, "observed_events[0].start_ms"),
])
def test_bad_events_name_the_field(event, field):
    assumed = hybrid_profile()
    plan = search_plan(assumed, 2, 2, max_evaluations=10).plan
    with pytest.raises(SpecError) as error:
        recalibrate(assumed, plan, [event])
    assert error.value.field == field


def test_no_action_events_is_an_error():
    assumed = hybrid_profile()
    plan = search_plan(assumed, 2, 2, max_evaluations=10).plan
    with pytest.raises(SpecError) as error:
        recalibrate(assumed, plan, [{"type": "run_started"}])
    assert error.value.field == "observed_events"


def test_the_fitted_message_overhead_reproduces_the_observed_iteration():
    cluster, profile = small_cluster(), hybrid_profile()
    plan = build_baseline("interleaved-1f1b", profile, DEVICES, MICROBATCHES, cluster=cluster)
    observed = simulate(plan, profile, with_message_overhead(cluster, 300.0)).iteration_ms
    fitted = fit_message_overhead(plan, profile, cluster, observed, tolerance_us=0.01)
    assert fitted == pytest.approx(300.0, abs=0.05)
    # a run no slower than the model without overhead needs none; one slower than any overhead explains is capped
    assert fit_message_overhead(plan, profile, cluster, simulate(plan, profile, cluster).iteration_ms * 0.9) == 0.0
    assert fit_message_overhead(plan, profile, cluster, observed * 100, max_overhead_us=2000.0) == 2000.0
    with pytest.raises(SpecError) as error:
        fit_message_overhead(plan, profile, cluster, 0.0)
    assert error.value.field == "observed_iteration_ms"


def test_the_fitted_overhead_of_one_micro_batch_through_the_pipeline_matches_the_closed_form():
    """One micro-batch crosses p - 1 links forward and back, paying latency + 2 o at each crossing:
    iteration = p (f + b) + 2 (p - 1) (latency + 2 o), so o follows from the observed iteration by hand."""
    profile = hybrid_profile()
    uniform = replace(profile, layers=tuple(replace(layer, forward=1.0, backward_input=1.5, backward_weight=0.5,
                                                    output_bytes=0)
                                            for layer in profile.layers))
    link = Link(bandwidth_gb_s=4.0, latency_us=50.0)
    cluster = replace(small_cluster(), intra_node=link, inter_node=link)
    plan = build_baseline("gpipe", uniform, DEVICES, 1, cluster=cluster)
    compute = sum(layer.forward + layer.backward_input + layer.backward_weight for layer in uniform.layers)
    observed = compute + 7.5
    by_hand_us = ((observed - compute) / (2 * (DEVICES - 1)) - 0.05) / 2 * 1000
    assert fit_message_overhead(plan, uniform, cluster, observed, tolerance_us=0.01) == pytest.approx(by_hand_us,
                                                                                                      abs=0.05)


def test_a_plan_that_sends_no_message_between_devices_has_no_overhead_to_fit():
    cluster, profile = small_cluster(), hybrid_profile()
    plan = build_baseline("1f1b", profile, 1, MICROBATCHES, cluster=cluster)
    observed = simulate(plan, profile, cluster).iteration_ms * 1.5
    with pytest.raises(SpecError) as error:
        fit_message_overhead(plan, profile, cluster, observed)
    assert error.value.field == "plan" and "no message between devices" in error.value.reason


def _events(result, step=0, shift_ms=0.0):
    return [{"type": "action", "action": entry["action"], "step": step, "start_ms": entry["start_ms"] + shift_ms,
             "end_ms": entry["end_ms"] + shift_ms} for entry in result.timeline()]


def test_the_measured_message_overhead_is_the_simulated_one_whatever_the_compute_speed():
    """The time between actions of a device that did not wait is its message ends times the overhead; a run
    whose layers ran at another speed than the profile says measures the same overhead (a fit would not)."""
    cluster, profile = small_cluster(), hybrid_profile()
    plan = build_baseline("interleaved-1f1b", profile, DEVICES, MICROBATCHES, cluster=cluster)
    slower = replace(profile, layers=tuple(replace(layer, forward=layer.forward * 1.3,
                                                   backward_input=layer.backward_input * 1.1)
                                           for layer in profile.layers))
    for real in (profile, slower):
        run = simulate(plan, real, with_message_overhead(cluster, 300.0))
        # two steps, the second far later: the gap between steps is no message's time
        events = _events(run) + _events(run, step=1, shift_ms=run.iteration_ms + 1000.0)
        assert measure_message_overhead(plan, events) == pytest.approx(300.0, rel=1e-9)
    fitted = fit_message_overhead(plan, profile, cluster, simulate(plan, slower, with_message_overhead(
        cluster, 300.0)).iteration_ms)
    assert fitted > 400.0, "the fit turns the unmodelled compute into overhead"


def test_measuring_the_overhead_needs_a_message_between_actions():
    cluster, profile = small_cluster(), hybrid_profile()
    plan = build_baseline("1f1b", profile, 1, MICROBATCHES, cluster=cluster)
    with pytest.raises(SpecError) as error:
        measure_message_overhead(plan, _events(simulate(plan, profile, cluster)))
    assert error.value.field == "observed_events"


def test_the_fitted_kernel_overhead_makes_the_analytic_total_the_measured_one():
    spec, cluster = load_model_preset("tiny-llama"), load_cluster_preset("cpu-host")
    # a "measurement": the analytic profile with 80 us per kernel, every layer 10 % slower on top
    truth = replace(cluster, device=replace(cluster.device, kernel_overhead_us=80.0))
    measured = analytic_profile(spec, truth)
    measured = replace(measured, layers=tuple(replace(layer, forward=layer.forward * 1.1,
                                                      backward_input=layer.backward_input * 1.1,
                                                      backward_weight=layer.backward_weight * 1.1)
                                              for layer in measured.layers))
    fitted = fit_kernel_overhead(spec, cluster, measured)
    total = lambda profile: sum(layer.forward + layer.backward_input + layer.backward_weight  # noqa: E731
                                for layer in profile.layers)
    refit = analytic_profile(spec, replace(cluster, device=replace(cluster.device, kernel_overhead_us=fitted)))
    assert total(refit) == pytest.approx(total(measured), rel=1e-9)
    assert fitted > 80.0
    # a measurement faster than the analytic model with no overhead at all needs none
    assert fit_kernel_overhead(spec, cluster, replace(measured, layers=tuple(
        replace(layer, forward=0.0, backward_input=0.0, backward_weight=0.0) for layer in measured.layers))) == 0.0


def test_after_warmup_keeps_the_action_events_of_the_steps_after_the_first_k():
    cluster, profile = small_cluster(), hybrid_profile()
    plan = build_baseline("1f1b", profile, DEVICES, MICROBATCHES, cluster=cluster)
    run = simulate(plan, profile, cluster)
    events = [{"type": "run_started"}] + _events(run, step=3) + _events(run, step=5, shift_ms=1e3)
    assert after_warmup(plan, events, 0) == events[1:]
    assert after_warmup(plan, events, 1) == _events(run, step=5, shift_ms=1e3)
    assert after_warmup(plan, events, 2) == []
