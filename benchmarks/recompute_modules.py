"""Megatron-Core's recompute modules as this project's executor runs them, on a real model's layers: what each frees
against what the planner credits it with, and what it costs.

DeepSeek-V2-Lite's first two layers (latent attention without a query latent, a dense MLP; then latent attention and
an MoE of 64 routed experts, top 6, with 2 shared experts) at their real widths, one micro-batch of ``--seq-len``
tokens in FP32 on this CPU (``executor.model``; PyTorch's BF16 weight-gradient matmuls are ~30x slower on a CPU).
Per module: the activation bytes autograd keeps after the forward without recomputation and with the module
(``executor.model.recompute.held_bytes``), their difference, the planner's credit
(``planner.cost.analytic.recompute_module_costs``: BF16 without FP8, doubled for FP32), and the forward + backward time
against none (the median of ``--repeats``; this host is noisy, see ``host_speed.py``). The executor runs eager
PyTorch kernels, whose SwiGLU and norms keep more intermediate tensors than Transformer Engine's fused ones, so it
frees at least the credit, not exactly it (``tests/executor/test_recompute_modules.py`` holds that on a small model).

    .venv/bin/python benchmarks/recompute_modules.py [--seq-len 512] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from executor.model.build import build_layers  # noqa: E402
from executor.model.recompute import apply_recompute_modules, held_bytes  # noqa: E402
from planner.cost.analytic import RECOMPUTE_MODULES, recompute_module_costs  # noqa: E402
from planner.spec.presets import load_model_preset  # noqa: E402

MIB = 1024 ** 2


FP32_PER_BF16 = 2


def measure(spec, built: dict, modules: tuple[str, ...], repeats: int) -> tuple[int, float]:
    """(bytes kept after the forward, median ms of a forward and backward) of the ``built`` layers under
    ``modules``."""
    layers = sorted(built)
    apply_recompute_modules(built.values(), modules)
    x = torch.randn(spec.micro_batch_size, spec.seq_len, spec.hidden_size, generator=torch.Generator().manual_seed(0),
                    requires_grad=True)

    def forward():
        out = x
        for index in layers:
            out = built[index](out)
        return out

    held, times = 0, []
    for _ in range(repeats):
        start = time.perf_counter()
        out, held = held_bytes(forward, [p for layer in built.values() for p in layer.parameters()])
        out.float().pow(2).mean().backward()
        times.append((time.perf_counter() - start) * 1e3)
    return held, statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    spec = replace(load_model_preset("deepseek-v2-lite"), seq_len=args.seq_len, micro_batch_size=1)
    layers = [1, 2]
    credit = {module: FP32_PER_BF16 * sum(sum(cost.activation_bytes for cost in costs[module].freed.values())
                          for costs in (recompute_module_costs(spec.layers[index], spec) for index in layers)
                          if module in costs) for module in RECOMPUTE_MODULES}
    built = build_layers(spec, layers, seed=0, device="cpu", dtype=torch.float32)
    measure(spec, built, (), 1)   # a warm-up: the first backward allocates every gradient
    base_held, base_ms = measure(spec, built, (), args.repeats)
    print(f"\nDeepSeek-V2-Lite layers 1-2 (dense MLP, then MoE 64x top-6 + 2 shared; MLA), {args.seq_len} tokens, FP32 "
          f"on CPU: {base_held / MIB:,.1f} MiB kept, {base_ms:,.0f} ms forward + backward without recomputation\n")
    print("| module | kept (MiB) | freed (MiB) | planner's credit (MiB) | freed / credit | time vs none |")
    print("|---|---|---|---|---|---|")
    for module in RECOMPUTE_MODULES:
        held, ms = measure(spec, built, (module,), args.repeats)
        freed = base_held - held
        ratio = f"{freed / credit[module]:.2f}" if credit[module] else "no credit"
        print(f"| {module} | {held / MIB:,.1f} | {freed / MIB:,.1f} | {credit[module] / MIB:,.1f} | {ratio} | "
              f"{ms / base_ms:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
