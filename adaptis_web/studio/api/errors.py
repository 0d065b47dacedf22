"""One error shape for bad input: HTTP 400 ``{"errors": [{"field": "num_devices", "reason": "..."}]}``.

Fields are dotted paths into the request (``file.layers[3].mixer.num_heads`` for a field inside an uploaded
spec). DRF's own validation errors and the planner's SpecError/PlanError are all reshaped into it; other
errors (401, 404) keep DRF's ``{"detail": ...}``. A role's refusal (accounts.roles.RoleRefusal) is HTTP 403 in the
same shape, naming ``role`` and the reason; a throttled request is HTTP 429 in it too (with ``Retry-After``), and a
body that does not parse is a 400 naming ``body``; a request naming something that does not exist is a 404, one the
current state refuses (a name taken, already archived) a 409, both in the same shape (``common.refusals``).
"""

from __future__ import annotations

import math

from rest_framework import status
from rest_framework.exceptions import ParseError, Throttled, UnsupportedMediaType, ValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from adaptis_web.studio.accounts.roles import RoleRefusal
from adaptis_web.studio.common.refusals import Conflict, Missing
from planner.errors import PlanError, SpecError

NON_FIELD_KEYS = ("non_field_errors", "__all__")


def flatten_errors(detail: object, path: str = "") -> list[dict]:
    """DRF's nested error detail (dicts of lists of messages) as a flat list of field/reason pairs."""
    if isinstance(detail, dict):
        return [error for key, value in detail.items()
                for error in flatten_errors(value, path if key in NON_FIELD_KEYS else
                                            f"{path}.{key}" if path else str(key))]
    if isinstance(detail, list):
        if all(not isinstance(item, (dict, list)) for item in detail):
            return [{"field": path, "reason": str(item)} for item in detail]
        return [error for index, item in enumerate(detail) for error in flatten_errors(item, f"{path}[{index}]")]
    return [{"field": path, "reason": str(detail)}]


def bad_input(errors: list[dict]) -> Response:
    return Response({"errors": errors}, status=status.HTTP_400_BAD_REQUEST)


def exception_handler(exc, context):
    if isinstance(exc, (Missing, Conflict)):
        return Response({"errors": [{"field": exc.field, "reason": exc.reason}]}, status=exc.status)
    if isinstance(exc, (SpecError, PlanError)):
        return bad_input([{"field": exc.field, "reason": exc.reason}])
    if isinstance(exc, ValidationError):
        return bad_input(flatten_errors(exc.detail))
    if isinstance(exc, RoleRefusal):
        return Response({"errors": [{"field": exc.field, "reason": exc.reason}]}, status=status.HTTP_403_FORBIDDEN)
    if isinstance(exc, Throttled):
        wait = math.ceil(exc.wait) if exc.wait is not None else None
        reason = "too many requests of this kind" + (f": try again in {wait} s" if wait is not None else "")
        response = Response({"errors": [{"field": "", "reason": reason}], "retry_after_s": wait},
                            status=status.HTTP_429_TOO_MANY_REQUESTS)
        if wait is not None:
            response["Retry-After"] = str(wait)
        return response
    if isinstance(exc, (ParseError, UnsupportedMediaType)):
        # A body that is not JSON (or not the media type the endpoint takes) is bad input like any other.
        return Response({"errors": [{"field": "body", "reason": str(exc.detail)}]}, status=exc.status_code)
    return drf_exception_handler(exc, context)
