"""Stage timings: every stage of a plan timed as its rank runs it, action by action, without messages.

A measured profile times layers one at a time, and a stage's predicted action is the sum of its layers. That
sum misses two things a rank's actions pay (``benchmarks/action_start_cost.py`` measures them):

- an action that starts right after work of another kind (an F after a backward, an I after an F) is slower
  than the same action right after one of its own kind, by 0.1-1 ms on a CPU; the profiler times each
  layer's F right after the previous layer's F, so only the first layer holds that cost;
- the profiler times each layer's backward as an autograd call of its own, which over-counts a long stage's
  backward (10-13 % on Gemma 2's 21-layer stages at CPU scale).

``measure_stage_timings`` builds each device's stages as its rank does (``executor.running.worker.build_runners``,
the rank's weight-gradient deferral), in one process per device started together, bound and threaded as
the ranks are, and per repeat pushes two micro-batches through each kind the plan runs on the stage in turn
(F a, F b, then B a, B b or I a, I b, W a, W b): the first of each pair runs right after work of another
kind ("cold"), the second right after the same kind ("warm"). ``planner.calibrate.stage_durations`` then
charges each of the plan's actions the cold or the warm time by what runs before it on its device, and
``planner.calibrate.recalibrate_durations`` scales the profile's layers to them.
"""

from __future__ import annotations

import statistics
import time

import torch

from executor.running.data import synthetic_batch
from executor.measuring.alongside import run_alongside
from executor.running.cores import bind_local_rank
from executor.model.linear import weight_grad_deferral
from executor.running.worker import build_runners
from planner.actions import ActionKind
from planner.plan import Plan, load_plan
from planner.spec.model import ModelSpec, load_model_spec


def _timed(work) -> float:
    started = time.perf_counter()
    work()
    return (time.perf_counter() - started) * 1e3


def _pair_runs(runner, backward_kinds: tuple[ActionKind, ...], inputs, targets, first_microbatch: int,
               ) -> list[tuple[ActionKind, float, float]]:
    """One repeat on one stage: (kind, cold ms, warm ms) for F and for each of ``backward_kinds``."""
    pair, outputs, spans = (first_microbatch, first_microbatch + 1), {}, []
    for microbatch in pair:
        spans.append(_timed(lambda: outputs.__setitem__(microbatch, runner.forward(microbatch, inputs, targets))))
    timings = [(ActionKind.F, *spans)]
    for kind in backward_kinds:
        spans = []
        for microbatch in pair:
            grad = None if runner.is_last else torch.ones_like(outputs[microbatch])
            if kind is ActionKind.B:
                spans.append(_timed(lambda: runner.backward(microbatch, grad)))
            elif kind is ActionKind.I:
                spans.append(_timed(lambda: runner.backward_input(microbatch, grad)))
            else:
                spans.append(_timed(lambda: runner.backward_weight(microbatch)))
        timings.append((kind, *spans))
    return timings


def time_device_stages(plan: Plan, spec: ModelSpec, device: int, *, repeats: int, warmup: int,
                       seed: int = 0) -> dict[tuple[int, str], tuple[float, float]]:
    """{(stage, kind): (cold ms, warm ms)} for every stage on ``device`` and every kind the plan runs it with,
    each the median over ``repeats`` repeats after ``warmup`` (see the module docstring). Runs in this process
    with its current threads and binding."""
    split = any(action.type.is_split_backward for action in plan.actions[device])
    with weight_grad_deferral(split):
        return _time_stages(plan, spec, device, split, repeats=repeats, warmup=warmup, seed=seed)


def _time_stages(plan: Plan, spec: ModelSpec, device: int, split: bool, *, repeats: int, warmup: int,
                 seed: int) -> dict[tuple[int, str], tuple[float, float]]:
    runners = build_runners(plan, spec, device, seed, torch.device("cpu"), torch.float32, split)
    batch = synthetic_batch(spec, 1, seed=seed, step=0, dtype=torch.float32, device=torch.device("cpu"))
    token_ids, targets = batch.microbatch(0)
    hidden = torch.randn(*token_ids.shape[:2], spec.hidden_size, generator=torch.Generator().manual_seed(seed))
    samples: dict[tuple[int, str], tuple[list, list]] = {}
    for stage, runner in sorted(runners.items()):
        kinds = {action.type for action in plan.actions[device] if action.stage == stage}
        groups = [group for group in ((ActionKind.B,), (ActionKind.I, ActionKind.W)) if kinds & set(group)]
        stage_input = token_ids if stage == 0 else hidden
        microbatch = 0
        for repeat in range(warmup + repeats):
            for group in groups:
                for kind, cold, warm in _pair_runs(runner, group, stage_input, targets, microbatch):
                    if repeat >= warmup:
                        cold_samples, warm_samples = samples.setdefault((stage, kind), ([], []))
                        cold_samples.append(cold)
                        warm_samples.append(warm)
                microbatch += 2
        runner.check_drained()
    return {key: (statistics.median(cold), statistics.median(warm)) for key, (cold, warm) in samples.items()}


def _time_in_process(plan_doc: dict, spec_doc: dict, device: int, threads: int, repeats: int, warmup: int,
                     seed: int, start, results) -> None:
    plan, spec = load_plan(plan_doc), load_model_spec(spec_doc)
    torch.set_num_threads(threads)
    bind_local_rank(device, plan.num_devices, threads)
    start.wait()
    timings = time_device_stages(plan, spec, device, repeats=repeats, warmup=warmup, seed=seed)
    results.put([[stage, kind, cold, warm] for (stage, kind), (cold, warm) in timings.items()])


def measure_stage_timings(plan: Plan, spec: ModelSpec, *, threads: int = 1, repeats: int = 20, warmup: int = 5,
                          seed: int = 0, timeout_s: float = 600) -> dict[tuple[int, str], tuple[float, float]]:
    """{(stage, kind): (cold ms, warm ms)} for every stage of ``plan`` on this host's CPU: one process per
    device, all at once (as the plan's local ranks share the cores), each with ``threads`` intra-op threads
    and bound to cores of its own as the ranks are (see the module docstring). CPU, float32."""
    timings: dict[tuple[int, str], tuple[float, float]] = {}
    for device_timings in run_alongside(_time_in_process, [(plan.to_dict(), spec.to_dict(), device, threads, repeats,
                                                            warmup, seed) for device in range(plan.num_devices)],
                                        timeout_s=timeout_s):
        for stage, kind, cold, warm in device_timings:
            timings[stage, kind] = (cold, warm)
    return timings
