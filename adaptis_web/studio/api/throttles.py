"""Throttles of the endpoints that create expensive work (a parsed spec, a planning job, a CPU run, a re-plan).

Per user (per address for the anonymous, who are refused anyway), per scope, counted in the shared Redis cache so
every web process sees the same counts. Only the creating method counts: reading a list is never throttled. A
refusal is a 429 with ``Retry-After`` and the project's error shape (``api.errors``).
"""

from rest_framework.throttling import ScopedRateThrottle


class CreateRateThrottle(ScopedRateThrottle):
    """``ScopedRateThrottle`` on POST only; the view names its ``throttle_scope`` (a key of
    ``DEFAULT_THROTTLE_RATES``)."""

    def allow_request(self, request, view) -> bool:
        if request.method != "POST":
            return True
        return super().allow_request(request, view)


class ThrottledCreate:
    """Mixin for a view whose POST creates expensive work: ``throttle_scope = "jobs"`` etc."""

    throttle_classes = [CreateRateThrottle]
