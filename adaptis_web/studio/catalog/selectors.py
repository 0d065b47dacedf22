"""Reads of specs and saved clusters, scoped to the teams a user belongs to (``Http404`` for another team's)."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404

from adaptis_web.studio.common.selectors import referenced
from adaptis_web.studio.models import ClusterRecord, ModelSpecRecord, Team


def spec_list_for_user(*, user: AbstractBaseUser, deleted: bool = False) -> QuerySet[ModelSpecRecord]:
    return ModelSpecRecord.objects.filter(team__memberships__user=user, deleted_at__isnull=not deleted).select_related(
        "team", "owner")


def spec_get_for_user(*, user: AbstractBaseUser, spec_id: int) -> ModelSpecRecord:
    return get_object_or_404(spec_list_for_user(user=user), pk=spec_id)


def cluster_list_for_user(*, user: AbstractBaseUser, deleted: bool = False) -> QuerySet[ClusterRecord]:
    return ClusterRecord.objects.filter(team__memberships__user=user, deleted_at__isnull=not deleted).select_related(
        "team", "owner")


def cluster_get_for_user(*, user: AbstractBaseUser, cluster_id: int) -> ClusterRecord:
    return get_object_or_404(cluster_list_for_user(user=user), pk=cluster_id)


def cluster_choices_for_team(*, team: Team) -> QuerySet[ClusterRecord]:
    """The saved clusters a job form offers: the team's, not archived, newest first, without their documents."""
    return ClusterRecord.objects.filter(team=team, deleted_at__isnull=True, archived_at__isnull=True).defer("doc")


def cluster_choices_for_user(*, user: AbstractBaseUser) -> QuerySet[ClusterRecord]:
    """The saved clusters of every team of ``user`` (the upload form, which picks the team too)."""
    return cluster_list_for_user(user=user).filter(archived_at__isnull=True).defer("doc")


def spec_for_request(*, user: AbstractBaseUser, spec_id: int) -> ModelSpecRecord:
    return referenced(spec_list_for_user(user=user), spec_id, "spec", "spec")


def cluster_for_request(*, user: AbstractBaseUser, cluster_id: int) -> ClusterRecord:
    return referenced(cluster_list_for_user(user=user), cluster_id, "saved_cluster", "cluster")
