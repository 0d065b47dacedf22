"""What every domain's reads share."""

from __future__ import annotations

from django.db.models import QuerySet

from adaptis_web.studio.common.refusals import Missing


def referenced(queryset: QuerySet, pk: int, field: str, noun: str):
    """An object a request body refers to; unknown and foreign ids read the same (no existence leak)."""
    found = queryset.filter(pk=pk).first()
    if found is None:
        raise Missing(field, f"no {noun} with id {pk} among your teams' {noun}s")
    return found
