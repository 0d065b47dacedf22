"""History filters (django-filter), shared by the API lists and the History page, and their cursor pagination.

Every list filters by ``team``, ``user`` (who created it), ``created_after`` / ``created_before`` (dates),
``q`` (name contains), ``archived`` (default: left out; ``true``: only archived) and, where it applies, by
``model`` (the spec's name contains), ``strategy`` (a job's schedule, a plan's or run's plan strategy) and
``status``. An unknown value is a 400 naming the filter.
"""

from __future__ import annotations

import django_filters
from django import forms
from django.db.models import Q
from rest_framework.pagination import CursorPagination

from adaptis_web.studio.models import JobStatus, ModelSpecRecord, Plan, PlanningJob, Run


class HistoryCursorPagination(CursorPagination):
    """Newest first; a cursor stays right while new work arrives, which an offset would not."""

    ordering = ("-created_at", "-id")
    page_size = 25
    page_size_query_param = "page_size"
    max_page_size = 200


DATE_INPUT = forms.DateInput(attrs={"type": "date"})
ARCHIVED_SELECT = forms.Select(choices=[("", "left out"), ("true", "only archived")])


class HistoryFilter(django_filters.FilterSet):
    """The filters every kind has; subclasses say where a kind keeps its team, creator and name."""

    team_path = "team"
    creator_path = "owner"
    name_paths: tuple[str, ...] = ("name",)

    q = django_filters.CharFilter(method="filter_name", label="name contains")
    team = django_filters.NumberFilter(method="filter_team", label="team id")
    user = django_filters.CharFilter(method="filter_user", label="created by (username)")
    created_after = django_filters.DateFilter(field_name="created_at", lookup_expr="date__gte", widget=DATE_INPUT,
                                              label="created on or after (YYYY-MM-DD)")
    created_before = django_filters.DateFilter(field_name="created_at", lookup_expr="date__lte", widget=DATE_INPUT,
                                               label="created on or before (YYYY-MM-DD)")
    archived = django_filters.BooleanFilter(method="filter_archived", widget=ARCHIVED_SELECT,
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

    def filter_queryset(self, queryset):
        queryset = super().filter_queryset(queryset)
        if self.form.cleaned_data.get("archived") is None:  # django-filter skips a filter left empty
            queryset = queryset.filter(archived_at__isnull=True)
        return queryset


STATUS_CHOICES = JobStatus.choices


class SpecFilter(HistoryFilter):
    model = django_filters.CharFilter(field_name="name", lookup_expr="icontains", label="model name contains")

    class Meta:
        model = ModelSpecRecord
        fields: list[str] = []


class JobFilter(HistoryFilter):
    team_path = "spec__team"
    creator_path = "created_by"
    name_paths = ("name", "spec__name")

    model = django_filters.CharFilter(field_name="spec__name", lookup_expr="icontains", label="model name contains")
    strategy = django_filters.CharFilter(field_name="schedule", label="schedule (adaptis, 1f1b, ...)")
    status = django_filters.ChoiceFilter(choices=STATUS_CHOICES)
    cluster = django_filters.CharFilter(field_name="cluster_preset", label="cluster preset")

    class Meta:
        model = PlanningJob
        fields: list[str] = []


class PlanFilter(HistoryFilter):
    team_path = "job__spec__team"
    creator_path = "job__created_by"
    name_paths = ("name", "job__spec__name")

    model = django_filters.CharFilter(field_name="job__spec__name", lookup_expr="icontains",
                                      label="model name contains")
    strategy = django_filters.CharFilter(field_name="strategy")
    status = django_filters.ChoiceFilter(field_name="job__status", choices=STATUS_CHOICES, label="the job's status")

    class Meta:
        model = Plan
        fields: list[str] = []


class RunFilter(HistoryFilter):
    team_path = "plan__job__spec__team"
    creator_path = "created_by"
    name_paths = ("name", "plan__job__spec__name")

    model = django_filters.CharFilter(field_name="plan__job__spec__name", lookup_expr="icontains",
                                      label="model name contains")
    strategy = django_filters.CharFilter(field_name="plan__strategy", label="the plan's strategy")
    status = django_filters.ChoiceFilter(choices=STATUS_CHOICES)

    class Meta:
        model = Run
        fields: list[str] = []


HISTORY_FILTERS = {"specs": SpecFilter, "jobs": JobFilter, "plans": PlanFilter, "runs": RunFilter}
