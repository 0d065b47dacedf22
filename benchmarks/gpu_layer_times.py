"""The analytic per-layer times against the times measured on this host's GPU, for every layer kind the presets ship.

For each preset (by default one or two per layer kind: softmax attention with GQA, sliding windows, sinks and QK
norms, MLA, Mamba-1, Mamba-2, gated delta-net, lightning attention; dense MLPs and MoE from 8 to 512 experts) it
builds one copy of each different layer at the preset's full size (micro-batch and sequence as the preset says,
4,096 tokens for all but GPT-2), times forward, backward-input and backward-weight on the GPU
(``executor.measuring.profiler.measure_profile(distinct=True)``: CUDA events, the median of ``--repeats`` passes
after two warm-up passes, the weight gradient deferred as a zero-bubble schedule runs it) and sets the analytic
profile (``planner.cost.analytic_profile``) on the named cluster's GPU beside it.

Columns: the analytic and measured milliseconds of F and of B + W, measured / analytic, and the TFLOP/s the layer
reached (the analytic model's FLOPs of F + B + W over the measured time), which is the per-kind efficiency the
analytic model assumes to be one number. The last table is the median ratio per mixer and MLP kind.

    python benchmarks/gpu_layer_times.py [--cluster h200-sxm-1x8] [--presets a,b] [--repeats 5] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from executor.measuring.profiler import distinct_layers, measure_profile  # noqa: E402
from executor.model.build import DTYPES  # noqa: E402
from planner.cluster import load_cluster_preset  # noqa: E402
from planner.cost import analytic_profile  # noqa: E402
from planner.cost.analytic import layer_cost  # noqa: E402
from planner.spec.model import LayerSpec  # noqa: E402
from planner.spec.presets import load_model_preset  # noqa: E402

# Every mixer and MLP kind the presets ship, each at least once, the larger MoE presets left out (their layers are
# the same kinds at more experts; deepseek-v3's MoE layer alone is 11 B parameters).
DEFAULT_PRESETS = ("llama-3-8b", "gemma-2-9b", "gpt-oss-20b", "qwen3-30b-a3b", "deepseek-v2-lite", "mixtral-8x7b",
                   "nemotron-h-8b", "falcon-mamba-7b", "qwen3-next-80b-a3b", "minimax-text-01", "jamba-v0.1")


def describe(layer: LayerSpec) -> tuple[str, str]:
    """(mixer, MLP) of a layer in words: its kind and the shape details that set its kernels."""
    mixer = layer.mixer
    if layer.kind in ("embedding", "head"):
        return layer.kind, ""
    if mixer is None:
        words = "-"
    elif mixer.type == "attention" and mixer.kv_lora_rank:
        words = f"MLA {mixer.num_heads}h"
    elif mixer.type == "attention":
        extras = [f"window {mixer.window}" if mixer.window else "", "sinks" if mixer.sinks else "",
                  "qk-norm" if mixer.qk_norm else ""]
        words = " ".join([f"attention {mixer.num_heads}/{mixer.num_kv_heads}h d{mixer.head_dim}"]
                         + [extra for extra in extras if extra])
    elif mixer.type == "linear_attention":
        words = f"{mixer.variant} {mixer.num_heads}h d{mixer.head_dim}"
    elif mixer.type == "mamba2":
        words = f"mamba2 {mixer.num_heads}h d{mixer.head_dim} state {mixer.state_size}"
    else:
        words = f"mamba state {mixer.state_size}"
    mlp = layer.mlp
    if mlp is None:
        return words, "-"
    if mlp.type == "moe":
        return words, f"MoE {mlp.top_k}/{mlp.num_experts} x {mlp.expert_intermediate_size}"
    return words, f"dense {mlp.intermediate_size}"


def kind_of(layer: LayerSpec) -> tuple[str, str]:
    """The layer's kinds for the summary: mixer kind (MLA apart from attention) and MLP kind."""
    mixer = layer.mixer
    if layer.kind in ("embedding", "head"):
        return layer.kind, ""
    name = "-" if mixer is None else ("mla" if getattr(mixer, "kv_lora_rank", None) else
                                     mixer.variant if mixer.type == "linear_attention" else mixer.type)
    return name, "-" if layer.mlp is None else layer.mlp.type


