"""The kernel rates a GPU reaches by shape: what ``planner/hardware.py``'s per-GPU compute constants are set from.

Measures on this host's CUDA GPU, with CUDA events (each shape: warm-up, then enough repetitions for ~20 ms of
work, the median of three such timings):

- **GEMMs** (``torch.nn.functional.linear``, the layout of a linear layer's forward, ``[m, k] x [n, k]^T``) in
  BF16 and, where the GPU has FP8 tensor cores, FP8 (``torch._scaled_mm``, e4m3, per-tensor scales, BF16 out, as
  Transformer Engine's delayed-scaling recipe runs them) over a grid of m (tokens), n and k, plus the widths the
  shipped presets' projections take after tensor-parallel splits;
- **grouped expert GEMMs** (``torch._grouped_mm``, one launch over all local experts, as Megatron-Core's
  ``GroupedMLP`` and torchtitan's MoE run them) by tokens per expert;
- **attention** (``scaled_dot_product_attention``, causal, FlashAttention and cuDNN back-ends) by head dimension and
  sequence length, forward and forward + backward;
- **memory-bound kernels** (a copy, an add, SiLU x up) by size, in bytes moved per second;
- a **sustained** 8192^3 BF16 GEMM loop for ``--sustain`` seconds, per second, to show the clocks a long training
  step runs at rather than a burst's.

Prints a table per section and writes everything to ``--out`` (JSON). ``--compare FILE`` (no GPU needed) prints how
far the cost model's rates (``planner.cost.roofline``, whose constants were fitted to
``benchmarks/results/gpu_kernels_h100.json``) are from a measured file, section by section.

    python benchmarks/gpu_kernels.py --out gpu_kernels.json [--quick]
    python benchmarks/gpu_kernels.py --compare benchmarks/results/gpu_kernels_h100.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

GRID_M = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
GRID_NK = (256, 512, 1024, 2048, 4096, 8192, 16384)
# Projection widths of the presets after TP 1-8 splits, and odd ones (gpt-oss 2880, DeepSeek-V2-Lite 1408, Qwen3 MoE
# 768, Mixtral / Llama 14336 and its splits, DeepSeek-V3 7168 / 18432 / 2048)
PRESET_WIDTHS = (384, 640, 768, 1408, 1536, 1792, 2880, 3072, 3584, 5120, 6144, 7168, 14336, 18432, 28672)
GROUPED_TOKENS = (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
# (experts, hidden, expert width): Qwen3-30B-A3B, DeepSeek-V2-Lite, DeepSeek-V3 / Kimi, Mixtral, gpt-oss
GROUPED_SHAPES = ((128, 2048, 768), (64, 2048, 1408), (32, 7168, 2048), (8, 4096, 14336), (32, 2880, 2880))
ATTENTION = ((128, (1024, 2048, 4096, 8192, 16384, 32768)), (64, (2048, 4096, 8192)), (256, (2048, 4096, 8192)),
             (192, (4096,)))


def timed(fn, target_ms: float = 20.0, graph: bool = True) -> float:
    """Milliseconds per call of ``fn``'s GPU work: a warm-up, a calibration call, then the median of three timings of
    a repetition count that takes ~target_ms. ``graph``: the repetitions are captured in one CUDA graph and replayed,
    so that a small kernel is timed on the GPU and not by Python's launch rate (the cost model charges launches
    apart, as the device's ``kernel_overhead_us``)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    once = max(start.elapsed_time(end), 1e-3)
    reps = max(3, min(500, int(target_ms / once)))
    run = None
    if graph:
        try:
            captured = torch.cuda.CUDAGraph()
            with torch.cuda.graph(captured):
                for _ in range(reps):
                    fn()
            captured.replay()
            run = captured.replay
        except RuntimeError:    # a kernel that cannot be captured is timed eagerly
            torch.cuda.synchronize()
    if run is None:
        def run():
            for _ in range(reps):
                fn()
    samples = []
    for _ in range(3):
        start.record()
        run()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / reps)
    return statistics.median(samples)


def gemm_ms(m: int, n: int, k: int, fp8: bool) -> float:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    if not fp8:
        return timed(lambda: F.linear(a, w))
    a8, w8 = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda", dtype=torch.float32)
    return timed(lambda: torch._scaled_mm(a8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16))


def gemm_rows(fp8: bool, quick: bool) -> list[dict]:
    shapes = [(m, n, k) for m in GRID_M for n in GRID_NK for k in GRID_NK]
    shapes += [(m, n, k) for m in (4096, 8192) for n in PRESET_WIDTHS for k in (2048, 4096, 7168)]
    shapes += [(m, n, k) for m in (4096, 8192) for n in (2048, 4096, 7168) for k in PRESET_WIDTHS]
    if quick:
        shapes = shapes[::37]
    rows = []
    for m, n, k in shapes:
        ms = gemm_ms(m, n, k, fp8)
        rows.append({"m": m, "n": n, "k": k, "ms": ms, "tflops": 2.0 * m * n * k / ms / 1e9})
    return rows


