"""Cluster topologies (``adaptis.cluster/v1``): devices numbered node-major, with intra/inter-node links.

``nvlink_domain`` (optional, default ``devices_per_node``) is how many consecutive devices share the fast
scale-up fabric (NVLink/NVSwitch, Infinity Fabric): 8 in a DGX/HGX node, 72 in a GB200 NVL72 rack. Two
devices in one domain talk over ``links.intra_node``, others over ``links.inter_node``, whose bandwidth is
per GPU (one 400 Gb/s NIC per GPU: 50 GB/s). Presets are files in ``presets/clusters`` or names
``<device>-<nodes>x<gpus per node>`` (``planner.hardware``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from planner.errors import SpecError
from planner.hardware import named_cluster_document, parse_cluster_name
from planner.fields import (
    check_format,
    get_int,
    get_number,
    get_str,
    reject_unknown,
    require_mapping,
)

CLUSTER_FORMAT = "adaptis.cluster/v1"
# Launch latency plus the tail of a partly filled last wave: about 5 us per kernel on a GPU.
DEFAULT_KERNEL_OVERHEAD_US = 5.0
PRESET_DIR = Path(__file__).parent / "presets" / "clusters"


@dataclass(frozen=True)
class DeviceType:
    name: str
    memory_bytes: int
    peak_tflops: float          # dense bf16 peak
    efficiency: float           # achievable fraction of peak for large matmuls (planner.cost.roofline)
    memory_bandwidth_gb_s: float
    # fixed time every kernel pays besides its FLOPs and bytes: ~5 us to launch one on a GPU, tens of us for
    # an eager PyTorch op (dispatch, autograd bookkeeping) on a CPU core
    kernel_overhead_us: float = DEFAULT_KERNEL_OVERHEAD_US
    fp8_tflops: float = 0.0     # dense FP8 tensor-core peak; 0: no FP8 tensor cores (A100, CPUs)
    # streaming multiprocessors (AMD: compute units); 0: unknown, and every GEMM of any shape runs at ``efficiency``
    # (a CPU, a GPU described by hand); given, the kernels' rates follow their shapes (planner.cost.roofline)
    multiprocessors: int = 0

    def to_dict(self) -> dict:
        doc = {"name": self.name, "memory_bytes": self.memory_bytes, "peak_tflops": self.peak_tflops,
               "efficiency": self.efficiency, "memory_bandwidth_gb_s": self.memory_bandwidth_gb_s}
        if self.fp8_tflops:
            doc["fp8_tflops"] = self.fp8_tflops
        if self.kernel_overhead_us != DEFAULT_KERNEL_OVERHEAD_US:
            doc["kernel_overhead_us"] = self.kernel_overhead_us
        if self.multiprocessors:
            doc["multiprocessors"] = self.multiprocessors
        return doc


@dataclass(frozen=True)
class Link:
    """A transfer of n bytes arrives ``latency + n / bandwidth`` after it is posted, without occupying either
    device; ``overhead_us`` is the time each end of a message spends on it on its own compute stream (posting
    the send, completing the receive and waking the rank that waits for it; LogP's *o*): about zero for
    NCCL kernels on GPUs, hundreds of microseconds for gloo on CPU ranks that share their cores."""

    bandwidth_gb_s: float
    latency_us: float
    overhead_us: float = 0.0

    def transfer_ms(self, nbytes: int) -> float:
        return nbytes / (self.bandwidth_gb_s * 1e9) * 1e3 + self.latency_us * 1e-3

    def to_dict(self) -> dict:
        doc = {"bandwidth_gb_s": self.bandwidth_gb_s, "latency_us": self.latency_us}
        if self.overhead_us:
            doc["overhead_us"] = self.overhead_us
        return doc


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    nodes: int
    devices_per_node: int
    device: DeviceType
    intra_node: Link
    inter_node: Link
    nvlink_domain: int | None = None   # devices sharing the scale-up fabric; None: one node

    @property
    def num_devices(self) -> int:
        return self.nodes * self.devices_per_node

    @property
    def domain_size(self) -> int:
        return self.nvlink_domain or self.devices_per_node

    def node_of(self, device: int) -> int:
        return device // self.devices_per_node

    def domain_of(self, device: int) -> int:
        return device // self.domain_size

    def link(self, src: int, dst: int) -> Link:
        return self.intra_node if self.domain_of(src) == self.domain_of(dst) else self.inter_node

    def transfer_ms(self, src: int, dst: int, nbytes: int) -> float:
        """Time to move ``nbytes`` from device ``src`` to ``dst``; zero on the same device."""
        if src == dst:
            return 0.0
        return self.link(src, dst).transfer_ms(nbytes)

    def message_overhead_ms(self, src: int, dst: int) -> float:
        """Time each end of a message from ``src`` to ``dst`` spends on it; zero on the same device."""
        if src == dst:
            return 0.0
        return self.link(src, dst).overhead_us * 1e-3

    @property
    def is_cpu(self) -> bool:
        """A cluster of CPU ranks (``cpu-host`` and ``cpu-<hosts>x<ranks>``): gloo processes, which only this
        project's executor runs."""
        return self.device.name.lower().startswith("cpu")

    def to_dict(self) -> dict:
        doc = {"format": CLUSTER_FORMAT, "name": self.name, "nodes": self.nodes,
               "devices_per_node": self.devices_per_node, "device": self.device.to_dict(),
               "links": {"intra_node": self.intra_node.to_dict(), "inter_node": self.inter_node.to_dict()}}
        if self.nvlink_domain is not None:
            doc["nvlink_domain"] = self.nvlink_domain
        return doc


def _load_link(doc: object, path: str) -> Link:
    doc = require_mapping(doc, path)
    reject_unknown(doc, {"bandwidth_gb_s", "latency_us", "overhead_us"}, path)
    return Link(bandwidth_gb_s=get_number(doc, "bandwidth_gb_s", path, exclusive_minimum=True),
                latency_us=get_number(doc, "latency_us", path, default=0.0),
                overhead_us=get_number(doc, "overhead_us", path, default=0.0))


def load_cluster(doc: object) -> ClusterSpec:
    """Validate a parsed ``adaptis.cluster/v1`` document."""
    doc = require_mapping(doc, "")
    check_format(doc, CLUSTER_FORMAT)
    reject_unknown(doc, {"format", "name", "nodes", "devices_per_node", "nvlink_domain", "device", "links",
                         "description"}, "")
    device = require_mapping(doc.get("device"), "device")
    reject_unknown(device, {"name", "memory_bytes", "peak_tflops", "fp8_tflops", "efficiency",
                            "memory_bandwidth_gb_s", "kernel_overhead_us", "multiprocessors"}, "device")
    efficiency = get_number(device, "efficiency", "device", default=0.5, exclusive_minimum=True)
    if efficiency > 1:
        raise SpecError("device.efficiency", f"must be a fraction in (0, 1], got {efficiency}")
    links = require_mapping(doc.get("links"), "links")
    intra = _load_link(links.get("intra_node"), "links.intra_node")
    nodes = get_int(doc, "nodes", "", default=1)
    devices_per_node = get_int(doc, "devices_per_node", "")
    domain = get_int(doc, "nvlink_domain", "", default=None)
    if domain is not None and (domain % devices_per_node and devices_per_node % domain):
        raise SpecError("nvlink_domain", f"must divide devices_per_node ({devices_per_node}) or be a multiple "
                                         f"of it, got {domain}")
    return ClusterSpec(
        name=get_str(doc, "name", ""),
        nodes=nodes,
        devices_per_node=devices_per_node,
        nvlink_domain=domain,
        device=DeviceType(
            name=get_str(device, "name", "device"),
            memory_bytes=get_int(device, "memory_bytes", "device"),
            peak_tflops=get_number(device, "peak_tflops", "device", exclusive_minimum=True),
            efficiency=efficiency,
            memory_bandwidth_gb_s=get_number(device, "memory_bandwidth_gb_s", "device", exclusive_minimum=True),
            kernel_overhead_us=get_number(device, "kernel_overhead_us", "device", default=DEFAULT_KERNEL_OVERHEAD_US),
            fp8_tflops=get_number(device, "fp8_tflops", "device", default=0.0),
            multiprocessors=get_int(device, "multiprocessors", "device", default=0, minimum=0),
        ),
        intra_node=intra,
        inter_node=_load_link(links["inter_node"], "links.inter_node") if "inter_node" in links else intra,
    )


def preset_names() -> list[str]:
    """The preset files; any ``<device>-<nodes>x<gpus per node>`` name is a preset too (``is_cluster_preset``), and
    ``cpu-<hosts>x<ranks per host>`` is ``cpu-host`` with that many local ranks (``local_cpu_document``)."""
    return sorted(path.stem for path in PRESET_DIR.glob("*.json"))


LOCAL_CPU_CLUSTER = re.compile(r"^cpu-(?P<nodes>\d+)x(?P<per_node>\d+)$")


def local_cpu_document(name: str) -> dict | None:
    """``cpu-1x8``: the ``cpu-host`` preset (its CPU and loopback links as measured) with 1 host of 8 ranks, so a
    TP x PP x DP plan can be rehearsed on a workstation; None for another name."""
    match = LOCAL_CPU_CLUSTER.fullmatch(name)
    if match is None:
        return None
    nodes, per_node = int(match.group("nodes")), int(match.group("per_node"))
    if nodes < 1 or per_node < 1:
        raise SpecError("cluster", f"{name!r}: hosts and ranks per host must be >= 1")
    doc = json.loads((PRESET_DIR / "cpu-host.json").read_text())
    return {**doc, "name": name, "description": f"{nodes} host(s) x {per_node} local gloo ranks. {doc['description']}",
            "nodes": nodes, "devices_per_node": per_node}


def is_cluster_preset(name: str) -> bool:
    return name in preset_names() or parse_cluster_name(name) is not None or local_cpu_document(name) is not None


@lru_cache(maxsize=None)
def load_cluster_preset(name: str) -> ClusterSpec:
    """A preset file by its name, else a named cluster such as ``h100-sxm-1024x8`` or ``cpu-1x8``."""
    if name in preset_names():
        return load_cluster(json.loads((PRESET_DIR / f"{name}.json").read_text()))
    if parse_cluster_name(name) is not None:
        return load_cluster(named_cluster_document(name))
    if local_cpu_document(name) is not None:
        return load_cluster(local_cpu_document(name))
    raise SpecError("cluster", f"unknown preset {name!r} (files: {', '.join(preset_names())}; or a name "
                               f"'<device>-<nodes>x<gpus per node>' such as 'h100-sxm-1024x8')")
