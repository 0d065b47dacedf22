"""Run settings shared by the launcher, every rank and the CLI (serialised into the job file)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from executor.running.cores import fair_share_threads
from executor.running.lowering import CAUSAL, check_lookahead
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
    event_token_file: str | None = None  # the run's secret, for an https:// sink (executor.running.events.HttpSink)
    checkpoint_dir: str | None = None   # each rank saves its layers there after the last step
    # When ranks post their receives (``executor.running.lowering``). Causal: a gloo send whose receive is not posted
    # yet waits for the receiver's notice, which the sender's communication thread handles; on a rank whose
    # core is busy computing that thread waits for the scheduler, and the message with it (3-5 ms per such
    # send on a 2-core host, benchmarks/receive_posting.py). All at the step's start ("step") avoids that too,
    # but holds a buffer for every incoming message of the step from its start.
    lookahead: int | str = CAUSAL
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
        check_lookahead(self.lookahead)
        if not self.lr > 0:
            raise SpecError("lr", f"must be > 0, got {self.lr}")
        if self.threads_per_rank is not None and self.threads_per_rank < 1:
            raise SpecError("threads_per_rank", f"must be >= 1, got {self.threads_per_rank}")

    def rank_threads(self, local_world_size: int) -> int:
        """The intra-op thread count each rank uses: the configured one, else its share of this host's cores."""
        return self.threads_per_rank or fair_share_threads(local_world_size)

    def to_dict(self) -> dict:
        return asdict(self)
