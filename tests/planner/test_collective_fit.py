"""Fitting a link class's latency and bandwidth to a hybrid run's collective events (planner.calibrate)."""

import itertools
from dataclasses import replace

import pytest

from planner.calibrate import (action_ms, fit_collective_links, fit_run_iteration_overhead, with_fitted_links,
                               with_kernel_overhead)
from planner.cluster import Link, load_cluster_preset
from planner.errors import SpecError
from planner.parallel.config import ParallelConfig
from planner.parallel.cost import (EXECUTOR_OPTIONS, CostOptions, all_to_all_ms, collective_ms, layer_comm_ms,
                                   layer_work, ring_collective_ms)
from planner.parallel.mapping import RankMapping
from planner.parallel.planning import pipeline, search
from planner.service import calibrate_hybrid_from_run
from planner.simulator import simulate
from planner.spec.presets import load_model_preset

LATENCY_US, BANDWIDTH_GB_S = 80.0, 1.5
INTER_LATENCY_US, INTER_BANDWIDTH_GB_S = 300.0, 0.4
CONFIG = ParallelConfig(tp=4, pp=1, dp=2, num_microbatches=4)   # 8 ranks: TP groups of 4, DP groups of 2


_NUMBERS = itertools.count()


def _event(op: str, nbytes: int, ms: float, start: float = 10.0, rank: int = 0, index: int | None = None) -> dict:
    """A collective of ``rank`` (each one its own, numbered apart, unless ``index`` says which of the step's)."""
    return {"type": "collective", "op": op, "group": op.split("_", 1)[0], "rank": rank, "device": 0, "step": 1,
            "index": next(_NUMBERS) if index is None else index, "bytes": nbytes, "start_ms": start,
            "end_ms": start + ms}


def _ring_ms(nbytes: int, size: int, latency_us: float, bandwidth_gb_s: float, passes: int = 1) -> float:
    # written out, not through the cost model: (size - 1) steps of nbytes / size each, per pass
    return passes * ((size - 1) * latency_us / 1e3 + (size - 1) / size * nbytes / (bandwidth_gb_s * 1e6))


def _one_host_events() -> list[dict]:
    events = []
    for nbytes in (4_096, 65_536, 1_048_576, 8_388_608):
        events.append(_event("tp_all_gather", nbytes, _ring_ms(nbytes, 4, LATENCY_US, BANDWIDTH_GB_S)))
        events.append(_event("tp_reduce_scatter", nbytes, _ring_ms(nbytes, 4, LATENCY_US, BANDWIDTH_GB_S)))
        events.append(_event("dp_all_reduce", nbytes, _ring_ms(nbytes, 2, LATENCY_US, BANDWIDTH_GB_S, passes=2)))
    return events


def test_fit_recovers_the_latency_and_bandwidth_the_collectives_took():
    cluster = load_cluster_preset("cpu-1x8")
    # a TP group's sum of its norms' partial gradients is an all-reduce too
    events = _one_host_events() + [_event("tp_grad_all_reduce", 2_048, _ring_ms(2_048, 4, LATENCY_US, BANDWIDTH_GB_S,
                                                                               passes=2))]
    [fit] = fit_collective_links(CONFIG, cluster, events)
    assert fit.link == "intra_node" and fit.samples == 13
    assert fit.latency_us == pytest.approx(LATENCY_US, rel=1e-9)
    assert fit.bandwidth_gb_s == pytest.approx(BANDWIDTH_GB_S, rel=1e-9)
    assert fit.median_error < 1e-9


def test_the_fitted_cluster_charges_each_collective_what_it_took():
    cluster = with_fitted_links(load_cluster_preset("cpu-1x8"),
                                fit_collective_links(CONFIG, load_cluster_preset("cpu-1x8"), _one_host_events()))
    tp = RankMapping(CONFIG, cluster).span("tp")
    assert ring_collective_ms(1_048_576, tp) == pytest.approx(_ring_ms(1_048_576, 4, LATENCY_US, BANDWIDTH_GB_S))
    assert cluster.inter_node == load_cluster_preset("cpu-1x8").inter_node   # no sample of it: unchanged


