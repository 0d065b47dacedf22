"""Prediction fidelity: measured profile -> baseline plan -> simulated prediction vs the executor's observed time.

Everything the prediction uses is measured on this host, under the conditions the ranks run in:

- the profile: ``executor.measuring.profiler.measure_profile_alongside``: one profiler process per rank, running at
  the same time, each with the ranks' intra-op thread count (``executor.running.cores.fair_share_threads``) and
  weight-gradient deferral as the plan's ranks use it (off for F/B-only schedules, on for zero-bubble ones),
  so a B is timed as the executor runs it and each layer pays the same sharing of cores and memory;
- the cluster: ``executor.measuring.linkprobe.measure_link`` ping-pongs gloo messages between two local ranks and
  fits latency + bytes / bandwidth, then times the executor's exchange pattern between computing ranks for
  the per-message overhead each end pays on its own stream; ``local_cluster`` wraps it into the
  ``adaptis.cluster/v1`` document the planner and the simulator are given, so every cross-device message
  costs what gloo costs here (median over 5 probe launches);
- the per-message overhead the predictions use: measured (``planner.calibrate.measure_message_overhead``) on
  runs of a probe model that no case uses (Llama 3 8B at CPU scale, 1F1B): the time between consecutive
  actions of a rank that did not wait for its input, per message end the simulator charges there. The figure
  fitted to the probe's iteration (``fit_message_overhead`` after recalibrating its compute) is printed
  beside it, and so is the lockstep probe's: the fit turns every few percent by which the run's compute
  strays from the profile into hundreds of microseconds per message, and the lockstep probe is bimodal from
  launch to launch on this project's virtual machines (about 70 us or about 800 us);
- the plan: ``planner.baselines.build_baseline`` on that profile and cluster (uniform partition).

The models: the two hand-written CPU models (tiny-llama's actions are a few tenths of a millisecond, so the
per-message overhead rivals the compute; tiny-hybrid has every layer kind) and Gemma 2 9B shrunk to CPU scale
with ``executor.model.scale_spec``, whose actions (5-13 ms) are long next to a message, as a real pipeline's
are. ``mean action ms`` is the plan's predicted compute per action; the summary gives the median error per
model as well as over every plan.

The executor then runs the plan ``--runs`` times with the profile's thread count (on this host the same plan's
steady state differs by up to a third from one launch to the next, far more than from step to step).
Observed: the median, over the steps after each run's ``--warmup`` warm-up steps, of the span from a step's
first action start to its last action end (what the simulator's ``iteration_ms`` models: the optimizer step
is not part of it); a device's bubble is that span minus the device's compute, as a share of the span.
``compute`` is the observed over the predicted busy time summed over devices: how far the layers ran from
their profiled speed, the error left when the schedule, the transfers and the bubbles are modelled right.
``error given the run's compute`` is not a prediction: the same simulation on each stage's mean F, B, I
and W durations in the runs (``planner.calibrate.recalibrate``), so it is the error of the schedule, message
and bubble model alone, and ``error`` minus it is what the profile's compute speed adds.
``error from stage timings`` is a prediction made before the plan runs: each stage of the plan timed as its
rank will run it (``executor.measuring.stage_timing.measure_stage_timings``: one process per device at once, every
action right after work of another kind and right after its own kind), each action charged the cold or the
warm time by what precedes it on its device (``planner.calibrate.stage_durations``), and the profile's layers
scaled to those times (``recalibrate_durations``), as ``executor profile --plan`` does.
``error calibrated on gpipe runs`` is a prediction again, of the closed loop: the plan simulated on the profile
recalibrated (``planner.calibrate.recalibrate``) on the runs of the same model's GPipe plan, which ran before
it; the GPipe row itself is the calibration.
``run-to-run spread`` is (slowest - fastest) / median of the runs' own median iterations: how much the same
plan moves from one launch to the next, which no prediction can follow.

On a machine shared with other work, load moves every timing: each measurement (link, profiles, runs)
starts once the CPUs are idle and is repeated (up to 3 times, the least disturbed one kept) while other
programs used more than 10 % of the host's CPU meanwhile (``shared_host.measure_quietly``); the table
shows that share for each run, and the load average at start and end.

Hybrid plans (``--hybrid``): plans with TP, CP and DP beside the pipeline, planned on a local CPU cluster
(``cpu-1x<ranks>``) by the hybrid planner. Their prediction cannot come from a profile of whole layers timed alone
(each rank runs a TP or CP shard of its layers, its collectives inside its actions), so it comes from the closed
loop: one run of the first plan (TP2 x PP2) calibrates the cluster, as `planner calibrate` would a user's (each
link class's collective latency and bandwidth fitted to its collective events,
``planner.calibrate.fit_collective_links``; the device's per-kernel overhead fitted so that the analytic shards of
the plan's layers take what its actions took, ``fit_run_kernel_overhead``), and every plan, that first one's next
launches included, is then planned and predicted by the hybrid planner on the calibrated cluster and run. The
table gives the prediction on the cluster as shipped beside it, and per collective op the fitted model's median
time against the observed median.

    .venv/bin/python benchmarks/prediction_fidelity.py [--steps 12] [--warmup 3] [--hybrid]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from executor.running.cores import fair_share_threads, usable_cores  # noqa: E402
from executor.running.launch import run_plan  # noqa: E402
from executor.measuring.linkprobe import local_cluster, measure_link  # noqa: E402
from executor.model.scale import scale_spec  # noqa: E402
from executor.measuring.profiler import measure_profile_alongside  # noqa: E402
from executor.measuring.stage_timing import measure_stage_timings  # noqa: E402
from planner.baselines import build_baseline  # noqa: E402
from planner.calibrate import (EXECUTED_GROUPS, after_warmup, executed_collective, fit_collective_links,  # noqa: E402
                               fit_message_overhead, fit_run_iteration_overhead, fit_run_kernel_overhead,
                               measure_message_overhead,
                               observed_iteration_ms, recalibrate, recalibrate_durations, stage_durations,
                               with_fitted_links, with_kernel_overhead, with_message_overhead)
from planner.cluster import load_cluster, load_cluster_preset  # noqa: E402
from planner.parallel.config import ParallelConfig  # noqa: E402
from planner.parallel.cost import EXECUTOR_OPTIONS, collective_ms  # noqa: E402
from planner.parallel.mapping import RankMapping  # noqa: E402
from planner.parallel.planning import predict as hybrid_predict  # noqa: E402
from planner.parallel.planning import search as hybrid_search  # noqa: E402
from planner.simulator import simulate  # noqa: E402
from planner.spec.presets import load_model_preset  # noqa: E402
from shared_host import load_average, measure_quietly, retried_once  # noqa: E402

# As many ranks as this benchmark's host has cores: a prediction for more ranks than cores would have to
# model the OS time-slicing them, which the simulator (one device = one processor) does not.
CASES = [("tiny-llama", "gpipe", 8), ("tiny-llama", "1f1b", 8), ("tiny-llama", "interleaved-1f1b", 8),
         ("tiny-llama", "zb-v", 8), ("tiny-hybrid", "gpipe", 4), ("tiny-hybrid", "1f1b", 8),
         ("tiny-hybrid", "interleaved-1f1b", 8), ("tiny-hybrid", "zb-h1", 8), ("tiny-hybrid", "zb-v", 8),
         ("gemma-2-9b", "gpipe", 8), ("gemma-2-9b", "1f1b", 8), ("gemma-2-9b", "interleaved-1f1b", 8),
         ("gemma-2-9b", "zb-v", 8)]
# Real models run at CPU scale (``executor.model.scale_spec``): Gemma 2's 42 alternating sliding-window and
# global attention blocks and its 256k-vocabulary head shrunk to hidden 64, keeping their proportions.
SCALED = {"gemma-2-9b": {"hidden_size": 64, "seq_len": 64}}
# The per-message overhead the predictions use is measured on runs of a model none of the cases uses.
PROBE_MODEL, PROBE_SCALE = "llama-3-8b", {"hidden_size": 64, "seq_len": 64}
PROBE_SCHEDULE, PROBE_MICROBATCHES = "1f1b", 8
SPLIT_SCHEDULES = ("zb-h1", "zb-v")
# The closed loop: each model's other plans are also predicted from its profile recalibrated on the runs of
# this schedule's plan (each model's first case), as a user re-plans after one run.
CALIBRATION_SCHEDULE = "gpipe"


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


def run_observed(plan, spec, threads: int, args) -> tuple[list, list[tuple[float, list[float]]]]:
    """The plan run ``args.runs`` times: (the runs, their pooled steady-state steps)."""
    runs = [measure_quietly(lambda: retried_once(lambda: run_plan(plan, spec, steps=args.steps, timeout_s=600,
                                                                  threads_per_rank=threads)))
            for _ in range(args.runs)]
    return runs, [step for run in runs for step in observed_steps(run.value.events, plan.num_devices, args.warmup)]


def steady_actions(plan, runs, warmup: int) -> list[list[dict]]:
    """Each run's action events after its warm-up steps."""
    return [after_warmup(plan, run.value.events, warmup) for run in runs]


