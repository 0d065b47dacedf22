"""Why a configuration wins: every scored step is split into compute, recomputation, exposed TP, CP, EP and DP
communication, pipeline transfers, the bubble and the optimizer step, summing to the step. Each part is checked
against an independent computation: the same job on links that cost nothing, without recomputation, and the
simulator's own accounting of every pipeline rank's idle time."""

from dataclasses import replace

import pytest

from planner.baselines import build_baseline
from planner.cluster import load_cluster_preset
from planner.parallel.config import ParallelConfig
from planner.parallel.cost import CostOptions
from planner.parallel.evaluate import STEP_PARTS, Job, estimate, plan_pipeline, score_plan, shard_profile
from planner.simulator import simulate
from planner.spec.presets import load_model_preset

CLUSTER = load_cluster_preset("h100-sxm-8x8")
MIXTRAL = load_model_preset("mixtral-8x7b")


def free_links(cluster):
    """The same cluster with links that take no time: what is left of a step is its compute."""
    free = replace(cluster.intra_node, bandwidth_gb_s=1e15, latency_us=0.0, overhead_us=0.0)
    return replace(cluster, intra_node=free, inter_node=free)


def job_on(cluster, options=CostOptions()):
    return Job(MIXTRAL, cluster, 64, 4096, 256, options)


def assert_adds_up(score):
    breakdown = score.breakdown_ms
    assert list(breakdown) == list(STEP_PARTS)
    assert all(ms >= 0 for ms in breakdown.values()), breakdown
    assert sum(breakdown.values()) == pytest.approx(score.iteration_ms, rel=1e-12)
    assert breakdown["dp"] == score.data_parallel_ms and breakdown["optimizer"] == score.optimizer_ms
    assert score.metrics()["breakdown_ms"] == breakdown


def test_without_a_pipeline_the_communication_is_what_free_links_take_away():
    # one pipeline rank: the step is its work, so what the links add to it is exactly its TP, CP and EP parts (CP
    # as all-gathered keys and values, which is not hidden behind attention as the ring is)
    config = ParallelConfig(tp=2, cp=2, pp=1, dp=16, ep=8, microbatch_size=1, num_microbatches=16)
    options = CostOptions(cp_comm="allgather")
    score = estimate(job_on(CLUSTER, options), config)
    free = estimate(job_on(free_links(CLUSTER), options), config)
    assert_adds_up(score)
    parts = score.breakdown_ms
    assert min(parts["tp"], parts["cp"], parts["ep"]) > 0, parts
    assert parts["bubble"] == parts["pipeline_transfers"] == parts["recompute"] == 0
    assert parts["compute"] == pytest.approx(free.pipeline_ms, rel=1e-9)
    assert parts["tp"] + parts["cp"] + parts["ep"] == pytest.approx(score.pipeline_ms - free.pipeline_ms, rel=1e-9)


def test_recomputation_is_what_recomputing_adds_to_the_step():
    config = ParallelConfig(tp=2, cp=1, pp=1, dp=32, ep=8, microbatch_size=1, num_microbatches=8)
    kept = estimate(job_on(CLUSTER), config)
    recomputed = estimate(job_on(CLUSTER), replace(config, recompute="full"))
    assert_adds_up(recomputed)
    assert kept.breakdown_ms["recompute"] == 0
    assert recomputed.breakdown_ms["recompute"] == pytest.approx(recomputed.pipeline_ms - kept.pipeline_ms, rel=1e-9)
    for part in ("compute", "tp", "ep"):
        assert recomputed.breakdown_ms[part] == pytest.approx(kept.breakdown_ms[part], rel=1e-9)


def test_the_closed_forms_bubble_is_the_schedules():
    # Narayanan et al. 2021, Sec. 2.2: on its busiest rank 1F1B idles for the other ranks' work of one micro-batch;
    # interleaving v chunks divides that by v (free links: no transfers)
    model = load_model_preset("llama-3-8b")
    job = Job(model, free_links(CLUSTER), 64, 4096, 256)
    for chunks in (1, 2):
        config = ParallelConfig(tp=1, cp=1, pp=4, dp=16, microbatch_size=1, num_microbatches=16)
        score = estimate(job, config, chunks)
        assert_adds_up(score)
        profile, _ = shard_profile(job, config, chunks)
        ranks = [sum(layer.forward + layer.backward_input + layer.backward_weight for layer in layers)
                 for layers in _rank_layers(profile.layers, 4 * chunks, 4)]
        expected = (sum(ranks) - max(ranks)) / chunks
        assert score.breakdown_ms["bubble"] == pytest.approx(expected, rel=1e-9)
        assert score.breakdown_ms["pipeline_transfers"] == pytest.approx(0, abs=1e-9)


def _rank_layers(layers, stages, pp):
    from planner.partition.uniform import uniform_stage_layers

    split = uniform_stage_layers([layer.kind for layer in layers], stages)
    return [[layers[index] for stage in range(rank, stages, pp) for index in split[stage]] for rank in range(pp)]


def test_a_simulated_plans_idle_time_is_the_simulators_on_its_busiest_rank():
    config = ParallelConfig(tp=2, cp=1, pp=4, dp=8, ep=8, microbatch_size=1, num_microbatches=32)
    job = job_on(CLUSTER)
    profile, pipeline_cluster = shard_profile(job, config)
    plan = build_baseline("1f1b", profile, 4, 32, cluster=pipeline_cluster)
    plan.parallel = config
    score = score_plan(job, config, plan, "1f1b", 1)
    assert_adds_up(score)
    simulation = simulate(plan, *plan_pipeline(job, config, plan))
    busiest = max(simulation.per_device, key=lambda stats: stats.time.busy_ms)
    parts = score.breakdown_ms
    assert parts["bubble"] > 0 and parts["pipeline_transfers"] > 0
    assert parts["bubble"] + parts["pipeline_transfers"] == pytest.approx(busiest.time.bubble_ms, rel=1e-9)
    work = sum(parts[part] for part in ("compute", "recompute", "tp", "cp", "ep"))
    assert work == pytest.approx(busiest.time.busy_ms, rel=1e-9)
