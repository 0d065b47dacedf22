"""Errors every loader raises: they name the offending field and the reason; and the warnings a loader gives
about input it accepts but that is probably not what was meant."""

from dataclasses import asdict, dataclass


class SpecError(ValueError):
    """Invalid input: ``field`` is a dotted path into the document (``layers[3].mixer.num_heads``)."""

    def __init__(self, field: str, reason: str):
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}" if field else reason)

    def to_dict(self) -> dict:
        return {"field": self.field, "reason": self.reason}


@dataclass(frozen=True)
class SpecWarning:
    """Input accepted, probably not as meant: ``field`` names it in the document, ``reason`` says why."""

    field: str
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


class PlanError(ValueError):
    """A plan that is structurally invalid or cannot execute (e.g. a dependency deadlock)."""

    def __init__(self, reason: str, *, field: str = "", blocked: list | None = None):
        self.field = field
        self.reason = reason
        self.blocked = blocked or []
        super().__init__(f"{field}: {reason}" if field else reason)

    def to_dict(self) -> dict:
        return {"field": self.field, "reason": self.reason, "blocked": self.blocked}
