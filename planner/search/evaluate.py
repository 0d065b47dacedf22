"""Scoring candidates: a layout plus a schedule policy -> a list schedule, its makespan and memory.

``CandidateScorer`` holds what every candidate of one search shares (prefix sums over the profile's
layers, link costs, the memory budget), caches scores, counts evaluations and enforces the search's
stop conditions (time budget, evaluation budget, cancellation) by raising ``StopSearch``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import accumulate
from typing import Callable

from planner.actions import ACTION_KINDS
from planner.bounds import pass_prefixes
from planner.cluster import ClusterSpec
from planner.memory import layer_state_bytes as unsharded_layer_state_bytes
from planner.plan import Action, Plan
from planner.profile import Profile
from planner.layout import Layout
from planner.search.list_scheduler import (
    Abandoned,
    Schedule,
    SchedulePolicy,
    StageTimes,
    list_schedule,
)
from planner.simulator.costs import StageCosts

INFEASIBLE = float("inf")


class StopSearch(Exception):
    """Raised inside the search when it must stop: ``reason`` is cancelled, time budget or evaluations."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class Candidate:
    layout: Layout
    policy: SchedulePolicy
    schedule: Schedule | None       # None when the layout cannot fit its model state
    makespan: float                 # INFEASIBLE when it breaks the memory limit
    origin: str
    device_excess: list[float]      # bytes over the limit per device (all 0 when it fits)
    abandoned: bool = False         # scheduling stopped once sure to end at or after ``makespan``

    @property
    def feasible(self) -> bool:
        return self.makespan < INFEASIBLE

    @property
    def rank(self) -> tuple[int, float]:
        """Smaller is better: any plan that fits beats any that does not; misfits by how far over."""
        if self.feasible:
            return 0, self.makespan
        return 1, max(self.device_excess)


