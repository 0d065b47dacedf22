"""Query parameters checked as the schema states them: a page size, limit or offset that is not a whole number in
range, or is given twice, is a 400 naming it (DRF would silently use the default); DRF's limit/offset pages for
the small lists (teams, tokens), the default pagination class."""

from __future__ import annotations

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination

from adaptis_web.studio.url_converters import MAX_ID


class StrictLimitOffsetPagination(LimitOffsetPagination):
    """DRF's limit/offset pages (the small lists: teams, tokens), with ``limit`` and ``offset`` checked: a value
    that is not a whole number in range is a 400, not a silent default (an offset past 2^63 was a 500)."""

    max_limit = 200

    def get_limit(self, request):
        return checked_query_int(request, self.limit_query_param, 1, self.max_limit, self.default_limit)

    def get_offset(self, request):
        return checked_query_int(request, self.offset_query_param, 0, MAX_ID, 0)

    def get_schema_operation_parameters(self, view):
        return bounded_schema(super().get_schema_operation_parameters(view),
                              {self.limit_query_param: (1, self.max_limit), self.offset_query_param: (0, MAX_ID)})


def checked_query_int(request, name: str, low: int, high: int, default: int | None) -> int | None:
    raw = request.query_params.getlist(name)
    if not raw:
        return default
    if len(raw) > 1 or not raw[0].isdigit() or not low <= int(raw[0]) <= high:
        raise ValidationError({name: [f"must be a whole number from {low} to {high}, given once"]})
    return int(raw[0])


def bounded_schema(parameters: list[dict], ranges: dict[str, tuple[int, int]]) -> list[dict]:
    for parameter in parameters:
        if parameter["name"] in ranges:
            low, high = ranges[parameter["name"]]
            parameter["schema"] = {**parameter.get("schema", {}), "type": "integer", "minimum": low, "maximum": high}
    return parameters
