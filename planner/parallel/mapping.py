"""Which GPU holds which (tp, cp, dp, pp) coordinate, and which links each parallel group crosses.

Megatron-LM's default order (``megatron/core/parallel_state.py``, ``order="tp-cp-ep-dp-pp"``): the
tensor-parallel rank varies fastest, then context, then data, then pipeline, so
``rank = tp_rank + tp·(cp_rank + cp·(dp_rank + dp·pp_rank))``, and rank r runs on device r of the cluster
(devices are numbered node-major). A TP group is then ``tp`` consecutive GPUs — inside one NVLink domain
whenever ``tp`` divides the domain — and a pipeline neighbour is ``tp·cp·dp`` ranks away. Expert
parallelism re-slices the same ``tp x cp x dp`` ranks of a pipeline stage for the MoE layers as ``etp x ep x
expert dp``, etp fastest (Megatron-Core's MoE parallel folding; ``etp`` = ``tp`` by default): an EP group is ``ep``
GPUs ``etp`` apart and spans ``etp·ep`` consecutive GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.cluster import ClusterSpec, Link
from planner.errors import SpecError
from planner.parallel.config import ParallelConfig


@dataclass(frozen=True)
class GroupSpan:
    """One parallel group as the network sees it: ``size`` ranks, ``per_domain`` of them in each NVLink
    domain it touches, and the links it uses."""

    name: str
    size: int
    per_domain: int
    intra: Link
    inter: Link

    @property
    def crosses_domains(self) -> bool:
        return self.size > self.per_domain

    def ring_bandwidth_gb_s(self) -> float:
        """Bus bandwidth of a ring collective (NCCL's busbw): NVLink inside a domain; across domains each
        domain's ``per_domain`` NICs carry the ring in parallel (one ring per NIC, rail-optimised), so
        ``min(NVLink, per_domain x NIC)`` (NCCL's multi-node rings; nccl-tests' PERFORMANCE.md)."""
        if not self.crosses_domains:
            return self.intra.bandwidth_gb_s
        return min(self.intra.bandwidth_gb_s, self.per_domain * self.inter.bandwidth_gb_s)

    def latency_us(self) -> float:
        return (self.inter if self.crosses_domains else self.intra).latency_us

    def to_dict(self) -> dict:
        return {"size": self.size, "per_domain": self.per_domain, "crosses_domains": self.crosses_domains,
                "ring_bandwidth_gb_s": self.ring_bandwidth_gb_s()}


def _members_per_domain(size: int, stride: int, domain: int) -> int:
    """Members of a group of ``size`` ranks ``stride`` apart (first rank aligned) that share a domain."""
    if size == 1:
        return 1
    if stride >= domain:
        return 1
    return min(size, max(1, domain // stride))


class RankMapping:
    def __init__(self, config: ParallelConfig, cluster: ClusterSpec):
        if config.num_gpus > cluster.num_devices:
            raise SpecError("gpus", f"tp x cp x pp x dp = {config.num_gpus} GPUs, but the cluster "
                                    f"{cluster.name!r} has {cluster.num_devices}")
        self.config = config
        self.cluster = cluster

    def coordinate(self, rank: int) -> dict:
        return {"gpu": rank, "node": self.cluster.node_of(rank), **self.config.coordinate(rank)}

    def rank_of(self, *, tp: int = 0, cp: int = 0, dp: int = 0, pp: int = 0) -> int:
        return self.config.rank_of(tp=tp, cp=cp, dp=dp, pp=pp)

    def span(self, group: str) -> GroupSpan:
        """The TP, CP, DP, EP, expert-TP (``etp``), expert-DP (``edp``) or PP group of rank 0 (all groups of a kind
        look alike)."""
        c = self.config
        size, stride = {"tp": (c.tp, 1), "cp": (c.cp, c.tp), "dp": (c.dp, c.tp * c.cp),
                        "dpcp": (c.dp * c.cp, c.tp), "ep": (c.ep, c.etp), "etp": (c.etp, 1),
                        "edp": (c.expert_dp, c.etp * c.ep),
                        "pp": (c.pp, c.tp * c.cp * c.dp)}[group]
        return GroupSpan(group, size, _members_per_domain(size, stride, self.cluster.domain_size),
                         self.cluster.intra_node, self.cluster.inter_node)

    def pipeline_cluster(self) -> ClusterSpec:
        """The cluster the pipeline ranks see: ranks ``pp_rank`` and ``pp_rank + 1`` share a domain exactly
        when ``tp·cp·dp`` ranks fit in it, which is what the simulator's node-major links express."""
        per_domain = self.span("pp").per_domain
        return ClusterSpec(name=f"{self.cluster.name} (pipeline ranks)", nodes=-(-self.config.pp // per_domain),
                           devices_per_node=per_domain, device=self.cluster.device,
                           intra_node=self.cluster.intra_node, inter_node=self.cluster.inter_node)

    def to_dict(self, limit: int | None = None) -> dict:
        """Every GPU's coordinate (the first ``limit`` when given) and each group's span."""
        count = self.config.num_gpus if limit is None else min(limit, self.config.num_gpus)
        return {"order": "tp-cp-dp-pp", "gpus_per_node": self.cluster.devices_per_node,
                "nvlink_domain": self.cluster.domain_size,
                "groups": {name: self.span(name).to_dict() for name in ("tp", "cp", "dp", "ep", "etp", "edp", "pp")},
                "ranks": [self.coordinate(rank) for rank in range(count)]}
