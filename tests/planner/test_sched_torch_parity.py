"""Our schedule generators produce the same per-device compute order as torch.distributed.pipelining 2.13.

How torch's order is obtained without running a pipeline:
- multi-stage classes (``ScheduleInterleaved1F1B``, ``ScheduleInterleavedZeroBubble``,
  ``ScheduleZBVZeroBubble``) build ``pipeline_order`` in their constructor; we construct them on mocked
  stages (as ``_schedule_visualizer.get_schedule_ops`` does) and drop the ``None`` spacers and
  non-compute actions. ``ScheduleInterleavedZeroBubble`` with one stage per rank is ZB-H1.
- single-stage classes (``ScheduleGPipe``, ``Schedule1F1B``) decide their order inside
  ``_step_microbatches``; their ``pipeline_order`` is only an illustration (for ``Schedule1F1B`` it skips
  micro-batch 0 on the last rank in 2.13). So we run ``_step_microbatches`` itself on a mocked stage
  with the point-to-point calls patched out and record the ``forward_one_chunk``/``backward_one_chunk``
  calls: the order torch really executes.
"""

from unittest import mock

import pytest

torch_schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
from torch.distributed.pipelining.stage import PipelineStage  # noqa: E402

from planner.scheduling import gpipe, interleaved_1f1b, interleaved_zero_bubble, one_f_one_b, zero_bubble_v  # noqa: E402


def _mock_stage(num_devices, num_stages, rank=0):
    stage = mock.create_autospec(PipelineStage, instance=True)
    stage.group_rank, stage.group_size, stage.num_stages, stage.submod = rank, num_devices, num_stages, None
    stage.stage_index, stage.is_first, stage.is_last = rank, rank == 0, rank == num_stages - 1
    return stage


def torch_multi_stage_order(schedule_class, num_devices, num_microbatches, stages_per_rank):
    stage = _mock_stage(num_devices, num_devices * stages_per_rank)
    schedule = schedule_class([stage] * stages_per_rank, num_microbatches)
    return [[str(action) for action in schedule.pipeline_order[rank] if action is not None and action.is_compute_op]
            for rank in range(num_devices)]


def torch_single_stage_order(schedule_class, num_devices, num_microbatches):
    orders = []
    for rank in range(num_devices):
        stage = _mock_stage(num_devices, num_devices, rank)
        executed = []
        stage.forward_one_chunk.side_effect = lambda mb, *a, rank=rank, **k: executed.append(f"{rank}F{mb}")
        stage.backward_one_chunk.side_effect = lambda mb, *a, rank=rank, **k: executed.append(f"{rank}B{mb}")
        schedule = schedule_class(stage, num_microbatches)
        with mock.patch.object(schedule, "_initialize_stage"), \
                mock.patch.object(torch_schedules, "_batch_p2p", return_value=[]), \
                mock.patch.object(torch_schedules, "_wait_batch_p2p"):
            schedule._step_microbatches([()] * num_microbatches, [{}] * num_microbatches)
        orders.append(executed)
    return orders


def ours(schedule):
    return [[str(action) for action in device_actions] for device_actions in schedule.actions]


@pytest.mark.parametrize("p, m", [(2, 2), (4, 4), (4, 8), (4, 3), (3, 7), (8, 16)])
def test_gpipe_matches_torch(p, m):
    assert ours(gpipe(p, m)) == torch_single_stage_order(torch_schedules.ScheduleGPipe, p, m)


@pytest.mark.parametrize("p, m", [(2, 2), (4, 4), (4, 8), (3, 7), (8, 16), (4, 13)])
def test_1f1b_matches_torch(p, m):   # torch's Schedule1F1B requires m >= p
    assert ours(one_f_one_b(p, m)) == torch_single_stage_order(torch_schedules.Schedule1F1B, p, m)


@pytest.mark.parametrize("p, m, v", [(4, 8, 2), (4, 6, 2), (4, 3, 2), (4, 10, 2), (2, 8, 3), (4, 16, 4),
                                     (8, 16, 2), (3, 5, 2), (1, 4, 2)])
def test_interleaved_1f1b_matches_torch(p, m, v):
    expected = torch_multi_stage_order(torch_schedules.ScheduleInterleaved1F1B, p, m, v)
    assert ours(interleaved_1f1b(p, m, v)) == expected


@pytest.mark.parametrize("p, m", [(2, 2), (4, 8), (4, 3), (4, 4), (3, 6), (8, 16)])
def test_zb_h1_matches_torch_interleaved_zero_bubble_with_one_stage_per_rank(p, m):
    expected = torch_multi_stage_order(torch_schedules.ScheduleInterleavedZeroBubble, p, m, 1)
    assert ours(interleaved_zero_bubble(p, m)) == expected


@pytest.mark.parametrize("p, m, v", [(4, 8, 2), (4, 6, 2), (2, 4, 3)])
def test_interleaved_zero_bubble_matches_torch(p, m, v):
    expected = torch_multi_stage_order(torch_schedules.ScheduleInterleavedZeroBubble, p, m, v)
    assert ours(interleaved_zero_bubble(p, m, v)) == expected


@pytest.mark.parametrize("p, m", [(2, 2), (4, 8), (4, 3), (4, 7), (3, 12), (8, 16), (1, 3)])
def test_zb_v_matches_torch(p, m):
    expected = torch_multi_stage_order(torch_schedules.ScheduleZBVZeroBubble, p, m, 2)
    assert ours(zero_bubble_v(p, m)) == expected
