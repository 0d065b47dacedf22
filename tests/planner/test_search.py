"""The AdaPtis search: plans that validate, fit memory, score what the simulator says, beat their starts."""

import json
import re

import pytest

from planner.baselines import build_baseline
from planner.bounds import lower_bound_ms
from planner.errors import SpecError
from planner.memory import device_memory
from planner.plan import load_plan
from planner.search import search_plan
from planner.simulator import simulate
from planner.plan_check import validate_plan
from tests.planner.search_profiles import big_head_profile, hybrid_profile, small_cluster

DEVICES, MICROBATCHES = 4, 8


@pytest.fixture(scope="module")
def cluster():
    return small_cluster()


@pytest.fixture(scope="module", params=["big-head", "hybrid"])
def searched(request, cluster):
    profile = big_head_profile() if request.param == "big-head" else hybrid_profile()
    return profile, search_plan(profile, DEVICES, MICROBATCHES, cluster=cluster, max_evaluations=120)


def test_the_plan_validates_and_is_labelled_adaptis(searched):
    profile, result = searched
    validate_plan(result.plan, profile.num_layers)
    assert result.plan.strategy == "adaptis"
    assert load_plan(json.loads(json.dumps(result.plan.to_dict()))).to_dict() == result.plan.to_dict()


def test_the_reported_score_is_what_the_simulator_says(searched, cluster):
    profile, result = searched
    simulation = simulate(result.plan, profile, cluster)
    assert result.iteration_ms == pytest.approx(simulation.iteration_ms, rel=1e-12)
    assert result.plan.predicted["bubble_ratio"] == pytest.approx(simulation.bubble_ratio, rel=1e-12)
    assert result.gap == pytest.approx(simulation.iteration_ms / result.lower_bound_ms - 1)


def test_the_plan_is_never_slower_than_any_baseline_that_fits(searched, cluster):
    profile, result = searched
    checked = 0
    for schedule in ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-v"):
        for partition in ("uniform", "time-balanced"):
            baseline = build_baseline(schedule, profile, DEVICES, MICROBATCHES, cluster=cluster, partition=partition)
            assert result.iteration_ms <= baseline.predicted["iteration_ms"] + 1e-9
            # the result carries the very plans it scored, for the caller to store and run
            [name] = [name for name, metrics in result.baselines.items()
                      if (metrics["schedule"], metrics["partition"]) == (schedule, partition)]
            scored = result.baseline_plans[name]
            assert (scored.stages, scored.actions) == (baseline.stages, baseline.actions)
            assert scored.predicted["iteration_ms"] == result.baselines[name]["iteration_ms"]
            checked += 1
    assert checked == 10 and len(result.baselines) == 10 == len(result.baseline_plans)


def test_the_bound_holds_and_is_at_least_the_shared_bound(searched):
    profile, result = searched
    assert result.lower_bound_ms >= lower_bound_ms(profile, DEVICES, MICROBATCHES)["lower_bound_ms"]
    assert result.iteration_ms >= result.lower_bound_ms - 1e-9
    assert result.plan.meta["lower_bound_ms"] == result.lower_bound_ms
    assert result.plan.meta["gap"] == result.gap


def test_a_heavy_head_is_planned_well_ahead_of_interleaved_1f1b(cluster):
    profile = big_head_profile(num_decoders=14, head_forward=5.0)
    result = search_plan(profile, DEVICES, 16, cluster=cluster, max_evaluations=150)
    interleaved = build_baseline("interleaved-1f1b", profile, DEVICES, 16, cluster=cluster)
    assert interleaved.predicted["iteration_ms"] / result.iteration_ms > 1.25
    assert result.gap < 0.08


@pytest.mark.parametrize("seed", [0, 1])
def test_patience_only_adds_to_the_search_it_continues(cluster, seed):
    """The search cut at the evaluations it used to be capped at is a prefix of the whole search (same seed, same
    moves until then), and the whole one only keeps better plans: it is never slower."""
    from planner.search.search import first_phase_evaluations
    profile = hybrid_profile()
    state = sum(layer.param_bytes for layer in profile.layers) * 9
    limit = state // 8 + 3 * max(layer.param_bytes for layer in profile.layers) * 9
    # no target gap: the search may not stop early for being close to the bound (here it can come within 1 %)
    cut = search_plan(profile, 8, 32, cluster=cluster, memory_limit_bytes=limit, seed=seed,
                      max_evaluations=first_phase_evaluations(8), target_gap=0.0)
    whole = search_plan(profile, 8, 32, cluster=cluster, memory_limit_bytes=limit, seed=seed, target_gap=0.0)
    assert cut.stats["stopped"] == "evaluation budget" and whole.stats["evaluations"] > cut.stats["evaluations"]
    assert whole.iteration_ms <= cut.iteration_ms


def test_the_same_seed_gives_the_same_plan(cluster):
    profile = hybrid_profile()
    first = search_plan(profile, DEVICES, MICROBATCHES, cluster=cluster, seed=3, max_evaluations=60)
    second = search_plan(profile, DEVICES, MICROBATCHES, cluster=cluster, seed=3, max_evaluations=60)
    assert first.plan.to_dict()["actions"] == second.plan.to_dict()["actions"]
    assert first.plan.stages == second.plan.stages
    assert first.candidates == second.candidates


def test_every_device_fits_a_tight_memory_limit(cluster):
    profile = hybrid_profile()
    unconstrained = search_plan(profile, DEVICES, MICROBATCHES, cluster=cluster, max_evaluations=60)
    peaks = [memory.peak_bytes for memory in device_memory(unconstrained.plan, profile)]
    limit = int(0.8 * max(peaks))
    result = search_plan(profile, DEVICES, MICROBATCHES, cluster=cluster, memory_limit_bytes=limit,
                         max_evaluations=60)
    assert max(memory.peak_bytes for memory in device_memory(result.plan, profile)) <= limit
    assert max(device["peak_memory_bytes"] for device in result.plan.predicted["per_device"]) <= limit