def overhead_on_probe_model(cluster, devices: int, threads: int, args) -> tuple[float, float, float]:
    """(observed ms, measured overhead us, fitted overhead us) of the probe model's plan.

    Measured (``planner.calibrate.measure_message_overhead``): the time between consecutive actions of a rank
    that did not wait, per message end, read off the run's action timings; this is what the predictions use.
    Fitted (``planner.calibrate.fit_message_overhead``, after recalibrating the profile to the run's compute):
    the overhead at which the simulated run takes the observed time. It is printed for comparison: it also
    absorbs whatever else differs between the simulated and the observed run.
    """
    spec = scale_spec(load_model_preset(PROBE_MODEL), **PROBE_SCALE)
    profile = measure_quietly(lambda: measure_profile_alongside(spec, processes=devices, threads=threads,
                                                                split_backward=False, repeats=args.repeats,
                                                                warmup=5)).value
    plan = build_baseline(PROBE_SCHEDULE, profile, devices, PROBE_MICROBATCHES, cluster=cluster)
    runs, steps = run_observed(plan, spec, threads, args)
    observed = statistics.median(span for span, _ in steps)
    per_run = steady_actions(plan, runs, args.warmup)
    fitted = fit_message_overhead(plan, recalibrate(profile, plan, [event for run in per_run for event in run]),
                                  cluster, observed)
    # each run's clock starts anew: the time between actions is read within a run, the median over runs kept
    return observed, statistics.median(measure_message_overhead(plan, run) for run in per_run), fitted


