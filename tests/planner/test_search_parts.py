"""The search's parts: the list scheduler agrees with the simulator, the bound holds, partitions balance."""

import itertools
import random
from dataclasses import replace
from types import SimpleNamespace

import pytest

from planner.actions import ActionKind
from planner.bounds import (activation_hold_ms, binding_term, indivisible_layers_ms, optimal_device_load_ms,
                            plan_memory_limit, search_lower_bound, stage_waves_ms)
from planner.memory import layer_state_bytes
from planner.profile import Profile
from planner.search import search_plan
from planner.search.list_scheduler import duration_of
from planner.search.evaluate import CandidateScorer, candidate_plan
from planner.layout import Layout
from planner.placement import SHAPES, shape_placement
from planner.search.list_scheduler import Abandoned, SchedulePolicy, list_schedule
from planner.search.partition import (balanced_starts, device_loads, exchange_layers, layer_devices,
                                      rebalance_devices)
from planner.simulator import simulate
from planner.plan_check import validate_plan
from tests.planner.search_profiles import big_head_profile, hybrid_profile, small_cluster


def scorer_for(profile, devices, microbatches, cluster=None, **limits):
    return CandidateScorer(profile, devices, microbatches, cluster=cluster,
                           memory_limit_bytes=limits.get("memory", float("inf")),
                           activation_limit_bytes=limits.get("activation", float("inf")), deadline=None,
                           max_evaluations=10**9, max_scheduled_actions=10**12, cancel=None)


def random_layout(rng, num_layers, devices):
    stages = rng.randint(devices, min(num_layers, 3 * devices))
    starts = (0, *sorted(rng.sample(range(1, num_layers), stages - 1)))
    placement = list(range(devices)) + [rng.randrange(devices) for _ in range(stages - devices)]
    rng.shuffle(placement)
    return Layout(starts, tuple(placement), num_layers)


def random_policy(rng):
    return SchedulePolicy(split_backward=rng.random() < 0.6, backward_first=rng.random() < 0.7,
                          forward_order=rng.choice(("deep", "old")), inflight_scale=rng.choice((0.5, 1, 1.5, 3)),
                          weight_lag=rng.choice((2, 8, 1_000_000)), reserve=rng.choice(("all", "next")))


@pytest.mark.parametrize("seed", range(12))
def test_list_schedules_are_valid_and_score_what_the_simulator_says(seed):
    rng = random.Random(seed)
    profile = hybrid_profile() if seed % 2 else big_head_profile()
    devices, microbatches = rng.choice((2, 3, 4)), rng.choice((1, 3, 8))
    cluster = small_cluster() if seed % 3 else None
    scorer = scorer_for(profile, devices, microbatches, cluster)
    candidate = scorer.score(random_layout(rng, profile.num_layers, devices), random_policy(rng), "random")
    plan = candidate_plan(candidate, devices, microbatches)
    validate_plan(plan, profile.num_layers)
    simulation = simulate(plan, profile, cluster)
    assert candidate.makespan == pytest.approx(simulation.iteration_ms, rel=1e-12)
    assert candidate.schedule.activation_peak == [memory.memory.activation_peak_bytes
                                                  for memory in simulation.per_device]
    assert candidate.schedule.device_busy == pytest.approx([device.time.busy_ms for device in simulation.per_device])


def test_a_byte_cap_bounds_every_devices_activations():
    profile = big_head_profile()
    cap = 3 * 64 * (1 << 20) * 3
    scorer = scorer_for(profile, 4, 16, activation=cap)
    layout = rebalance_devices(Layout(balanced_starts([1.0] * 12, 8), shape_placement("v-shape", 8, 4), 12),
                               scorer.work_prefix, 4)
    candidate = scorer.score(layout, SchedulePolicy(split_backward=True, inflight_scale=3.0), "capped")
    assert candidate.feasible and max(candidate.schedule.activation_peak) <= cap
    uncapped = scorer_for(profile, 4, 16).score(layout, SchedulePolicy(split_backward=True, inflight_scale=3.0), "")
    assert max(uncapped.schedule.activation_peak) > cap


