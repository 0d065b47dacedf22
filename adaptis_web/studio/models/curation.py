"""Soft archiving and deletion, shared by specs, clusters, jobs, plans and runs (history.curation)."""

from django.db import models


class Curated(models.Model):
    """Archived objects leave the default history; deleted ones leave every list and page until restored.

    Archiving or deleting an object does the same to what depends on it, stamped with the same time, so a
    restore brings back exactly what went with it (history.curation).
    """

    archived_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
