"""Studio data: teams own model specs and clusters; a spec is planned by jobs, a job produces plans, a plan is run.

Every object is reached through its team (spec → team), which is how access is decided: a user sees the
objects of the teams they belong to, and their role in that team says what they may change (services.roles).
Specs, clusters, jobs, plans and runs are archived and deleted softly (``Curated``): a deleted object disappears
from every list and page until an admin restores it. The JSON columns hold the planner's versioned documents
verbatim (``adaptis.model/v1``, ``adaptis.cluster/v1``, ``adaptis.plan/v1`` and ``/v2``, ``adaptis.profile/v1``,
simulator output) so what was planned and run can always be reproduced.
"""

from django.conf import settings
from django.db import models
from knox.models import AbstractAuthToken


class Team(models.Model):
    name = models.CharField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    run_environment = models.CharField(
        max_length=500, blank=True, default="",
        help_text="the shell line that readies the executor on every node of the team's cluster runs (a virtual "
                  "environment, a module load; or image:NAME, a container image for Kubernetes); empty: the default")
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", related_name="teams")

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    class Role(models.TextChoices):
        """From most to least trusted; services.roles decides what each may do."""

        OWNER = "owner", "Owner"
        ADMIN = "admin", "Admin"
        MEMBER = "member", "Member"
        VIEWER = "viewer", "Viewer"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "user"], name="membership_unique_team_user"),
            models.UniqueConstraint(fields=["team"], condition=models.Q(role="owner"), name="membership_one_owner"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class Invitation(models.Model):
    """A single-use link that makes whoever opens it (logged in) a member of ``team`` with ``role``.

    Only the SHA-256 of the link's key is stored: the link is shown once, to the admin who created it.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="invitations")
    role = models.CharField(max_length=10, choices=Membership.Role.choices, default=Membership.Role.MEMBER)
    key_digest = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    accepted_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"invitation to {self.team} as {self.role}"


class Curated(models.Model):
    """Archived objects leave the default history; deleted ones leave every list and page until restored.

    Archiving or deleting an object does the same to what depends on it, stamped with the same time, so a
    restore brings back exactly what went with it (services.curation).
    """

    archived_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True


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


class JobStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class JobMode(models.TextChoices):
    PIPELINE = "pipeline", "Pipeline only"
    HYBRID = "hybrid", "Hybrid parallel"


class TrackedWork(Curated):
    """The lifecycle a Celery task records on its own row: queued, running, then succeeded, failed or cancelled."""

    name = models.CharField(max_length=200, blank=True, help_text="given by a user; empty shows the id")
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
    # A hybrid job (mode "hybrid", schedule "hybrid") chooses TP, CP, PP, DP, EP, micro-batch size and
    # recomputation for the whole training job; num_devices is then its GPU count, num_microbatches 0.
    mode = models.CharField(max_length=10, choices=JobMode.choices, default=JobMode.PIPELINE)
    gpus = models.PositiveIntegerField(null=True, blank=True, help_text="hybrid: GPUs of the training job")
    seq_len = models.PositiveIntegerField(null=True, blank=True, help_text="hybrid: tokens per sequence")
    global_batch = models.PositiveIntegerField(null=True, blank=True, help_text="hybrid: sequences per step")
    pins = models.JSONField(default=dict, blank=True,
                            help_text="hybrid: the degrees and settings the user fixed (tp, cp, pp, dp, ep, "
                                      "microbatch_size, recompute, distributed_optimizer)")
    cluster_record = models.ForeignKey(ClusterRecord, null=True, blank=True, on_delete=models.SET_NULL,
                                       related_name="jobs", help_text="the saved cluster it was planned on")

    @property
    def is_hybrid(self) -> bool:
        return self.mode == JobMode.HYBRID

    @property
    def own_plan(self) -> "Plan | None":
        """The plan this job made (a search's: its AdaPtis plan, not the baselines it stored beside it), never one
        edited from it later (those have a ``parent`` and are listed under it). Reads the prefetched ``plans``
        where a list prefetched them (selectors.job_list_with_plan_metrics)."""
        made = sorted((plan for plan in self.plans.all() if plan.parent_id is None and plan.deleted_at is None),
                      key=lambda plan: plan.pk)
        return next((plan for plan in made if plan.strategy == self.schedule), made[0] if made else None)

    @property
    def plans_own_first(self) -> list["Plan"]:
        """The job's plans as its API lists them: its own first, then the rest newest first."""
        own = self.own_plan
        rest = sorted((plan for plan in self.plans.all() if plan.deleted_at is None and plan != own),
                      key=lambda plan: (plan.created_at, plan.pk), reverse=True)
        return ([own] if own else []) + rest

    @property
    def derived_plans(self) -> list["Plan"]:
        """Plans edited from this job's plans (plan editor's "save as new plan"), oldest first."""
        return sorted((plan for plan in self.plans.all() if plan.parent_id is not None and plan.deleted_at is None),
                      key=lambda plan: plan.pk)
    measured_profile = models.ForeignKey("MeasuredProfile", null=True, blank=True, on_delete=models.SET_NULL,
                                         related_name="jobs",
                                         help_text="the profile measured on the runs' host this job plans with "
                                                   "(services.profiling); the job waits for it while it is measured")
    analytic_profile_reason = models.TextField(
        blank=True, help_text="why a job on cpu-host planned on the analytic profile instead of one measured on the "
                              "runs' host (the measuring failed, or the model is not measured there); else empty")

    def __str__(self) -> str:
        return f"job {self.pk} ({self.schedule}, {self.num_devices} devices)"


class Plan(Curated):
    job = models.ForeignKey(PlanningJob, on_delete=models.CASCADE, related_name="plans")
    name = models.CharField(max_length=200, blank=True, help_text="given by a user; empty shows the strategy")
    strategy = models.CharField(max_length=40)
    layout = models.TextField(help_text="human form of the partition and placement")
    schedule_summary = models.TextField(blank=True)
    plan_doc = models.JSONField(help_text="adaptis.plan/v1")
    simulation = models.JSONField(help_text="simulator output including the timeline")
    profile_doc = models.JSONField(help_text="adaptis.profile/v1 the plan was built from")
    iteration_ms = models.FloatField()
    bubble_ratio = models.FloatField()
    created_at = models.DateTimeField(auto_now_add=True)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="derived",
                               help_text="the plan this one was edited from in the plan editor (services.plan_editing)")

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
    cancel_requested = models.BooleanField(default=False,
                                           help_text="set by a cancel; the worker's launcher stops the ranks when "
                                                     "it sees it (services.run_control)")
    target = models.CharField(max_length=10, choices=[("local", "local"), ("cluster", "cluster")], default="local",
                              help_text="local: the runs worker starts its ranks; cluster: the user launches them "
                                        "(torchrun, Slurm) and they report to the ingest (services.cluster_runs)")
    secret_digest = models.CharField(max_length=64, blank=True,
                                     help_text="SHA-256 of a cluster run's secret, which its ranks send to the ingest")
    launch_options = models.JSONField(default=dict, blank=True,
                                      help_text="a cluster run's launch settings: environment, time_limit")
    cluster_facts = models.JSONField(default=dict, blank=True,
                                     help_text="what ran a cluster run, as its rank 0 reported: hosts, devices, torch "
                                               "and NCCL versions")

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


class MeasuredProfile(TrackedWork):
    """A spec's profile measured on the host that runs the team's CPU runs (a task on the runs queue):
    ``num_ranks`` profilers at once, one per rank, with the ranks' threads and weight-gradient setting; with a
    ``plan``, its stages are also timed as its ranks run them and the layers scaled to those times
    (``executor profile --plan``). Planning on ``cpu-host`` uses the newest one that fits (services.profiling)."""

    spec = models.ForeignKey(ModelSpecRecord, on_delete=models.CASCADE, related_name="measured_profiles")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    num_ranks = models.PositiveIntegerField()
    split_backward = models.BooleanField(help_text="I and W timed apart (zero-bubble ranks); off: one full B")
    plan = models.ForeignKey(Plan, null=True, blank=True, on_delete=models.SET_NULL, related_name="measured_profiles",
                             help_text="the plan whose stages were timed as actions")
    host = models.CharField(max_length=200, blank=True, help_text="where it was measured (set by the worker)")
    profile_doc = models.JSONField(null=True, blank=True, help_text="adaptis.profile/v1, once measured")

    def __str__(self) -> str:
        return f"measured profile {self.pk} of {self.spec_id} ({self.num_ranks} ranks)"


class ApiToken(AbstractAuthToken):
    """An API token as django-rest-knox keeps it (a SHA-512 digest, never the token; an expiry), with the name
    its user gave it and when it last authenticated a request (stamped at most once a minute)."""

    name = models.CharField(max_length=100)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]
        constraints = [models.UniqueConstraint(fields=["user", "name"], name="apitoken_unique_user_name")]

    def __str__(self) -> str:
        return f"token {self.name!r} of {self.user}"