def test_reserving_room_for_one_micro_batch_lets_more_in_flight_within_the_cap():
    """``reserve="next"`` admits a micro-batch beside what is held (not also what is promised to those inside): on a
    V-shape, whose devices hold an early and a late stage, more micro-batches fit in flight and the schedule is
    shorter, its peak still within the cap; where it deadlocks the scheduler lets a forward through and counts it."""
    profile = big_head_profile()
    cap = 4 * 64 * (1 << 20) * 3
    scorer = scorer_for(profile, 4, 16, activation=cap)
    layout = rebalance_devices(Layout(balanced_starts([1.0] * 12, 8), shape_placement("v-shape", 8, 4), 12),
                               scorer.work_prefix, 4)
    policy = SchedulePolicy(split_backward=True, inflight_scale=3.0)
    everything = scorer.score(layout, policy, "")
    next_only = scorer.score(layout, replace(policy, reserve="next"), "")
    assert everything.feasible and next_only.feasible and next_only.schedule.cap_overrides == 0
    assert max(next_only.schedule.activation_peak) <= cap
    assert sum(next_only.schedule.activation_peak) > sum(everything.schedule.activation_peak)
    assert next_only.makespan < everything.makespan
    tight = scorer_for(profile, 4, 16, activation=64 * (1 << 20) * 3)
    for reserve in ("all", "next"):
        schedule = tight.score(layout, replace(policy, reserve=reserve), "").schedule
        # Every action is still scheduled; a cap override is counted where the cap had to give.
        assert sum(map(len, schedule.orders)) == 8 * 16 * 3
        assert schedule.cap_overrides > 0 or max(schedule.activation_peak) <= 64 * (1 << 20) * 3


def test_the_indivisible_layer_bound_matches_brute_force():
    rng = random.Random(7)
    for _ in range(20):
        costs = [round(rng.uniform(0.5, 3.0), 2) for _ in range(rng.randint(4, 7))]
        devices = rng.randint(2, 3)
        best = min(max(sum(cost for cost, owner in zip(costs, assignment) if owner == device)
                       for device in range(devices))
                   for assignment in itertools.product(range(devices), repeat=len(costs)))
        assert indivisible_layers_ms(costs, devices, 1) <= best + 1e-9


def brute_force_device_load(costs, devices):
    return min(max(sum(cost for cost, owner in zip(costs, assignment) if owner == device)
                   for device in range(devices))
               for assignment in itertools.product(range(devices), repeat=len(costs)))


def test_the_optimal_device_load_bound_never_exceeds_brute_force():
    rng = random.Random(5)
    for _ in range(25):
        costs = [round(rng.uniform(0.05, 3.0), 3) for _ in range(rng.randint(3, 8))]
        devices = rng.randint(2, 3)
        microbatches = rng.choice((1, 4))
        bound = optimal_device_load_ms(costs, devices, microbatches)
        assert bound <= brute_force_device_load(costs, devices) * microbatches + 1e-9


def test_the_optimal_device_load_bound_is_exact_for_few_layer_kinds():
    # A big head beside many equal decoders: the counting bound misses that the head's device takes no
    # decoder, which forces an extra decoder onto another device; the exact bound sees it.
    rng = random.Random(9)
    for _ in range(25):
        kinds = [round(rng.uniform(0.5, 3.0), 2) for _ in range(rng.randint(1, 3))]
        costs = [rng.choice(kinds) for _ in range(rng.randint(3, 9))]
        devices = rng.randint(2, 3)
        best = brute_force_device_load(costs, devices)
        bound = optimal_device_load_ms(costs, devices, 1)
        assert best - len(costs) * max(costs) / 1000 - 1e-9 <= bound <= best + 1e-9
    costs = [3.0] * 8 + [8.0]  # best: 8 + 3 | 3 x 4 | 3 x 3 -> 12; the counting bound sees 3 x 3
    assert indivisible_layers_ms(costs, 3, 1) == pytest.approx(9.0)
    assert brute_force_device_load(costs, 3) == 12.0
    assert 12.0 - len(costs) * 8.0 / 1000 <= optimal_device_load_ms(costs, 3, 1) <= 12.0  # rounded down