class CandidateScorer:
    """Without a budget (the defaults), it scores and times stages unlimited: what the plan editor asks of it."""

    def __init__(self, profile: Profile, num_devices: int, num_microbatches: int, *,
                 cluster: ClusterSpec | None, memory_limit_bytes: float = INFEASIBLE,
                 activation_limit_bytes: float = INFEASIBLE, deadline: float | None = None,
                 max_evaluations: float = INFEASIBLE, max_scheduled_actions: float = INFEASIBLE,
                 cancel: Callable[[], bool] | None = None, layer_state_bytes: list[float] | None = None):
        """``layer_state_bytes``: the model state each layer costs the device holding it (default: unsharded,
        ``planner.memory.layer_state_bytes``); a hybrid job passes its sharded state."""
        self.profile = profile
        self.num_devices = num_devices
        self.num_microbatches = num_microbatches
        self.cluster = cluster
        self.memory_limit_bytes = memory_limit_bytes
        self.activation_limit_bytes = activation_limit_bytes
        self.deadline = deadline
        self.max_evaluations = max_evaluations
        self.max_scheduled_actions = max_scheduled_actions
        self.scheduled_actions = 0
        self.cancel = cancel
        layers = profile.layers
        self.forward_prefix, self.input_prefix, self.weight_prefix = pass_prefixes(profile)
        self.work_prefix = [0.0, *accumulate(layer.forward + layer.backward for layer in layers)]
        self.activation_prefix = [0, *accumulate(layer.activation_bytes for layer in layers)]
        self.param_prefix = [0, *accumulate(layer.param_bytes for layer in layers)]
        state = unsharded_layer_state_bytes(profile) if layer_state_bytes is None else layer_state_bytes
        self.state_prefix = [0, *accumulate(state)]
        self.cache: dict[tuple[Layout, SchedulePolicy], Candidate] = {}
        self.evaluations = 0
        self.best_makespan = INFEASIBLE
        # Called after every evaluation (progress reports read the counters above).
        self.on_evaluation: Callable[[], None] | None = None

    def check_stop(self) -> None:
        if self.cancel is not None and self.cancel():
            raise StopSearch("cancelled")
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise StopSearch("time budget")
        if self.evaluations >= self.max_evaluations or self.scheduled_actions >= self.max_scheduled_actions:
            raise StopSearch("evaluation budget")

    def model_state_bytes(self, layout: Layout) -> list[float]:
        state = [0] * self.num_devices
        for stage, device in enumerate(layout.stage_device):
            state[device] += self.state_prefix[layout.stage_end(stage)] - self.state_prefix[layout.starts[stage]]
        return state

    def stage_times(self, layout: Layout) -> StageTimes:
        """The list scheduler's inputs for ``layout``: the simulator's stage costs (``StageCosts.of_sums``) over
        this profile's prefix sums, each action's message handling folded into its hold on the device."""
        def sums(prefix):
            return tuple(prefix[layout.stage_end(stage)] - prefix[layout.starts[stage]]
                         for stage in range(layout.num_stages))

        boundary = tuple(self.profile.layers[layout.stage_end(stage) - 1].output_bytes
                         for stage in range(layout.num_stages))
        costs = StageCosts.of_sums(sums(self.forward_prefix), sums(self.input_prefix), sums(self.weight_prefix),
                                   boundary, layout.stage_device, self.cluster)
        return StageTimes(
            forward=tuple(map(sum, zip(costs.forward, costs.forward_pre, costs.forward_post))),
            backward_input=tuple(map(sum, zip(costs.backward_input, costs.backward_pre, costs.backward_post))),
            backward_weight=costs.backward_weight, forward_lag=costs.forward_lag, gradient_lag=costs.gradient_lag,
            activation_bytes=sums(self.activation_prefix), stage_device=layout.stage_device,
            num_devices=self.num_devices)

    def device_work(self, layout: Layout) -> list[float]:
        loads = [0.0] * self.num_devices
        for stage, device in enumerate(layout.stage_device):
            loads[device] += self.work_prefix[layout.stage_end(stage)] - self.work_prefix[layout.starts[stage]]
        return loads

    def layout_bound(self, layout: Layout) -> float:
        """A makespan no schedule of ``layout`` beats, without scheduling it.

        Every action on device d serves some micro-batch on one of d's stages, and needs that
        micro-batch's forward through every layer before d's lowest layer; so d idles at least that
        forward prefix before it starts, then runs its whole load (F + I + W of its layers, ``m`` times)
        serially. Transfers only add time, so they are left out.
        """
        loads = self.device_work(layout)
        first_layer = [self.profile.num_layers] * self.num_devices
        for stage, device in enumerate(layout.stage_device):
            first_layer[device] = min(first_layer[device], layout.starts[stage])
        return max(self.forward_prefix[first] + load * self.num_microbatches
                   for first, load in zip(first_layer, loads) if load > 0)

    def score(self, layout: Layout, policy: SchedulePolicy, origin: str,
              give_up_at: float = INFEASIBLE) -> Candidate:
        """Score a candidate; with ``give_up_at``, one sure to end no earlier comes back ``abandoned``
        with ``makespan == give_up_at`` (a lower bound on its true makespan, so it never ranks first)."""
        key = (layout, policy)
        cached = self.cache.get(key)
        if cached is not None and not (cached.abandoned and cached.makespan < give_up_at):
            return cached
        self.check_stop()
        self.evaluations += 1
        state = self.model_state_bytes(layout)
        caps = [min(self.memory_limit_bytes - device_state, self.activation_limit_bytes) for device_state in state]
        if min(caps) < 0:
            # The model state alone does not fit: no schedule can help, the partition must change.
            candidate = Candidate(layout, policy, None, INFEASIBLE, origin, [max(-cap, 0.0) for cap in caps])
        else:
            schedule = list_schedule(self.stage_times(layout), self.num_microbatches, policy, caps,
                                     give_up_at)
            if isinstance(schedule, Abandoned):
                self.scheduled_actions += schedule.committed
                candidate = Candidate(layout, policy, None, give_up_at, origin, [0.0] * self.num_devices,
                                      abandoned=True)
                self.cache[key] = candidate
                if self.on_evaluation is not None:
                    self.on_evaluation()
                return candidate
            self.scheduled_actions += sum(len(order) for order in schedule.orders)
            excess = [max(peak - cap, 0.0) for peak, cap in zip(schedule.activation_peak, caps)]
            makespan = INFEASIBLE if any(excess) else schedule.makespan
            candidate = Candidate(layout, policy, schedule, makespan, origin, excess)
        self.cache[key] = candidate
        self.best_makespan = min(self.best_makespan, candidate.makespan)
        if self.on_evaluation is not None:
            self.on_evaluation()
        return candidate


def candidate_plan(candidate: Candidate, num_devices: int, num_microbatches: int) -> Plan:
    actions = [[Action(stage, ACTION_KINDS[kind], microbatch) for stage, kind, microbatch in order]
               for order in candidate.schedule.orders]
    return Plan(num_devices=num_devices, num_microbatches=num_microbatches, stages=candidate.layout.stages(),
                actions=actions, strategy="adaptis")
