"""Intra-op threads per rank: each rank gets its share of the host's cores unless told otherwise, the run
records what every rank used, and the profiler times with the thread count a run will use."""

from __future__ import annotations

import os

import pytest
import torch

from executor.running.config import RunConfig
from executor.running.cores import fair_share_threads, local_cores, usable_cores
from executor.running.launch import run_plan
from executor.measuring.profiler import measure_profile
from executor_plans import one_f_one_b
from planner.errors import SpecError
from planner.spec.presets import load_model_preset


def test_ranks_share_the_cores_without_oversubscribing_them():
    cores = usable_cores()
    assert fair_share_threads(1) == cores
    assert fair_share_threads(cores) == 1
    assert fair_share_threads(4 * cores) == 1   # more ranks than cores still get one thread each
    assert RunConfig().rank_threads(2) == max(1, cores // 2)
    assert RunConfig(threads_per_rank=3).rank_threads(2) == 3


def test_a_thread_count_below_one_is_refused_naming_the_field():
    with pytest.raises(SpecError) as raised:
        RunConfig(threads_per_rank=0)
    assert raised.value.field == "threads_per_rank"


def test_run_summary_records_every_ranks_thread_count_and_the_cores_the_kernel_bound_it_to():
    spec = load_model_preset("tiny-llama")
    result = run_plan(one_f_one_b([[0, 1, 2], [3, 4, 5]], num_microbatches=2), spec, threads_per_rank=1,
                      timeout_s=240)
    assert result.summary["threads_per_rank"] == [1, 1]
    # read back from the kernel in each rank: one core each, and not the same one
    cores = result.summary["cores_per_rank"]
    assert len(cores[0]) == len(cores[1]) == 1 and cores[0] != cores[1]
    assert set(cores[0] + cores[1]) <= os.sched_getaffinity(0)


def test_ranks_are_left_to_the_scheduler_when_told_or_when_they_do_not_fit():
    spec = load_model_preset("tiny-llama")
    plan = one_f_one_b([[0, 1, 2], [3, 4, 5]], num_microbatches=2)
    assert run_plan(plan, spec, threads_per_rank=1, bind_cores=False, timeout_s=240).summary["cores_per_rank"] == [
        None, None]
    too_many = len(os.sched_getaffinity(0))   # two ranks with every core each cannot have cores of their own
    assert run_plan(plan, spec, threads_per_rank=too_many, timeout_s=240).summary["cores_per_rank"] == [None, None]


def test_local_ranks_get_disjoint_consecutive_cores_of_the_affinity_set():
    cores = sorted(os.sched_getaffinity(0))
    assert local_cores(0, 1, len(cores)) == set(cores)
    assert local_cores(0, len(cores), 1) == {cores[0]} and local_cores(len(cores) - 1, len(cores), 1) == {cores[-1]}
    assert local_cores(0, 2, len(cores)) is None                 # 2 x all cores do not fit
    assert local_cores(0, len(cores) + 1, 1) is None
    assert local_cores(2, 2, 1) is None                          # not a local rank of 2


def test_profiler_times_with_the_requested_threads_and_restores_the_callers():
    before = torch.get_num_threads()
    profile = measure_profile(load_model_preset("tiny-llama"), repeats=1, warmup=0, threads=1)
    assert "1 threads" in profile.device
    assert torch.get_num_threads() == before