def test_the_bound_never_exceeds_a_plan_the_scheduler_finds():
    rng = random.Random(11)
    for index in range(25):
        profile = hybrid_profile() if index % 2 else big_head_profile(num_decoders=rng.randint(4, 12))
        devices, microbatches = rng.choice((2, 3, 4)), rng.choice((1, 2, 6))
        bound = search_lower_bound(profile, devices, microbatches)["lower_bound_ms"]
        scorer = scorer_for(profile, devices, microbatches)
        for _ in range(6):
            candidate = scorer.score(random_layout(rng, profile.num_layers, devices), random_policy(rng), "")
            assert candidate.makespan >= bound - 1e-9


def test_the_layer_chain_sees_a_deep_pipelines_wait_for_its_first_backward():
    """Eight uniform layers (F = I = W = 1), four micro-batches: a layer's first I waits for one micro-batch's F and
    its forwards and input gradients through every later layer, and after it come all four I's and W's. Layer 0:
    1 + 7 x 2 (its F, then the chain through the seven later layers), 4 I's and 4 W's: 23, by hand, where one
    micro-batch's chain plus three of the bottleneck (17 + 3) says 20. No schedule of any layout beats it."""
    from planner.bounds import layer_chain_ms
    from tests.planner.search_profiles import layer
    profile = Profile(model="uniform", device="test", seq_len=1024,
                      layers=tuple(layer(f"layers.{index}", "decoder", 1.0) for index in range(8)))
    assert [(item.forward, item.backward_input, item.backward_weight) for item in profile.layers] == [(1, 1, 1)] * 8
    assert layer_chain_ms(profile, 4) == 23
    assert search_lower_bound(profile, 8, 4)["lower_bound_ms"] == 23
    rng = random.Random(5)
    scorer = scorer_for(profile, 8, 4)
    one_each = Layout(tuple(range(8)), tuple(range(8)), 8)
    makespans = [scorer.score(layout, random_policy(rng), "").makespan
                 for layout in [one_each] * 40 + [random_layout(rng, 8, 8) for _ in range(40)]]
    assert min(makespans) >= 23 - 1e-9


def test_a_deep_pipeline_ending_in_its_bottleneck_needs_unbounded_in_flight_micro_batches():
    """Forty decoders and a head 1.6 of them, one device each, 32 micro-batches: the head's device is the bottleneck
    at the end of the pipeline, so every stage before it must run ahead of 1F1B's warm-up depth. With the in-flight
    limit unbounded (memory still binding) the schedule reaches the lower bound; every scale the search's moves take
    is 18 % or more above it. The search finds the unbounded one, lifting the limit on its best plan last."""
    from planner.search.list_scheduler import UNBOUNDED_INFLIGHT
    from planner.search.tuning import INFLIGHT_SCALES
    profile = big_head_profile(num_decoders=40, head_forward=1.6)
    devices = profile.num_layers
    bound = search_lower_bound(profile, devices, 32)["lower_bound_ms"]
    scorer = scorer_for(profile, devices, 32)
    one_each = Layout(tuple(range(devices)), tuple(range(devices)), devices)
    best = {scale: min(scorer.score(one_each, SchedulePolicy(split_backward=True, inflight_scale=scale,
                                                             weight_lag=lag, forward_order=order), "").makespan
                       for lag in (1, 8, 1_000_000) for order in ("deep", "old"))
            for scale in (*INFLIGHT_SCALES, UNBOUNDED_INFLIGHT)}
    assert best[UNBOUNDED_INFLIGHT] == pytest.approx(bound, rel=1e-9)
    assert all(makespan >= 1.18 * bound for scale, makespan in best.items() if scale != UNBOUNDED_INFLIGHT)
    result = search_plan(profile, devices, 32)
    assert result.iteration_ms == pytest.approx(bound, rel=1e-9) and "in-flight unbounded" in result.plan.meta["schedule"]