def run_spread(runs, warmup: int, num_devices: int) -> float:
    """(slowest - fastest) / median of the runs' own median iterations: how far the same plan moves between
    launches on this host, the floor under any prediction's error."""
    medians = [statistics.median(span for span, _ in observed_steps(run.value.events, num_devices, warmup))
               for run in runs]
    return (max(medians) - min(medians)) / statistics.median(medians)


# (row, pinned degrees): every plan on HYBRID_RANKS local ranks; the first one's run calibrates the cluster.
HYBRID_CASES = [("TP2 x PP2", {"tp": 2, "cp": 1, "dp": 1, "pp": 2}),
                ("DP2 x PP2, ZeRO-1", {"tp": 1, "cp": 1, "dp": 2, "pp": 2}),
                ("CP2 x PP2", {"tp": 1, "cp": 2, "dp": 1, "pp": 2}),
                ("TP2 x CP2", {"tp": 2, "cp": 2, "dp": 1, "pp": 1})]
HYBRID_RANKS, HYBRID_MICROBATCHES = 4, 8
HYBRID_MODEL, HYBRID_SCALE = "llama-3-8b", {"hidden_size": 128, "head_dim": 32, "seq_len": 128}


def hybrid_plan(spec, cluster, pins: dict):
    """The hybrid planner's plan with ``pins`` on ``cluster`` (a name or a ClusterSpec), costed as the executor runs."""
    pins = {"ep": 1, "recompute": "none", "microbatch_size": spec.micro_batch_size, **pins}
    global_batch = spec.micro_batch_size * pins["dp"] * HYBRID_MICROBATCHES
    best = hybrid_search(spec, cluster, HYBRID_RANKS, spec.seq_len, global_batch, pins, options=EXECUTOR_OPTIONS).best
    return best.plan


