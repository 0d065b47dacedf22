"""The planner's baseline schedules are torch.distributed.pipelining's, action for action.

``benchmarks/executor_vs_torch.py`` compares our executor with torch's schedule classes on the same plan;
that comparison is only fair while both run the same per-rank compute order. Torch computes its order in
the schedule's constructor from the stages' group size; the ``pipeline_order`` method below calls the same
per-rank function without building stages or a process group.
"""

from __future__ import annotations

import pytest
from torch.distributed.pipelining import ScheduleInterleaved1F1B, ScheduleZBVZeroBubble
from torch.distributed.pipelining._utils import generate_stage_to_rank_mapping

from planner.scheduling import generate_schedule


def torch_pipeline_order(schedule_class, num_devices: int, num_microbatches: int) -> list[list[str]]:
    """Torch's compute-only actions per rank (``_calculate_single_rank_operations``) for two stages per rank."""
    schedule = object.__new__(schedule_class)
    schedule.pp_group_size, schedule._n_microbatches = num_devices, num_microbatches
    schedule.n_local_stages, schedule.num_stages = 2, 2 * num_devices
    schedule.number_of_rounds = max(1, num_microbatches // num_devices)
    schedule.microbatches_per_round = num_microbatches // schedule.number_of_rounds
    return [[str(action) for action in schedule._calculate_single_rank_operations(rank) if action is not None]
            for rank in range(num_devices)]


@pytest.mark.parametrize("name, schedule_class, placement", [("interleaved-1f1b", ScheduleInterleaved1F1B, "loop"),
                                                             ("zb-v", ScheduleZBVZeroBubble, "v")])
@pytest.mark.parametrize("num_devices, num_microbatches", [(2, 8), (4, 8), (4, 12)])
def test_planner_multi_stage_schedules_match_torch_action_for_action(name, schedule_class, placement, num_devices,
                                                                     num_microbatches):
    ours = generate_schedule(name, num_devices, num_microbatches, chunks=2)
    torch_placement = generate_stage_to_rank_mapping(num_devices, 2 * num_devices, style=placement)
    assert list(ours.stage_devices) == [torch_placement[stage] for stage in range(2 * num_devices)]
    assert [[str(action) for action in actions] for actions in ours.actions] == \
        torch_pipeline_order(schedule_class, num_devices, num_microbatches)