def test_the_policy_polish_tries_every_in_flight_scale_with_small_w_lags_and_keeps_only_a_better_plan():
    """The polish scores the best plan's layout under every in-flight scale (unbounded too) with W owed 1, 2, 4 or 8 at
    a time, and tunes on from the best of them only where it beats the plan: under memory limits that leave room for a
    few micro-batches, the result is never worse than the plan or than the best variant scored here independently,
    and on some of these layouts it is better."""
    from planner.search.list_scheduler import UNBOUNDED_INFLIGHT
    from planner.search.search import POLISH_WEIGHT_LAGS, _Tuner
    from planner.search.tuning import INFLIGHT_SCALES
    rng = random.Random(40)
    feasible = improved = 0
    for index in range(30):
        profile = light_weights(hybrid_profile() if index % 2 else big_head_profile(num_decoders=rng.randint(8, 12)))
        state = layer_state_bytes(profile)
        limit = sum(state) / 4 + max(state) + rng.uniform(0.6, 3.0) * sum(layer.activation_bytes
                                                                        for layer in profile.layers) / 4
        scorer = scorer_for(profile, 4, 16, memory=limit)
        tuner = _Tuner(scorer, random.Random(0), 0.0, 0.0)
        layout = random_layout(rng, profile.num_layers, 4)
        start = tuner.consider(layout, SchedulePolicy(split_backward=True, inflight_scale=1.0), "start")
        if not start.feasible:
            assert tuner.polish_policy() is False
            continue
        variants = [scorer.score(layout, SchedulePolicy(split_backward=True, inflight_scale=scale, weight_lag=lag), "")
                    for scale in (*INFLIGHT_SCALES, UNBOUNDED_INFLIGHT) for lag in (*POLISH_WEIGHT_LAGS, 1_000_000)]
        best_variant = min(variants, key=lambda candidate: candidate.rank)
        polished = tuner.polish_policy()
        assert polished == (best_variant.rank < start.rank)
        assert tuner.best.rank <= min(start.rank, best_variant.rank)
        feasible += 1
        improved += polished
    assert feasible >= 10 and improved >= 2, (feasible, improved)


def test_the_layout_bound_and_giving_up_never_discard_a_better_schedule():
    rng = random.Random(13)
    for index in range(30):
        profile = hybrid_profile() if index % 2 else big_head_profile(num_decoders=rng.randint(4, 12))
        devices, microbatches = rng.choice((2, 3, 4)), rng.choice((2, 6))
        scorer = scorer_for(profile, devices, microbatches, cluster=small_cluster() if index % 3 else None)
        layout, policy = random_layout(rng, profile.num_layers, devices), random_policy(rng)
        times = scorer.stage_times(layout)
        full = list_schedule(times, microbatches, policy)
        assert scorer.layout_bound(layout) <= full.makespan + 1e-9
        for factor in (0.5, 0.9, 0.99, 1.01, 1.5):
            cut = list_schedule(times, microbatches, policy, give_up_at=full.makespan * factor)
            if isinstance(cut, Abandoned):
                assert full.makespan >= cut.give_up_at
            else:
                assert cut.orders == full.orders and cut.makespan == full.makespan
        assert not isinstance(list_schedule(times, microbatches, policy, give_up_at=full.makespan * 1.01), Abandoned)
        assert isinstance(list_schedule(times, microbatches, policy, give_up_at=full.makespan * 0.5), Abandoned)


