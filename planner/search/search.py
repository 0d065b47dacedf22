"""``search_plan``: AdaPtis's co-optimisation of partition, placement and schedule.

1. Score every baseline (each schedule with a uniform and a time-balanced partition) on the profile.
2. Starts: each baseline's partition and placement, plus loop and V layouts over S = p .. 4p stages
   with device-balanced partitions, each under a few schedule policies (list scheduler).
3. Phase-by-phase tuning of the best few starts: diagnose the bottleneck from the candidate's timeline,
   try the matching phase's moves, keep the best neighbour only if it beats the current candidate
   (otherwise roll back and try the next phase); at a local optimum restart from a perturbed best until that
   stops paying; then, under a memory limit, tune a start split for memory (``_Tuner.waves_start``); then
   restart, in turn, from a perturbed best, another stage count and shape, the best's layers exchanged between
   devices, a partition that trades balance for memory (``_Tuner.restart``), and the starts not yet tuned.
4. Stop on the time budget (``DEFAULT_TIME_BUDGET_S``), on cancellation, once within ``target_gap`` of the
   bound, or once its patience is spent: ``PATIENCE_PER_PERCENT`` evaluations without a better plan for every
   percent its best is above the bound (``patience``). No fixed evaluation cap: a search far from the bound, or
   still finding better plans, keeps its budget. ``max_evaluations`` and ``max_scheduled_actions`` cap it only
   when given (tests that must be reproducible).
5. The best candidate is validated and simulated; it is returned unless a baseline that fits memory
   is faster, in which case that baseline is (so the search is never worse than where it started).

Everything is deterministic for a given seed unless a time budget or cancellation cuts the run short.
"""

from __future__ import annotations

import random
import time
from dataclasses import replace
from typing import Callable

from planner.baselines import BASELINE_SCHEDULES, build_baseline
from planner.bounds import binding_term, plan_memory_limit, search_lower_bound, stage_hold_ms, waves_ms
from planner.cluster import ClusterSpec
from planner.errors import SpecError
from planner.layout import Layout, layer_codes_from_profile, plan_layout_string
from planner.memory import layer_state_bytes as unsharded_layer_state_bytes
from planner.partition.contiguous import split_min_max
from planner.placement import SHAPES, shape_placement
from planner.plan import Plan
from planner.profile import Profile
from planner.search.evaluate import Candidate, CandidateScorer, StopSearch, candidate_plan
from planner.search.list_scheduler import UNBOUNDED_INFLIGHT, SchedulePolicy
from planner.search.partition import balanced_starts, exchange_layers, rebalance_devices
from planner.search.result import SearchResult
from planner.search.tuning import (INFLIGHT_SCALES, diagnose, partition_moves, perturbed, placement_moves, policy_moves,
                                   restructure)
from planner.plan_check import validate_plan
from planner.simulator import simulate
from planner.units import binary_bytes

DEFAULT_TIME_BUDGET_S = 60.0
# Patience (``patience``): evaluations without a better plan before the search stops, PATIENCE_PER_PERCENT per
# percent of the best plan's gap to the bound (a plan 70 % above it: 1,400; 3 % above: 60), at least MIN_PATIENCE.
PATIENCE_PER_PERCENT = 20
MIN_PATIENCE = 20
BEAM_WIDTH = 3
RESTARTS_WITHOUT_GAIN = 6   # the first phase: restarts from the perturbed best until this many in a row gain nothing
RESTART_KINDS = 6   # ``_Tuner.restart``'s five kinds, and the next untuned start
STALE_RESTARTS = 50  # restarts in a row that find only candidates already scored: the search has converged
POLISH_WEIGHT_LAGS = (1, 2, 4, 8)   # ``_Tuner.polish_policy``'s W lags (the tuner's own moves take p, 2p or none)
PLACEMENT_MOVES_PER_STEP = 12
EXCHANGE_STARTS = 4  # best distinct starts whose layers are exchanged between devices for another start
BASELINE_PARTITIONS = ("uniform", "time-balanced")
START_POLICIES = (
    SchedulePolicy(split_backward=False),
    SchedulePolicy(split_backward=True),
    SchedulePolicy(split_backward=True, inflight_scale=1.5),
)
MEMORY_POLICY = SchedulePolicy(split_backward=True, inflight_scale=0.5)

