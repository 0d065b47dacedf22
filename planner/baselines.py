"""The fixed strategies AdaPtis is compared against, as complete, simulated plans.

A baseline is a schedule (which fixes the placement and the per-device order) plus a partition of the
profile's layers into that schedule's stages. ``predicted`` holds the simulator's compact metrics.
"""

from __future__ import annotations

from planner.cluster import ClusterSpec
from planner.errors import SpecError
from planner.layout import layer_codes_from_profile, plan_layout_string
from planner.partition import PARTITION_NAMES, partition_layers
from planner.placement import placement_shape
from planner.plan import Plan, Stage
from planner.profile import Profile
from planner.scheduling import SCHEDULE_NAMES, chunks_per_device, generate_schedule
from planner.simulator import simulate_summary

BASELINE_SCHEDULES = SCHEDULE_NAMES
PARTITIONS = PARTITION_NAMES


def build_baseline(schedule: str, profile: Profile, num_devices: int, num_microbatches: int, *,
                   cluster: ClusterSpec | None = None, partition: str = "uniform", chunks: int = 2) -> Plan:
    """Partition ``profile`` for ``schedule`` on ``num_devices`` devices and simulate the result.

    ``chunks`` (model chunks per device) only applies to interleaved 1F1B; ZB-V always uses two, the
    other schedules one.
    """
    if schedule not in BASELINE_SCHEDULES:
        raise SpecError("schedule", f"must be one of {', '.join(BASELINE_SCHEDULES)}; got {schedule!r}")
    if partition not in PARTITIONS:
        raise SpecError("partition", f"must be one of {', '.join(PARTITIONS)}; got {partition!r}")
    if cluster is not None and isinstance(num_devices, int) and num_devices > cluster.num_devices:
        raise SpecError("num_devices", f"the cluster {cluster.name!r} has {cluster.num_devices} devices, "
                                       f"asked for {num_devices}")
    pipeline = generate_schedule(schedule, num_devices, num_microbatches, chunks=chunks)
    layer_groups = partition_layers(partition, profile, pipeline.num_stages)
    stages = [Stage(layers, device) for layers, device in zip(layer_groups, pipeline.stage_devices)]
    plan = Plan(num_devices=num_devices, num_microbatches=num_microbatches, stages=stages,
                actions=pipeline.actions, strategy=schedule)
    # simulate checks the plan's structure and dependencies (PlanError) before it times anything.
    plan.predicted = simulate_summary(plan, profile, cluster)
    plan.meta = {"partition": partition, "chunks": chunks_per_device(schedule, chunks),
                 "placement": placement_shape(pipeline.stage_devices, num_devices),
                 "layout": plan_layout_string(plan, layer_codes_from_profile(profile)),
                 "profile": profile.model, "cluster": cluster.name if cluster is not None else None}
    return plan