def test_rebalancing_evens_device_loads_for_every_shape():
    profile = big_head_profile(num_decoders=14, head_forward=5.0)
    scorer = scorer_for(profile, 4, 8)
    weights = [layer.forward + layer.backward for layer in profile.layers]
    for shape, stages in itertools.product(SHAPES, (4, 8, 12)):
        layout = Layout(balanced_starts(weights, stages), shape_placement(shape, stages, 4), profile.num_layers)
        balanced = rebalance_devices(layout, scorer.work_prefix, 4)
        assert max(device_loads(balanced, scorer.work_prefix, 4)) <= max(device_loads(layout, scorer.work_prefix, 4))
        assert balanced.stage_device == layout.stage_device
        assert all(later > earlier for earlier, later in zip(balanced.starts, balanced.starts[1:]))
    # 14 decoders of 3 ms, a 15 ms head and a 0.15 ms embedding over 4 devices: the head alone is the
    # heaviest device in the best split (0.15 + 5 x 3 | 5 x 3 | 4 x 3 | 15).
    best = rebalance_devices(Layout(balanced_starts(weights, 4), shape_placement("loop", 4, 4), profile.num_layers),
                             scorer.work_prefix, 4)
    assert max(device_loads(best, scorer.work_prefix, 4)) == pytest.approx(15.0)


def _held_byte_ms(candidate, times):
    """Per device, the integral over time of the activation bytes it holds: each stage's bytes from its F's start to
    the end of the W (or B) that frees them, read off the list schedule."""
    backward = tuple(input_ + (0.0 if candidate.policy.split_backward else weight)
                     for input_, weight in zip(times.backward_input, times.backward_weight))
    taken, held = {}, [0.0] * times.num_devices
    for device, (order, starts) in enumerate(zip(candidate.schedule.orders, candidate.schedule.starts)):
        for (stage, kind, microbatch), start in zip(order, starts):
            if kind == ActionKind.F.code:
                taken[stage, microbatch] = start
            elif kind in (ActionKind.W.code, ActionKind.B.code):
                end = start + duration_of(times, backward, times.backward_weight, (stage, kind, microbatch))
                held[device] += times.activation_bytes[stage] * (end - taken.pop((stage, microbatch)))
    assert not taken
    return held


