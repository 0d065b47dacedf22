"""The GPUs a cluster can be named after, and clusters of them by name: ``<device>-<nodes>x<gpus per node>``.

``h100-sxm-1024x8`` is 1,024 nodes of 8 H100 SXM GPUs, built without a file. Every figure is the vendor's
datasheet value (dense BF16 without sparsity, HBM capacity and bandwidth, NVLink per GPU in one direction)
or the reference node's network (one 400 Gb/s InfiniBand NIC per GPU on DGX H100/H200/B200, the DeepSeek-V3
H800 cluster and MI300X nodes; 200 Gb/s HDR per GPU on DGX A100, the Selene nodes of Megatron-LM's runs).

``efficiency`` is the fraction of the dense peak a large BF16 GEMM holds; smaller and skinnier products, grouped
expert GEMMs and fused attention run at fractions of it that follow their shapes on the kind's ``multiprocessors``
(``planner.cost.roofline``). H100's (0.72) was measured: ``benchmarks/gpu_kernels.py`` on one H100 80GB HBM3,
2026-11-27. The fit to 572 BF16 products timed in ~20 ms bursts has a plateau of 0.75; a sustained 8192^3 loop held
676 TFLOP/s (0.68 of the peak, the median of 47 one-second windows) where the burst fit gives 0.71, so a training
step's plateau is 0.75 x 0.68 / 0.71 = 0.72. H800 and H200 share its GH100 silicon and clocks. A100's (0.62, ~193 of
312 TFLOP/s) was set once, before the Megatron-LM weak-scaling table (``benchmarks/published_runs.py``) was first
run, and is not tuned per row. B200 and MI300X take H100's (not measured here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from planner.errors import SpecError

GIB = 1 << 30
GBIT_PER_S_TO_GB_PER_S = 1 / 8
NVLINK_LATENCY_US = 3.0
INFINIBAND_LATENCY_US = 8.0


@dataclass(frozen=True)
class Accelerator:
    """One GPU kind and the node it comes in."""

    device_name: str
    memory_bytes: int
    peak_tflops: float              # dense BF16, no sparsity
    fp8_tflops: float               # dense FP8, no sparsity; 0: no FP8 tensor cores
    memory_bandwidth_gb_s: float
    nvlink_gb_s: float              # per GPU, one direction, to the NVSwitch / Infinity Fabric
    nic_gbit_s: float               # scale-out network per GPU
    efficiency: float
    description: str
    multiprocessors: int            # SMs (AMD: compute units), the datasheet's


ACCELERATORS: dict[str, Accelerator] = {
    # DGX H100: 80 GB HBM3 at 3.35 TB/s, 989 TFLOP/s BF16 and 1,979 FP8 dense, NVLink 4 900 GB/s both ways,
    # 8x ConnectX-7 400 Gb/s
    "h100-sxm": Accelerator("H100-SXM-80GB", 80 * GIB, 989.0, 1979.0, 3350.0, 450.0, 400.0, 0.72,
                            "H100 SXM, NVLink 4 / NVSwitch in the node, 400 Gb/s InfiniBand per GPU", 132),
    # H800: H100 silicon with NVLink cut to 400 GB/s both ways (DeepSeek-V3 report, Sec. 3.1: 8x 400 Gb/s IB)
    "h800-sxm": Accelerator("H800-SXM-80GB", 80 * GIB, 989.0, 1979.0, 3350.0, 200.0, 400.0, 0.72,
                            "H800 SXM, NVLink 400 GB/s bidirectional, 400 Gb/s InfiniBand per GPU", 132),
    # H200: 141 GB HBM3e at 4.8 TB/s, otherwise H100
    "h200-sxm": Accelerator("H200-SXM-141GB", 141 * 10**9, 989.0, 1979.0, 4800.0, 450.0, 400.0, 0.72,
                            "H200 SXM, NVLink 4 / NVSwitch in the node, 400 Gb/s InfiniBand per GPU", 132),
    # HGX B200: 180 GB HBM3e at 8 TB/s, 2.25 PFLOP/s BF16 and 4.5 FP8 dense, NVLink 5 1.8 TB/s both ways
    "b200": Accelerator("B200-180GB", 180 * 10**9, 2250.0, 4500.0, 8000.0, 900.0, 400.0, 0.72,
                        "B200, NVLink 5 / NVSwitch in the node, 400 Gb/s InfiniBand per GPU", 148),
    # Grand Teton H100 (torchtitan's published benchmarks): GH100 with 96 GB HBM2e at 2.4 TB/s, capped at 500 W; its
    # peaks are not published (between H100 NVL's and SXM's), so SXM's are taken, as torchtitan's own MFU does; NVLink
    # 4 in the node, 400 Gb/s RDMA per GPU. Its efficiency (0.53, what the power cap leaves of SXM's 0.72) was set
    # once, on one row (torchtitan's Llama 3.1 8B FSDP + torch.compile on 8 GPUs, benchmarks/published_runs.py), with
    # that row's recomputation as torchtitan runs it (per-op checkpointing re-runs 3 of a block's 7 matmuls; 0.47
    # before, when none was charged); the table's other rows are held out
    "h100-hbm2e-96gb": Accelerator("H100-HBM2e-96GB", 96 * GIB, 989.0, 1979.0, 2400.0, 450.0, 400.0, 0.53,
                                   "Grand Teton H100 96 GB HBM2e (500 W), NVLink 4 in the node, 400 Gb/s RDMA per GPU",
                                   132),
    # DGX A100 80 GB: 312 TFLOP/s BF16 (no FP8 tensor cores), 2.039 TB/s, NVLink 3 600 GB/s both ways, 8x HDR 200 Gb/s
    "a100-80gb-sxm": Accelerator("A100-SXM-80GB", 80 * GIB, 312.0, 0.0, 2039.0, 300.0, 200.0, 0.62,
                                 "A100 SXM 80 GB, NVLink 3 / NVSwitch in the node, 200 Gb/s HDR InfiniBand per GPU",
                                 108),
    # MI300X: 192 GB HBM3 at 5.3 TB/s, 1307 TFLOP/s BF16 and 2615 FP8 dense, 7 Infinity Fabric links of 64 GB/s each way
    "mi300x": Accelerator("MI300X-192GB", 192 * 10**9, 1307.4, 2614.9, 5300.0, 448.0, 400.0, 0.72,
                          "MI300X, Infinity Fabric mesh in the node, 400 Gb/s network per GPU", 304),
}
NAMED_CLUSTER = re.compile(r"^(?P<device>[a-z0-9-]+?)-(?P<nodes>\d+)x(?P<per_node>\d+)$")


def parse_cluster_name(name: str) -> tuple[str, int, int] | None:
    """``(accelerator, nodes, gpus per node)`` for a name like ``h100-sxm-1024x8``; None if it is not one."""
    match = NAMED_CLUSTER.fullmatch(name)  # not match: its $ would also take a name ending in a newline
    if match is None or match.group("device") not in ACCELERATORS:
        return None
    nodes, per_node = int(match.group("nodes")), int(match.group("per_node"))
    if nodes < 1 or per_node < 1:
        raise SpecError("cluster", f"{name!r}: nodes and GPUs per node must be >= 1")
    return match.group("device"), nodes, per_node


def named_cluster_document(name: str) -> dict:
    """The ``adaptis.cluster/v1`` document of a named cluster; SpecError for a name that is not one."""
    parsed = parse_cluster_name(name)
    if parsed is None:
        raise SpecError("cluster", f"{name!r} is not '<device>-<nodes>x<gpus per node>' with a device among "
                                   f"{', '.join(ACCELERATORS)}")
    device, nodes, per_node = parsed
    accelerator = ACCELERATORS[device]
    return {"format": "adaptis.cluster/v1", "name": name,
            "description": f"{nodes} node(s) x {per_node} {accelerator.description}",
            "nodes": nodes, "devices_per_node": per_node, "nvlink_domain": per_node,
            "device": {"name": accelerator.device_name, "memory_bytes": accelerator.memory_bytes,
                       "peak_tflops": accelerator.peak_tflops, "fp8_tflops": accelerator.fp8_tflops,
                       "efficiency": accelerator.efficiency, "multiprocessors": accelerator.multiprocessors,
                       "memory_bandwidth_gb_s": accelerator.memory_bandwidth_gb_s},
            "links": {"intra_node": {"bandwidth_gb_s": accelerator.nvlink_gb_s, "latency_us": NVLINK_LATENCY_US},
                      "inter_node": {"bandwidth_gb_s": accelerator.nic_gbit_s * GBIT_PER_S_TO_GB_PER_S,
                                     "latency_us": INFINIBAND_LATENCY_US}}}
