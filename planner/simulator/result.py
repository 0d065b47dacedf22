"""The simulator's answer: iteration metrics, per-device accounting, and (on request) the timeline."""

from __future__ import annotations

from dataclasses import dataclass

from planner.actions import ACTIVATION
from planner.memory import DeviceMemory
from planner.plan import Plan
from planner.simulator.costs import StageCosts
from planner.simulator.engine import Execution
from planner.simulator.metrics import DeviceTime


@dataclass(frozen=True)
class DeviceStats:
    device: int
    time: DeviceTime
    memory: DeviceMemory

    def to_dict(self) -> dict:
        time = self.time
        return {"device": self.device, "busy_ms": time.busy_ms, "bubble_ms": time.bubble_ms,
                "warmup_bubble_ms": time.warmup_bubble_ms, "steady_bubble_ms": time.steady_bubble_ms,
                "cooldown_bubble_ms": time.cooldown_bubble_ms, "peak_memory_bytes": self.memory.peak_bytes,
                "activation_peak_bytes": self.memory.activation_peak_bytes,
                "model_state_bytes": self.memory.model_state_bytes,
                "exposed_comm_ms": time.exposed_comm_ms, "overlapped_comm_ms": time.overlapped_comm_ms,
                "message_ms": time.message_ms}


@dataclass(frozen=True)
class Simulation:
    plan: Plan
    costs: StageCosts
    execution: Execution
    per_device: tuple[DeviceStats, ...]
    iteration_ms: float
    bubble_ratio: float
    tokens_per_s: float | None
    mfu: float | None

    @property
    def peak_memory_bytes(self) -> int:
        return max((stats.memory.peak_bytes for stats in self.per_device), default=0)

    def action_times(self, device: int) -> list[tuple[float, float]]:
        """``(start_ms, end_ms)`` of each of ``device``'s actions' compute, in its order (message handling
        before and after it is not part of the action, as in an executor's timeline)."""
        plan, costs = self.plan, self.costs
        times = []
        for action, start in zip(plan.actions[device], self.execution.starts[device]):
            before, _ = costs.message_time(action.stage, action.type)
            begin = start + before
            times.append((begin, begin + costs.duration(action.stage, action.type)))
        return times

    def timeline(self) -> list[dict]:
        entries = []
        for device, device_actions in enumerate(self.plan.actions):
            for action, (start, end) in zip(device_actions, self.action_times(device)):
                entries.append({"device": device, "action": str(action), "stage": action.stage,
                                "type": action.type, "microbatch": action.microbatch,
                                "start_ms": start, "end_ms": end})
        return entries

    def transfers(self) -> list[dict]:
        """Every cross-device transfer: activations forward, input gradients backward."""
        plan, costs = self.plan, self.costs
        # (stage, boundary tensor, micro-batch) -> (when it leaves, the stage that consumes it)
        finished: dict[tuple[int, str, int], tuple[float, int | None]] = {}
        for device, device_actions in enumerate(plan.actions):
            for action, (_, end) in zip(device_actions, self.action_times(device)):
                kind = action.type.boundary
                if kind:
                    finished[(action.stage, kind, action.microbatch)] = (
                        end + costs.message_time(action.stage, action.type)[1], plan.output_stage(action))
        entries = []
        for (stage, kind, microbatch), (start, destination) in sorted(finished.items(), key=lambda item: item[1][0]):
            if destination is None:
                continue
            src_device, dst_device = plan.stage_device(stage), plan.stage_device(destination)
            if src_device == dst_device:
                continue
            lag = costs.forward_lag[destination] if kind == ACTIVATION else costs.gradient_lag[destination]
            nbytes = costs.boundary_bytes[stage if kind == ACTIVATION else destination]
            entries.append({"kind": kind, "src_stage": stage, "dst_stage": destination,
                            "src_device": src_device, "dst_device": dst_device, "microbatch": microbatch,
                            "bytes": nbytes, "start_ms": start, "end_ms": start + lag})
        return entries

    def to_dict(self, include_timeline: bool = True) -> dict:
        doc = {"iteration_ms": self.iteration_ms, "bubble_ratio": self.bubble_ratio,
               "tokens_per_s": self.tokens_per_s, "mfu": self.mfu,
               "peak_memory_bytes": self.peak_memory_bytes,
               "per_device": [stats.to_dict() for stats in self.per_device]}
        if include_timeline:
            doc["timeline"] = self.timeline()
            doc["transfers"] = self.transfers()
        return doc
