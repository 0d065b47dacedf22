"""Our executor vs torch.distributed.pipelining: same stage modules, same schedule, gloo, this host.

Both sides train the same layers (built by ``executor.model`` from the same seed) on the same synthetic
batches with SGD, one process per stage, one thread per process. The plans come from
``planner.baselines.build_baseline`` (uniform partition over an analytic profile); torch runs the same
stages with ``ScheduleGPipe`` / ``Schedule1F1B``. Both sides measure iteration time the same way: every rank
enters a barrier before and after each step and rank 0 takes the wall-clock time between the two barriers
(optimizer step included); the figure is the median over all steps after the first ``--warmup`` steps of
every repeat. Torch's last stage returns logits and its ``loss_fn`` computes the cross-entropy; ours
computes the same loss in the head.

    .venv/bin/python benchmarks/executor_vs_torch.py [--steps 8] [--repeats 3] [--warmup 2]
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

from executor.launch import rendezvous_store, run_plan  # noqa: E402
from planner.baselines import build_baseline  # noqa: E402
from planner.cluster import load_cluster_preset  # noqa: E402
from planner.cost import analytic_profile  # noqa: E402
from planner.plan import Plan  # noqa: E402
from planner.spec.presets import load_model_preset  # noqa: E402

CASES = [("tiny-llama", "gpipe", 8), ("tiny-llama", "1f1b", 8), ("tiny-hybrid", "1f1b", 8)]
LR = 1e-3


def baseline_plan(spec, schedule: str, devices: int, microbatches: int) -> Plan:
    """The planner's own baseline plan (uniform partition), which torch's schedule of the same name executes."""
    profile = analytic_profile(spec, load_cluster_preset("cpu-host"))
    return build_baseline(schedule, profile, devices, microbatches)


def ours(spec, plan: Plan, steps: int, warmup: int) -> list[float]:
    """Our executor's per-step wall times (barrier to barrier, rank 0) after ``warmup`` steps."""
    result = run_plan(plan, spec, steps=steps, lr=LR, timeout_s=600, step_barriers=True)
    return result.step_wall_ms[warmup:]


def torch_rank(args) -> None:
    """One rank of the torch.distributed.pipelining side (run in a subprocess)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    from executor.data import synthetic_batch
    from executor.model.build import build_layers
    from executor.model.layers import Head
    from executor.model.linear import enable_weight_grad_deferral

    torch.set_num_threads(1)
    enable_weight_grad_deferral(False)   # as our F/B-only ranks do: torch's schedules never split B
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    spec = load_model_preset(args.model)
    stage_layers = json.loads(args.stage_layers)[rank]
    modules = build_layers(spec, stage_layers, seed=0)

    class StageModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(modules[i] for i in stage_layers)

        def forward(self, x):
            for layer in self.layers:
                x = F.linear(layer.norm(x), layer.weight) if isinstance(layer, Head) else layer(x)
            return x

    module = StageModule()
    stage = PipelineStage(module, rank, world, torch.device("cpu"))

    def loss_fn(logits, target):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))

    schedule_class = ScheduleGPipe if args.schedule == "gpipe" else Schedule1F1B
    schedule = schedule_class(stage, args.microbatches, loss_fn=loss_fn)
    optimizer = torch.optim.SGD(module.parameters(), lr=LR)
    step_ms = []
    for step in range(args.steps):
        batch = synthetic_batch(spec, args.microbatches, seed=0, step=step)
        dist.barrier()
        began = time.perf_counter()
        if rank == 0:
            schedule.step(batch.inputs)
        elif rank == world - 1:
            schedule.step(target=batch.targets)
        else:
            schedule.step()
        optimizer.step()
        optimizer.zero_grad()
        dist.barrier()
        step_ms.append((time.perf_counter() - began) * 1e3)
    if rank == 0:
        Path(args.out).write_text(json.dumps(step_ms[args.warmup:]))
    dist.destroy_process_group()


def torch_side(model: str, schedule: str, plan: Plan, steps: int, warmup: int) -> list[float]:
    """torch.distributed.pipelining's per-step wall times on the plan's stages (one stage per rank)."""
    devices, microbatches = plan.num_devices, plan.num_microbatches
    stage_layers = [list(plan.stages[plan.stages_on(rank)[0]].layers) for rank in range(devices)]
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "ms.json"
        store = rendezvous_store(devices)
        processes = []
        for rank in range(devices):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(devices), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(store.port), TORCHELASTIC_USE_AGENT_STORE="True",
                       OMP_NUM_THREADS="1")
            processes.append(subprocess.Popen(
                [sys.executable, __file__, "--torch-rank", "--model", model, "--schedule", schedule,
                 "--microbatches", str(microbatches), "--steps", str(steps), "--warmup", str(warmup),
                 "--stage-layers", json.dumps(stage_layers), "--out", str(out)], env=env))
        codes = [process.wait(timeout=600) for process in processes]
        if any(codes):
            raise RuntimeError(f"torch pipelining ranks failed: exit codes {codes}")
        return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=2, help="steps left out of each repeat's timings")
    parser.add_argument("--stage-layers", help=argparse.SUPPRESS)
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
    print(f"{os.cpu_count()} CPU cores; median wall ms per step (barrier to barrier) over "
          f"{args.repeats} x {args.steps - args.warmup} steps after {args.warmup} warm-up steps")
    print(f"{'model':<12} {'schedule':<8} {'devices':>7} {'mbs':>4} {'ours ms/step':>13} {'torch ms/step':>14} "
          f"{'torch/ours':>10}")
    for model, schedule, microbatches in CASES:
        spec = load_model_preset(model)
        plan = baseline_plan(spec, schedule, args.devices, microbatches)
        ours_samples, torch_samples = [], []
        for _ in range(args.repeats):   # interleaved, so load changes on a shared host hit both sides alike
            ours_samples += ours(spec, plan, args.steps, args.warmup)
            torch_samples += torch_side(model, schedule, plan, args.steps, args.warmup)
        ours_ms, torch_ms = statistics.median(ours_samples), statistics.median(torch_samples)
        print(f"{model:<12} {schedule:<8} {args.devices:>7} {microbatches:>4} {ours_ms:>13.2f} {torch_ms:>14.2f} "
              f"{torch_ms / ours_ms:>10.2f}")


if __name__ == "__main__":
    main()
