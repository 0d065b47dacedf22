"""History filters (django-filter), shared by the API lists and the History page, and their cursor pagination.

Every list filters by ``team``, ``user`` (who created it), ``created_after`` / ``created_before`` (dates),
``q`` (name contains), ``archived`` (default: left out; ``true``: only archived) and, where it applies, by
``model`` (the spec's name contains), ``strategy`` (a job's schedule, a plan's or run's plan strategy) and
``status``; clusters by ``device`` (its name contains) and jobs by ``mode`` (``pipeline``, ``hybrid`` or
``capacity``). An unknown value is a 400 naming the filter.
"""

from __future__ import annotations

import django_filters
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import extend_schema_field
from django import forms
from django.db.models import Q
from rest_framework.pagination import CursorPagination

from adaptis_web.studio.api.pagination import bounded_schema, checked_query_int
from adaptis_web.studio.models import ClusterRecord, JobMode, JobStatus, ModelSpecRecord, Plan, PlanningJob, Run
from adaptis_web.studio.url_converters import MAX_ID


class HistoryCursorPagination(CursorPagination):
    """Newest first, or by a result the list's ``sort`` filter names (``SORTS``, checked by the filter set before
    a page is cut); a cursor stays right while new work arrives, which an offset would not. A ``page_size`` that
    is not a whole number from 1 to ``max_page_size`` is a 400 (DRF would silently use the default)."""

    ordering = ("-created_at", "-id")
    page_size = 25
    page_size_query_param = "page_size"
    max_page_size = 200

    def get_page_size(self, request):
        return checked_query_int(request, self.page_size_query_param, 1, self.max_page_size, self.page_size)

    def get_ordering(self, request, queryset, view):
        return sort_ordering(queryset.model, request.query_params.get("sort", "")) or self.ordering

    def get_schema_operation_parameters(self, view):
        return bounded_schema(super().get_schema_operation_parameters(view),
                              {self.page_size_query_param: (1, self.max_page_size)})


@extend_schema_field({"type": "string", "pattern": "^[^\\u0000]*$"})
class TextFilter(django_filters.CharFilter):
    """A text filter; the schema says what Django's form field refuses (a NUL character)."""


@extend_schema_field({"type": "integer", "minimum": 1, "maximum": MAX_ID})
class IdFilter(django_filters.NumberFilter):
    """A row id: a positive 64-bit integer (django-filter's NumberFilter takes any decimal, and an id past 2^63
    fails in the database driver)."""

    field_class = forms.IntegerField

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", MAX_ID)
        super().__init__(*args, **kwargs)


@extend_schema_field({"type": "string", "enum": ["true", "false"]})
class ArchivedFilter(django_filters.TypedChoiceFilter):
    """``true``: only archived; ``false`` or left out: archived work is left out; anything else is a 400."""


DATE_INPUT = forms.DateInput(attrs={"type": "date"})
ARCHIVED_SELECT = forms.Select(choices=[("", "left out"), ("true", "only archived")])


class HistoryFilter(django_filters.FilterSet):
    """The filters every kind has; subclasses say where a kind keeps its team, creator and name."""

    team_path = "team"
    creator_path = "owner"
    name_paths: tuple[str, ...] = ("name",)

    q = TextFilter(method="filter_name", label="name contains")
    team = IdFilter(method="filter_team", label="team id")
    user = TextFilter(method="filter_user", label="created by (username)")
    created_after = django_filters.DateFilter(field_name="created_at", lookup_expr="date__gte", widget=DATE_INPUT,
                                              label="created on or after (YYYY-MM-DD)")
    created_before = django_filters.DateFilter(field_name="created_at", lookup_expr="date__lte", widget=DATE_INPUT,
                                               label="created on or before (YYYY-MM-DD)")
    # The form field's choices replace the widget's: the empty one must be among them, or the page's select
    # opens on "true" and every filtered history shows only archived rows.
    archived = ArchivedFilter(method="filter_archived", widget=ARCHIVED_SELECT,
                              choices=[("", "left out"), ("true", "only archived"), ("false", "not archived")],
                              coerce=lambda value: value == "true", empty_value=None,
                              label="only archived (true) or leave them out (default)")

    def filter_name(self, queryset, name, value):
        match = Q()
        for path in self.name_paths:
            match |= Q(**{f"{path}__icontains": value})
        return queryset.filter(match)

    def filter_team(self, queryset, name, value):
        return queryset.filter(**{self.team_path: value})

    def filter_user(self, queryset, name, value):
        return queryset.filter(**{f"{self.creator_path}__username": value})

    def filter_archived(self, queryset, name, value):
        return queryset.filter(archived_at__isnull=not value)

    def filter_sort(self, queryset, name, value):
        return queryset   # checked here (a 400 naming it); the cursor pagination orders by it

    def filter_queryset(self, queryset):
        queryset = super().filter_queryset(queryset)
        if self.form.cleaned_data.get("archived") is None:  # django-filter skips a filter left empty
            queryset = self.unfiltered(queryset)
        return queryset

    @staticmethod
    def unfiltered(queryset):
        """The rows with no filter given: archived work left out."""
        return queryset.filter(archived_at__isnull=True)