Progress = Callable[[float, str], None]


def search_plan(profile: Profile, num_devices: int, num_microbatches: int, *, cluster: ClusterSpec | None = None,
                memory_limit_bytes: int | None = None, seed: int = 0, time_budget_s: float | None = None,
                progress: Progress | None = None, cancel: Callable[[], bool] | None = None, top_k: int = 5,
                activation_limit_bytes: int | None = None, max_evaluations: int | None = None,
                max_scheduled_actions: int | None = None, target_gap: float = 0.01,
                layer_state_bytes: list[float] | None = None) -> SearchResult:
    """Search a plan for ``profile`` on ``num_devices`` devices and ``num_microbatches`` micro-batches.

    Memory is a hard constraint on every device: model state (params + grads + optimizer) plus in-flight
    activations within ``memory_limit_bytes`` (default: the cluster's device memory; unlimited without
    either), and in-flight activations alone within ``activation_limit_bytes`` when given. Each layer costs
    its device ``layer_state_bytes`` of model state (default: unsharded, ``planner.memory.layer_state_bytes``;
    a hybrid job passes its sharded state and a limit without its buffers). Raises
    ``SpecError("memory_limit_bytes", ...)`` when no plan can fit. ``time_budget_s`` defaults to
    ``DEFAULT_TIME_BUDGET_S``; ``max_evaluations`` (no cap by default) is for reproducible tests.
    """
    started = time.monotonic()
    if time_budget_s is None:
        time_budget_s = DEFAULT_TIME_BUDGET_S
    _check_arguments(profile, num_devices, num_microbatches, cluster, time_budget_s, top_k, max_evaluations)
    memory_limit = _memory_limit(memory_limit_bytes, cluster)
    activation_limit = float("inf") if activation_limit_bytes is None else activation_limit_bytes
    state = unsharded_layer_state_bytes(profile) if layer_state_bytes is None else list(layer_state_bytes)
    _check_model_state_fits(profile, state, num_devices, memory_limit)
    reporter = _Reporter(progress, started, time_budget_s)
    reporter.report(0.0, "scoring baselines")
    bound = search_lower_bound(profile, num_devices, num_microbatches, memory_limit_bytes=memory_limit,
                               layer_state_bytes=state, activation_limit_bytes=activation_limit)
    reporter.bound_ms = bound["lower_bound_ms"]
    baseline_plans, baselines = _score_baselines(profile, num_devices, num_microbatches, cluster,
                                                 memory_limit, activation_limit, state)
    scorer = CandidateScorer(profile, num_devices, num_microbatches, cluster=cluster,
                             memory_limit_bytes=memory_limit, activation_limit_bytes=activation_limit,
                             deadline=started + time_budget_s,
                             max_evaluations=float("inf") if max_evaluations is None else max_evaluations,
                             max_scheduled_actions=float("inf") if max_scheduled_actions is None
                             else max_scheduled_actions,
                             cancel=cancel, layer_state_bytes=state)
    scorer.on_evaluation = lambda: reporter.tick(scorer)
    tuner = _Tuner(scorer, random.Random(seed), bound["lower_bound_ms"], target_gap)
    stopped = "converged"
    try:
        tuner.run([Layout.of_stages(plan.stages, profile.num_layers) for plan in baseline_plans.values()])
    except StopSearch as stop:
        stopped = stop.reason
    plan, origin = _final_plan(tuner.best, baseline_plans, baselines, profile, num_devices, num_microbatches,
                               cluster, memory_limit, activation_limit)
    iteration_ms = plan.predicted["iteration_ms"]
    gap = iteration_ms / bound["lower_bound_ms"] - 1 if bound["lower_bound_ms"] > 0 else 0.0
    for metrics in baselines.values():
        metrics["adaptis_speedup"] = metrics["iteration_ms"] / iteration_ms if iteration_ms > 0 else None
    stats = {"evaluations": scorer.evaluations, "scheduled_actions": scorer.scheduled_actions,
             "seconds": time.monotonic() - started, "stopped": stopped, "restarts": tuner.restarts,
             "best_found_at": tuner.improved_at,
             "seed": seed, "max_evaluations": max_evaluations, "time_budget_s": time_budget_s,
             "target_gap": target_gap, "origin": origin}
    plan.meta.update({"lower_bound_ms": bound["lower_bound_ms"], "lower_bound": bound, "gap": gap,
                      "binding": binding_term(bound), "search": stats,
                      "memory_binding": plan_memory_limit(plan, profile, memory_limit_bytes=memory_limit,
                                                          layer_state_bytes=state,
                                                          activation_limit_bytes=activation_limit)})
    reporter.report(1.0, f"done: {iteration_ms:.1f} ms, {gap:.1%} above the lower bound")
    return SearchResult(plan=plan, lower_bound=bound, gap=gap, candidates=tuner.top(top_k, profile),
                        baselines=baselines, stats=stats, cancelled=stopped == "cancelled",
                        baseline_plans=baseline_plans)


