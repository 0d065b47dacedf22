"""Runs of a plan, the events their ranks report (actions, and a hybrid run's collectives), and a spec's profile
measured on the runs' host."""

from django.conf import settings
from django.db import models

from adaptis_web.studio.models.catalog import ModelSpecRecord
from adaptis_web.studio.models.planning import Plan
from adaptis_web.studio.models.work import TrackedWork


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


class RunCollective(models.Model):
    """One observed collective of a hybrid run: a TP all-gather or reduce-scatter inside an action, a DP all-reduce
    or an optimizer step after the step's last action, ... (``op``, its ``group`` the op's prefix). ``device`` is
    the rank's pipeline rank; ``index`` numbers the rank's collectives in the step (rank, step and index identify
    it, as rank, step and action identify an action). ``seq`` is drawn from the run's one sequence, shared with its
    RunEvents, so a client's ``after=seq`` cursor pages through both."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="collectives")
    seq = models.PositiveIntegerField()
    rank = models.PositiveIntegerField()
    device = models.PositiveIntegerField()
    op = models.CharField(max_length=40)
    group = models.CharField(max_length=20)
    step = models.PositiveIntegerField()
    index = models.PositiveIntegerField()
    bytes = models.PositiveBigIntegerField(default=0)
    start_ms = models.FloatField()
    end_ms = models.FloatField()

    class Meta:
        ordering = ["run", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="runcollective_unique_run_seq"),
            models.UniqueConstraint(fields=["run", "rank", "step", "index"], name="runcollective_unique_identity"),
        ]

    def __str__(self) -> str:
        return f"{self.op} on rank {self.rank} (run {self.run_id} #{self.seq})"


class MeasuredProfile(TrackedWork):
    """A spec's profile measured on the host that runs the team's CPU runs (a task on the runs queue):
    ``num_ranks`` profilers at once, one per rank, with the ranks' threads and weight-gradient setting; with a
    ``plan``, its stages are also timed as its ranks run them and the layers scaled to those times
    (``executor profile --plan``). Planning on ``cpu-host`` uses the newest one that fits (runs.profiling)."""

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
