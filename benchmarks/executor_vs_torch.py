"""Our executor vs torch.distributed.pipelining: same stage modules, same schedule, gloo, this host.

Both sides train the same layers (built by ``executor.model`` from the same seed) on the same synthetic batches
with SGD, one process per device and the same number of intra-op threads per process (this host's cores / devices,
``executor.running.cores.fair_share_threads``). The plans come from ``planner.baselines.build_baseline`` (uniform
partition over an analytic profile); torch runs the same stages on the same devices with the torch schedule of the
same name, whose per-rank compute order is the planner's (``TORCH_SCHEDULES``; checked by
``tests/executor/test_torch_schedule_agreement.py``). Both sides measure iteration time the same way: every rank
enters a barrier before and after each step and rank 0 takes the wall-clock time between the two barriers
(optimizer step included); a side's figure is the median over all steps after the first ``--warmup`` steps of every
repeat. The two sides alternate, repeat after repeat, so load from other work on a shared host hits both alike;
``torch/ours`` is the median over repeats of the ratio of the two medians taken back to back. Each run starts once
the CPUs are idle and is repeated while other programs disturbed it (``shared_host.measure_quietly``). Torch's last
stage returns logits and its ``loss_fn`` computes the cross-entropy; ours computes the same loss in the head.

    .venv/bin/python benchmarks/executor_vs_torch.py [--steps 10] [--repeats 3] [--warmup 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from executor.running.cores import bind_local_rank, fair_share_threads, usable_cores  # noqa: E402
from executor.running.launch import rendezvous_store, run_plan  # noqa: E402
from planner.baselines import build_baseline  # noqa: E402
from planner.cluster import load_cluster_preset  # noqa: E402
from planner.cost import analytic_profile  # noqa: E402
from planner.plan import Plan  # noqa: E402
from planner.spec.presets import load_model_preset  # noqa: E402
from shared_host import load_average, measure_quietly, retried_once  # noqa: E402

CASES = [("tiny-llama", "gpipe", 8), ("tiny-llama", "1f1b", 8), ("tiny-llama", "interleaved-1f1b", 8),
         ("tiny-llama", "zb-v", 8), ("tiny-hybrid", "1f1b", 8), ("tiny-hybrid", "interleaved-1f1b", 8),
         ("tiny-hybrid", "zb-v", 8)]
TORCH_SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved-1f1b": "ScheduleInterleaved1F1B",
                   "zb-v": "ScheduleZBVZeroBubble"}
LR = 1e-3


def baseline_plan(spec, schedule: str, devices: int, microbatches: int) -> Plan:
    """The planner's own baseline plan (uniform partition), which torch's schedule of the same name executes."""
    profile = analytic_profile(spec, load_cluster_preset("cpu-host"))
    return build_baseline(schedule, profile, devices, microbatches)


def ours(spec, plan: Plan, steps: int, warmup: int, threads: int) -> list[float]:
    """Our executor's per-step wall times (barrier to barrier, rank 0) after ``warmup`` steps."""
    result = retried_once(lambda: run_plan(plan, spec, steps=steps, lr=LR, timeout_s=600, step_barriers=True,
                                           threads_per_rank=threads))
    return result.step_wall_ms[warmup:]