def rehomed_end(layout: Layout, loads: list[float], rng: random.Random) -> Layout | None:
    """``layout`` with its last stage (the head's) or its first (the embedding's) moved to one of the two least loaded
    other devices, the head split into a stage of its own when it shares one; ``None`` when that would leave a
    device without a stage."""
    starts, devices = list(layout.starts), list(layout.stage_device)
    stage = rng.choice((0, len(starts) - 1))
    if stage and layout.stage_end(stage) - starts[stage] > 1 and rng.random() < 0.5:
        starts.append(layout.num_layers - 1)   # the head alone, after the rest of the last stage
        devices.append(devices[stage])
        stage += 1
    lightest = sorted((device for device in range(len(loads)) if device != devices[stage]), key=loads.__getitem__)
    devices[stage] = rng.choice(lightest[:2])
    if set(devices) != set(range(len(loads))):
        return None
    return Layout(tuple(starts), tuple(devices), layout.num_layers)


def first_phase_evaluations(num_devices: int) -> int:
    """The evaluations the search was capped at before it had patience (200 for up to 8 devices, 300 from 16): its
    first phase runs at least this long, unless it finishes sooner."""
    return int(min(300, max(200, 100 + 12.5 * num_devices)))


def patience(best: Candidate, bound_ms: float) -> float:
    """Evaluations without a better plan after which the search stops (see ``_Tuner.patience_spent``)."""
    gap = best.makespan / bound_ms - 1 if best.feasible and bound_ms > 0 else 1.0
    return max(MIN_PATIENCE, PATIENCE_PER_PERCENT * 100 * gap)


