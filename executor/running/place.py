"""Where one rank of a run sits: its pipeline rank and, in a hybrid plan, its (tp, cp, dp) replica of the pipeline.

Ranks are numbered in Megatron-LM's order (``planner.parallel.config.ParallelConfig.coordinate``: tp fastest, then
cp, dp, pp), so rank r runs on the GPU the planner's rank mapping gave that coordinate, and a torch ``DeviceMesh``
of shape (pp, dp, cp, tp) has the same numbering. Every replica runs the plan's pipeline program (``actions[pp]``)
with the same replica's other pipeline ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.parallel.config import ParallelConfig
from planner.plan import Plan

MESH_DIMENSIONS = ("pp", "dp", "cp", "tp")   # slowest to fastest, as the ranks are numbered
# The same ranks as MoE layers see them: a pipeline rank's tp x cp x dp positions as etp x ep x edp, etp fastest (with
# etp = tp, EP groups of ``ep`` consecutive dp x cp positions; folded, etp 1, EP groups over the TP ranks too)
EXPERT_MESH_DIMENSIONS = ("pp", "edp", "ep", "etp")


@dataclass(frozen=True)
class RankPlace:
    rank: int
    config: ParallelConfig    # a plan without one: its pipeline alone (every other degree 1)

    @classmethod
    def of(cls, plan: Plan, rank: int) -> RankPlace:
        return cls(rank, plan.parallel_config())

    @property
    def coordinate(self) -> dict:
        return self.config.coordinate(self.rank)

    @property
    def pp(self) -> int:
        return self.coordinate["pp"]

    @property
    def hybrid(self) -> bool:
        """More than one replica of the pipeline (TP, CP or DP above 1)."""
        return self.config.tp * self.config.cp * self.config.dp > 1

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        return tuple(getattr(self.config, dimension) for dimension in MESH_DIMENSIONS)

    @property
    def expert_mesh_shape(self) -> tuple[int, ...]:
        c = self.config
        return c.pp, c.expert_dp, c.ep, c.etp

    def replicas(self) -> list[dict]:
        """Every (tp, cp, dp) replica of the pipeline, in rank order (the same list on every rank)."""
        c = self.config
        return [{"tp": tp, "cp": cp, "dp": dp} for dp in range(c.dp) for cp in range(c.cp) for tp in range(c.tp)]

    def own_replica(self) -> dict:
        coordinate = self.coordinate
        return {"tp": coordinate["tp"], "cp": coordinate["cp"], "dp": coordinate["dp"]}

    def rank_in(self, replica: dict, pp: int) -> int:
        """The global rank of pipeline rank ``pp`` in ``replica``."""
        return self.config.rank_of(pp=pp, **replica)

    def peer(self, pp: int) -> int:
        """The global rank of pipeline rank ``pp`` in this rank's replica."""
        return self.rank_in(self.own_replica(), pp)

    def writes_checkpoint(self) -> bool:
        """One replica saves the layers (after gathering the TP shards): the others hold the same values."""
        coordinate = self.coordinate
        return coordinate["tp"] == coordinate["cp"] == coordinate["dp"] == 0
