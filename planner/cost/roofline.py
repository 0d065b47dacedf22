"""Kernel time on a device: the roofline model (Williams, Waterman & Patterson 2009).

A kernel takes ``max(FLOPs / (peak · efficiency), bytes / memory bandwidth)``: compute-bound kernels
(projections, attention) at the device's achievable matmul rate, memory-bound ones (norms, activations, the
embedding gather) at its bandwidth. Each kernel also pays the device's fixed ``kernel_overhead_us``
(launch and tail on a GPU, eager dispatch on a CPU), which is what dominates tiny layers.
"""

from __future__ import annotations

from planner.cluster import DeviceType
from planner.cost.work import Kernel

def compute_rate_flops_per_ms(device: DeviceType, fp8: bool = False) -> float:
    """The achievable matmul rate: the dense BF16 peak (``fp8``: the FP8 one) at the device's efficiency."""
    return (device.fp8_tflops if fp8 else device.peak_tflops) * 1e12 * device.efficiency / 1e3


def bandwidth_bytes_per_ms(device: DeviceType) -> float:
    return device.memory_bandwidth_gb_s * 1e9 / 1e3


def kernel_ms(kernel: Kernel, device: DeviceType) -> float:
    compute_ms = (kernel.flops + kernel.recomputed_flops) / compute_rate_flops_per_ms(device)
    memory_ms = kernel.bytes / bandwidth_bytes_per_ms(device)
    return max(compute_ms, memory_ms) + device.kernel_overhead_us * 1e-3


def pass_ms(kernels: tuple[Kernel, ...], device: DeviceType) -> float:
    """Kernels of one pass run one after another on the device's compute stream."""
    return sum(kernel_ms(kernel, device) for kernel in kernels)
