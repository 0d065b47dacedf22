"""The AdaPtis search inside a hybrid job charges each GPU what the job's memory model does: its sharded model
state, its buffers and overheads; not the pure-PP planner's unsharded 18 bytes per parameter."""

import pytest

from planner.cluster import load_cluster_preset
from planner.errors import SpecError
from planner.parallel.config import ParallelConfig
from planner.parallel.evaluate import Job, pipeline_memory_budget, score_plan, shard_profile
from planner.search import search_plan
from planner.spec.presets import load_model_preset

# Llama 3 8B (8,030,261,248 parameters) on 8 A100-40GB: PP 2 x DP 4 with the distributed optimizer.
LLAMA_3_8B_PARAMETERS = 8_030_261_248
JOB = Job(model=load_model_preset("llama-3-8b"), cluster=load_cluster_preset("a100-40gb-pcie-1x8"), gpus=8,
          seq_len=4096, global_batch=64)
CONFIG = ParallelConfig(tp=1, pp=2, dp=4, microbatch_size=1, num_microbatches=16, recompute="full")


def test_the_search_charges_megatrons_6_plus_12_over_dp_bytes_per_parameter():
    profile, _ = shard_profile(JOB, CONFIG)
    _, layer_state, _ = pipeline_memory_budget(JOB, CONFIG, profile)
    assert sum(layer_state) == pytest.approx(LLAMA_3_8B_PARAMETERS * (6 + 12 / 4), rel=1e-9)


def test_a_pipeline_the_unsharded_accounting_refuses_is_planned_within_the_gpu_under_the_jobs_sharding():
    profile, pipeline_cluster = shard_profile(JOB, CONFIG)
    # unsharded, each of the 2 ranks would need ~67 GiB / 2 of model state alone: more than 2 x 40 GB in all
    with pytest.raises(SpecError) as refused:
        search_plan(profile, CONFIG.pp, CONFIG.num_microbatches, cluster=pipeline_cluster,
                    memory_limit_bytes=JOB.cluster.device.memory_bytes, time_budget_s=1)
    assert refused.value.field == "memory_limit_bytes"

    charged, layer_state, limit = pipeline_memory_budget(JOB, CONFIG, profile)
    result = search_plan(charged, CONFIG.pp, CONFIG.num_microbatches, cluster=pipeline_cluster,
                         memory_limit_bytes=limit, layer_state_bytes=layer_state, time_budget_s=1)
    scored = score_plan(JOB, CONFIG, result.plan, "adaptis", 1)
    assert all(memory.fits for memory in scored.memory)
    assert limit <= JOB.cluster.device.memory_bytes - (1 << 30) - (512 << 20)   # the CUDA context, NCCL buffers
