"""What a team plans on: its model specs and saved clusters."""

from django.conf import settings
from django.db import models

from adaptis_web.studio.models.accounts import Team
from adaptis_web.studio.models.curation import Curated


class ModelSpecRecord(Curated):
    """A validated ``adaptis.model/v1`` document (HF configs are stored after conversion)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="specs")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="specs")
    name = models.CharField(max_length=200)
    doc = models.JSONField()
    source_filename = models.CharField(max_length=255, blank=True)
    num_layers = models.PositiveIntegerField()
    # What the upload was accepted with but probably not as meant ([{field, reason}]: a HF config's misspelt key).
    warnings = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name


class ClusterRecord(Curated):
    """A team's saved ``adaptis.cluster/v1`` document, validated by ``planner.cluster.load_cluster``. A job planned
    on it copies the document (``PlanningJob.cluster_doc``), so nothing depends on the saved cluster."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="clusters")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="clusters")
    name = models.CharField(max_length=200)
    doc = models.JSONField()
    source_filename = models.CharField(max_length=255, blank=True)
    num_devices = models.PositiveIntegerField()
    device_name = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name
