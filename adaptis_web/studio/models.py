"""Studio data: teams own model specs; a spec is planned by jobs, a job produces plans, a plan is run.

Every object is reached through its team (spec → team), which is how access is decided: a user sees the
objects of the teams they belong to. The JSON columns hold the planner's versioned documents verbatim
(``adaptis.model/v1``, ``adaptis.plan/v1``, ``adaptis.profile/v1``, simulator output) so what was
planned and run can always be reproduced.
"""

from django.conf import settings
from django.db import models


class Team(models.Model):
    name = models.CharField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", related_name="teams")

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    class Role(models.TextChoices):
        OWNER = "owner", "Owner"
        MEMBER = "member", "Member"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="membership_unique_team_user")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class ModelSpecRecord(models.Model):
    """A validated ``adaptis.model/v1`` document (HF configs are stored after conversion)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="specs")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="specs")
    name = models.CharField(max_length=200)
    doc = models.JSONField()
    source_filename = models.CharField(max_length=255, blank=True)
    num_layers = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name


class JobStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class TrackedWork(models.Model):
    """The lifecycle a Celery task records on its own row: queued, running, then succeeded, failed or cancelled."""

    status = models.CharField(max_length=10, choices=JobStatus.choices, default=JobStatus.QUEUED)
    error = models.TextField(blank=True)
    celery_task_id = models.CharField(max_length=50, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True,
                                        help_text="last sign of life from the worker running it (services.liveness)")
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
        ordering = ["-created_at", "-id"]

    @property
    def is_finished(self) -> bool:
        return self.status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


class PlanningJob(TrackedWork):
    """Profile a spec on a cluster and build a plan; progress and failure are recorded here by the task.

    ``schedule`` is a baseline schedule (one plan) or ``"adaptis"``: the search, which stores its best plan
    next to every baseline it was compared with and keeps its summary in ``result``. The search fields
    (``seed``, ``time_budget_s``, ``memory_limit_bytes``) only apply to ``"adaptis"``.
    """

    spec = models.ForeignKey(ModelSpecRecord, on_delete=models.CASCADE, related_name="jobs")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs")
    cluster_preset = models.CharField(max_length=100, blank=True, help_text="empty when a custom cluster was given")
    cluster_doc = models.JSONField(help_text="the resolved adaptis.cluster/v1 document")
    num_devices = models.PositiveIntegerField()
    num_microbatches = models.PositiveIntegerField()
    schedule = models.CharField(max_length=40)
    partition = models.CharField(max_length=40, default="uniform")
    progress = models.FloatField(default=0.0)
    progress_message = models.CharField(max_length=200, blank=True)
    seed = models.PositiveIntegerField(default=0)
    time_budget_s = models.FloatField(default=60.0, help_text="wall-clock budget of the search")
    memory_limit_bytes = models.BigIntegerField(null=True, blank=True,
                                                help_text="per device; empty means the cluster's device memory")
    cancel_requested = models.BooleanField(default=False)
    result = models.JSONField(default=dict, blank=True,
                              help_text="the search summary: lower bound, gap, stats, top candidates, baselines")
    calibrated_from = models.ForeignKey("Run", null=True, blank=True, on_delete=models.SET_NULL,
                                        related_name="replans",
                                        help_text="the run whose observed timings calibrated this job's profile")
    profile_doc = models.JSONField(null=True, blank=True,
                                   help_text="adaptis.profile/v1 to plan with; empty means the analytic profile")
    calibration = models.JSONField(default=dict, blank=True,
                                   help_text="how the calibrated profile predicts the run it came from")

    def __str__(self) -> str:
        return f"job {self.pk} ({self.schedule}, {self.num_devices} devices)"


class Plan(models.Model):
    job = models.ForeignKey(PlanningJob, on_delete=models.CASCADE, related_name="plans")
    strategy = models.CharField(max_length=40)
    layout = models.TextField(help_text="human form of the partition and placement")
    schedule_summary = models.TextField(blank=True)
    plan_doc = models.JSONField(help_text="adaptis.plan/v1")
    simulation = models.JSONField(help_text="simulator output including the timeline")
    profile_doc = models.JSONField(help_text="adaptis.profile/v1 the plan was built from")
    iteration_ms = models.FloatField()
    bubble_ratio = models.FloatField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"plan {self.pk} ({self.strategy})"


class Run(TrackedWork):
    """One execution of a plan on real torch.distributed ranks; observed timings arrive as RunEvents."""

    plan = models.ForeignKey(Plan, on_delete=models.CASCADE, related_name="runs")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="runs")
    backend = models.CharField(max_length=10, default="gloo")
    world_size = models.PositiveIntegerField()
    steps = models.PositiveIntegerField(default=1)
    scaled_down = models.BooleanField(default=False)
    executed_spec = models.JSONField(default=dict, blank=True,
                                     help_text="the adaptis.model/v1 document the ranks built (set when it starts)")
    summary = models.JSONField(default=dict, blank=True)
    loss = models.FloatField(null=True, blank=True)
    balancing_loss = models.FloatField(null=True, blank=True,
                                       help_text="the last step's MoE load-balancing loss, apart from the loss "
                                                 "(null: the model has none)")

    def __str__(self) -> str:
        return f"run {self.pk} of plan {self.plan_id}"


class RunEvent(models.Model):
    """One observed action; ``seq`` numbers a run's events in arrival order (clients poll ``after=seq``)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    rank = models.PositiveIntegerField()
    device = models.PositiveIntegerField()
    action = models.CharField(max_length=20)
    stage = models.PositiveIntegerField()
    kind = models.CharField(max_length=10)
    microbatch = models.PositiveIntegerField()
    step = models.PositiveIntegerField(default=0)
    start_ms = models.FloatField()
    end_ms = models.FloatField()

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="runevent_unique_run_seq")]

    def __str__(self) -> str:
        return f"{self.action} on device {self.device} (run {self.run_id} #{self.seq})"
