"""Prediction fidelity: measured profile -> baseline plan -> simulated prediction vs the executor's observed time.

Everything the prediction uses is measured on this host, under the conditions the ranks run in:

- the profile: ``executor.profiler.measure_profile_alongside``: one profiler process per rank, running at
  the same time, each with the ranks' intra-op thread count (``executor.host.fair_share_threads``) and
  weight-gradient deferral as the plan's ranks use it (off for F/B-only schedules, on for zero-bubble ones),
  so a B is timed as the executor runs it and each layer pays the same sharing of cores and memory;
- the cluster: ``executor.linkprobe.measure_link`` ping-pongs gloo messages between two local ranks and
  fits latency + bytes / bandwidth, then times the executor's exchange pattern between computing ranks for
  the per-message overhead each end pays on its own stream; ``local_cluster`` wraps it into the
  ``adaptis.cluster/v1`` document the planner and the simulator are given, so every cross-device message
  costs what gloo costs here;
- the plan: ``planner.baselines.build_baseline`` on that profile and cluster (uniform partition).

The executor then runs the plan ``--runs`` times with the profile's thread count (on this host the same plan's
steady state differs by up to a third from one launch to the next, far more than from step to step).
Observed: the median, over the steps after each run's ``--warmup`` warm-up steps, of the span from a step's
first action start to its last action end (what the simulator's ``iteration_ms`` models: the optimizer step
is not part of it); a device's bubble is that span minus the device's compute, as a share of the span.
``compute`` is the observed over the predicted busy time summed over devices: how far the layers ran from
their profiled speed, the error left when the schedule, the transfers and the bubbles are modelled right.

On a machine shared with other work, load moves every timing: each measurement (link, profiles, runs)
starts once the CPUs are idle and is repeated (up to 3 times, the least disturbed one kept) while other
programs used more than 10 % of the host's CPU meanwhile (``executor.host.measure_quietly``); the table
shows that share for each run, and the load average at start and end.

    .venv/bin/python benchmarks/prediction_fidelity.py [--steps 12] [--warmup 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from executor.host import (fair_share_threads, load_average, measure_quietly,  # noqa: E402
                           retried_once, usable_cores)
from executor.launch import run_plan  # noqa: E402
from executor.linkprobe import local_cluster, measure_link  # noqa: E402
from executor.profiler import measure_profile_alongside  # noqa: E402
from planner.baselines import build_baseline  # noqa: E402
from planner.cluster import load_cluster  # noqa: E402
from planner.simulator import simulate  # noqa: E402
from planner.spec.presets import load_model_preset  # noqa: E402

# As many ranks as this benchmark's host has cores: a prediction for more ranks than cores would have to
# model the OS time-slicing them, which the simulator (one device = one processor) does not.
CASES = [("tiny-llama", "gpipe", 8), ("tiny-llama", "1f1b", 8), ("tiny-llama", "interleaved-1f1b", 8),
         ("tiny-llama", "zb-v", 8), ("tiny-hybrid", "gpipe", 4), ("tiny-hybrid", "1f1b", 8),
         ("tiny-hybrid", "interleaved-1f1b", 8), ("tiny-hybrid", "zb-h1", 8), ("tiny-hybrid", "zb-v", 8)]
SPLIT_SCHEDULES = ("zb-h1", "zb-v")


def observed_steps(events: list[dict], num_devices: int, warmup: int) -> list[tuple[float, list[float]]]:
    """(iteration ms, per-device compute ms) of every step after the first ``warmup`` ones."""
    by_step: dict[int, list[dict]] = defaultdict(list)
    for event in events:
        if event.get("type", "action") == "action":
            by_step[event["step"]].append(event)
    steps = []
    for step in sorted(by_step)[warmup:]:
        step_events = by_step[step]
        span = max(e["end_ms"] for e in step_events) - min(e["start_ms"] for e in step_events)
        busy = [0.0] * num_devices
        for event in step_events:
            busy[event["device"]] += event["end_ms"] - event["start_ms"]
        steps.append((span, busy))
    return steps


def bubbles(iteration_ms: float, busy_ms: list[float]) -> str:
    return " / ".join(f"{max(0.0, 1 - busy / iteration_ms):.0%}" for busy in busy_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3, help="steps left out of the observed times")
    parser.add_argument("--devices", type=int, default=min(2, usable_cores()))
    parser.add_argument("--runs", type=int, default=3, help="executor runs per plan, their steps pooled")
    parser.add_argument("--repeats", type=int, default=15, help="profiler timings per layer and kind")
    parser.add_argument("--only", help="run only the cases whose 'model/schedule' contains this text")
    args = parser.parse_args()
    if args.steps <= args.warmup:
        parser.error("--steps must exceed --warmup")
    devices, threads = args.devices, fair_share_threads(args.devices)
    link = measure_quietly(measure_link).value
    cluster = load_cluster(local_cluster(devices, link))
    print(f"{usable_cores()} CPU cores, {devices} ranks with {threads} intra-op thread(s) each; load average "
          f"{load_average()} at start; gloo loopback link: latency {link['latency_us']:.0f} us, bandwidth "
          f"{link['bandwidth_gb_s']:.2f} GB/s, overhead per message end on a computing rank "
          f"{link['overhead_us']:.0f} us; observed = median over {args.runs} runs x "
          f"{args.steps - args.warmup} steps after {args.warmup} warm-up steps each\n")
    print("| model | schedule | micro-batches | predicted ms | observed ms | error | predicted bubble per device "
          "| observed bubble per device | compute observed/predicted | other programs' CPU, worst run |")
    print("|---|---|---:|---:|---:|---:|---|---|---:|---:|")
    profiles: dict = {}
    errors = []
    for model, schedule, microbatches in CASES:
        if args.only is not None and args.only not in f"{model}/{schedule}":
            continue
        spec = load_model_preset(model)
        split_backward = schedule in SPLIT_SCHEDULES
        if (model, split_backward) not in profiles:
            profiles[model, split_backward] = measure_quietly(lambda: measure_profile_alongside(
                spec, processes=devices, threads=threads, split_backward=split_backward, repeats=args.repeats,
                warmup=5)).value
        profile = profiles[model, split_backward]
        plan = build_baseline(schedule, profile, devices, microbatches, cluster=cluster)
        prediction = simulate(plan, profile, cluster)
        predicted_busy = [device.time.busy_ms for device in prediction.per_device]
        runs = [measure_quietly(lambda: retried_once(lambda: run_plan(plan, spec, steps=args.steps, timeout_s=600,
                                                                      threads_per_rank=threads)))
                for _ in range(args.runs)]
        steps = [step for run in runs for step in observed_steps(run.value.events, devices, args.warmup)]
        observed = statistics.median(span for span, _ in steps)
        observed_busy = [statistics.median(busy[device] for _, busy in steps) for device in range(devices)]
        error = (prediction.iteration_ms - observed) / observed
        errors.append(abs(error))
        print(f"| {model} | {schedule} | {microbatches} | {prediction.iteration_ms:.2f} | {observed:.2f} | "
              f"{error:+.1%} | {bubbles(prediction.iteration_ms, predicted_busy)} | "
              f"{bubbles(observed, observed_busy)} | {sum(observed_busy) / sum(predicted_busy):.2f} | "
              f"{max(run.other_load for run in runs):.0%} |", flush=True)
    print(f"\nmedian |error| {statistics.median(errors):.1%} over {len(errors)} plans; load average "
          f"{load_average()} at end")


if __name__ == "__main__":
    main()
