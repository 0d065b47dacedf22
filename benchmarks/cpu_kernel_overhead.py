"""The CPU's per-kernel overhead: how far the analytic cost model is from measured CPU profiles, and the fixed
cost per kernel (``DeviceType.kernel_overhead_us``) that closes the gap.

On a CPU core a small model's layers are not bound by FLOPs or bytes but by the fixed cost of every eager
PyTorch op (dispatch, autograd bookkeeping, allocation). The analytic model charges each of its kernels the
device's ``kernel_overhead_us``; this script measures each CPU model's profile on this host
(``executor.measuring.profiler.measure_profile``, one intra-op thread as a local rank gets on 2 cores) and fits the
overhead at which the analytic profile on ``cpu-host`` takes as long in all
(``planner.calibrate.fit_kernel_overhead``). It prints, per model, the analytic total with the preset's
overhead and with 5 us (a GPU's), the measured total, and the fit. The ``cpu-host`` preset carries the
median fit over the dense models, whose ops are what the cost model counts. The hybrid model's scan-based
mixers run as many more small ops on a CPU than their fused GPU kernels, so they need more and are shown
apart.

    .venv/bin/python benchmarks/cpu_kernel_overhead.py [--repeats 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from executor.model.scale import scale_spec  # noqa: E402
from executor.measuring.profiler import measure_profile  # noqa: E402
from planner.calibrate import fit_kernel_overhead  # noqa: E402
from planner.cluster import DEFAULT_KERNEL_OVERHEAD_US, load_cluster_preset  # noqa: E402
from planner.cost import analytic_profile  # noqa: E402
from planner.spec.presets import load_model_preset  # noqa: E402

# (model, CPU scale or None, dense: whether its ops are the ones the cost model counts)
MODELS = [("tiny-llama", None, True), ("gemma-2-9b", {"hidden_size": 64, "seq_len": 64}, True),
          ("llama-3-8b", {"hidden_size": 64, "seq_len": 64}, True), ("tiny-hybrid", None, False)]


def total_ms(profile) -> float:
    return sum(layer.forward + layer.backward_input + layer.backward_weight for layer in profile.layers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    cluster = load_cluster_preset("cpu-host")
    gpu_like = replace(cluster, device=replace(cluster.device, kernel_overhead_us=DEFAULT_KERNEL_OVERHEAD_US))
    print(f"cpu-host preset: {cluster.device.kernel_overhead_us:g} us per kernel; measured with {args.threads} "
          f"intra-op thread(s), median of {args.repeats} passes per layer\n")
    print("| model | analytic ms (5 us/kernel) | analytic ms (preset) | measured ms | fitted us/kernel |")
    print("|---|---:|---:|---:|---:|")
    dense_fits = []
    for name, scale, dense in MODELS:
        spec = load_model_preset(name)
        if scale:
            spec = scale_spec(spec, **scale)
        measured = measure_profile(spec, repeats=args.repeats, warmup=3, threads=args.threads)
        fitted = fit_kernel_overhead(spec, cluster, measured)
        if dense:
            dense_fits.append(fitted)
        label = f"{name} (CPU scale)" if scale else name
        print(f"| {label}{'' if dense else ' (scan mixers)'} | {total_ms(analytic_profile(spec, gpu_like)):.2f} | "
              f"{total_ms(analytic_profile(spec, cluster)):.2f} | {total_ms(measured):.2f} | {fitted:.0f} |",
              flush=True)
    print(f"\nmedian fit over the dense models: {statistics.median(dense_fits):.0f} us per kernel")


if __name__ == "__main__":
    main()