def measure(preset: str, cluster, device: torch.device, repeats: int) -> list[dict]:
    spec = load_model_preset(preset)
    reduced, _ = distinct_layers(spec)
    started = time.perf_counter()
    measured = measure_profile(reduced, device=device, dtype=DTYPES[spec.dtype], repeats=repeats, warmup=2,
                               distinct=True)
    seconds = time.perf_counter() - started
    analytic = analytic_profile(reduced, cluster)
    rows = []
    for layer, model, real in zip(reduced.layers, analytic.layers, measured.layers):
        flops = layer_cost(layer, reduced).model_flops()
        mixer, mlp = describe(layer)
        rows.append({
            "preset": preset, "layer": model.name, "mixer": mixer, "mlp": mlp, "kinds": kind_of(layer),
            "analytic_f_ms": model.forward, "analytic_bw_ms": model.backward_input + model.backward_weight,
            "measured_f_ms": real.forward, "measured_b_ms": real.backward_input, "measured_w_ms": real.backward_weight,
            "flops": flops, "analytic_activation_bytes": model.activation_bytes,
            "measured_activation_bytes": real.activation_bytes, "tokens": spec.micro_batch_size * spec.seq_len,
            "seconds": seconds,
        })
    return rows


HEADER = ["preset", "layer", "mixer", "MLP", "F analytic ms", "F measured ms", "F meas./an.",
          "B+W analytic ms", "B+W measured ms", "B+W meas./an.", "TFLOP/s"]


def table(rows: list[dict]) -> None:
    for row in rows:
        measured_bw = row["measured_b_ms"] + row["measured_w_ms"]
        total_ms = row["measured_f_ms"] + measured_bw
        print("| " + " | ".join([
            row["preset"], row["layer"], row["mixer"], row["mlp"],
            f"{row['analytic_f_ms']:.3f}", f"{row['measured_f_ms']:.3f}",
            f"{row['measured_f_ms'] / row['analytic_f_ms']:.2f}",
            f"{row['analytic_bw_ms']:.3f}", f"{measured_bw:.3f}", f"{measured_bw / row['analytic_bw_ms']:.2f}",
            f"{row['flops'] / total_ms / 1e9:.1f}"]) + " |", flush=True)


def summary(rows: list[dict]) -> None:
    by_kind = defaultdict(list)
    for row in rows:
        measured = row["measured_f_ms"] + row["measured_b_ms"] + row["measured_w_ms"]
        by_kind[tuple(row["kinds"])].append((measured / (row["analytic_f_ms"] + row["analytic_bw_ms"]),
                                              row["flops"] / measured / 1e9))
    print("\n| mixer kind | MLP kind | layers | median measured / analytic (F+B+W) | median TFLOP/s |")
    print("|---|---|---|---|---|")
    for (mixer, mlp), values in sorted(by_kind.items()):
        print(f"| {mixer} | {mlp or '-'} | {len(values)} | {statistics.median(v[0] for v in values):.2f} "
              f"| {statistics.median(v[1] for v in values):.0f} |")
    ratios = [v[0] for values in by_kind.values() for v in values]
    print(f"\nall {len(ratios)} layers: median measured / analytic {statistics.median(ratios):.2f}, "
          f"range {min(ratios):.2f} to {max(ratios):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cluster", default="h200-sxm-1x8",
                        help="the named cluster whose GPU the analytic side uses")
    parser.add_argument("--presets", default=",".join(DEFAULT_PRESETS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", help="also write the rows as JSON here, after every preset")
    args = parser.parse_args()
    device = torch.device(args.device)
    cluster = load_cluster_preset(args.cluster)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"measured on {name} (torch {torch.__version__}); analytic on {args.cluster}: {cluster.device.name}, "
          f"{cluster.device.peak_tflops:.0f} TFLOP/s peak x {cluster.device.efficiency} efficiency, "
          f"{cluster.device.memory_bandwidth_gb_s:.0f} GB/s\n", flush=True)
    print("| " + " | ".join(HEADER) + " |")
    print("|" + "---|" * len(HEADER))
    rows = []
    for preset in args.presets.split(","):
        try:
            measured = measure(preset, cluster, device, args.repeats)
            table(measured)
            rows.extend(measured)
        except torch.OutOfMemoryError as error:
            print(f"{preset}: out of memory ({str(error).splitlines()[0]})", flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        if args.out:
            Path(args.out).write_text(json.dumps({"device": name, "cluster": args.cluster, "rows": rows}, indent=1))
    summary(rows)


if __name__ == "__main__":
    main()