class HistoryFilterBackend(DjangoFilterBackend):
    """django-filter's backend for the API's history lists. A request that names none of the filters gets
    ``HistoryFilter.unfiltered`` directly, as the filter set would give it, without building the filter set and
    its form (a new form class per request: a tenth of a specs list's time, benchmarks/web_profile.py)."""

    def filter_queryset(self, request, queryset, view):
        filterset_class = self.get_filterset_class(view, queryset)
        if (filterset_class is not None and issubclass(filterset_class, HistoryFilter)
                and not any(name in request.query_params for name in filterset_class.base_filters)):
            return filterset_class.unfiltered(queryset)
        return super().filter_queryset(request, queryset, view)


STATUS_CHOICES = JobStatus.choices


class SpecFilter(HistoryFilter):
    model = TextFilter(field_name="name", lookup_expr="icontains", label="model name contains")

    class Meta:
        model = ModelSpecRecord
        fields: list[str] = []


class ClusterFilter(HistoryFilter):
    device = TextFilter(field_name="device_name", lookup_expr="icontains", label="device name contains")

    class Meta:
        model = ClusterRecord
        fields: list[str] = []


# ``sort=NAME`` (smallest first) or ``sort=-NAME``: the results a list can be ordered by, and the column or
# annotation (history.selectors.history_for_user) each one is. A row without the result (a job not planned yet, a
# run not measured) sorts after every row with one.
SORTS = {
    PlanningJob: {"iteration": "iteration_ms", "bubble": "bubble_ratio", "created": "created_at"},
    Plan: {"iteration": "iteration_ms", "bubble": "bubble_ratio", "tokens_per_s": "tokens_per_s",
           "created": "created_at"},
    Run: {"observed_iteration": "observed_iteration_ms", "created": "created_at"},
}


def sort_ordering(model, sort: str) -> tuple[str, str] | None:
    """The ordering a ``sort`` parameter names for ``model``'s rows (``SORTS``; "-name" descending), the id breaking
    ties so a cursor never skips a row; None for no such sort (the list's own order)."""
    column = SORTS.get(model, {}).get(sort.removeprefix("-"))
    if column is None:
        return None
    sign = "-" if sort.startswith("-") else ""
    return (f"{sign}{column}", f"{sign}id")


def sort_links(sort: str, names: tuple[str, ...]) -> dict:
    """What a list's sortable headers link to and show: ``{name}_sort`` (the other direction of the current sort,
    else ascending) and ``sort_marks`` (an arrow on the current one), for the History page and the dashboard."""
    links = {f"{name}_sort": (f"-{name}" if sort == name else name) for name in names}
    return {**links, "sort_marks": {sort.removeprefix("-"): " ↓" if sort.startswith("-") else " ↑"} if sort else {}}


def sort_filter(model) -> django_filters.ChoiceFilter:
    names = list(SORTS[model])
    return django_filters.ChoiceFilter(
        method="filter_sort", choices=[(f"{sign}{name}", f"{name}{' (largest first)' if sign else ''}")
                                       for name in names for sign in ("", "-")],
        label=f"order by ({', '.join(names)}; a leading - for largest first; default: newest first)")


class JobFilter(HistoryFilter):
    team_path = "spec__team"
    creator_path = "created_by"
    name_paths = ("name", "spec__name")

    model = TextFilter(field_name="spec__name", lookup_expr="icontains", label="model name contains")
    strategy = TextFilter(field_name="schedule", label="schedule (adaptis, 1f1b, ...)")
    status = django_filters.ChoiceFilter(choices=STATUS_CHOICES)
    cluster = TextFilter(field_name="cluster_preset", label="cluster preset")
    mode = django_filters.ChoiceFilter(choices=JobMode.choices, label="pipeline only, hybrid parallel or capacity")
    sort = sort_filter(PlanningJob)

    class Meta:
        model = PlanningJob
        fields: list[str] = []


class PlanFilter(HistoryFilter):
    team_path = "job__spec__team"
    creator_path = "job__created_by"
    name_paths = ("name", "job__spec__name")

    model = TextFilter(field_name="job__spec__name", lookup_expr="icontains", label="model name contains")
    strategy = TextFilter(field_name="strategy")
    status = django_filters.ChoiceFilter(field_name="job__status", choices=STATUS_CHOICES, label="the job's status")
    sort = sort_filter(Plan)

    class Meta:
        model = Plan
        fields: list[str] = []


class RunFilter(HistoryFilter):
    team_path = "plan__job__spec__team"
    creator_path = "created_by"
    name_paths = ("name", "plan__job__spec__name")

    model = TextFilter(field_name="plan__job__spec__name", lookup_expr="icontains", label="model name contains")
    strategy = TextFilter(field_name="plan__strategy", label="the plan's strategy")
    status = django_filters.ChoiceFilter(choices=STATUS_CHOICES)
    sort = sort_filter(Run)

    class Meta:
        model = Run
        fields: list[str] = []


HISTORY_FILTERS = {"specs": SpecFilter, "clusters": ClusterFilter, "jobs": JobFilter, "plans": PlanFilter,
                   "runs": RunFilter}