def test_an_activation_limit_caps_in_flight_activations(cluster):
    profile = big_head_profile()
    limit = 5 * 64 * (1 << 20) * 3  # a few micro-batches of three decoders
    result = search_plan(profile, DEVICES, MICROBATCHES, cluster=cluster, activation_limit_bytes=limit,
                         max_evaluations=60)
    assert max(memory.activation_peak_bytes for memory in device_memory(result.plan, profile)) <= limit


def test_parameters_that_cannot_fit_give_a_clear_error(cluster):
    profile = big_head_profile()
    total_state = sum(layer.param_bytes for layer in profile.layers) * 9
    limit = total_state // DEVICES - 1  # every layer alone fits; all of them on 4 devices do not
    assert max(layer.param_bytes for layer in profile.layers) * 9 < limit
    with pytest.raises(SpecError) as error:
        search_plan(profile, DEVICES, MICROBATCHES, cluster=cluster, memory_limit_bytes=limit)
    assert error.value.field == "memory_limit_bytes"
    assert f"{total_state:,}" in error.value.reason


def test_a_single_layer_too_big_for_a_device_is_named(cluster):
    profile = big_head_profile()
    with pytest.raises(SpecError) as error:
        search_plan(profile, DEVICES, MICROBATCHES, cluster=cluster, memory_limit_bytes=400 * (1 << 20) * 8)
    assert error.value.field == "memory_limit_bytes" and "'embed'" in error.value.reason


def test_activations_that_cannot_fit_give_a_clear_error(cluster):
    profile = big_head_profile()
    with pytest.raises(SpecError) as error:
        search_plan(profile, DEVICES, MICROBATCHES, cluster=cluster, activation_limit_bytes=1 << 20,
                    max_evaluations=40)
    assert error.value.field == "memory_limit_bytes"
    assert re.search(r"needs [\d.]+ [KMG]iB more on device", error.value.reason), error.value.reason


def test_cancellation_returns_the_best_so_far_flagged(cluster):
    profile = hybrid_profile()
    calls = []

    def cancel():
        calls.append(1)
        return len(calls) > 10

    result = search_plan(profile, DEVICES, MICROBATCHES, cluster=cluster, cancel=cancel)
    assert result.cancelled and result.stats["stopped"] == "cancelled"
    assert result.stats["evaluations"] == 10
    validate_plan(result.plan, profile.num_layers)
    assert result.iteration_ms <= min(metrics["iteration_ms"] for metrics in result.baselines.values())


def test_a_time_budget_stops_the_search(cluster):
    profile = hybrid_profile()
    # The budget is a tenth of what the whole search takes on this machine, whatever its speed.
    unbounded = search_plan(profile, 8, 32, cluster=cluster, max_evaluations=100_000)
    budget_s = unbounded.stats["seconds"] / 10
    result = search_plan(profile, 8, 32, cluster=cluster, time_budget_s=budget_s, max_evaluations=100_000)
    assert result.stats["stopped"] == "time budget" and not result.cancelled
    assert result.stats["evaluations"] < unbounded.stats["evaluations"]
    validate_plan(result.plan, profile.num_layers)


def test_progress_rises_to_one(cluster):
    reports = []
    search_plan(hybrid_profile(), DEVICES, MICROBATCHES, cluster=cluster, max_evaluations=60,
                progress=lambda fraction, message: reports.append((fraction, message)))
    fractions = [fraction for fraction, _ in reports]
    assert fractions == sorted(fractions) and fractions[0] == 0.0 and fractions[-1] == 1.0
    assert all(isinstance(message, str) and message for _, message in reports)
    # Each report says the best plan so far and its gap; the best only improves.
    bests = [(float(best.replace(",", "")), float(gap)) for _, message in reports
             for best, gap in re.findall(r"best ([\d,.]+) ms, ([\d.]+)% above the bound", message)]
    assert len(bests) >= 2 and [best for best, _ in bests] == sorted((best for best, _ in bests), reverse=True)


def test_the_result_serialises_with_candidates_and_baselines(searched):
    _, result = searched
    doc = json.loads(json.dumps(result.to_dict()))
    assert doc["plan"]["strategy"] == "adaptis" and doc["plan"]["meta"]["search"]["evaluations"] > 0
    assert {"interleaved-1f1b", "zb-v", "1f1b"} <= set(doc["baselines"])
    scores = [candidate["iteration_ms"] for candidate in doc["candidates"]]
    assert scores == sorted(scores) and 1 <= len(scores) <= 5
    assert scores[0] <= doc["iteration_ms"] + 1e-9 or doc["plan"]["meta"]["origin"].startswith("baseline")
    speedup = doc["baselines"]["interleaved-1f1b"]["adaptis_speedup"]
    assert speedup == pytest.approx(doc["baselines"]["interleaved-1f1b"]["iteration_ms"] / doc["iteration_ms"])


@pytest.mark.parametrize("argument, value", [("num_devices", 0), ("num_microbatches", 0), ("top_k", 0)])
def test_bad_arguments_name_the_field(cluster, argument, value):
    arguments = {"num_devices": DEVICES, "num_microbatches": MICROBATCHES}
    keywords = {"top_k": value} if argument == "top_k" else {}
    arguments.update({argument: value} if argument != "top_k" else {})
    with pytest.raises(SpecError) as error:
        search_plan(hybrid_profile(), arguments["num_devices"], arguments["num_microbatches"], cluster=cluster,
                    **keywords)
    assert error.value.field == argument
