"""Our executor vs torch.distributed.pipelining: same stage modules, same schedule, gloo, this host.

Both sides train the same layers (built by ``executor.model`` from the same seed) on the same synthetic
batches with SGD, one process per stage, one thread per process. The measure is throughput step time:
the time from the end of the first (warm-up) step to the end of the last, divided by the steps in
between, optimizer included — from the action events for our executor (end of each step's last action),
from rank 0's clock between barriers for torch's ``Schedule1F1B`` / ``ScheduleGPipe``. Torch's last stage
returns logits and its ``loss_fn`` computes the cross-entropy; ours computes the same loss in the head.

    .venv/bin/python benchmarks/executor_vs_torch.py [--steps 8] [--repeats 3]
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
from planner.plan import Action, Plan, Stage  # noqa: E402
from planner.spec.presets import load_model_preset  # noqa: E402

CASES = [("tiny-llama", "gpipe", 8), ("tiny-llama", "1f1b", 8), ("tiny-hybrid", "1f1b", 8)]
LR = 1e-3


def split_layers(num_layers: int, num_stages: int) -> list[list[int]]:
    bounds = [round(i * num_layers / num_stages) for i in range(num_stages + 1)]
    return [list(range(bounds[i], bounds[i + 1])) for i in range(num_stages)]


def schedule_plan(schedule: str, stage_layers: list[list[int]], m: int) -> Plan:
    """The per-device orders torch's ScheduleGPipe / Schedule1F1B execute, one stage per device."""
    devices = len(stage_layers)
    actions = []
    for d in range(devices):
        if schedule == "gpipe":
            order = [Action(d, "F", mb) for mb in range(m)] + [Action(d, "B", mb) for mb in range(m)]
        else:
            warmup = min(devices - d - 1, m)
            order = [Action(d, "F", mb) for mb in range(warmup)]
            for mb in range(m - warmup):
                order += [Action(d, "F", mb + warmup), Action(d, "B", mb)]
            order += [Action(d, "B", mb) for mb in range(m - warmup, m)]
        actions.append(order)
    stages = [Stage(tuple(layers), d) for d, layers in enumerate(stage_layers)]
    return Plan(devices, m, stages, actions, strategy=schedule)


def ours(spec, plan: Plan, steps: int) -> float:
    result = run_plan(plan, spec, steps=steps, lr=LR, timeout_s=600)
    step_end = {}
    for event in result.events:
        step_end[event["step"]] = max(step_end.get(event["step"], 0.0), event["end_ms"])
    return (step_end[steps - 1] - step_end[0]) / (steps - 1)


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

    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    spec = load_model_preset(args.model)
    stage_layers = split_layers(spec.num_layers, world)[rank]
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
    started = None
    for step in range(args.steps):
        batch = synthetic_batch(spec, args.microbatches, seed=0, step=step)
        if rank == 0:
            schedule.step(batch.inputs)
        elif rank == world - 1:
            schedule.step(target=batch.targets)
        else:
            schedule.step()
        optimizer.step()
        optimizer.zero_grad()
        if step == 0:
            dist.barrier()
            started = time.perf_counter()
    dist.barrier()
    if rank == 0:
        Path(args.out).write_text(json.dumps((time.perf_counter() - started) * 1e3 / (args.steps - 1)))
    dist.destroy_process_group()


def torch_side(model: str, schedule: str, microbatches: int, devices: int, steps: int) -> float:
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
                 "--microbatches", str(microbatches), "--steps", str(steps), "--out", str(out)], env=env))
        codes = [process.wait(timeout=600) for process in processes]
        if any(codes):
            raise RuntimeError(f"torch pipelining ranks failed: exit codes {codes}")
        return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--torch-rank", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--schedule", help=argparse.SUPPRESS)
    parser.add_argument("--microbatches", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_rank:
        torch_rank(args)
        return
    print(f"{'model':<12} {'schedule':<8} {'devices':>7} {'mbs':>4} {'ours ms/step':>13} {'torch ms/step':>14} "
          f"{'torch/ours':>10}")
    for model, schedule, microbatches in CASES:
        spec = load_model_preset(model)
        plan = schedule_plan(schedule, split_layers(spec.num_layers, args.devices), microbatches)
        ours_ms = statistics.median(ours(spec, plan, args.steps) for _ in range(args.repeats))
        torch_ms = statistics.median(torch_side(model, schedule, microbatches, args.devices, args.steps)
                                     for _ in range(args.repeats))
        print(f"{model:<12} {schedule:<8} {args.devices:>7} {microbatches:>4} {ours_ms:>13.2f} {torch_ms:>14.2f} "
              f"{torch_ms / ours_ms:>10.2f}")


if __name__ == "__main__":
    main()