def grouped_rows(quick: bool) -> list[dict]:
    rows = []
    for experts, hidden, width in GROUPED_SHAPES[:2] if quick else GROUPED_SHAPES:
        for per_expert in GROUPED_TOKENS[:3] if quick else GROUPED_TOKENS:
            total = experts * per_expert
            x = torch.randn(total, hidden, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(experts, width, hidden, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)
            offsets = torch.arange(1, experts + 1, device="cuda", dtype=torch.int32) * per_expert
            ms = timed(lambda: torch._grouped_mm(x, w, offs=offsets, out_dtype=torch.bfloat16))
            flops = 2.0 * total * hidden * width
            rows.append({"experts": experts, "hidden": hidden, "width": width, "tokens_per_expert": per_expert,
                         "ms": ms, "tflops": flops / ms / 1e9})
    return rows


def attention_rows(quick: bool) -> list[dict]:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows = []
    for head_dim, seqs in ATTENTION[:1] if quick else ATTENTION:
        heads = 8192 // max(head_dim, 128) * (2 if head_dim == 64 else 1)
        for seq in seqs[:2] if quick else seqs:
            for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                q, k, v = (torch.randn(1, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16,
                                       requires_grad=True) for _ in range(3))
                grad = torch.randn(1, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16)
                causal_flops = 2.0 * 2.0 * heads * seq * seq * head_dim / 2
                try:
                    with sdpa_kernel(backend):
                        forward = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                        graph=False)

                        def step():
                            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                            torch.autograd.grad(out, (q, k, v), grad)
                        both = timed(step, graph=False)
                except RuntimeError as error:
                    rows.append({"backend": name, "head_dim": head_dim, "seq": seq, "error": str(error)[:200]})
                    continue
                rows.append({"backend": name, "head_dim": head_dim, "heads": heads, "seq": seq,
                             "forward_ms": forward, "backward_ms": both - forward,
                             "forward_tflops": causal_flops / forward / 1e9,
                             "backward_tflops": 2.5 * causal_flops / (both - forward) / 1e9})
    return rows


def bandwidth_rows(quick: bool) -> list[dict]:
    rows = []
    for mib in (8, 64, 512) if quick else (1, 8, 64, 256, 1024, 4096):
        elements = mib * (1 << 20) // 2
        x, y = (torch.randn(elements, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        out = torch.empty_like(x)
        for name, fn, moved in (("copy", lambda: out.copy_(x), 2),
                                ("add", lambda: torch.add(x, y, out=out), 3),
                                ("silu_mul", lambda: torch.mul(F.silu(x), y, out=out), 5)):
            ms = timed(fn)
            rows.append({"kernel": name, "mib": mib, "ms": ms, "gb_s": moved * elements * 2 / ms / 1e6})
    return rows


def sustained_rows(seconds: float) -> list[dict]:
    n = 8192
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    flops = 2.0 * n ** 3
    rows, begin = [], time.time()
    while time.time() - begin < seconds:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(200):
            torch.mm(a, b)
        end.record()
        end.synchronize()
        rows.append({"t_s": round(time.time() - begin, 2), "tflops": 200 * flops / start.elapsed_time(end) / 1e9})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="gpu_kernels.json")
    parser.add_argument("--quick", action="store_true", help="a few shapes of each section (a smoke run)")
    parser.add_argument("--sustain", type=float, default=20.0, help="seconds of the sustained GEMM loop")
    parser.add_argument("--sections", default="gemm,fp8,grouped,attention,bandwidth,sustained")
    parser.add_argument("--compare", metavar="FILE", help="the cost model against a measured file (no GPU needed)")
    args = parser.parse_args()
    if args.compare:
        compare(json.loads(Path(args.compare).read_text()))
        return
    props = torch.cuda.get_device_properties(0)
    result = {"gpu": props.name, "multiprocessors": props.multi_processor_count, "torch": torch.__version__,
              "cuda": torch.version.cuda, "date": time.strftime("%Y-%m-%d"), "host": platform.node()}
    fp8 = torch.cuda.get_device_capability(0) >= (8, 9)
    sections = {"gemm": lambda: gemm_rows(False, args.quick), "fp8": lambda: gemm_rows(True, args.quick),
                "grouped": lambda: grouped_rows(args.quick), "attention": lambda: attention_rows(args.quick),
                "bandwidth": lambda: bandwidth_rows(args.quick), "sustained": lambda: sustained_rows(args.sustain)}
    for name in args.sections.split(","):
        if name == "fp8" and not fp8:
            continue
        begin = time.time()
        try:
            result[name] = sections[name]()
        except Exception:  # noqa: BLE001 - one section's failure must not lose the others
            result[name + "_error"] = traceback.format_exc()[-2000:]
            print(result[name + "_error"])
        print(f"{name}: {len(result.get(name, []))} rows in {time.time() - begin:.1f} s", flush=True)
        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)
        torch.cuda.empty_cache()
    summary(result)