def test_each_link_class_is_fitted_to_its_own_collectives():
    # two hosts of four: each TP group inside one host, each DP group across the two
    cluster = replace(load_cluster_preset("cpu-2x4"), intra_node=Link(10.0, 1.0), inter_node=Link(1.0, 10.0))
    events = [event for event in _one_host_events() if event["group"] == "tp"]
    for nbytes in (4_096, 1_048_576, 8_388_608):
        # a ring across hosts with one rank on each: NIC-bound, 2 passes of 1 step moving nbytes / 2
        events.append(_event("dp_all_reduce", nbytes,
                             _ring_ms(nbytes, 2, INTER_LATENCY_US, INTER_BANDWIDTH_GB_S, passes=2)))
    fits = {fit.link: fit for fit in fit_collective_links(CONFIG, cluster, events)}
    assert fits["intra_node"].latency_us == pytest.approx(LATENCY_US, rel=1e-9)
    assert fits["intra_node"].bandwidth_gb_s == pytest.approx(BANDWIDTH_GB_S, rel=1e-9)
    assert fits["inter_node"].latency_us == pytest.approx(INTER_LATENCY_US, rel=1e-9)
    assert fits["inter_node"].bandwidth_gb_s == pytest.approx(INTER_BANDWIDTH_GB_S, rel=1e-9)
    assert fits["inter_node"].samples == 3


def test_all_to_all_dispatch_and_combine_are_fitted_with_one_latency_each():
    config = ParallelConfig(tp=1, pp=1, dp=4, ep=4, num_microbatches=4)
    events = []
    for nbytes in (8_192, 262_144, 4_194_304):
        ms = LATENCY_US / 1e3 + 3 / 4 * nbytes / (BANDWIDTH_GB_S * 1e6)   # three quarters leave the rank
        events += [_event("ep_dispatch", nbytes, ms), _event("ep_combine", nbytes, ms)]
    [fit] = fit_collective_links(config, load_cluster_preset("cpu-1x4"), events)
    assert fit.latency_us == pytest.approx(LATENCY_US, rel=1e-9)
    assert fit.bandwidth_gb_s == pytest.approx(BANDWIDTH_GB_S, rel=1e-9)


def test_a_latency_alone_is_fitted_where_every_collective_moved_the_same_bytes_and_the_rest_is_ignored():
    events = [_event("tp_all_gather", 1_000, 0.3 + 0.01 * (index % 3 - 1)) for index in range(9)]
    events += [_event("dp_optimizer_step", 10**6, 50.0), _event("pp_tied_all_reduce", 10**6, 70.0),
               _event("cp_all_gather", 10**6, 90.0),   # a CP group of one rank: nothing moved
               {"type": "action", "action": "0F0", "start_ms": 0.0, "end_ms": 1.0}]
    cluster = load_cluster_preset("cpu-1x8")
    [fit] = fit_collective_links(CONFIG, cluster, events)
    # all the same size: a slow link and a long latency cannot be told apart, so the cluster's bandwidth is kept
    # and the latency fitted (the mean of 0.29, 0.30 and 0.31 ms, less the kept transfer of 750 bytes)
    assert fit.samples == 9 and fit.bandwidth_gb_s is None
    assert 3 * fit.latency_us / 1e3 + 750 / (cluster.intra_node.bandwidth_gb_s * 1e6) == pytest.approx(0.3, rel=1e-9)
    assert with_fitted_links(cluster, [fit]).intra_node.bandwidth_gb_s == cluster.intra_node.bandwidth_gb_s


def test_malformed_collectives_and_runs_without_any_are_refused_naming_the_field():
    events = _one_host_events()
    events[3] = {**events[3], "bytes": "many"}
    with pytest.raises(SpecError) as error:
        fit_collective_links(CONFIG, load_cluster_preset("cpu-1x8"), events)
    assert error.value.field == "observed_events[3].bytes"
    with pytest.raises(SpecError) as error:
        fit_collective_links(CONFIG, load_cluster_preset("cpu-1x8"), [_event("tp_all_gather", 8, 2.0, 5.0) | {
            "end_ms": 1.0}])
    assert error.value.field == "observed_events[0].end_ms"
    with pytest.raises(SpecError) as error:
        fit_collective_links(CONFIG, load_cluster_preset("cpu-1x8"), [_event("dp_optimizer_step", 8, 2.0)])
    assert error.value.field == "observed_events" and "no collective" in error.value.reason


