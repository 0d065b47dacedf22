"""torch.distributed.pipelining's compute-only CSV: one row per rank, one action (``2F0``) per cell.

Load it with ``_PipelineScheduleRuntime._load_csv(path)`` (or ``PipelineScheduleMulti._load_csv``): torch
infers the stage→rank map from the rows and inserts the send/recv actions itself.
"""

from __future__ import annotations

import csv
import io

from planner.plan import Plan


def torch_csv(plan: Plan) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for device_actions in plan.actions:
        writer.writerow([str(action) for action in device_actions])
    return buffer.getvalue()
