"""The first prediction a user sees for a local CPU run, against what the run then observes.

The web's default flow, step by step, without the web: a job on ``cpu-host`` plans on the spec's profile measured
on the runs' host (``executor.profiler.measure_for_local_runs``: one profiler per rank at once, each with the
ranks' share of the cores and their weight-gradient setting, 15 timings per layer and kind after 5 warm-up
passes, as ``services.profiling`` measures it), builds the baseline plan on the ``cpu-host`` preset (uniform
partition, 2 chunks where the schedule has them, as ``services.jobs`` does) and shows the simulator's iteration
time on the job page (**measured-profile ms**); then the plan's stages are timed as its ranks will run them and the
profile scaled to those times (``measure_for_local_runs(plan=...)``, the profiling task given the plan), and the
run page predicts on that (**stage-timed ms**, the prediction shown beside the observed run). "Run on CPU" then
runs it (``executor.launch.run_plan`` with its defaults, as
``services.runs`` calls it); the run page's **observed** iteration is the median over steps 1..N-1 (step 0 is
warm-up) of each step's span from its first action's start to its last action's end (``executor.summary``).
Beside them, for comparison, the analytic ``cpu-host`` profile's prediction (what a job showed before).

Each measurement starts once the CPUs are idle and is repeated while other programs used more than 10 % of the
host's CPU meanwhile (``executor.host.measure_quietly``, the least disturbed kept); the table shows that share.

    .venv/bin/python benchmarks/local_prediction.py [--steps 12] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from executor.host import load_average, measure_quietly, retried_once, usable_cores  # noqa: E402
from executor.launch import run_plan  # noqa: E402
from executor.profiler import measure_for_local_runs  # noqa: E402
from planner.baselines import build_baseline  # noqa: E402
from planner.cluster import load_cluster_preset  # noqa: E402
from planner.cost import analytic_profile  # noqa: E402
from planner.simulator import simulate  # noqa: E402
from planner.spec.presets import load_model_preset  # noqa: E402

CASES = [("tiny-llama", "1f1b", 8), ("tiny-llama", "zb-h1", 8), ("tiny-llama", "gpipe", 8),
         ("tiny-hybrid", "1f1b", 8), ("tiny-hybrid", "zb-h1", 8), ("tiny-hybrid", "gpipe", 4)]
SPLIT_BACKWARD_SCHEDULES = ("zb-h1", "zb-v")   # services.profiling: their ranks time I and W apart
CHUNKS = 2                                     # services.jobs.CHUNKS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--runs", type=int, default=3, help="runs per plan; the median of their observed medians")
    parser.add_argument("--only", help="only the cases whose 'model/schedule' contains this text")
    args = parser.parse_args()
    cluster = load_cluster_preset("cpu-host")
    print(f"{usable_cores()} CPU cores, {args.devices} ranks; load average {load_average()} at start; observed = "
          f"median over {args.runs} runs of each run's median over steps 1-{args.steps - 1}\n")
    print("| model | schedule | micro-batches | analytic cpu-host ms | measured-profile ms | observed ms "
          "| measured-profile error | analytic error | stage-timed ms (run page) | stage-timed error | run-to-run spread "
          "| other programs' CPU, worst |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    profiles: dict = {}
    errors, stage_errors = [], []
    for model, schedule, microbatches in CASES:
        if args.only and args.only not in f"{model}/{schedule}":
            continue
        spec = load_model_preset(model)
        split = schedule in SPLIT_BACKWARD_SCHEDULES
        if (model, split) not in profiles:
            profiles[model, split] = measure_quietly(lambda: measure_for_local_runs(
                spec, ranks=args.devices, split_backward=split)).value
        profile = profiles[model, split]
        plan = build_baseline(schedule, profile, args.devices, microbatches, cluster=cluster, partition="uniform",
                              chunks=CHUNKS)
        shown = simulate(plan, profile, cluster).iteration_ms
        analytic_plan = build_baseline(schedule, analytic_profile(spec, cluster), args.devices, microbatches,
                                       cluster=cluster, partition="uniform", chunks=CHUNKS)
        analytic = simulate(analytic_plan, analytic_profile(spec, cluster), cluster).iteration_ms
        staged_profile = measure_quietly(lambda: measure_for_local_runs(
            spec, ranks=args.devices, split_backward=split, plan=plan)).value
        staged = simulate(plan, staged_profile, cluster).iteration_ms
        runs = [measure_quietly(lambda: retried_once(lambda: run_plan(plan, spec, steps=args.steps, timeout_s=600)))
                for _ in range(args.runs)]
        medians = [run.value.summary["median_iteration_ms"] for run in runs]
        observed = statistics.median(medians)
        error, staged_error = (shown - observed) / observed, (staged - observed) / observed
        errors.append(abs(error))
        stage_errors.append(abs(staged_error))
        print(f"| {model} | {schedule} | {microbatches} | {analytic:.2f} | {shown:.2f} | {observed:.2f} | "
              f"{error:+.1%} | {(analytic - observed) / observed:+.1%} | {staged:.2f} | {staged_error:+.1%} | "
              f"{(max(medians) - min(medians)) / observed:.0%} | {max(run.other_load for run in runs):.0%} |",
              flush=True)
    print(f"\nmedian |error| from the measured profile {statistics.median(errors):.1%}, worst {max(errors):.1%} over "
          f"{len(errors)} plans; from stage timings (the run page) {statistics.median(stage_errors):.1%}, worst "
          f"{max(stage_errors):.1%}; load average {load_average()} at end")


if __name__ == "__main__":
    main()