def light_weights(profile):
    """``profile`` with a 16th of its weights: the limits below leave room for a few micro-batches' activations."""
    return replace(profile, layers=tuple(replace(layer, param_bytes=layer.param_bytes // 16)
                                         for layer in profile.layers))


def test_every_micro_batch_holds_its_activations_at_least_their_chain():
    """The lemma under ``memory_flow_ms``: a device's held bytes integrate to at least m x sum(a_l g_l)."""
    rng = random.Random(21)
    for index in range(20):
        profile = hybrid_profile() if index % 2 else big_head_profile(num_decoders=rng.randint(4, 12))
        devices, microbatches = rng.choice((2, 3, 4)), rng.choice((1, 3, 6))
        scorer = scorer_for(profile, devices, microbatches, small_cluster() if index % 3 else None)
        hold = activation_hold_ms(profile)
        for _ in range(4):
            layout = random_layout(rng, profile.num_layers, devices)
            candidate = scorer.score(layout, random_policy(rng), "")
            held = _held_byte_ms(candidate, scorer.stage_times(layout))
            for device in range(devices):
                layers = [layer for stage in layout.stages() if stage.device == device for layer in stage.layers]
                flow = microbatches * sum(profile.layers[layer].activation_bytes * hold[layer] for layer in layers)
                assert held[device] >= flow * (1 - 1e-9)


def test_the_memory_bound_holds_for_every_plan_that_fits_and_binds_when_memory_is_tight():
    rng = random.Random(23)
    binding = fitting = waves = 0
    for index in range(24):
        profile = hybrid_profile() if index % 2 else big_head_profile(num_decoders=rng.randint(6, 12))
        profile = light_weights(profile)
        devices, microbatches = rng.choice((2, 3, 4)), rng.choice((4, 8))
        state = layer_state_bytes(profile)
        activations = sum(layer.activation_bytes for layer in profile.layers)
        limit = sum(state) / devices + max(state) + rng.uniform(0.3, 2) * activations / devices
        bound = search_lower_bound(profile, devices, microbatches, memory_limit_bytes=limit, layer_state_bytes=state)
        binding += binding_term(bound)["term"] == "memory_flow_ms"
        scorer = scorer_for(profile, devices, microbatches, memory=limit)
        for _ in range(8):
            candidate = scorer.score(random_layout(rng, profile.num_layers, devices), random_policy(rng), "")
            if candidate.feasible:
                fitting += 1
                assert candidate.makespan >= bound["lower_bound_ms"] * (1 - 1e-9)
                # The plan's own memory argument (Little's law, or its waves on a device with one stage) holds too.
                plan = candidate_plan(candidate, devices, microbatches)
                own = plan_memory_limit(plan, profile, memory_limit_bytes=limit, layer_state_bytes=state)
                assert candidate.makespan >= own["memory_flow_ms"] * (1 - 1e-9)
                waves += any(stage_waves_ms(profile, stage.layers[0], stage.layers[-1] + 1, microbatches,
                                            own["microbatches_fit"]) == own["memory_flow_ms"]
                             for stage in plan.stages if stage.device == own["device"])
    assert binding >= 3 and fitting >= 30  # the term binds on some of these limits, and plans fit them
    assert waves >= 3  # and the waves of a one-stage device set some plans' own limits


def test_a_tight_memory_limit_is_named_on_the_bound_and_on_the_plan():
    cluster = small_cluster()
    profile = light_weights(big_head_profile(num_decoders=12))
    state = layer_state_bytes(profile)
    limit = sum(state) / 4 + max(state) + 0.4 * sum(layer.activation_bytes for layer in profile.layers) / 4
    loose = search_lower_bound(profile, 4, 16)
    tight = search_lower_bound(profile, 4, 16, memory_limit_bytes=limit, layer_state_bytes=state)
    assert tight["memory_flow_ms"] > loose["lower_bound_ms"] and binding_term(tight)["term"] == "memory_flow_ms"
    result = search_plan(profile, 4, 16, cluster=cluster, memory_limit_bytes=int(limit), max_evaluations=80)
    assert result.plan.meta["binding"]["term"] == "memory_flow_ms" and "Little" in result.plan.meta["binding"]["text"]
    worst = result.plan.meta["memory_binding"]
    per_device = {row["device"]: row for row in result.plan.predicted["per_device"]}
    assert worst["left_bytes"] == pytest.approx(limit - per_device[worst["device"]]["model_state_bytes"])
    assert worst["microbatches_fit"] == int(worst["left_bytes"] // worst["microbatch_bytes"])
    assert f"device {worst['device']} allows {worst['microbatches_fit']} micro-batches in flight" in worst["text"]
    assert result.iteration_ms >= worst["memory_flow_ms"] * (1 - 1e-9)


def test_the_search_persists_longer_the_farther_its_plan_is_from_the_bound():
    from planner.search.search import MIN_PATIENCE, PATIENCE_PER_PERCENT, patience
    near = SimpleNamespace(feasible=True, makespan=100.5)
    close = SimpleNamespace(feasible=True, makespan=103.0)
    far = SimpleNamespace(feasible=True, makespan=160.0)
    assert patience(near, 100.0) == MIN_PATIENCE
    assert patience(close, 100.0) == pytest.approx(3 * PATIENCE_PER_PERCENT)
    assert patience(far, 100.0) == pytest.approx(60 * PATIENCE_PER_PERCENT)
    result = search_plan(big_head_profile(num_decoders=12), 4, 16, cluster=small_cluster(), target_gap=0.0)
    stats = result.stats
    assert stats["stopped"] == "converged" and stats["max_evaluations"] is None
    # It stopped only once its best had gone unimproved for the patience its gap earns.
    earned = max(MIN_PATIENCE, PATIENCE_PER_PERCENT * 100 * result.gap)
    assert stats["evaluations"] - stats["best_found_at"] >= earned * 0.999


def _loads_by_layer(layout, work, devices):
    loads = [0.0] * devices
    for stage in layout.stages():
        loads[stage.device] += sum(work[layer] for layer in stage.layers)
    return loads


@pytest.mark.parametrize("seed", range(20))
def test_layer_exchange_never_makes_the_heaviest_device_heavier_and_keeps_every_layer(seed):
    rng = random.Random(seed)
    num_layers, devices = rng.randint(6, 30), rng.randint(2, 5)
    work = [rng.choice([1.0, 1.0, 1.0, 0.8, 3.5]) * rng.uniform(0.9, 1.1) for _ in range(num_layers)]
    layout = random_layout(rng, num_layers, devices)
    exchanged = exchange_layers(layout, work, devices)
    assert sorted(layer for stage in exchanged.stages() for layer in stage.layers) == list(range(num_layers))
    assert max(_loads_by_layer(exchanged, work, devices)) <= max(_loads_by_layer(layout, work, devices)) + 1e-9
    per_layer = layer_devices(exchanged)
    assert all(per_layer[start] != per_layer[start - 1] for start in exchanged.starts[1:]), "stages are maximal runs"


def test_layer_exchange_balances_a_lumpy_stack_that_boundaries_cannot():
    # 2 devices: cheap layers around one heavy layer in the middle; the best contiguous split is 11 vs 9,
    # the best assignment 10 vs 10 needs the heavy layer's device to give away a layer from the far end.
    work = [1.0] * 5 + [6.0] + [1.0] * 9
    contiguous = Layout(balanced_starts(work, 2), (0, 1), len(work))
    assert max(_loads_by_layer(contiguous, work, 2)) == 11.0
    assert max(_loads_by_layer(rebalance_devices(contiguous, [0.0, *itertools.accumulate(work)], 2), work, 2)) == 11.0
    exchanged = exchange_layers(contiguous, work, 2)
    best = min(max(sum(w for w, d in zip(work, assignment) if d == device) for device in (0, 1))
               for assignment in itertools.product((0, 1), repeat=len(work)))
    assert best == 10.0 and max(_loads_by_layer(exchanged, work, 2)) == best


def test_the_waves_start_splits_so_that_the_slowest_device_under_memory_is_fastest():
    from planner.search.search import _Tuner
    profile = light_weights(big_head_profile(num_decoders=9))
    devices, microbatches = 3, 8
    state = layer_state_bytes(profile)
    limit = sum(state) / devices + max(state) + 0.5 * sum(layer.activation_bytes for layer in profile.layers) / devices
    scorer = scorer_for(profile, devices, microbatches, memory=limit)
    layout = _Tuner(scorer, random.Random(0), 1.0, 0.0).waves_start()
    work = [layer.forward + layer.backward for layer in profile.layers]

    def slowest(starts):
        bounds = [*starts, profile.num_layers]
        costs = []
        for start, end in zip(bounds, bounds[1:]):
            left = limit - sum(state[start:end])
            fit = int(left // sum(layer.activation_bytes for layer in profile.layers[start:end]))
            costs.append(max(microbatches * sum(work[start:end]),
                             stage_waves_ms(profile, start, end, microbatches, fit)))
        return max(costs)

    every = [slowest((0, *cuts)) for cuts in itertools.combinations(range(1, profile.num_layers), devices - 1)]
    assert layout.stage_device == (0, 1, 2) and slowest(layout.starts) == pytest.approx(min(every))
    # Memory binds here: the front device, which holds each micro-batch longest, gets fewer layers than a split
    # that balances work alone.
    assert slowest(layout.starts) > microbatches * max(device_loads(layout, scorer.work_prefix, devices)) * 0.999
    balanced = balanced_starts(work, devices)
    assert layout.starts[1] <= balanced[1]
