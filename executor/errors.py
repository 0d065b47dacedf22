"""Errors the executor raises to its callers."""


class ExecutorError(RuntimeError):
    """A run failed. ``rank`` is the rank that failed first (None when no rank is to blame, e.g. a timeout);
    ``traceback_text`` is that rank's Python traceback."""

    def __init__(self, message: str, *, rank: int | None = None, traceback_text: str = ""):
        self.rank = rank
        self.message = message
        self.traceback_text = traceback_text
        where = f"rank {rank}: " if rank is not None else ""
        super().__init__(f"{where}{message}")

    def to_dict(self) -> dict:
        return {"rank": self.rank, "error": self.message, "traceback": self.traceback_text}


class RunCancelled(ExecutorError):
    """The caller asked the run to stop (``run_plan``'s ``should_stop``); its ranks were ended."""
