"""What an action costs beyond its layers' profiled times when it starts after work of another kind.

The profiler times each layer between its neighbours in one forward pass and one backward pass, so a layer's
F is timed right after the previous layer's F. In a pipeline an action's first layer usually runs right after
an action of another kind (an F after a B, W or I, an I after an F), when what that work pushed out of the
core's caches (the interpreter's and dispatcher's paths for this kind of work, the stage's weights) has to
come back. This script times each stage of a baseline plan in one process, built and run as the executor's
ranks build and run it (``executor.worker.build_runners``, one intra-op thread, bound to one core), twice per
repeat and kind: the first action of a kind right after one of the other kind, the second right after the
first. ``start cost`` is their difference; ``profiled`` is the sum of the stage's layer times in this host's
profile of the same model (``executor.profiler.measure_profile``).

No messages and no second process: what is left is the action's own start. The simulator charges no such
cost yet; the README's prediction fidelity section has the table and what it means for the predictions.

    .venv/bin/python benchmarks/action_start_cost.py [--repeats 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from executor.data import synthetic_batch  # noqa: E402
from executor.host import bind_local_rank  # noqa: E402
from executor.model.linear import enable_weight_grad_deferral  # noqa: E402
from executor.model.scale import scale_spec  # noqa: E402
from executor.profiler import measure_profile  # noqa: E402
from executor.worker import build_runners  # noqa: E402
from planner.baselines import build_baseline  # noqa: E402
from planner.calibrate import KIND_PARTS  # noqa: E402
from planner.cluster import load_cluster_preset  # noqa: E402
from planner.spec.presets import load_model_preset  # noqa: E402

CASES = [("tiny-llama", "zb-v"), ("tiny-hybrid", "1f1b"), ("gemma-2-9b", "1f1b")]
SCALED = {"gemma-2-9b": {"hidden_size": 64, "seq_len": 64}}
DEVICES, MICROBATCHES = 2, 8


def _timed(work) -> float:
    began = time.perf_counter()
    work()
    return (time.perf_counter() - began) * 1e3


def time_stage(runner, batch, hidden_size: int, kinds: tuple[str, ...], repeats: int,
               warmup: int) -> dict[str, tuple[float, float]]:
    """{kind: (median ms right after the other kind, median ms right after the same kind)} for one stage.

    Each repeat runs two micro-batches kind by kind (F a, F b, then I a, I b, W a, W b; or B a, B b): the
    first of each pair follows the other kind of work, the second follows the first.
    """
    times: dict[str, tuple[list, list]] = {kind: ([], []) for kind in ("F", *kinds)}
    for repeat in range(warmup + repeats):
        pair, outputs, spans = (2 * repeat, 2 * repeat + 1), {}, []
        for microbatch in pair:
            inputs, targets = batch.microbatch(0)
            if not runner.is_first:   # a hidden state from the previous stage
                inputs = torch.randn(*inputs.shape[:2], hidden_size)
            spans.append(_timed(lambda: outputs.__setitem__(microbatch, runner.forward(microbatch, inputs, targets))))
        record = [("F", *spans)]
        for kind in kinds:
            spans = []
            for microbatch in pair:
                output = outputs[microbatch]
                grad = None if runner.is_last else torch.randn_like(output)
                if kind == "B":
                    spans.append(_timed(lambda: runner.backward(microbatch, grad)))
                elif kind == "I":
                    spans.append(_timed(lambda: runner.backward_input(microbatch, grad)))
                else:
                    spans.append(_timed(lambda: runner.backward_weight(microbatch)))
            record.append((kind, *spans))
        if repeat >= warmup:
            for kind, after_other, after_same in record:
                times[kind][0].append(after_other)
                times[kind][1].append(after_same)
    return {kind: (statistics.median(other), statistics.median(same)) for kind, (other, same) in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    bind_local_rank(0, DEVICES, 1)
    print("| model | schedule | stage | kind | profiled ms | after the same kind ms | after another kind ms "
          "| start cost ms |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    for model, schedule in CASES:
        spec = load_model_preset(model)
        if model in SCALED:
            spec = scale_spec(spec, **SCALED[model])
        split = schedule.startswith("zb")
        enable_weight_grad_deferral(split)
        profile = measure_profile(spec, repeats=15, warmup=5, threads=1)
        plan = build_baseline(schedule, profile, DEVICES, MICROBATCHES, cluster=load_cluster_preset("cpu-host"))
        batch = synthetic_batch(spec, MICROBATCHES, seed=0, step=0, dtype=torch.float32, device=torch.device("cpu"))
        for rank in range(DEVICES):
            runners = build_runners(plan, spec, rank, 0, torch.device("cpu"), torch.float32, split)
            for stage, runner in sorted(runners.items()):
                kinds = ("I", "W") if split else ("B",)
                timings = time_stage(runner, batch, spec.hidden_size, kinds, args.repeats, args.warmup)
                for kind, (after_other, after_same) in timings.items():
                    profiled = sum(getattr(profile.layers[index], part)
                                   for index in plan.stages[stage].layers for part in KIND_PARTS[kind])
                    print(f"| {model} | {schedule} | {stage} | {kind} | {profiled:.3f} | {after_same:.3f} | "
                          f"{after_other:.3f} | {after_other - after_same:+.3f} |", flush=True)


if __name__ == "__main__":
    main()
