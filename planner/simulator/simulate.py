"""``simulate``: the performance model every planner part scores plans with."""

from __future__ import annotations

from planner.cluster import ClusterSpec
from planner.memory import device_memory
from planner.plan import Plan
from planner.profile import Profile
from planner.simulator.costs import stage_costs
from planner.simulator.engine import execute
from planner.simulator.metrics import device_times
from planner.simulator.program import compile_programs
from planner.simulator.result import DeviceStats, Simulation
from planner.plan_check import check_plan_structure


def simulate(plan: Plan, profile: Profile, cluster: ClusterSpec | None = None) -> Simulation:
    """Run ``plan`` on ``profile``'s costs; transfers cost ``cluster``'s link times (0 without one).

    Raises ``PlanError`` for a structurally invalid plan and, naming the blocked actions, on a deadlock.
    """
    check_plan_structure(plan, profile.num_layers)
    costs = stage_costs(plan, profile, cluster)
    programs = compile_programs(plan, costs)
    execution = execute(programs, plan)
    times = device_times(programs, execution)
    memory = device_memory(plan, profile)
    iteration_ms = execution.makespan
    num_devices = plan.num_devices
    bubble_ratio = (sum(time.bubble_ms for time in times) / (num_devices * iteration_ms)
                    if iteration_ms > 0 else 0.0)
    tokens = plan.num_microbatches * profile.microbatch_size * profile.seq_len
    tokens_per_s = tokens / (iteration_ms / 1e3) if iteration_ms > 0 else None
    mfu = None
    if cluster is not None and iteration_ms > 0 and profile.flops_per_microbatch > 0:
        peak_flops_per_s = num_devices * cluster.device.peak_tflops * 1e12
        mfu = profile.flops_per_microbatch * plan.num_microbatches / (iteration_ms / 1e3) / peak_flops_per_s
    per_device = tuple(DeviceStats(device, times[device], memory[device]) for device in range(num_devices))
    return Simulation(plan=plan, costs=costs, execution=execution, per_device=per_device,
                      iteration_ms=iteration_ms, bubble_ratio=bubble_ratio, tokens_per_s=tokens_per_s, mfu=mfu)


def simulate_summary(plan: Plan, profile: Profile, cluster: ClusterSpec | None = None) -> dict:
    """The compact metrics block stored as a plan's ``predicted`` (no timeline, no transfers)."""
    return simulate(plan, profile, cluster).to_dict(include_timeline=False)
