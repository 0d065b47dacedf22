"""The hybrid-parallel configuration of a training job: how the GPUs split the model and the batch.

``tp`` tensor parallelism (Megatron-LM's column/row-parallel layers, always with sequence parallelism, as
Megatron-Core requires for MoE and recommends everywhere: Korthikanti et al. 2022, Sec. 4.2.2), ``cp`` context
parallelism (the sequence split over ranks, ring attention), ``pp`` pipeline ranks, ``dp`` data parallelism,
``ep`` expert parallelism for MoE layers, carved out of ``dp x cp`` as Megatron-Core's expert groups are
(expert tensor parallelism = ``tp``, expert data parallelism = ``dp·cp / ep``). ``tp·cp·pp·dp`` is the GPU
count. A step runs ``num_microbatches`` micro-batches of ``microbatch_size`` sequences on every pipeline, so
the global batch is ``microbatch_size · num_microbatches · dp``. ``recompute`` is ``none``, ``selective`` or
``full`` for every stage, or one of those per stage of the plan. ``distributed_optimizer`` shards the fp32
master weights and Adam moments over the data-parallel ranks (ZeRO-1; Megatron's ``--use-distributed-optimizer``).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import SpecError
from planner.fields import get_bool, get_int, reject_unknown, require_mapping

RECOMPUTE_MODES = ("none", "selective", "full")
DEGREES = ("tp", "cp", "pp", "dp", "ep")
PARALLEL_KEYS = DEGREES + ("microbatch_size", "num_microbatches", "recompute", "distributed_optimizer")


@dataclass(frozen=True)
class ParallelConfig:
    tp: int = 1
    cp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    microbatch_size: int = 1
    num_microbatches: int = 1
    recompute: str | tuple[str, ...] = "none"
    distributed_optimizer: bool = True

    def __post_init__(self):
        for key in DEGREES + ("microbatch_size", "num_microbatches"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(f"parallel.{key}", f"must be an integer >= 1, got {value!r}")
        modes = (self.recompute,) if isinstance(self.recompute, str) else self.recompute
        for mode in modes:
            if mode not in RECOMPUTE_MODES:
                raise SpecError("parallel.recompute", f"must be one of {', '.join(RECOMPUTE_MODES)} (or a list "
                                                      f"of them, one per stage); got {mode!r}")
        if (self.dp * self.cp) % self.ep:
            raise SpecError("parallel.ep", f"expert parallelism is carved out of dp x cp ({self.dp} x {self.cp}) "
                                           f"and must divide it, got {self.ep}")

    @property
    def num_gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def global_batch(self) -> int:
        return self.microbatch_size * self.num_microbatches * self.dp

    @property
    def expert_dp(self) -> int:
        """Data-parallel ranks that hold the same experts (Megatron-Core's expert data parallel group)."""
        return self.dp * self.cp // self.ep

    def coordinate(self, rank: int) -> dict:
        """Rank ``rank``'s (tp, cp, dp, pp, ep) position in Megatron-LM's order (``planner.parallel.mapping``):
        tp fastest, then cp, dp, pp; the EP rank re-slices the stage's ``cp x dp`` positions."""
        tp_rank, rest = rank % self.tp, rank // self.tp
        cp_rank, rest = rest % self.cp, rest // self.cp
        dp_rank, pp_rank = rest % self.dp, rest // self.dp
        return {"tp": tp_rank, "cp": cp_rank, "dp": dp_rank, "pp": pp_rank,
                "ep": (cp_rank + self.cp * dp_rank) % self.ep}

    def rank_of(self, *, tp: int = 0, cp: int = 0, dp: int = 0, pp: int = 0) -> int:
        return tp + self.tp * (cp + self.cp * (dp + self.dp * pp))

    def recompute_of(self, stage: int) -> str:
        return self.recompute if isinstance(self.recompute, str) else self.recompute[stage]

    def to_dict(self) -> dict:
        return {"tp": self.tp, "cp": self.cp, "pp": self.pp, "dp": self.dp, "ep": self.ep,
                "microbatch_size": self.microbatch_size, "num_microbatches": self.num_microbatches,
                "recompute": self.recompute if isinstance(self.recompute, str) else list(self.recompute),
                "distributed_optimizer": self.distributed_optimizer}

    def recompute_text(self) -> str:
        """``full``, or per stage as runs: ``full*3,none*1``."""
        if isinstance(self.recompute, str):
            return self.recompute
        return ",".join(f"{mode}*{count}" for mode, count in _runs(self.recompute))

    def short(self) -> str:
        """One line for a table cell: ``TP8 CP1 PP4 DP32 EP1 mbs1 m56 full ZeRO-1`` (per-stage recomputation as
        runs: ``full*3,none*1``)."""
        recompute = self.recompute_text()
        return (f"TP{self.tp} CP{self.cp} PP{self.pp} DP{self.dp} EP{self.ep} mbs{self.microbatch_size} "
                f"m{self.num_microbatches} {recompute}{' ZeRO-1' if self.distributed_optimizer else ''}")


def _runs(modes: tuple[str, ...]) -> list[tuple[str, int]]:
    runs: list[tuple[str, int]] = []
    for mode in modes:
        if runs and runs[-1][0] == mode:
            runs[-1] = (mode, runs[-1][1] + 1)
        else:
            runs.append((mode, 1))
    return runs


def load_parallel(doc: object, path: str = "parallel") -> ParallelConfig:
    """Validate a plan's ``parallel`` object."""
    doc = require_mapping(doc, path)
    reject_unknown(doc, set(PARALLEL_KEYS), path)
    recompute = doc.get("recompute", "none")
    if isinstance(recompute, list):
        recompute = tuple(recompute)
    elif not isinstance(recompute, str):
        raise SpecError(f"{path}.recompute", f"must be a string or a list of strings, got {recompute!r}")
    values = {key: get_int(doc, key, path, default=1) for key in DEGREES + ("microbatch_size", "num_microbatches")}
    return ParallelConfig(**values, recompute=recompute,
                          distributed_optimizer=get_bool(doc, "distributed_optimizer", path, default=True))