@pytest.mark.parametrize("cluster_name", ["cpu-1x8", "h100-sxm-1x8"])
def test_the_fitted_model_of_a_collective_is_the_one_the_planner_charges(cluster_name):
    # inside one NVLink domain (where every local run is) collective_ms is ring_collective_ms and all_to_all_ms
    config = ParallelConfig(tp=4, pp=1, dp=2, ep=2, num_microbatches=4)
    mapping = RankMapping(config, load_cluster_preset(cluster_name))
    tp, ep = mapping.span("tp"), mapping.span("ep")
    assert collective_ms("all_gather", 3e6, tp) == pytest.approx(ring_collective_ms(3e6, tp), rel=1e-12)
    assert collective_ms("reduce_scatter", 3e6, tp) == pytest.approx(ring_collective_ms(3e6, tp), rel=1e-12)
    assert collective_ms("all_reduce", 3e6, tp) == pytest.approx(2 * ring_collective_ms(3e6, tp), rel=1e-12)
    assert collective_ms("dispatch", 3e6, ep) == pytest.approx(all_to_all_ms(3e6, ep), rel=1e-12)
    with pytest.raises(SpecError) as error:
        collective_ms("broadcast", 3e6, tp)
    assert error.value.field == "op"


def test_a_hybrid_run_calibrates_the_links_and_the_kernel_overhead_of_the_cluster_it_ran_on():
    spec = load_model_preset("tiny-llama")
    pins = {"tp": 2, "cp": 1, "pp": 2, "dp": 1, "ep": 1, "microbatch_size": 1, "recompute": "none"}
    plan = search(spec, "cpu-1x4", 4, spec.seq_len, 4, pins).best.plan
    shipped = load_cluster_preset("cpu-1x4")
    true_cluster = with_kernel_overhead(replace(shipped, intra_node=replace(shipped.intra_node, latency_us=LATENCY_US,
                                                                           bandwidth_gb_s=BANDWIDTH_GB_S)), 37.0)
    profile = pipeline(plan, spec, true_cluster, spec.seq_len)[0]
    events, clock = [], 0.0
    for device, actions in enumerate(plan.actions):   # every action taking what the true cluster charges it
        for action in actions:
            took = action_ms(profile, plan, action.stage, action.type)
            events.append({"type": "action", "action": str(action), "device": device, "step": 1,
                           "start_ms": clock, "end_ms": clock + took})
            clock += took
    for nbytes in (4_096, 1_048_576, 8_388_608):   # the plan's TP groups have two ranks
        events.append(_event("tp_all_gather", nbytes, _ring_ms(nbytes, 2, LATENCY_US, BANDWIDTH_GB_S)))
    calibration = calibrate_hybrid_from_run(plan_doc=plan.to_dict(), model_doc=spec.to_dict(),
                                            cluster_doc=shipped.to_dict(), events=events, warmup_steps=0)
    assert calibration.profile is None
    assert calibration.record["kernel_overhead_us"] == pytest.approx(37.0, rel=1e-9)
    assert calibration.cluster.device.kernel_overhead_us == pytest.approx(37.0, rel=1e-9)
    assert calibration.cluster.intra_node.latency_us == pytest.approx(LATENCY_US, rel=1e-9)
    assert calibration.cluster.intra_node.bandwidth_gb_s == pytest.approx(BANDWIDTH_GB_S, rel=1e-9)
    with pytest.raises(SpecError) as error:   # a run without collectives has nothing to fit the links to
        calibrate_hybrid_from_run(plan_doc=plan.to_dict(), model_doc=spec.to_dict(), cluster_doc=shipped.to_dict(),
                                  events=[e for e in events if e["type"] == "action"], warmup_steps=0)
    assert error.value.field == "observed_events"


def test_context_parallel_as_the_executor_runs_it_charges_keys_and_values_gathered_whole():
    # Megatron's --cp-comm-type allgather: each of K and V all-gathered in F (reduce-scattered in B), not overlapped
    spec, cluster, tokens = load_model_preset("llama-3-8b"), load_cluster_preset("h100-sxm-1x8"), 8192
    config = ParallelConfig(tp=2, cp=2, pp=1, dp=2, num_microbatches=4)
    mapping = RankMapping(config, cluster)
    work = layer_work(spec, cluster, 1, tokens)[1]
    forward, backward = layer_comm_ms(spec.layers[1], work, spec, config, mapping, tokens,
                                      CostOptions(cp_comm="allgather"))
    # sequence parallelism: an all-gather and a reduce-scatter per sublayer of this CP rank's tokens
    tp_ms = 4 * ring_collective_ms(tokens / 2 * 4096 * 2, mapping.span("tp"))
    keys = tokens * (8 / 2) * 128 * 2      # every token's keys of this TP rank's 4 of 8 key/value heads, bf16
    assert forward == pytest.approx(tp_ms + 2 * ring_collective_ms(keys, mapping.span("cp")), rel=1e-12)
    assert backward == pytest.approx(forward, rel=1e-12)
    ring_forward, _ = layer_comm_ms(spec.layers[1], work, spec, config, mapping, tokens)   # Megatron's default
    assert ring_forward < forward