def hybrid_observed(plan, spec, args, launches: int | None = None) -> tuple[float, list[list[dict]], list]:
    """(median steady iteration over ``launches`` launches (``args.runs``), each one's steady events, the runs)."""
    runs = [measure_quietly(lambda: retried_once(lambda: run_plan(plan, spec, steps=args.steps, timeout_s=600)))
            for _ in range(launches or args.runs)]
    steady = [[event for event in run.value.events if event.get("step", 0) >= args.warmup] for run in runs]
    iterations = [observed_iteration_ms(plan, events) for events in steady]
    return statistics.median(iterations), steady, runs


def hybrid_main(args) -> None:
    shipped = load_cluster_preset(f"cpu-1x{HYBRID_RANKS}")
    spec = scale_spec(load_model_preset(HYBRID_MODEL), **HYBRID_SCALE,
                      parallel=ParallelConfig(tp=2, cp=2, pp=1, dp=1, num_microbatches=HYBRID_MICROBATCHES))
    print(f"{usable_cores()} CPU cores, {HYBRID_RANKS} gloo ranks; {spec.name} ({spec.num_layers} layers, hidden "
          f"{spec.hidden_size}, sequence {spec.seq_len}), {HYBRID_MICROBATCHES} micro-batches per pipeline; observed "
          f"= median over {args.runs} launches of each launch's median iteration over {args.steps - args.warmup} "
          f"steps after {args.warmup} warm-up steps; load average {load_average()} at start\n")
    calibrating = hybrid_plan(spec, shipped, HYBRID_CASES[0][1])
    _, (events,), _ = hybrid_observed(calibrating, spec, args, launches=1)   # one run, as a user's re-plan
    fits = fit_collective_links(calibrating.parallel, shipped, events)
    linked = with_fitted_links(shipped, fits)
    overhead_us = fit_run_kernel_overhead(calibrating, spec, linked, spec.seq_len, events)
    calibrated = with_kernel_overhead(linked, overhead_us)
    iteration_overhead_us = fit_run_iteration_overhead(calibrating, spec, linked, spec.seq_len, events)
    to_iteration = with_kernel_overhead(linked, iteration_overhead_us)
    for fit in fits:
        bandwidth = "not told" if fit.bandwidth_gb_s is None else f"{fit.bandwidth_gb_s:.2f} GB/s"
        print(f"calibrated on {HYBRID_CASES[0][0]}'s run ({calibrating.parallel.short()} {calibrating.strategy}, "
              f"{observed_iteration_ms(calibrating, events):.1f} ms): {fit.link} latency {fit.latency_us:.0f} us, "
              f"bandwidth {bandwidth} ({fit.samples} collectives, median fit error {fit.median_error:.0%}); per-kernel "
              f"overhead {overhead_us:.1f} us fitted to the actions, {iteration_overhead_us:.1f} us to the "
              f"iteration (shipped: {shipped.device.kernel_overhead_us:.1f} us)")
    print("\n| plan | planned | predicted ms, shipped cluster | predicted ms, calibrated to the actions "
          "| predicted ms, calibrated to the iteration | observed ms | error, shipped | error, actions "
          "| error, iteration | run-to-run spread | other programs' CPU, worst run |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    errors, iteration_errors, collectives = [], [], defaultdict(lambda: ([], []))
    for name, pins in HYBRID_CASES:
        plan = hybrid_plan(spec, calibrated, pins)
        predicted, uncalibrated, fitted_to_iteration = (
            hybrid_predict(plan, spec, cluster, spec.seq_len, EXECUTOR_OPTIONS)["predicted"]["pipeline_ms"]
            for cluster in (calibrated, shipped, to_iteration))
        observed, launches, runs = hybrid_observed(plan, spec, args)
        iterations = [observed_iteration_ms(plan, events) for events in launches]
        events = [event for events in launches for event in events]
        errors.append(abs(predicted - observed) / observed)
        iteration_errors.append(abs(fitted_to_iteration - observed) / observed)
        mapping = RankMapping(plan.parallel, calibrated)
        for event in events:
            charged = executed_collective(event["op"]) if event.get("type") == "collective" else None
            if charged is not None:
                group, kind = charged
                collectives[event["op"]][0].append(collective_ms(kind, event["bytes"],
                                                                 mapping.span(EXECUTED_GROUPS[group])))
                collectives[event["op"]][1].append(event["end_ms"] - event["start_ms"])
        print(f"| {name} | {plan.parallel.short()} {plan.strategy} | {uncalibrated:.1f} | {predicted:.1f} | "
              f"{fitted_to_iteration:.1f} | {observed:.1f} | {(uncalibrated - observed) / observed:+.1%} "
              f"| {(predicted - observed) / observed:+.1%} | {(fitted_to_iteration - observed) / observed:+.1%} "
              f"| {(max(iterations) - min(iterations)) / observed:.0%} "
              f"| {max(run.other_load for run in runs):.0%} |", flush=True)
    print(f"\nmedian |error| {statistics.median(errors):.1%} calibrated to the actions, "
          f"{statistics.median(iteration_errors):.1%} to the iteration, over {len(errors)} plans (the first, "
          f"{HYBRID_CASES[0][0]}, the calibration's own plan on later launches); load average {load_average()} at end")
    print("\n| collective | count | fitted model median ms | observed median ms |")
    print("|---|---:|---:|---:|")
    for op, (model_ms, observed_ms) in sorted(collectives.items()):
        print(f"| {op} | {len(observed_ms)} | {statistics.median(model_ms):.3f} "
              f"| {statistics.median(observed_ms):.3f} |")


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
    parser.add_argument("--hybrid", action="store_true", help="the hybrid plans' table instead (see above)")
    args = parser.parse_args()
    if args.steps <= args.warmup:
        parser.error("--steps must exceed --warmup")
    if args.hybrid:
        hybrid_main(args)
        return
    devices, threads = args.devices, fair_share_threads(args.devices)
    link = measure_quietly(lambda: measure_link(launches=5)).value
    probed = load_cluster(local_cluster(devices, link))
    probe_observed, overhead_us, fitted_us = overhead_on_probe_model(probed, devices, threads, args)
    cluster = with_message_overhead(probed, overhead_us)
    print(f"{usable_cores()} CPU cores, {devices} ranks with {threads} intra-op thread(s) each; load average "
          f"{load_average()} at start; gloo loopback link: latency {link['latency_us']:.0f} us, bandwidth "
          f"{link['bandwidth_gb_s']:.2f} GB/s, overhead per message end on a computing rank "
          f"{link['overhead_us']:.0f} us by the lockstep probe; on runs of {PROBE_MODEL} {PROBE_SCHEDULE} "
          f"(observed {probe_observed:.1f} ms) {overhead_us:.0f} us measured between actions, used below, and "
          f"{fitted_us:.0f} us fitted to the iteration; observed = median over {args.runs} "
          f"runs x "
          f"{args.steps - args.warmup} steps after {args.warmup} warm-up steps each\n")
    print("| model | schedule | micro-batches | predicted ms | observed ms | error | error from stage timings "
          f"| error given the run's compute | error calibrated on {CALIBRATION_SCHEDULE} runs "
          "| predicted bubble per device | observed bubble per device | mean action ms "
          "| compute observed/predicted | run-to-run spread | other programs' CPU, worst run |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|")
    profiles: dict = {}
    errors: dict[str, list[float]] = defaultdict(list)
    timing_errors: list[float] = []
    calibrations: dict = {}          # model -> (plan, steady actions) of its CALIBRATION_SCHEDULE runs
    calibrated_errors: list[float] = []
    staged_errors: list[float] = []
    for model, schedule, microbatches in CASES:
        if args.only is not None and args.only not in f"{model}/{schedule}":
            continue
        spec = load_model_preset(model)
        if model in SCALED:
            spec = scale_spec(spec, **SCALED[model])
        split_backward = schedule in SPLIT_SCHEDULES
        if (model, split_backward) not in profiles:
            profiles[model, split_backward] = measure_quietly(lambda: measure_profile_alongside(
                spec, processes=devices, threads=threads, split_backward=split_backward, repeats=args.repeats,
                warmup=5)).value
        profile = profiles[model, split_backward]
        plan = build_baseline(schedule, profile, devices, microbatches, cluster=cluster)
        prediction = simulate(plan, profile, cluster)
        # A prediction too: the profile scaled to the plan's stages timed as actions (executor.measuring.stage_timing),
        # before any run of the plan.
        timings = measure_quietly(lambda: measure_stage_timings(plan, spec, threads=threads)).value
        staged = simulate(plan, recalibrate_durations(profile, plan, stage_durations(plan, timings)),
                          cluster).iteration_ms
        predicted_busy = [device.time.busy_ms for device in prediction.per_device]
        runs, steps = run_observed(plan, spec, threads, args)
        observed = statistics.median(span for span, _ in steps)
        observed_busy = [statistics.median(busy[device] for _, busy in steps) for device in range(devices)]
        error = (prediction.iteration_ms - observed) / observed
        errors[model].append(abs(error))
        staged_errors.append(abs(staged - observed) / observed)
        # Not a prediction: the same simulation on the compute the runs showed (each stage's mean F, B, I and
        # W durations, planner.calibrate.recalibrate), to tell the timing model's error from the profile's.
        actions = [event for run in steady_actions(plan, runs, args.warmup) for event in run]
        given_compute = simulate(plan, recalibrate(profile, plan, actions), cluster).iteration_ms
        timing_errors.append(abs(given_compute - observed) / observed)
        # A prediction again: the profile recalibrated on the runs of another plan of the same model (its
        # CALIBRATION_SCHEDULE plan, run before), as "Recalibrate and re-plan" and `planner calibrate` do.
        if schedule == CALIBRATION_SCHEDULE:
            calibrations[model] = (plan, actions)
            after_calibration = "calibration"
        elif model in calibrations:
            calibrated = simulate(plan, recalibrate(profile, *calibrations[model]), cluster).iteration_ms
            calibrated_errors.append(abs(calibrated - observed) / observed)
            after_calibration = f"{(calibrated - observed) / observed:+.1%}"
        else:
            after_calibration = "–"
        mean_action_ms = sum(predicted_busy) / sum(len(device_actions) for device_actions in plan.actions)
        print(f"| {model} | {schedule} | {microbatches} | {prediction.iteration_ms:.2f} | {observed:.2f} | "
              f"{error:+.1%} | {(staged - observed) / observed:+.1%} | "
              f"{(given_compute - observed) / observed:+.1%} | {after_calibration} | "
              f"{bubbles(prediction.iteration_ms, predicted_busy)} | "
              f"{bubbles(observed, observed_busy)} | {mean_action_ms:.2f} | "
              f"{sum(observed_busy) / sum(predicted_busy):.2f} | {run_spread(runs, args.warmup, devices):.0%} | "
              f"{max(run.other_load for run in runs):.0%} |", flush=True)
    every_error = [error for model_errors in errors.values() for error in model_errors]
    per_model = "; ".join(f"{model} {statistics.median(model_errors):.1%} ({len(model_errors)})"
                          for model, model_errors in errors.items())
    print(f"\nmedian |error| {statistics.median(every_error):.1%} over {len(every_error)} plans (per model: "
          f"{per_model}); from stage timings {statistics.median(staged_errors):.1%}; given the runs' own compute "
          f"{statistics.median(timing_errors):.1%}; calibrated on each "
          f"model's {CALIBRATION_SCHEDULE} runs "
          f"{statistics.median(calibrated_errors) if calibrated_errors else float('nan'):.1%} over "
          f"{len(calibrated_errors)} other plans; load average {load_average()} at end")


if __name__ == "__main__":
    main()
