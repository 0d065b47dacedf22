"""Kernel time on a device: the roofline model (Williams, Waterman & Patterson 2009), each kernel at its shape's rate.

A kernel takes ``max(FLOPs / (peak · efficiency), bytes / bandwidth)``: compute-bound kernels (projections,
attention) at the rate their shape reaches, memory-bound ones (norms, activations, the embedding gather) at the
device's bandwidth. Each kernel also pays the device's fixed ``kernel_overhead_us`` (launch and tail on a GPU, eager
dispatch on a CPU), which is what dominates tiny layers.

``DeviceType.efficiency`` is the fraction of the peak a large GEMM holds. On a device whose multiprocessors are
known (every named GPU, ``planner.hardware``) the rate of a kernel with a shape (``planner.cost.work``) follows it:

- **GEMMs** run as output tiles of ``GEMM_TILE`` (128 x 256, CUTLASS 3's and cuBLAS's Hopper tile for large
  BF16/FP8 products), one per multiprocessor at a time. A product whose tiles do not fill the last wave leaves
  multiprocessors idle (wave quantisation: NVIDIA, "Matrix Multiplication Background User's Guide", Sec. 2.4); one
  with fewer tiles than multiprocessors splits its k loop over them (split-K) in up to ``SPLIT_K_MAX`` slices of at
  least ``SPLIT_K_MIN``; and each tile's k loop pays a fixed fill and drain, so a slice of ``k`` runs at
  ``k / (k + k0)`` of the plateau (``K_HALF``, larger for FP8, whose k step is twice as long). FP8 products hold
  ``FP8_PLATEAU`` of the BF16 plateau's fraction of their own peak.
- **Grouped expert GEMMs** (one launch over the local experts, Megatron-Core's ``GroupedMLP``, torchtitan's
  ``torch._grouped_mm``) by the tokens each expert receives ``t``: ``GROUPED_PLATEAU · x / sqrt(1 + x²)`` of the
  plateau with ``x = t / GROUPED_TOKENS``: below ~256 tokens per expert the tiles run mostly empty. Measured in BF16;
  an FP8 one (Transformer Engine's ``GroupedLinear``) takes the dense rule's FP8 plateau and k cost besides.
- **Fused attention** by the keys a query block sees ``s`` (the sequence, its CP share, or the window) and the head
  dimension: ``a · s / (s + s0)`` of the plateau, forward and backward apart (``ATTENTION``), times
  ``ATTENTION_HEAD_DIM``'s factor; for the kernel the framework runs (``ATTENTION_KERNELS``): cuDNN's fused
  attention (Megatron-Core's and NeMo's: Transformer Engine's ``get_attention_backend`` disables FlashAttention "to
  give FusedAttention preference on Hopper+") or FlashAttention-2 (PyTorch's ``scaled_dot_product_attention`` flash
  back-end: torchtitan), about half as fast on Hopper; or ``cudnn-2024``, Transformer Engine's fused attention as the
  2024 stacks ran it (``TE_2024_ATTENTION``).
- **Memory-bound kernels** at ``MEMORY_BANDWIDTH_EFFICIENCY`` of the datasheet bandwidth (a copy, an add and SiLU x
  up over >= 64 MiB).

Tensor, context and expert parallelism shrink the shapes first (``Split``): TP divides a projection's split
dimension (or, for a weight replicated over TP, its sequence-parallel tokens), CP the tokens, and EP x ETP gathers
``ep·etp/(tp·cp)`` times a rank's routed tokens per local expert. The bytes a GEMM moves divide the same way, but for
its weights, which divide as they are sharded (``split_bytes``): a rank's grouped expert GEMM reads its own
``experts / ep`` experts' weights, whatever TP and CP are.

Every constant was measured with ``benchmarks/gpu_kernels.py`` on one NVIDIA H100 80GB HBM3 (132 SMs, torch 2.11 /
CUDA 13.0, 2026-11-27; ``benchmarks/results/gpu_kernels_h100.json``); the fit, and how far each measured kernel is
from it, are in the README (``tests/planner/test_kernel_rates.py`` holds the model to the measured table). They are
taken for every GPU kind whose multiprocessors are known, with that kind's own ``efficiency`` and SM count: a
Hopper measurement, an approximation for A100, B200 and MI300X.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.cluster import DeviceType
from planner.cost.work import AttentionShape, Gemm, Kernel

GEMM_TILE = (128, 256)
SPLIT_K_MIN, SPLIT_K_MAX = 256, 8
K_HALF = {False: 192.0, True: 512.0}        # BF16, FP8
FP8_PLATEAU = 0.93                          # an FP8 GEMM's plateau, of the FP8 peak, over a BF16 one's of the BF16 peak
GROUPED_PLATEAU, GROUPED_TOKENS = 0.89, 256.0
ATTENTION_KERNELS = ("cudnn", "flash2", "cudnn-2024")
# per kernel, (a, s0) of the forward and of the backward
ATTENTION = {"cudnn": {False: (0.90, 800.0), True: (0.73, 700.0)},
             "flash2": {False: (0.44, 600.0), True: (0.45, 1350.0)}}
# per kernel, the head dimension up to which a factor holds: (forward, backward), against d128's
ATTENTION_HEAD_DIM = {"cudnn": ((64, (0.77, 0.77)), (128, (1.0, 1.0)), (1 << 20, (1.05, 0.72))),
                      "flash2": ((64, (0.96, 0.87)), (128, (1.0, 1.0)), (1 << 20, (0.92, 0.85)))}
# Transformer Engine 1.x's fused attention as the 2024 stacks ran it in training (NeMo 24.03 and 24.07, Megatron-Core
# r0.8.0; cuDNN 9.0-9.2): cuDNN's curve at TE_2024_ATTENTION of the rate measured in 2026. Not measured here: set
# once, on the 1 M-token row of NeMo's long-sequence table (Llama 2 7B, CP 32, 98 % of its FLOPs attention;
# benchmarks/published_runs.py), and held out on every other row of the three 2024 tables. Transformer Engine's own
# 2024 benchmark (docs/examples/attention/attention.ipynb, TE 1.8, cuDNN 9.2, H100 PCIe) had cuDNN 1.35-1.59x
# FlashAttention-2, where the 2026 measurement has it about 2x: 0.68-0.80 of today's rate standalone; the rest is
# the training path's, which nothing here measures.
TE_2024_ATTENTION = 0.58
ATTENTION["cudnn-2024"] = {backward: (a * TE_2024_ATTENTION, s0) for backward, (a, s0) in ATTENTION["cudnn"].items()}
ATTENTION_HEAD_DIM["cudnn-2024"] = ATTENTION_HEAD_DIM["cudnn"]
MEMORY_BANDWIDTH_EFFICIENCY = 0.91
# The plateau the shape rules were fitted with, on kernels timed in ~20 ms bursts; a device's ``efficiency`` is its
# sustained plateau (H100: this x 0.68 / 0.71 = 0.72, planner/hardware.py)
BURST_PLATEAU = 0.75


@dataclass(frozen=True)
class Split:
    """How a GPU's share of a layer's kernels is cut: tensor, context, expert and expert-tensor parallelism (the part
    of a ``ParallelConfig`` that sets kernel shapes, ``planner.parallel.cost.kernel_split``; kept apart so that the
    layers' work is cached per split, not per configuration)."""

    tp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1


WHOLE = Split()


def gemm_efficiency(m: float, n: float, k: float, multiprocessors: int, plateau: float, fp8: bool = False) -> float:
    """The fraction of the peak an ``[m, k] x [k, n]`` product reaches (module doc)."""
    tiles = math.ceil(m / GEMM_TILE[0]) * math.ceil(n / GEMM_TILE[1])
    splits = max(1, min(multiprocessors // tiles, SPLIT_K_MAX, int(k // SPLIT_K_MIN)))
    units = tiles * splits
    waves = math.ceil(units / multiprocessors)
    k_slice = k / splits
    bf16 = plateau * units / (waves * multiprocessors) * k_slice / (k_slice + K_HALF[False])
    return bf16 * fp8_factor(k_slice) if fp8 else bf16


def fp8_factor(k: float) -> float:
    """What FP8 takes off a product's fraction of its (FP8) peak against BF16's of the BF16 peak, for a k loop of
    ``k``: FP8's lower plateau and its longer fill and drain (the dense rule's ``FP8_PLATEAU`` and ``K_HALF``)."""
    return FP8_PLATEAU * (k / (k + K_HALF[True])) / (k / (k + K_HALF[False]))


def grouped_efficiency(tokens_per_expert: float, plateau: float, fp8: bool = False, k: float = 0.0) -> float:
    """The fraction of the peak a grouped expert GEMM reaches (module doc), measured in BF16; in FP8 (of the FP8
    peak) with the dense rule's FP8 cost for its k loop of ``k``, which no grouped FP8 measurement here replaces."""
    x = tokens_per_expert / GROUPED_TOKENS
    bf16 = plateau * GROUPED_PLATEAU * x / math.sqrt(1 + x * x)
    return bf16 * fp8_factor(k) if fp8 and k > 0 else bf16


def attention_efficiency(shape: AttentionShape, cp: int, plateau: float, kernel: str = "cudnn") -> float:
    a, s0 = ATTENTION[kernel][shape.backward]
    keys = shape.keys / cp
    factor = next(factors for limit, factors in ATTENTION_HEAD_DIM[kernel] if shape.head_dim <= limit)
    return plateau * a * keys / (keys + s0) * factor[shape.backward]


def local_gemm(gemm: Gemm, split: Split) -> tuple[list[float], float]:
    """(the ``[m, n, k]`` one GPU runs, tokens per local expert or 0) of ``gemm`` under ``split``."""
    dims = [gemm.m, gemm.n, gemm.k]
    if gemm.experts:
        per_expert = dims[gemm.token_dim] * split.ep * split.etp / (split.tp * split.cp * gemm.experts)
        dims[gemm.token_dim] = per_expert
        if gemm.tp_dim is not None:
            dims[gemm.tp_dim] /= split.etp
        return dims, per_expert
    dims[gemm.token_dim] /= split.cp
    dims[gemm.token_dim if gemm.tp_dim is None else gemm.tp_dim] /= split.tp
    return dims, 0.0


def split_bytes(kernel: Kernel, split: Split) -> float:
    """``kernel.bytes`` counted whole under ``split`` (one GPU's bytes times ``tp·cp``, as ``roofline_ms`` counts):
    its activations divide as its tokens do, its weights (``Kernel.weight_bytes``) as they are sharded. A projection
    split over TP reads its TP shard of them, whole on every CP rank; a weight replicated over TP (the router) is
    read whole on every GPU; a grouped expert GEMM reads its rank's ``experts / ep`` experts, each cut by ETP, of them
    those that receive a token (``planner.cost.mlp.expert_projection`` counts the experts touched, all of them once
    the tokens outnumber the experts)."""
    shape = kernel.shape
    if not kernel.weight_bytes or not isinstance(shape, Gemm) or split == WHOLE:
        return kernel.bytes
    if shape.experts:
        _, per_expert = local_gemm(shape, split)
        touched = max(min(shape.experts, (shape.m, shape.n, shape.k)[shape.token_dim]), 1e-9)
        local = shape.experts / split.ep * min(1.0, per_expert)
        per_gpu = kernel.weight_bytes / touched * local / split.etp
    elif shape.tp_dim is None:
        per_gpu = kernel.weight_bytes
    else:
        per_gpu = kernel.weight_bytes / split.tp
    return kernel.bytes - kernel.weight_bytes + per_gpu * split.tp * split.cp


def kernel_efficiency(kernel: Kernel, device: DeviceType, split: Split = WHOLE, fp8: bool = False,
                      attention: str = "cudnn") -> float:
    """The fraction of the (BF16, or with ``fp8`` the FP8) peak ``kernel`` runs at on one GPU of ``split``; fused
    attention as the ``attention`` kernel runs it."""
    shape = kernel.shape
    if not device.multiprocessors or shape is None:
        return device.efficiency
    if isinstance(shape, AttentionShape):
        return attention_efficiency(shape, split.cp, device.efficiency, attention)
    dims, per_expert = local_gemm(shape, split)
    if shape.experts:
        return grouped_efficiency(per_expert, device.efficiency, fp8, dims[2])
    return gemm_efficiency(*dims, device.multiprocessors, device.efficiency, fp8)


def compute_rate_flops_per_ms(device: DeviceType, efficiency: float, fp8: bool = False) -> float:
    """The matmul rate at ``efficiency`` of the dense BF16 peak (``fp8``: of the FP8 one)."""
    return (device.fp8_tflops if fp8 else device.peak_tflops) * 1e12 * efficiency / 1e3


def bandwidth_bytes_per_ms(device: DeviceType) -> float:
    """What a memory-bound kernel streams: the datasheet bandwidth, at ``MEMORY_BANDWIDTH_EFFICIENCY`` on a GPU
    whose kernels are modelled by shape."""
    fraction = MEMORY_BANDWIDTH_EFFICIENCY if device.multiprocessors else 1.0
    return device.memory_bandwidth_gb_s * 1e9 / 1e3 * fraction


def roofline_ms(kernel: Kernel, device: DeviceType, split: Split = WHOLE, fp8: bool = False,
                attention: str = "cudnn") -> float:
    """``kernel``'s whole time, as if one GPU ran all of it at the rate its ``split`` share reaches (divide by the
    shards for one GPU's), without the launch overhead; ``fp8``: its GEMM runs in FP8; ``attention``: the fused
    attention kernel (``ATTENTION_KERNELS``)."""
    work = kernel.flops + kernel.recomputed_flops
    efficiency = kernel_efficiency(kernel, device, split, fp8, attention)
    compute = work / compute_rate_flops_per_ms(device, efficiency, fp8) if work else 0.0
    return max(compute, split_bytes(kernel, split) / bandwidth_bytes_per_ms(device))


def kernel_ms(kernel: Kernel, device: DeviceType) -> float:
    return roofline_ms(kernel, device) + device.kernel_overhead_us * 1e-3


def pass_ms(kernels: tuple[Kernel, ...], device: DeviceType) -> float:
    """Kernels of one pass run one after another on the device's compute stream."""
    return sum(kernel_ms(kernel, device) for kernel in kernels)
