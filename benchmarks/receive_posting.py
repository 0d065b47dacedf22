"""When gloo ranks post their receives: the same plans run with each receive posted one compute ahead
(``--lookahead 1``, the default until 2026-11-24), with every receive of the step posted at its start
(``step``), and causally (``causal``, the default now: right after the receiving rank's last compute that the
sender's producing action depends on). Every channel travels in a process group of its own
(``executor.running.worker.open_channels``) in all three.

A gloo send whose receive is not posted yet waits for the receiver's notice, and the sender's communication
thread handles it; on a rank whose core is busy computing, that thread waits for the scheduler. The table
shows what that costs: for every cross-device message, the ``wait`` is how long its consumer sat idle after
the message's producer had finished (the consumer's start minus the later of the producer's end and the
consumer's previous action's end on its own device), so a message that travels at once waits a tenth of a
millisecond. ``iteration`` is the median steady-state step, from its first action's start to its last
action's end; ``wall`` the median time between the barriers around a step (rank 0), which also counts what
a rank does before its first compute (posting receives) and after its last (draining sends, the optimizer).

Plans: the planner's baselines on the analytic ``cpu-host`` profile (uniform partition), 8 micro-batches,
one rank per core, one intra-op thread each; ``--runs`` launches per setting, the settings taking turns, each
``--steps`` steps of which the first ``--warmup`` are left out.

    .venv/bin/python benchmarks/receive_posting.py [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from executor.running.cores import usable_cores  # noqa: E402
from executor.running.launch import run_plan  # noqa: E402
from executor.running.lowering import CAUSAL, WHOLE_STEP  # noqa: E402
from executor.model.scale import scale_spec  # noqa: E402
from planner.actions import ActionKind  # noqa: E402
from planner.baselines import build_baseline  # noqa: E402
from planner.calibrate import (after_warmup, device_timelines, observed_iteration_ms,  # noqa: E402
                               observed_spans)
from planner.cluster import load_cluster_preset  # noqa: E402
from planner.cost import analytic_profile  # noqa: E402
from planner.plan import Action  # noqa: E402
from planner.spec.presets import load_model_preset  # noqa: E402

CASES = [("tiny-llama", "gpipe"), ("tiny-llama", "1f1b"), ("tiny-llama", "zb-v"), ("tiny-hybrid", "1f1b"),
         ("tiny-hybrid", "interleaved-1f1b"), ("gemma-2-9b", "1f1b")]
SCALED = {"gemma-2-9b": {"hidden_size": 64, "seq_len": 64}}
LOOKAHEADS = (1, WHOLE_STEP, CAUSAL)
LATE_MS = 1.0


def _produced_at(plan, ends: dict, step: int, action: Action) -> tuple[int, float] | None:
    """(stage, end ms) of the action whose output ``action`` consumes from the neighbouring stage
    (``Plan.input_stage``): the stage before's F for an F, the stage after's B or I (whichever ran) for a B or
    I; None at the ends and for W."""
    stage = plan.input_stage(action)
    if stage is None:
        return None
    for kind in ActionKind:
        if kind.boundary == action.type.boundary and (step, stage, kind, action.microbatch) in ends:
            return stage, ends[(step, stage, kind, action.microbatch)]
    return None


def message_waits(plan, events: list[dict]) -> list[float]:
    """Per cross-device message, ms its consumer sat idle after the producer had finished (see module doc)."""
    spans = observed_spans(plan, events)
    ends = {(step, action.stage, action.type, action.microbatch): end for step, action, _, end in spans}
    waits = []
    for (step, device), actions in device_timelines(plan, spans).items():
        previous_end = None
        for start, end, action in actions:
            produced = _produced_at(plan, ends, step, action)
            if produced is not None and plan.stage_device(produced[0]) != device:
                ready = produced[1] if previous_end is None else max(produced[1], previous_end)
                waits.append(max(0.0, start - ready))
            previous_end = end
    return waits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    devices = min(2, usable_cores())
    cluster = load_cluster_preset("cpu-host")
    print(f"{usable_cores()} CPU cores, {devices} ranks with 1 intra-op thread each, gloo; {args.runs} runs x "
          f"{args.steps - args.warmup} steps after {args.warmup} warm-up steps per setting\n")
    print("| model | schedule | lookahead | wall ms | iteration ms | message wait median ms | max ms "
          f"| messages waiting > {LATE_MS:g} ms |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for model, schedule in CASES:
        spec = load_model_preset(model)
        if model in SCALED:
            spec = scale_spec(spec, **SCALED[model])
        plan = build_baseline(schedule, analytic_profile(spec, cluster), devices, 8)
        walls, iterations, waits = defaultdict(list), defaultdict(list), defaultdict(list)
        for _ in range(args.runs):
            for lookahead in LOOKAHEADS:   # alternating, so that the host's drift hits every setting alike
                result = run_plan(plan, spec, steps=args.steps, timeout_s=600, threads_per_rank=1,
                                  lookahead=lookahead, step_barriers=True)
                walls[lookahead].extend(result.step_wall_ms[args.warmup:])
                steady = after_warmup(plan, result.events, args.warmup)
                iterations[lookahead].append(observed_iteration_ms(plan, steady))
                waits[lookahead].extend(message_waits(plan, steady))
        for lookahead in LOOKAHEADS:
            late = sum(wait > LATE_MS for wait in waits[lookahead])
            print(f"| {model} | {schedule} | {lookahead} | {statistics.median(walls[lookahead]):.2f} "
                  f"| {statistics.median(iterations[lookahead]):.2f} | {statistics.median(waits[lookahead]):.2f} "
                  f"| {max(waits[lookahead]):.2f} | {late} of {len(waits[lookahead])} "
                  f"({late / len(waits[lookahead]):.0%}) |", flush=True)


if __name__ == "__main__":
    main()
