"""Refusals that are not bad input: the request is well formed, but what it names does not exist, or the state of
things does not allow it now. Both name the field and the reason like any ``SpecError`` (pages show them the same
way); the API answers 404 and 409 (``api.errors``) instead of 400, so a client can tell "fix the request" from
"look again" and "not now"."""

from planner.errors import SpecError


class Missing(SpecError):
    """What the request names does not exist (or not in the caller's teams): HTTP 404."""

    status = 404


class Conflict(SpecError):
    """The request conflicts with the current state (a name taken, already archived, still running): HTTP 409."""

    status = 409
