"""The hybrid-parallel configuration of a training job: how the GPUs split the model and the batch.

``tp`` tensor parallelism (Megatron-LM's column/row-parallel layers, always with sequence parallelism, as
Megatron-Core requires for MoE and recommends everywhere: Korthikanti et al. 2022, Sec. 4.2.2), ``cp`` context
parallelism (the sequence split over ranks, ring attention), ``pp`` pipeline ranks, ``dp`` data parallelism,
``ep`` expert parallelism and ``etp`` expert tensor parallelism for MoE layers: Megatron-Core's MoE parallel
folding (Liu et al. 2025, "MoE Parallel Folding", arXiv:2504.14960; ``--expert-tensor-parallel-size``) re-slices a
pipeline stage's ``tp·cp·dp`` GPUs for the experts as ``etp x ep x expert_dp``, etp fastest; ``etp`` defaults to
``tp`` (Megatron's default), which makes ``expert_dp = dp·cp / ep``. ``tp·cp·pp·dp`` is the GPU count. A step runs
``num_microbatches`` micro-batches of ``microbatch_size`` sequences on every pipeline, so the global batch is
``microbatch_size · num_microbatches · dp``. ``recompute`` is ``none``, ``selective`` (the framework's:
``planner.parallel.cost``) or ``full`` for every stage, or one of those per stage of the plan.

``sharding`` says what the data-parallel ranks (x CP) shard (Rajbhandari et al. 2020, "ZeRO", Sec. 5):
``none`` (every rank keeps all model state; gradients all-reduced), ``optimizer`` (ZeRO-1, the fp32 master weights and
Adam moments sharded: Megatron's ``--use-distributed-optimizer``, which the documents' older
``distributed_optimizer: true`` means) or ``full`` (ZeRO-3: weights and gradients too, gathered layer by layer in
each forward and backward, as PyTorch FSDP2 does in torchtitan and Megatron-FSDP). ``precision`` is ``bf16`` or
``fp8`` (the linear layers' GEMMs in FP8 with Transformer Engine's recipes; ``planner.parallel.cost``).
``vpp`` is the virtual pipeline stages (model chunks) per pipeline rank: 1 for 1F1B, more for Megatron's
interleaved 1F1B.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import SpecError
from planner.fields import get_bool, get_int, get_str, join, reject_unknown, require_mapping

RECOMPUTE_MODES = ("none", "selective", "full")
DEGREES = ("tp", "cp", "pp", "dp", "ep")
SHARDING_MODES = ("none", "optimizer", "full")
# how a page says each: what the data-parallel ranks shard
SHARDING_LABELS = {"none": "nothing (every DP rank keeps all model state)",
                   "optimizer": "the optimizer state (ZeRO-1, the distributed optimizer)",
                   "full": "weights, gradients and optimizer state (FSDP, ZeRO-3)"}
PRECISIONS = ("bf16", "fp8")
PARALLEL_KEYS = DEGREES + ("etp", "vpp", "microbatch_size", "num_microbatches", "recompute", "sharding", "precision",
                           "distributed_optimizer")


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
    sharding: str = "optimizer"
    precision: str = "bf16"
    etp: int | None = None          # None: tp (set in __post_init__)

    def __post_init__(self):
        if self.etp is None:
            object.__setattr__(self, "etp", self.tp)
        for key in DEGREES + ("etp", "microbatch_size", "num_microbatches"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(f"parallel.{key}", f"must be an integer >= 1, got {value!r}")
        if self.sharding not in SHARDING_MODES:
            raise SpecError("parallel.sharding", f"must be one of {', '.join(SHARDING_MODES)}, got {self.sharding!r}")
        if self.precision not in PRECISIONS:
            raise SpecError("parallel.precision", f"must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        modes = (self.recompute,) if isinstance(self.recompute, str) else self.recompute
        for mode in modes:
            if mode not in RECOMPUTE_MODES:
                raise SpecError("parallel.recompute", f"must be one of {', '.join(RECOMPUTE_MODES)} (or a list "
                                                      f"of them, one per stage); got {mode!r}")
        reason = expert_split_refusal(self.tp * self.cp * self.dp, self.etp, self.ep)
        if reason:
            raise SpecError("parallel.ep" if self.etp == self.tp else "parallel.etp", reason)

    @property
    def num_gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def global_batch(self) -> int:
        return self.microbatch_size * self.num_microbatches * self.dp

    @property
    def expert_dp(self) -> int:
        """Data-parallel ranks that hold the same experts (Megatron-Core's expert data parallel group)."""
        return self.tp * self.cp * self.dp // (self.etp * self.ep)

    @property
    def distributed_optimizer(self) -> bool:
        """Whether the optimizer state is sharded over the data-parallel ranks (ZeRO-1 or more)."""
        return self.sharding != "none"

    def coordinate(self, rank: int) -> dict:
        """Rank ``rank``'s (tp, cp, dp, pp, ep) position in Megatron-LM's order (``planner.parallel.mapping``):
        tp fastest, then cp, dp, pp; the EP rank re-slices the stage's ``tp x cp x dp`` positions as etp x ep x
        expert dp (etp fastest)."""
        tp_rank, rest = rank % self.tp, rank // self.tp
        cp_rank, rest = rest % self.cp, rest // self.cp
        dp_rank, pp_rank = rest % self.dp, rest // self.dp
        local = tp_rank + self.tp * (cp_rank + self.cp * dp_rank)
        return {"tp": tp_rank, "cp": cp_rank, "dp": dp_rank, "pp": pp_rank, "ep": local // self.etp % self.ep}

    def rank_of(self, *, tp: int = 0, cp: int = 0, dp: int = 0, pp: int = 0) -> int:
        return tp + self.tp * (cp + self.cp * (dp + self.dp * pp))

    def recompute_of(self, stage: int) -> str:
        return self.recompute if isinstance(self.recompute, str) else self.recompute[stage]

    def to_dict(self) -> dict:
        return {"tp": self.tp, "cp": self.cp, "pp": self.pp, "dp": self.dp, "ep": self.ep,
                "microbatch_size": self.microbatch_size, "num_microbatches": self.num_microbatches,
                **({"etp": self.etp} if self.etp != self.tp else {}),   # unwritten: expert TP = TP
                "recompute": self.recompute if isinstance(self.recompute, str) else list(self.recompute),
                "sharding": self.sharding, "precision": self.precision}

    def recompute_text(self) -> str:
        """``full``, or per stage as runs: ``full*3,none*1``."""
        if isinstance(self.recompute, str):
            return self.recompute
        return ",".join(f"{mode}*{count}" for mode, count in _runs(self.recompute))

    def short(self) -> str:
        """One line for a table cell: ``TP8 CP1 PP4 DP32 EP1 mbs1 m56 full ZeRO-1`` (per-stage recomputation as
        runs: ``full*3,none*1``; ``ETP1`` where expert TP differs from TP; ``FSDP`` for full sharding; ``FP8``)."""
        recompute = self.recompute_text()
        etp = f" ETP{self.etp}" if self.etp != self.tp else ""
        sharding = {"none": "", "optimizer": " ZeRO-1", "full": " FSDP"}[self.sharding]
        return (f"TP{self.tp} CP{self.cp} PP{self.pp} DP{self.dp} EP{self.ep}{etp} mbs{self.microbatch_size} "
                f"m{self.num_microbatches} {recompute}{sharding}{' FP8' if self.precision == 'fp8' else ''}")


def expert_split_refusal(stage_gpus: int, etp: int, ep: int) -> str | None:
    """Why the experts cannot re-slice a stage's ``tp x cp x dp`` = ``stage_gpus`` GPUs as etp x ep x expert dp, or
    None."""
    if stage_gpus % (etp * ep):
        return (f"the experts re-slice a stage's tp x cp x dp = {stage_gpus} GPUs as etp x ep x expert dp; etp {etp} "
                f"x ep {ep} does not divide them")
    return None


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
    etp = get_int(doc, "etp", path, default=None)
    get_int(doc, "vpp", path, default=None)   # the stages per pipeline rank: planner.plan checks it against the plan's
    return ParallelConfig(**values, recompute=recompute, sharding=load_sharding(doc, path), etp=etp,
                          precision=get_str(doc, "precision", path, default="bf16", choices=PRECISIONS))


def load_sharding(doc: dict, path: str) -> str:
    """``sharding``, or what the older ``distributed_optimizer`` (true: ``optimizer``, false: ``none``) says; both
    given must agree."""
    sharding = get_str(doc, "sharding", path, default=None, choices=SHARDING_MODES)
    if "distributed_optimizer" not in doc:
        return sharding or "optimizer"
    legacy = "optimizer" if get_bool(doc, "distributed_optimizer", path, default=True) else "none"
    if sharding is not None and (sharding == "none") != (legacy == "none"):
        raise SpecError(join(path, "distributed_optimizer"), f"says {doc['distributed_optimizer']!r} but sharding is "
                                                             f"{sharding!r}; give sharding alone")
    return sharding or legacy
