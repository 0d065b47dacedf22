"""API input and output shapes of runs, their events and the ingest, and measured profiles."""

from __future__ import annotations

from django.core.validators import RegexValidator
from rest_framework import serializers

from adaptis_web.studio.api.fields import (ChoiceField, IdField, KnownFieldsMixin, StrictBooleanField,
                                          StrictCharField)
from adaptis_web.studio.api.plain_output import PlainOutputMixin
from adaptis_web.studio.models import MeasuredProfile, Run, RunCollective, RunEvent
from adaptis_web.studio.runs.local_runs import DEFAULT_RUN_STEPS, MAX_RUN_STEPS
from adaptis_web.studio.runs.profiling import MAX_PROFILE_RANKS
from adaptis_web.studio.runs.selectors import RUN_COLLECTIVE_FIELDS, RUN_EVENT_FIELDS, RUN_EVENTS_PAGE
from adaptis_web.studio.url_converters import MAX_ID
from executor.service import HTTP_BATCH_EVENTS


class RunCreateInput(KnownFieldsMixin, serializers.Serializer):
    plan = IdField(help_text="id of a plan of one of your teams")
    steps = serializers.IntegerField(default=DEFAULT_RUN_STEPS, min_value=1, max_value=MAX_RUN_STEPS,
                                     help_text="training steps; the first warms up, the rest show the steady state")
    scale_down = StrictBooleanField(default=False,
                                          help_text="run a CPU-sized copy with the same layer pattern")
    target = ChoiceField(choices=["local", "cluster"], default="local",
                         help_text="local: on the runs worker's CPU; cluster: you launch its ranks "
                                   "(the answer's launch: torchrun, sbatch) and they report here")
    # Blank (as a form sends a field left empty) means the default, for both.
    environment = StrictCharField(required=False, allow_blank=True, max_length=2000,
                                  help_text="cluster: the shell line that sets up the executor's environment on every "
                                            "node (a virtual environment, a module load)")
    time_limit = StrictCharField(required=False, allow_blank=True, max_length=9,
                                 validators=[RegexValidator(r"^(\d{1,3}:\d{2}:\d{2})?$", "must be HH:MM:SS")],
                                 help_text="cluster: Slurm's --time, HH:MM:SS (default 01:00:00)")


class ClusterLaunchOutput(serializers.Serializer):
    nodes = serializers.IntegerField()
    ranks_per_node = serializers.IntegerField()
    backend = serializers.CharField()
    files = serializers.DictField(help_text="file name -> JSON document the ranks read, beside the command")
    torchrun = serializers.CharField(help_text="the command every node runs; $HEAD is the first node's address")
    sbatch = serializers.CharField(help_text="a complete Slurm batch script: ADAPTIS_TOKEN_FILE=... sbatch it")
    kubernetes = serializers.CharField(help_text="a Kubeflow training operator PyTorchJob and the ConfigMap of its "
                                                 "files (YAML): create the Secret it names, then kubectl apply it")


class IngestBatchInput(KnownFieldsMixin, serializers.Serializer):
    events = serializers.ListField(child=serializers.DictField(), min_length=1, max_length=HTTP_BATCH_EVENTS,
                                   help_text="executor events (executor.running.events): actions, a hybrid run's "
                                             "collectives and the run's lifecycle")


class IngestOutput(serializers.Serializer):
    stored = serializers.IntegerField()
    duplicates = serializers.IntegerField(help_text="actions and collectives already stored (a retried batch)")
    status = serializers.CharField()


class RunOutput(PlainOutputMixin, serializers.ModelSerializer):
    event_count = serializers.SerializerMethodField()
    created_by = serializers.CharField(source="created_by.username")

    class Meta:
        model = Run
        fields = ["id", "name", "plan", "created_by", "status", "cancel_requested", "target", "backend", "world_size",
                  "steps", "scaled_down", "error", "summary", "loss", "balancing_loss", "event_count", "executed_spec",
                  "cluster_facts", "created_at", "started_at", "finished_at", "archived_at"]

    def get_event_count(self, run: Run) -> int:
        annotated = getattr(run, "event_count", None)  # run_list_for_user annotates it: no query per row
        return annotated if annotated is not None else run.events.count()


class RunCreatedOutput(RunOutput):
    """What creating a run answers: the run, and for a cluster run its secret (shown this once) and its launch."""

    # Not read-only: drf-spectacular marks read-only response fields required, and a local run's answer has neither.
    secret = serializers.CharField(required=False,
                                   help_text="cluster: the run's secret, which its ranks send; shown this once")
    launch = ClusterLaunchOutput(required=False, help_text="cluster: how to launch its ranks")

    class Meta(RunOutput.Meta):
        fields = RunOutput.Meta.fields + ["secret", "launch"]


class RunEventOutput(serializers.ModelSerializer):
    """The shape of an event; the events endpoint sends ``selectors.run_events_after``'s rows, which have it."""

    class Meta:
        model = RunEvent
        fields = list(RUN_EVENT_FIELDS)


class RunCollectiveOutput(serializers.ModelSerializer):
    """The shape of a hybrid run's collective (``selectors.run_events_after``'s rows have it)."""

    class Meta:
        model = RunCollective
        fields = list(RUN_COLLECTIVE_FIELDS)


class RunEventsOutput(serializers.Serializer):
    run = serializers.IntegerField()
    status = serializers.CharField()
    finished = serializers.BooleanField()
    last_seq = serializers.IntegerField(help_text="pass it as 'after' to get only newer events and collectives")
    events = RunEventOutput(many=True, help_text="the actions (F, B, I, W) the ranks ran")
    collectives = RunCollectiveOutput(many=True, help_text="a hybrid run's collectives (TP, DP, optimizer, ...); "
                                                           "one seq numbers them with the actions")


class RunEventsQuery(serializers.Serializer):
    after = serializers.IntegerField(min_value=0, max_value=MAX_ID, default=0,
                                     help_text="only events with a larger seq")
    limit = serializers.IntegerField(min_value=1, max_value=RUN_EVENTS_PAGE, default=RUN_EVENTS_PAGE,
                                     help_text="at most this many")


class MeasuredProfileCreateInput(KnownFieldsMixin, serializers.Serializer):
    num_ranks = serializers.IntegerField(default=2, min_value=1, max_value=MAX_PROFILE_RANKS,
                                         help_text="profilers at once, one per rank of the runs to predict")
    split_backward = StrictBooleanField(default=False, help_text="time I and W apart (zero-bubble ranks)")
    plan = IdField(required=False, allow_null=True, default=None,
                                    help_text="a plan of this spec: also time its stages as its ranks run them "
                                              "(num_ranks is then its devices)")


class MeasuredProfileOutput(serializers.ModelSerializer):
    profile = serializers.JSONField(source="profile_doc", help_text="adaptis.profile/v1 once measured, else null")

    class Meta:
        model = MeasuredProfile
        fields = ["id", "spec", "plan", "num_ranks", "split_backward", "status", "host", "error", "profile",
                  "created_at", "started_at", "finished_at"]