def torch_rank(args) -> None:
    """One rank of the torch.distributed.pipelining side (run in a subprocess)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn
    from torch.distributed import pipelining
    from torch.distributed.pipelining import PipelineStage

    from executor.running.data import synthetic_batch
    from executor.model.build import build_layers
    from executor.model.layers import Head
    from executor.model.linear import enable_weight_grad_deferral

    torch.set_num_threads(args.threads)
    # Bound to cores of its own as our ranks are (executor.running.cores.bind_to_cores), so both sides run alike.
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    bind_local_rank(rank, world, args.threads)
    # Torch's schedules differentiate plain autograd graphs (its ZB-V splits B itself), so the projections
    # are native F.linear, as on our F/B-only ranks.
    enable_weight_grad_deferral(False)
    dist.init_process_group("gloo")
    spec = load_model_preset(args.model)
    stage_layers = json.loads(args.stage_layers)        # every stage's layers, in model order
    stage_devices = json.loads(args.stage_devices)
    my_stages = [stage for stage, device in enumerate(stage_devices) if device == rank]
    modules = build_layers(spec, [layer for stage in my_stages for layer in stage_layers[stage]], seed=0)

    class StageModule(nn.Module):
        def __init__(self, layers):
            super().__init__()
            self.layers = nn.ModuleList(modules[i] for i in layers)

        def forward(self, x):
            for layer in self.layers:
                x = F.linear(layer.norm(x), layer.weight) if isinstance(layer, Head) else layer(x)
            return x

    stage_modules = [StageModule(stage_layers[stage]) for stage in my_stages]
    stages = [PipelineStage(module, stage, len(stage_devices), torch.device("cpu"))
              for module, stage in zip(stage_modules, my_stages)]

    def loss_fn(logits, target):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))

    schedule_class = getattr(pipelining, TORCH_SCHEDULES[args.schedule])
    single_stage = schedule_class in (pipelining.ScheduleGPipe, pipelining.Schedule1F1B)
    schedule = schedule_class(stages[0] if single_stage else stages, args.microbatches, loss_fn=loss_fn)
    optimizer = torch.optim.SGD([p for module in stage_modules for p in module.parameters()], lr=LR)
    has_first, has_last = 0 in my_stages, len(stage_devices) - 1 in my_stages
    step_ms = []
    for step in range(args.steps):
        batch = synthetic_batch(spec, args.microbatches, seed=0, step=step)
        dist.barrier()
        began = time.perf_counter()
        schedule.step(*([batch.inputs] if has_first else []), **({"target": batch.targets} if has_last else {}))
        optimizer.step()
        optimizer.zero_grad()
        dist.barrier()
        step_ms.append((time.perf_counter() - began) * 1e3)
    if rank == 0:
        Path(args.out).write_text(json.dumps(step_ms[args.warmup:]))
    dist.destroy_process_group()


def torch_side(model: str, schedule: str, plan: Plan, steps: int, warmup: int, threads: int) -> list[float]:
    """torch.distributed.pipelining's per-step wall times on the plan's stages and devices."""
    devices, microbatches = plan.num_devices, plan.num_microbatches
    stage_layers = [list(stage.layers) for stage in plan.stages]
    stage_devices = [stage.device for stage in plan.stages]
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "ms.json"
        store = rendezvous_store(devices)
        processes = []
        for rank in range(devices):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(devices), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(store.port), TORCHELASTIC_USE_AGENT_STORE="True",
                       OMP_NUM_THREADS=str(threads))
            processes.append(subprocess.Popen(
                [sys.executable, __file__, "--torch-rank", "--model", model, "--schedule", schedule,
                 "--microbatches", str(microbatches), "--steps", str(steps), "--warmup", str(warmup),
                 "--threads", str(threads), "--stage-layers", json.dumps(stage_layers),
                 "--stage-devices", json.dumps(stage_devices), "--out", str(out)], env=env))
        codes = [process.wait(timeout=600) for process in processes]
        if any(codes):
            raise RuntimeError(f"torch pipelining ranks failed: exit codes {codes}")
        return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=2, help="steps left out of each repeat's timings")
    parser.add_argument("--threads", type=int, help="intra-op threads per rank, both sides (default: cores / devices)")
    parser.add_argument("--only", help="run only the cases whose 'model/schedule' contains this text")
    parser.add_argument("--stage-layers", help=argparse.SUPPRESS)
    parser.add_argument("--stage-devices", help=argparse.SUPPRESS)
    parser.add_argument("--torch-rank", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--schedule", help=argparse.SUPPRESS)
    parser.add_argument("--microbatches", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_rank:
        torch_rank(args)
        return
    if args.steps <= args.warmup:
        parser.error("--steps must exceed --warmup")
    threads = args.threads or fair_share_threads(args.devices)
    cases = [case for case in CASES if args.only is None or args.only in f"{case[0]}/{case[1]}"]
    print(f"{usable_cores()} CPU cores, {threads} intra-op thread(s) per rank on both sides; load average "
          f"{load_average()} at start; each run starts on idle CPUs and is repeated (up to 3 times, the least "
          f"disturbed kept) while other programs used > 10 % of the CPUs; median wall ms per step (barrier to "
          f"barrier) over {args.repeats} x {args.steps - args.warmup} steps after {args.warmup} warm-up steps\n")
    other_loads: list[float] = []
    print("| model | schedule | torch schedule | devices | micro-batches | ours ms/step | torch ms/step | torch/ours |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for model, schedule, microbatches in cases:
        spec = load_model_preset(model)
        plan = baseline_plan(spec, schedule, args.devices, microbatches)
        ours_samples, torch_samples, ratios = [], [], []
        for repeat in range(args.repeats):
            # Alternate which side goes first, so a load change on a shared host hits both sides alike.
            sides = [("ours", lambda: ours(spec, plan, args.steps, args.warmup, threads)),
                     ("torch", lambda: torch_side(model, schedule, plan, args.steps, args.warmup, threads))]
            timings = {}
            for name, run in sides if repeat % 2 == 0 else sides[::-1]:
                quiet = measure_quietly(run)
                other_loads.append(quiet.other_load)
                timings[name] = quiet.value
            ours_samples += timings["ours"]
            torch_samples += timings["torch"]
            ratios.append(statistics.median(timings["torch"]) / statistics.median(timings["ours"]))
        ours_ms, torch_ms = statistics.median(ours_samples), statistics.median(torch_samples)
        print(f"| {model} | {schedule} | {TORCH_SCHEDULES[schedule]} | {args.devices} | {microbatches} | "
              f"{ours_ms:.2f} | {torch_ms:.2f} | {statistics.median(ratios):.2f} |", flush=True)
    print(f"\nload average {load_average()} at end; other programs' share of the CPUs during the kept runs: "
          f"median {statistics.median(other_loads):.0%}, highest {max(other_loads):.0%}")


if __name__ == "__main__":
    main()
