"""Planning: a job plans a spec on a cluster and produces plans (a search stores its baselines beside its own)."""

from django.conf import settings
from django.db import models

from adaptis_web.studio.models.catalog import ClusterRecord, ModelSpecRecord
from adaptis_web.studio.models.curation import Curated
from adaptis_web.studio.models.work import TrackedWork
from planner.service import Software


class JobMode(models.TextChoices):
    PIPELINE = "pipeline", "Pipeline only"
    HYBRID = "hybrid", "Hybrid parallel"
    CAPACITY = "capacity", "Capacity (GPU counts)"


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
                                      "etp, microbatch_size, vpp, recompute, sharding, precision)")
    overlap = models.CharField(max_length=20, default=Software().overlap, blank=True,
                               help_text="hybrid and capacity: the communication the cost model hides behind compute "
                                         "(tp, dp, ep, comma-separated, or none; planner.parallel.cost.overlap_options)")
    framework = models.CharField(max_length=20, default=Software().framework, blank=True,
                                 help_text="hybrid and capacity: the training framework whose kernels the cost model "
                                           "assumes (megatron or torchtitan; planner.parallel.cost.FRAMEWORKS)")
    recompute_modules = models.CharField(max_length=60, default=Software().recompute_modules, blank=True,
                                         help_text="hybrid and capacity: what selective recomputation re-runs, "
                                                   "Megatron-Core's recompute modules (comma-separated; "
                                                   "planner.parallel.cost.recompute_modules_named)")
    ep_dispatcher = models.CharField(max_length=20, default=Software().ep_dispatcher, blank=True,
                                     help_text="hybrid and capacity: how MoE tokens are sent to their experts "
                                               "(alltoall, deepep or hybridep; planner.parallel.cost.EP_DISPATCHERS)")
    cluster_record = models.ForeignKey(ClusterRecord, null=True, blank=True, on_delete=models.SET_NULL,
                                       related_name="jobs", help_text="the saved cluster it was planned on")
    # A capacity job (mode "capacity", schedule "capacity") finds the best configuration at each of gpu_counts GPUs
    # of the cluster's kind (seq_len, global_batch and pins as a hybrid job's) and what training on token_budget tokens
    # costs there; num_devices is its largest count.
    token_budget = models.BigIntegerField(null=True, blank=True, help_text="capacity: tokens to train on")
    gpu_counts = models.JSONField(default=list, blank=True, help_text="capacity: the GPU counts swept, ascending")

    @property
    def software(self) -> Software:
        """The job's software, its four columns as one ``planner.service.Software`` (``software=`` sets them)."""
        return Software(overlap=self.overlap, framework=self.framework, recompute_modules=self.recompute_modules,
                        ep_dispatcher=self.ep_dispatcher)

    @software.setter
    def software(self, software: Software) -> None:
        for name, value in software.to_dict().items():
            setattr(self, name, value)

    @property
    def is_hybrid(self) -> bool:
        return self.mode == JobMode.HYBRID

    @property
    def is_capacity(self) -> bool:
        return self.mode == JobMode.CAPACITY

    @property
    def own_plan(self) -> "Plan | None":
        """The plan this job made (a search's: its AdaPtis plan, not the baselines it stored beside it), never one
        edited from it later (those have a ``parent`` and are listed under it). Reads the prefetched ``plans``
        where a list prefetched them (planning.selectors.job_list_with_plan_metrics)."""
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