def summary(result: dict) -> None:
    print(f"\n{result['gpu']}, {result['multiprocessors']} SMs, torch {result['torch']}, CUDA {result['cuda']}")
    for name in ("gemm", "fp8"):
        rows = result.get(name, [])
        square = [row for row in rows if row["m"] == row["n"] == row["k"]]
        print(f"\n{name}: square shapes " + ", ".join(f"{row['m']}: {row['tflops']:.0f}" for row in square))
        best = max((row["tflops"] for row in rows), default=0)
        print(f"{name}: best {best:.0f} TFLOP/s over {len(rows)} shapes")
    for row in result.get("grouped", []):
        print(f"grouped E{row['experts']} {row['hidden']}x{row['width']} {row['tokens_per_expert']} tok/expert: "
              f"{row['tflops']:.0f} TFLOP/s")
    for row in result.get("attention", []):
        if "error" in row:
            print(f"attention {row['backend']} d{row['head_dim']} s{row['seq']}: {row['error'][:80]}")
        else:
            print(f"attention {row['backend']} d{row['head_dim']} s{row['seq']}: F {row['forward_tflops']:.0f} "
                  f"B {row['backward_tflops']:.0f} TFLOP/s")
    for row in result.get("bandwidth", []):
        print(f"bandwidth {row['kernel']} {row['mib']} MiB: {row['gb_s']:.0f} GB/s")
    sustained = result.get("sustained", [])
    if sustained:
        every = sustained[::max(1, len(sustained) // 10)]
        print("sustained 8192^3: " + ", ".join(f"{row['tflops']:.0f}" for row in every))


def compare(measured: dict, peak_tflops: float = 989.0, fp8_tflops: float = 1979.0) -> None:
    """Model against measurement: per section, how many kernels, the median and 90th percentile of |model / measured
    - 1|, and the median signed error of the large ones (m, n, k >= 4096) for the GEMMs."""
    from planner.cluster import load_cluster_preset
    from planner.cost.roofline import BURST_PLATEAU, attention_efficiency, gemm_efficiency, grouped_efficiency
    from planner.cost.work import AttentionShape
    device = load_cluster_preset("h100-sxm-1x8").device
    plateau, sms = BURST_PLATEAU, measured["multiprocessors"]   # the file's kernels were timed in bursts

    def line(name, pairs, large=None):
        errors = sorted(abs(model / seen - 1) for model, seen in pairs)
        bias = f"{statistics.median(m / s - 1 for m, s in large):+.1%}" if large else "-"
        print(f"| {name} | {len(errors)} | {statistics.median(errors):.1%} | {errors[int(0.9 * len(errors))]:.1%} | "
              f"{bias} |")
    print(f"Model ({device.name}: burst plateau {plateau}, {sms} SMs) against {measured['gpu']}, {measured['date']}\n")
    print("| kernels | count | median abs. error | 90th percentile | median error, m, n, k >= 4096 |")
    print("|---|---:|---:|---:|---:|")
    for section, label, peak, fp8 in (("gemm", "BF16", peak_tflops, False), ("fp8", "FP8", fp8_tflops, True)):
        rows = measured.get(section, [])
        pairs = [(gemm_efficiency(r["m"], r["n"], r["k"], sms, plateau, fp8), r["tflops"] / peak) for r in rows]
        training = [pair for pair, r in zip(pairs, rows) if r["m"] >= 1024 and min(r["n"], r["k"]) >= 512]
        large = [pair for pair, r in zip(pairs, rows) if min(r["m"], r["n"], r["k"]) >= 4096]
        line(f"{label} GEMMs, m >= 1,024, n, k >= 512", training, large)
        line(f"{label} GEMMs, all", pairs)
    line("grouped expert GEMMs (BF16)", [(grouped_efficiency(r["tokens_per_expert"], plateau),
                                          r["tflops"] / peak_tflops) for r in measured.get("grouped", [])])
    for backend, kernel in (("cudnn", "cudnn"), ("flash", "flash2")):
        for backward, key in ((False, "forward_tflops"), (True, "backward_tflops")):
            rows = [r for r in measured.get("attention", []) if r.get("backend") == backend and "error" not in r]
            line(f"attention {kernel} {'backward' if backward else 'forward'}",
                 [(attention_efficiency(AttentionShape(r["head_dim"], r["seq"], backward), 1, plateau, kernel),
                   r[key] / peak_tflops) for r in rows])


if __name__ == "__main__":
    main()