class _Tuner:
    """The search state: every candidate scored so far lives in the scorer's cache; ``best`` is the best."""

    def __init__(self, scorer: CandidateScorer, rng: random.Random, bound_ms: float, target_gap: float):
        self.scorer = scorer
        self.rng = rng
        self.bound_ms = bound_ms
        self.good_enough_ms = bound_ms * (1 + target_gap)
        self.best: Candidate | None = None
        self.improved_at = 0      # evaluations when ``best`` last improved
        self.restarts = 0
        self.widened = False      # past the first phase: the moves that phase did not make are open too
        # Work and model state, each as a share of its total, per layer prefix: a partition balanced on it trades
        # time balance for memory (what a device near its memory limit needs).
        work, state = scorer.work_prefix, scorer.state_prefix
        self.mixed_prefix = [time_share / (work[-1] or 1.0) + held / (state[-1] or 1.0)
                             for time_share, held in zip(work, state)]

    def consider(self, layout: Layout, policy: SchedulePolicy, origin: str,
                 give_up_at: float = float("inf")) -> Candidate:
        candidate = self.scorer.score(layout, policy, origin, give_up_at)
        if self.best is None or candidate.rank < self.best.rank:
            self.best = candidate
            self.improved_at = self.scorer.evaluations
            if candidate.feasible and candidate.makespan <= self.good_enough_ms:
                raise StopSearch("within target gap")
        return candidate

    def run(self, baseline_layouts: list[Layout]) -> None:
        starts = self.starts(baseline_layouts)
        beam = sorted(starts, key=lambda candidate: candidate.rank)
        seen, chosen = set(), []
        for candidate in beam:
            if candidate.layout not in seen:
                seen.add(candidate.layout)
                chosen.append(candidate)
        for candidate in chosen[:BEAM_WIDTH]:
            self.tune(candidate)
        # First the best perturbed until it stops paying, at least up to the evaluations the search used to be capped
        # at, with the moves the search has always made; then the wider restarts and moves (the reserve policy) while
        # patience lasts: every step only keeps a better plan, so the search ends no worse than that first phase
        # alone, which is the search as it was before it had patience.
        fruitless = 0
        while fruitless < RESTARTS_WITHOUT_GAIN:
            self.scorer.check_stop()   # cached candidates do not check the time budget or cancellation
            if self.scorer.evaluations >= first_phase_evaluations(self.scorer.num_devices) and self.patience_spent():
                break
            before = self.best.rank
            layout = perturbed(self.best.layout, self.rng, self.scorer.num_devices, self.scorer.work_prefix)
            self.tune(self.consider(layout, self.best.policy, "restart"))
            fruitless = fruitless + 1 if self.best.rank >= before else 0
        self.widened = True
        scorer = self.scorer
        # A start designed for the memory limit is always tried where the limit can bind: where one device could not
        # hold the whole model state and every micro-batch's activations.
        everything = scorer.state_prefix[-1] + scorer.num_microbatches * scorer.activation_prefix[-1]
        if min(scorer.memory_limit_bytes, scorer.activation_limit_bytes + scorer.state_prefix[-1]) < everything:
            layout = self.waves_start()
            if layout is not None:
                for policy in START_POLICIES:
                    self.tune(self.consider(layout, policy, "memory waves loop"))
        untuned = chosen[BEAM_WIDTH:]
        self.restart_while_patient(untuned)
        while self.polish_policy():   # each time strictly better, so it ends
            self.restart_while_patient(untuned)   # a better best earns its patience again

    def restart_while_patient(self, untuned: list[Candidate]) -> None:
        """The wider restarts, each tuned, until the best has gone unimproved for its patience or the restarts find
        nothing new."""
        stale = 0   # restarts in a row that scored nothing new (every candidate they reached was cached)
        while not self.patience_spent() and stale < STALE_RESTARTS:
            self.scorer.check_stop()   # cached candidates do not check the time budget or cancellation
            evaluations = self.scorer.evaluations
            if untuned and self.restarts % RESTART_KINDS == RESTART_KINDS - 1:
                # Every few restarts, the next start the beam left out: another basin, not the best's.
                self.restarts += 1
                self.tune(untuned.pop(0))
            else:
                layout, policy, origin = self.restart()
                self.tune(self.consider(layout, policy, origin))
            stale = stale + 1 if self.scorer.evaluations == evaluations else 0

    def polish_policy(self) -> bool:
        """Last, the best plan's layout under schedule policies the tuner's moves do not reach, tuned on from the best
        of them where that is better (True then): no in-flight limit but memory's (``UNBOUNDED_INFLIGHT``; a deep
        pipeline whose bottleneck is near its end needs every stage before it to run ahead of any warm-up depth:
        GLM-4.5-Air on 48 devices, one layer each, 1,633 -> 1,437 ms) and, with the backward split, W owed only a few
        at a time (``POLISH_WEIGHT_LAGS``; memory freed sooner admits more micro-batches: Mixtral on 16 devices,
        1,529 -> 1,497 ms), each with every in-flight scale. Tried once the search has converged rather than among
        its moves, so that it takes the steps it always took and ends no worse."""
        best = self.best
        if not best.feasible:
            return False
        inflight = {best.policy.inflight_scale, *INFLIGHT_SCALES, UNBOUNDED_INFLIGHT}
        lags = {best.policy.weight_lag, *POLISH_WEIGHT_LAGS} if best.policy.split_backward else {best.policy.weight_lag}
        variants = [replace(best.policy, inflight_scale=scale, weight_lag=lag)
                    for scale in sorted(inflight) for lag in sorted(lags)]
        before = best.rank
        scored = [self.consider(best.layout, policy, "policy polish") for policy in variants if policy != best.policy]
        polished = min(scored, key=lambda candidate: candidate.rank, default=None)
        if polished is None or polished.rank >= before:
            return False
        self.tune(polished)
        return True

    def patience_spent(self) -> bool:
        """Whether the best has gone unimproved for ``patience`` evaluations: the farther from the bound, the longer
        the search persists."""
        return self.scorer.evaluations - self.improved_at >= patience(self.best, self.bound_ms)

    def restart(self) -> tuple[Layout, SchedulePolicy, str]:
        """The next restart, in turn: the best perturbed; another stage count and shape with balanced devices; the
        best's layers exchanged between devices; a partition balanced on work and model state together; the stage
        with the head or the embedding moved to a lightly loaded device (and, in ``run``, the next start the beam
        did not tune)."""
        scorer, rng, best = self.scorer, self.rng, self.best
        num_devices, num_layers = scorer.num_devices, scorer.profile.num_layers
        kind = self.restarts % RESTART_KINDS
        self.restarts += 1
        policy = best.policy if kind == 0 else rng.choice((best.policy, *START_POLICIES, MEMORY_POLICY))
        if kind == 1:
            count = rng.randint(num_devices, min(num_layers, 4 * num_devices))
            shape = rng.choice(SHAPES) if count > num_devices else "loop"
            return restructure(num_layers, num_devices, count, shape, scorer.work_prefix), policy, \
                f"restart {shape} S={count}"
        if kind == 2:
            work = [layer.forward + layer.backward for layer in scorer.profile.layers]
            layout = exchange_layers(perturbed(best.layout, rng, num_devices, scorer.work_prefix), work, num_devices)
            return layout, policy, "restart layer exchange"
        if kind == 3:
            return rebalance_devices(best.layout, self.mixed_prefix, num_devices), policy, "restart memory balance"
        if kind == 4:
            layout = rehomed_end(best.layout, scorer.device_work(best.layout), rng)
            if layout is not None:
                return rebalance_devices(layout, scorer.work_prefix, num_devices), policy, "restart end re-homed"
        return perturbed(best.layout, rng, num_devices, scorer.work_prefix), policy, "restart"

    def starts(self, baseline_layouts: list[Layout]) -> list[Candidate]:
        num_devices, num_layers = self.scorer.num_devices, self.scorer.profile.num_layers
        layouts: list[tuple[Layout, str]] = []
        stage_counts = sorted({count for count in (num_devices, num_devices * 3 // 2, 2 * num_devices,
                                                    3 * num_devices, 4 * num_devices, num_layers)
                               if num_devices <= count <= min(num_layers, 4 * num_devices)})
        for count in stage_counts:
            for shape in SHAPES if count > num_devices else ("loop",):
                layouts.append((restructure(num_layers, num_devices, count, shape, self.scorer.work_prefix),
                                f"{shape} S={count}"))
        layouts += [(layout, "baseline layout") for layout in baseline_layouts]
        candidates = []
        for layout, origin in dict(layouts).items():
            for policy in START_POLICIES:
                candidates.append(self.consider(layout, policy, origin))
        candidates += self.exchange_starts(candidates)
        if not self.best.feasible:
            candidates += self.memory_starts(stage_counts)
        return candidates

    def waves_start(self) -> Layout | None:
        """One stage per device, split so that the slowest device is fastest when each device runs its load and its
        micro-batches pass in the waves its memory allows (``planner.bounds.stage_waves_ms``): a device near the
        front holds each micro-batch longest, so it gets fewer layers, and more room for micro-batches in flight."""
        scorer = self.scorer
        m, num_layers = scorer.num_microbatches, scorer.profile.num_layers
        prefixes = scorer.forward_prefix, scorer.input_prefix, scorer.weight_prefix

        def cost(start: int, end: int) -> float:
            activations = scorer.activation_prefix[end] - scorer.activation_prefix[start]
            left = min(scorer.memory_limit_bytes - (scorer.state_prefix[end] - scorer.state_prefix[start]),
                       scorer.activation_limit_bytes)
            fit = int(left // activations) if activations > 0 else m
            return max(m * (scorer.work_prefix[end] - scorer.work_prefix[start]),
                       waves_ms(m, fit, stage_hold_ms(*prefixes, start, end)))

        sizes, slowest = split_min_max(num_layers, scorer.num_devices, cost)
        if slowest == float("inf"):
            return None
        starts = tuple(sum(sizes[:index]) for index in range(len(sizes)))
        return Layout(starts, shape_placement("loop", len(sizes), scorer.num_devices), num_layers)

    def exchange_starts(self, candidates: list[Candidate]) -> list[Candidate]:
        """The best starts' layouts with single layers moved between devices (``exchange_layers``): the
        way to balance lumpy stacks that contiguous stage boundaries cannot."""
        work = [layer.forward + layer.backward for layer in self.scorer.profile.layers]
        seen, layouts = {candidate.layout for candidate in candidates}, []
        for candidate in sorted(candidates, key=lambda candidate: candidate.rank):
            if len(layouts) == EXCHANGE_STARTS:
                break
            layout = exchange_layers(candidate.layout, work, self.scorer.num_devices)
            if layout not in seen:
                seen.add(layout)
                layouts.append(layout)
        return [self.consider(layout, policy, "layer exchange") for layout in layouts for policy in START_POLICIES]

    def memory_starts(self, stage_counts: list[int]) -> list[Candidate]:
        """Starts for a tight memory limit: parameters spread evenly, few micro-batches in flight."""
        profile, num_devices = self.scorer.profile, self.scorer.num_devices
        params = [float(layer.param_bytes) for layer in profile.layers]
        param_prefix = [float(value) for value in self.scorer.param_prefix]
        candidates = []
        for count in stage_counts:
            for shape in SHAPES:
                layout = Layout(balanced_starts(params, count), shape_placement(shape, count, num_devices),
                                profile.num_layers)
                layout = rebalance_devices(layout, param_prefix, num_devices)
                candidates.append(self.consider(layout, MEMORY_POLICY, f"memory {shape} S={count}"))
        return candidates

    def tune(self, candidate: Candidate) -> Candidate:
        """Phase-by-phase descent from ``candidate`` to a local optimum."""
        current = candidate
        while True:
            for phase in self.phases(current):
                # A neighbour whose layout bound already reaches the current makespan could never be
                # kept, so it is not scheduled at all (the descent takes the same steps, cheaper).
                # and one is scheduled only until it is sure not to beat the current candidate.
                give_up_at = current.makespan if current.feasible else float("inf")
                neighbours = [self.consider(layout, policy, f"{phase} tuning", give_up_at)
                              for layout, policy in self.moves(current, phase)
                              if self.scorer.layout_bound(layout) < give_up_at]
                best = min(neighbours, key=lambda neighbour: neighbour.rank, default=None)
                if best is not None and best.rank < current.rank:
                    current = best
                    break
            else:
                return current

    def phases(self, candidate: Candidate) -> list[str]:
        if not candidate.feasible:
            return ["memory", "gaps", "fill"]
        return diagnose(candidate)

    def moves(self, candidate: Candidate, phase: str) -> list[tuple[Layout, SchedulePolicy]]:
        scorer, policy = self.scorer, candidate.policy
        if phase == "gaps":
            return [(candidate.layout, other) for other in policy_moves(policy, scorer.num_devices, self.widened)]
        if phase == "imbalance":
            return [(layout, policy) for layout in partition_moves(candidate, scorer.device_work(candidate.layout))]
        if phase == "memory":
            pressure = [excess + state for excess, state in
                        zip(candidate.device_excess, scorer.model_state_bytes(candidate.layout))]
            return [(layout, policy) for layout in partition_moves(candidate, pressure)]
        return [(layout, policy) for layout in placement_moves(candidate, scorer.num_devices, scorer.work_prefix,
                                                               self.rng, PLACEMENT_MOVES_PER_STEP)]

    def top(self, count: int, profile: Profile) -> list[dict]:
        codes = layer_codes_from_profile(profile)
        ranked = sorted((candidate for candidate in self.scorer.cache.values()
                         if candidate.feasible and not candidate.abandoned),
                        key=lambda candidate: candidate.rank)
        entries, seen = [], set()
        for candidate in ranked:
            if candidate.layout in seen:
                continue
            seen.add(candidate.layout)
            plan = Plan(self.scorer.num_devices, self.scorer.num_microbatches, candidate.layout.stages(), [])
            entries.append({"rank": len(entries) + 1, "iteration_ms": candidate.makespan,
                            "num_stages": candidate.layout.num_stages,
                            "layout": plan_layout_string(plan, codes), "policy": candidate.policy.to_dict(),
                            "schedule": candidate.policy.describe(), "origin": candidate.origin,
                            "activation_peak_bytes": max(candidate.schedule.activation_peak)})
            if len(entries) == count:
                break
        return entries


class _Reporter:
    """Progress is the largest used share of any budget (evaluations, scheduled actions, time); each report says
    the best plan so far and its gap to the bound, and a better plan is reported at once."""

    def __init__(self, progress: Progress | None, started: float, time_budget_s: float, bound_ms: float = 0.0):
        self.progress = progress
        self.started = started
        self.time_budget_s = time_budget_s
        self.bound_ms = bound_ms
        self.best_ms = float("inf")
        self.fraction = 0.0

    def report(self, fraction: float, message: str) -> None:
        self.fraction = max(self.fraction, min(fraction, 1.0))
        if self.progress is not None:
            self.progress(self.fraction, message)

    def tick(self, scorer: CandidateScorer) -> None:
        fraction = max(scorer.evaluations / scorer.max_evaluations,
                       scorer.scheduled_actions / scorer.max_scheduled_actions,
                       (time.monotonic() - self.started) / self.time_budget_s)
        improved = scorer.best_makespan < self.best_ms
        if fraction >= self.fraction + 0.02 or improved:
            self.best_ms = scorer.best_makespan
            if self.best_ms < float("inf") and self.bound_ms > 0:
                best = f"best {self.best_ms:,.1f} ms, {self.best_ms / self.bound_ms - 1:.1%} above the bound"
            else:
                best = "no plan fits memory yet"
            self.report(fraction * 0.98, f"{scorer.evaluations} candidates scored, {best}")


def _check_arguments(profile: Profile, num_devices: int, num_microbatches: int, cluster: ClusterSpec | None,
                     time_budget_s: float, top_k: int, max_evaluations: int | None) -> None:
    for name, value in (("num_devices", num_devices), ("num_microbatches", num_microbatches),
                        ("max_evaluations", 1 if max_evaluations is None else max_evaluations), ("top_k", top_k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(name, f"must be an integer >= 1, got {value!r}")
    if num_devices > profile.num_layers:
        raise SpecError("num_devices", f"{num_devices} devices need at least as many layers to hold; the "
                                       f"profile of {profile.model} has {profile.num_layers}")
    if cluster is not None and num_devices > cluster.num_devices:
        raise SpecError("num_devices", f"the cluster {cluster.name!r} has {cluster.num_devices} devices, "
                                       f"asked for {num_devices}")
    if not time_budget_s > 0:
        raise SpecError("time_budget_s", f"must be > 0 seconds, got {time_budget_s!r}")


def _memory_limit(memory_limit_bytes: int | None, cluster: ClusterSpec | None) -> float:
    if memory_limit_bytes is not None:
        if isinstance(memory_limit_bytes, bool) or not isinstance(memory_limit_bytes, (int, float)) \
                or memory_limit_bytes <= 0:
            raise SpecError("memory_limit_bytes", f"must be a positive number of bytes, got {memory_limit_bytes!r}")
        return float(memory_limit_bytes)
    return float(cluster.device.memory_bytes) if cluster is not None else float("inf")


def check_model_state_fits(profile: Profile, num_devices: int, *, memory_limit_bytes: int | None = None,
                           cluster: ClusterSpec | None = None) -> None:
    """SpecError unless the model state (parameters, gradients, optimizer state) can be spread over ``num_devices``
    devices of ``memory_limit_bytes`` each (the cluster's device memory by default): what the search checks first,
    and what a request checks before it is queued (``planner.service.check_pipeline_job``)."""
    limit = _memory_limit(memory_limit_bytes, cluster)
    _check_model_state_fits(profile, unsharded_layer_state_bytes(profile), num_devices, limit,
                            field="memory_limit_bytes" if memory_limit_bytes is not None else "num_devices")


def _check_model_state_fits(profile: Profile, state: list[float], num_devices: int, memory_limit: float,
                            field: str = "memory_limit_bytes") -> None:
    heaviest = max(range(profile.num_layers), key=lambda index: state[index])
    if state[heaviest] > memory_limit:
        raise SpecError(field, (
            f"layer {profile.layers[heaviest].name!r} alone needs {_both(state[heaviest])} of model state "
            f"(parameters, gradients and optimizer state) but a device holds {_both(memory_limit)}; "
            f"no partition can fit it"))
    total = sum(state)
    if total > memory_limit * num_devices:
        raise SpecError(field, (
            f"the model state needs {_both(total)} but {num_devices} devices x {binary_bytes(memory_limit)} "
            f"hold {_both(memory_limit * num_devices)}; use more devices or a larger limit"))


def _both(amount: float) -> str:
    """Binary units to read, the exact bytes beside them (a refusal by a few bytes must not read "15.8 GiB but
    15.8 GiB")."""
    return f"{binary_bytes(amount)} ({amount:,.0f} bytes)"


def _fits(plan: Plan, state: list[float], memory_limit: float, activation_limit: float) -> bool:
    """Model state (``state`` per layer) plus the simulated in-flight activations within the limits, per device."""
    held = [0.0] * plan.num_devices
    for stage in plan.stages:
        held[stage.device] += sum(state[index] for index in stage.layers)
    return all(held[device["device"]] + device["activation_peak_bytes"] <= memory_limit
               and device["activation_peak_bytes"] <= activation_limit for device in plan.predicted["per_device"])


def baseline_name(schedule: str, partition: str) -> str:
    return schedule if partition == "uniform" else f"{schedule}+{partition}"


def _score_baselines(profile: Profile, num_devices: int, num_microbatches: int, cluster: ClusterSpec | None,
                     memory_limit: float, activation_limit: float,
                     state: list[float]) -> tuple[dict[str, Plan], dict[str, dict]]:
    plans, metrics = {}, {}
    for schedule in BASELINE_SCHEDULES:
        for partition in BASELINE_PARTITIONS:
            try:
                plan = build_baseline(schedule, profile, num_devices, num_microbatches, cluster=cluster,
                                      partition=partition)
            except SpecError:
                continue  # e.g. more stages than the model has layers
            predicted = plan.predicted
            name = baseline_name(schedule, partition)
            plans[name] = plan
            metrics[name] = {"schedule": schedule, "partition": partition, "iteration_ms": predicted["iteration_ms"],
                             "bubble_ratio": predicted["bubble_ratio"],
                             "peak_memory_bytes": predicted["peak_memory_bytes"],
                             "activation_peak_bytes": max(device["activation_peak_bytes"]
                                                          for device in predicted["per_device"]),
                             "fits_memory": _fits(plan, state, memory_limit, activation_limit),
                             "layout": plan.meta.get("layout")}
    return plans, metrics


def _final_plan(best: Candidate | None, baseline_plans: dict[str, Plan], baselines: dict[str, dict],
                profile: Profile, num_devices: int, num_microbatches: int, cluster: ClusterSpec | None,
                memory_limit: float, activation_limit: float) -> tuple[Plan, str]:
    fitting = [name for name, metrics in baselines.items() if metrics["fits_memory"]]
    best_baseline = min(fitting, key=lambda name: baselines[name]["iteration_ms"], default=None)
    plan = origin = None
    if best is not None and best.feasible:
        plan = candidate_plan(best, num_devices, num_microbatches)
        validate_plan(plan, profile.num_layers)
        plan.predicted = simulate(plan, profile, cluster).to_dict(include_timeline=False)
        origin = best.origin
        plan.meta = {"policy": best.policy.to_dict(), "schedule": best.policy.describe()}
    if best_baseline is not None and (plan is None or
                                      baselines[best_baseline]["iteration_ms"] < plan.predicted["iteration_ms"]):
        source = baseline_plans[best_baseline]
        plan = Plan(source.num_devices, source.num_microbatches, list(source.stages),
                    [list(actions) for actions in source.actions], strategy="adaptis",
                    predicted=dict(source.predicted), meta={"schedule": f"baseline {best_baseline}"})
        origin = f"baseline {best_baseline}"
    if plan is None:
        raise SpecError("memory_limit_bytes", _no_fit_reason(best, memory_limit, activation_limit))
    plan.strategy = "adaptis"
    plan.meta["layout"] = plan_layout_string(plan, layer_codes_from_profile(profile))
    plan.meta["origin"] = origin
    plan.meta["memory_limit_bytes"] = memory_limit if memory_limit < float("inf") else None
    return plan, origin


def _no_fit_reason(best: Candidate | None, memory_limit: float, activation_limit: float) -> str:
    limits = f"{_both(memory_limit)} per device"
    if activation_limit < float("inf"):
        limits += f" with at most {binary_bytes(activation_limit)} of activations"
    if best is None:
        return f"no plan fits {limits}"
    device = max(range(len(best.device_excess)), key=lambda index: best.device_excess[index])
    return (f"no plan fits {limits}: the closest candidate ({best.layout.num_stages} stages, "
            f"{best.policy.describe()}) still needs {binary_bytes(best.device_excess[device])} more on device "
            f"{device}, even holding as few micro-batches in flight as the schedule allows")