def test_the_overhead_fitted_to_a_runs_iteration_simulates_that_iteration():
    spec = load_model_preset("tiny-llama")
    pins = {"tp": 2, "cp": 1, "pp": 2, "dp": 1, "ep": 1, "microbatch_size": 1, "recompute": "none"}
    cluster = load_cluster_preset("cpu-1x4")
    plan = search(spec, cluster, 4, spec.seq_len, 4, pins).best.plan
    observed = 40.0   # one step's span: the first action at 0 ms, the last ending at 40 ms
    events = [{"type": "action", "action": str(plan.actions[0][0]), "step": 0, "start_ms": 0.0, "end_ms": 1.0},
              {"type": "action", "action": str(plan.actions[0][-1]), "step": 0, "start_ms": 39.0, "end_ms": observed}]
    overhead_us = fit_run_iteration_overhead(plan, spec, cluster, spec.seq_len, events)
    profile, ranks = pipeline(plan, spec, with_kernel_overhead(cluster, overhead_us), spec.seq_len, EXECUTOR_OPTIONS)
    assert simulate(plan, profile, ranks).iteration_ms == pytest.approx(observed, rel=2e-3)
    fast = [{**event, "end_ms": event["end_ms"] / 1000, "start_ms": event["start_ms"] / 1000} for event in events]
    assert fit_run_iteration_overhead(plan, spec, cluster, spec.seq_len, fast) == 0.0   # faster than any overhead


def test_collectives_too_small_for_their_bytes_to_show_fit_the_latency_alone():
    # 1 to 64 KB take about 1 ms each on a host whose ranks time-share their cores: at the link's 5 GB/s even the
    # largest would move in 10 us, so the times say nothing of the bandwidth, which is kept
    cluster = load_cluster_preset("cpu-1x8")
    events = [_event("tp_all_gather", nbytes, 3 * 0.33 + 0.01 * (index % 2))
              for index, nbytes in enumerate([1_024, 4_096, 16_384, 65_536] * 5)]
    [fit] = fit_collective_links(CONFIG, cluster, events)
    assert fit.bandwidth_gb_s is None
    transfer_ms = sum(3 / 4 * event["bytes"] for event in events) / (cluster.intra_node.bandwidth_gb_s * 1e6)
    mean_ms = sum(event["end_ms"] - event["start_ms"] for event in events) / len(events)
    assert fit.latency_us == pytest.approx((mean_ms - transfer_ms / len(events)) / 3 * 1e3, rel=1e-9)


def test_a_collective_counts_once_at_the_time_of_its_groups_last_rank():
    # TP groups of 4 (ranks 0-3 and 4-7): each rank reports the same all-gather; the three that waited for the
    # last took longer. Ranks 4-7's collective with the same number is another group's: it counts too.
    took = _ring_ms(1_048_576, 4, LATENCY_US, BANDWIDTH_GB_S)
    events = [_event("tp_all_gather", 1_048_576, took + wait, rank=rank, index=7)
              for rank, wait in zip(range(4), (2.0, 0.0, 0.5, 1.0))]
    events += [_event("tp_all_gather", 1_048_576, took + 0.25 * (rank - 4), rank=rank, index=7) for rank in range(4, 8)]
    events += [_event("tp_all_gather", 8_388_608, _ring_ms(8_388_608, 4, LATENCY_US, BANDWIDTH_GB_S) + wait,
                      rank=rank, index=9) for rank, wait in zip(range(4), (0.0, 3.0, 3.0, 3.0))]
    [fit] = fit_collective_links(CONFIG, load_cluster_preset("cpu-1x8"), events)
    assert fit.samples == 3
    assert fit.latency_us == pytest.approx(LATENCY_US, rel=1e-9)
    assert fit.bandwidth_gb_s == pytest.approx(BANDWIDTH_GB_S, rel=1e-9)
