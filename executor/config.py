"""Run settings shared by the launcher, every rank and the CLI (serialised into the job file)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from executor.host import fair_share_threads
from planner.errors import SpecError

BACKENDS = ("gloo", "nccl")
OPTIMIZERS = ("sgd", "adamw")


@dataclass(frozen=True)
class RunConfig:
    backend: str = "gloo"
    seed: int = 0
    steps: int = 1
    optimizer: str = "sgd"
    lr: float = 1e-3
    dtype: str | None = None            # None: float32 on CPU, the spec's dtype on CUDA
    event_sink: str | None = None
    checkpoint_dir: str | None = None   # each rank saves its layers there after the last step
    lookahead: int = 1
    report_failures: bool = True        # False when a launcher reports the first failure itself
    step_barriers: bool = False         # barrier around every step; rank 0 reports each step's wall time
    threads_per_rank: int | None = None  # torch intra-op threads per rank; None: this host's cores / local ranks
    bind_cores: bool = True             # CPU ranks: each local rank on cores of its own, where they fit

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise SpecError("backend", f"must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.optimizer not in OPTIMIZERS:
            raise SpecError("optimizer", f"must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.steps < 1:
            raise SpecError("steps", f"must be >= 1, got {self.steps}")
        if self.lookahead < 0:
            raise SpecError("lookahead", f"must be >= 0, got {self.lookahead}")
        if not self.lr > 0:
            raise SpecError("lr", f"must be > 0, got {self.lr}")
        if self.threads_per_rank is not None and self.threads_per_rank < 1:
            raise SpecError("threads_per_rank", f"must be >= 1, got {self.threads_per_rank}")

    def rank_threads(self, local_world_size: int) -> int:
        """The intra-op thread count each rank uses: the configured one, else its share of this host's cores."""
        return self.threads_per_rank or fair_share_threads(local_world_size)

    def to_dict(self) -> dict:
        return asdict(self)
