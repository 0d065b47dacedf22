"""One error shape for bad input: HTTP 400 ``{"errors": [{"field": "num_devices", "reason": "..."}]}``.

Fields are dotted paths into the request (``file.layers[3].mixer.num_heads`` for a field inside an uploaded
spec). DRF's own validation errors and the planner's SpecError/PlanError are all reshaped into it; other
errors (401, 404) keep DRF's ``{"detail": ...}``. A role's refusal (services.roles.RoleRefusal) is HTTP 403 in the
same shape, naming ``role`` and the reason.
"""

from __future__ import annotations

from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from adaptis_web.studio.services.roles import RoleRefusal
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
    if isinstance(exc, (SpecError, PlanError)):
        return bad_input([{"field": exc.field, "reason": exc.reason}])
    if isinstance(exc, ValidationError):
        return bad_input(flatten_errors(exc.detail))
    if isinstance(exc, RoleRefusal):
        return Response({"errors": [{"field": exc.field, "reason": exc.reason}]}, status=status.HTTP_403_FORBIDDEN)
    return drf_exception_handler(exc, context)
