"""What starting a local run costs: the imports a rank needs, paid once by the zygote that forks the ranks.

A local rank (``executor.running.launch``) and a measuring process (``executor.measuring.alongside``) is forked by
the launching thread's zygote (``executor.running.processes``), which has imported torch, ``torch._dynamo`` (what
``torch.optim`` imports at an optimizer's first step) and the executor once. This prints, on this host:

- what each rank would pay to import them in a fresh process (``python -c "import ..."``, wall and CPU);
- the wall time of a one-step run of tiny-llama's 1F1B plan on 2 local ranks through ``run_plan``: the first one in
  this process (it starts the zygote too) and the median of the next ones (the zygote already there).

    .venv/bin/python benchmarks/run_start.py [--runs 5]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from executor.running.launch import run_plan  # noqa: E402
from executor.running.processes import ZYGOTE_PRELOAD  # noqa: E402
from planner.baselines import build_baseline  # noqa: E402
from planner.cluster import load_cluster_preset  # noqa: E402
from planner.cost.analytic import analytic_profile  # noqa: E402
from planner.spec.presets import load_model_preset  # noqa: E402


def fresh_import() -> tuple[float, float]:
    """Wall and CPU seconds of a fresh interpreter importing what the zygote imports."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import " + ", ".join(ZYGOTE_PRELOAD)], cwd=REPO_ROOT, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs after the first (default 5)")
    args = parser.parse_args()
    spec = load_model_preset("tiny-llama")
    cluster = load_cluster_preset("cpu-host")
    plan = build_baseline("1f1b", analytic_profile(spec, cluster), 2, 4, cluster=cluster)
    imports = [fresh_import() for _ in range(3)]
    walls = []
    for _ in range(args.runs + 1):
        started = time.perf_counter()
        run_plan(plan, spec, steps=1)
        walls.append(time.perf_counter() - started)
    print("| what | wall s | CPU s |")
    print("|---|---:|---:|")
    print(f"| a fresh process importing {', '.join(ZYGOTE_PRELOAD)} (median of 3) | "
          f"{statistics.median(w for w, _ in imports):.2f} | {statistics.median(c for _, c in imports):.2f} |")
    print(f"| a 1-step run of tiny-llama 1F1B on 2 ranks, the first in this process (the zygote starts) | "
          f"{walls[0]:.2f} | |")
    print(f"| the same run with the zygote started (median of {args.runs}) | {statistics.median(walls[1:]):.2f} | |")


if __name__ == "__main__":
    main()
