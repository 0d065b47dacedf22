"""Hybrid-parallel plans of large models at real cluster sizes, and how long the search takes (one core).

For each job the unpinned search (``planner.parallel.planning.search``) chooses TP, CP, PP, DP, EP, micro-batch size,
recomputation and the pipeline plan; the table shows the chosen configuration, its schedule, predicted step
time, throughput, MFU (model FLOPs without recomputation over the dense BF16 peak), every executed FLOP per
GPU, the fullest GPU's memory, the runner-up and the search's wall time. The last rows are the 1,024-GPU
searches the 60 s target is about.

    .venv/bin/python benchmarks/hybrid_plans.py [--jobs deepseek-v3,...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.parallel.planning import search  # noqa: E402

# (model, cluster, GPUs, sequence, global batch)
JOBS = (
    ("qwen3-next-80b-a3b", "h100-sxm-8x8", 64, 4096, 512),
    ("deepseek-v3", "h800-sxm-256x8", 2048, 4096, 15360),
    ("minimax-text-01", "h100-sxm-32x8", 256, 4096, 1024),
    ("gemma-3-27b", "h100-sxm-128x8", 1024, 8192, 1024),
    ("deepseek-v3", "h100-sxm-128x8", 1024, 4096, 4096),
    ("nemotron-h-8b", "b200-128x8", 1024, 8192, 2048),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", help="comma-separated model names (default: all)")
    args = parser.parse_args()
    jobs = [job for job in JOBS if args.jobs is None or job[0] in args.jobs.split(",")]
    print("| model | cluster | GPUs | seq × batch | chosen | schedule | step s | tokens/s | MFU | HW TFLOP/s/GPU | "
          "peak GiB | runner-up (step s) | configs (pruned) | search s |")
    print("|---|---|---:|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|")
    for model, cluster, gpus, seq_len, batch in jobs:
        started = time.process_time()
        result = search(model, cluster, gpus, seq_len, batch)
        seconds = time.process_time() - started
        best = result.best.metrics()
        runner = result.runners_up[0] if result.runners_up else None
        runner_text = (f"{runner.config.short()} {runner.schedule} ({runner.iteration_ms / 1e3:.2f})" if runner
                       else "-")
        print(f"| {model} | {cluster} | {gpus} | {seq_len} × {batch} | {result.best.config.short()} | "
              f"{best['schedule']} | {best['iteration_ms'] / 1e3:.2f} | {best['tokens_per_s']:,.0f} | "
              f"{best['mfu']:.1%} | {best['hardware_tflops_per_gpu']:.0f} | {best['peak_memory_bytes'] / 2**30:.1f} | "
              f"{runner_text} | {result.considered} ({result.pruned_by_memory}) | {seconds:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
