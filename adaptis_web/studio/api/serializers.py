"""API input and output shapes. Inputs only check types; the business rules live in the services."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from adaptis_web.studio.models import (ApiToken, Invitation, MeasuredProfile, Membership, ModelSpecRecord, Plan,
                                       PlanningJob, Run, RunEvent, Team)
from adaptis_web.studio.selectors import RUN_EVENTS_PAGE
from adaptis_web.studio.services.predictions import plan_prediction
from adaptis_web.studio.services.jobs import DEFAULT_PARTITION, DEFAULT_SCHEDULE, JOB_SCHEDULES
from adaptis_web.studio.services.search import DEFAULT_TIME_BUDGET_S, MAX_SEED, MAX_TIME_BUDGET_S, MIN_TIME_BUDGET_S
from planner.baselines import PARTITIONS


class TeamOutput(serializers.ModelSerializer):
    role = serializers.SerializerMethodField()

    class Meta:
        model = Team
        fields = ["id", "name", "role"]

    def get_role(self, team: Team) -> str:
        user = self.context["request"].user
        return next(m.role for m in team.memberships.all() if m.user_id == user.pk)


class TeamCreateInput(serializers.Serializer):
    name = serializers.CharField(max_length=100)


class MemberOutput(serializers.ModelSerializer):
    user_id = serializers.IntegerField()
    username = serializers.CharField(source="user.username")

    class Meta:
        model = Membership
        fields = ["user_id", "username", "role", "created_at"]


class TeamDetailOutput(serializers.ModelSerializer):
    members = MemberOutput(many=True, source="member_rows")

    class Meta:
        model = Team
        fields = ["id", "name", "created_at", "members"]


class MemberAddInput(serializers.Serializer):
    username = serializers.CharField()
    role = serializers.CharField(default=Membership.Role.MEMBER, help_text="admin, member or viewer")


class MemberRoleInput(serializers.Serializer):
    role = serializers.CharField(help_text="admin, member or viewer")


class TransferInput(serializers.Serializer):
    user_id = serializers.IntegerField(help_text="the member who becomes the owner; you stay on as an admin")


class InvitationCreateInput(serializers.Serializer):
    role = serializers.CharField(default=Membership.Role.MEMBER, help_text="admin, member or viewer")


class InvitationOutput(serializers.ModelSerializer):
    url = serializers.CharField(help_text="the single-use link; shown only in this response")

    class Meta:
        model = Invitation
        fields = ["id", "team", "role", "expires_at", "url"]


class TokenCreateInput(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    expires_in_days = serializers.IntegerField(default=30)


class TokenOutput(serializers.ModelSerializer):
    id = serializers.CharField(source="token_key", help_text="the token's first characters: how it is named in URLs")

    class Meta:
        model = ApiToken
        fields = ["id", "name", "created", "expiry", "last_used_at"]


class TokenCreatedOutput(TokenOutput):
    token = serializers.CharField(help_text="the token itself: shown only in this response, stored hashed")

    class Meta(TokenOutput.Meta):
        fields = TokenOutput.Meta.fields + ["token"]


class RenameInput(serializers.Serializer):
    name = serializers.CharField(max_length=200, allow_blank=True)


class CuratedOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    archived_at = serializers.DateTimeField(allow_null=True)
    deleted_at = serializers.DateTimeField(allow_null=True)


class DependentOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    created_by = serializers.CharField()


class DependentsOutput(serializers.Serializer):
    jobs = DependentOutput(many=True, required=False)
    plans = DependentOutput(many=True, required=False)
    runs = DependentOutput(many=True, required=False)


class SpecOutput(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username")

    class Meta:
        model = ModelSpecRecord
        fields = ["id", "team", "owner", "name", "source_filename", "num_layers", "created_at", "archived_at"]


class SpecDetailOutput(SpecOutput):
    class Meta(SpecOutput.Meta):
        fields = SpecOutput.Meta.fields + ["doc"]


class SpecCreateInput(serializers.Serializer):
    team = serializers.IntegerField(required=False, help_text="defaults to your only team")
    file = serializers.FileField(required=False, help_text="adaptis.model/v1 JSON/YAML or a HF config.json")
    doc = serializers.JSONField(required=False, help_text="the same document inline, instead of a file")
    name = serializers.CharField(required=False, allow_blank=True, max_length=200)

    def validate(self, attrs):
        if ("file" in attrs) == ("doc" in attrs):
            raise serializers.ValidationError({"file": "give exactly one of 'file' (upload) or 'doc' (inline)"})
        return attrs


class JobCreateInput(serializers.Serializer):
    spec = serializers.IntegerField(help_text="id of a spec of one of your teams")
    cluster_preset = serializers.CharField(required=False, allow_blank=True, default="")
    cluster = serializers.JSONField(required=False, help_text="a custom adaptis.cluster/v1 document")
    num_devices = serializers.IntegerField()
    num_microbatches = serializers.IntegerField()
    schedule = serializers.ChoiceField(choices=JOB_SCHEDULES, default=DEFAULT_SCHEDULE,
                                       help_text='"adaptis" searches partition, placement and schedule and compares '
                                                 "the result with every baseline; the others build that baseline")
    partition = serializers.ChoiceField(choices=PARTITIONS, default=DEFAULT_PARTITION,
                                        help_text="baselines only: the search chooses its own")
    seed = serializers.IntegerField(default=0, help_text=f"search only: 0 .. {MAX_SEED}")
    time_budget_s = serializers.FloatField(default=DEFAULT_TIME_BUDGET_S,
                                           help_text=f"search only: {MIN_TIME_BUDGET_S:g} .. {MAX_TIME_BUDGET_S:g}")
    memory_limit_bytes = serializers.IntegerField(allow_null=True, default=None,
                                                  help_text="search only: per device; default the device memory")


class JobPlanOutput(serializers.ModelSerializer):
    class Meta:
        model = Plan
        fields = ["id", "name", "strategy", "iteration_ms", "bubble_ratio"]


class JobOutput(serializers.ModelSerializer):
    spec_name = serializers.CharField(source="spec.name")
    created_by = serializers.CharField(source="created_by.username")
    plans = JobPlanOutput(many=True, read_only=True, help_text="newest first: a search's own plan comes first")

    class Meta:
        model = PlanningJob
        fields = ["id", "name", "spec", "spec_name", "created_by", "cluster_preset", "num_devices",
                  "num_microbatches", "schedule", "partition", "seed", "time_budget_s", "memory_limit_bytes",
                  "status", "progress", "progress_message", "cancel_requested", "error", "plans", "created_at",
                  "started_at", "finished_at", "archived_at"]


class PlanListOutput(serializers.ModelSerializer):
    spec_name = serializers.CharField(source="job.spec.name")
    created_by = serializers.CharField(source="job.created_by.username")

    class Meta:
        model = Plan
        fields = ["id", "name", "job", "spec_name", "created_by", "strategy", "layout", "iteration_ms",
                  "bubble_ratio", "created_at", "archived_at"]


class JobDetailOutput(JobOutput):
    cluster = serializers.JSONField(source="cluster_doc")
    result = serializers.JSONField(help_text="a search's summary: iteration_ms, lower_bound_ms, lower_bound, gap, "
                                             "stats, candidates, baselines (with adaptis_speedup and plan_id); "
                                             "empty for a baseline job")
    calibration = serializers.JSONField(help_text="for a job planned with a profile calibrated from a run: run_id, "
                                                  "plan_id, observed_iteration_ms, predicted_before_ms, "
                                                  "predicted_compute_calibrated_ms, predicted_after_ms, "
                                                  "message_overhead_us (measured, or null with message_overhead_note "
                                                  "saying why not), observed_actions, scaled_down; else empty")

    class Meta(JobOutput.Meta):
        fields = JobOutput.Meta.fields + ["cluster", "result", "calibrated_from", "calibration", "measured_profile"]


class PlanOutput(serializers.ModelSerializer):
    plan = serializers.JSONField(source="plan_doc")
    profile = serializers.JSONField(source="profile_doc")
    simulation = serializers.SerializerMethodField(
        help_text="the simulator's output: metrics, per_device, timeline and transfers (simulated on request)")

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_simulation(self, plan: Plan) -> dict:
        return plan_prediction(plan)

    class Meta:
        model = Plan
        fields = ["id", "name", "job", "strategy", "layout", "schedule_summary", "iteration_ms", "bubble_ratio",
                  "plan", "simulation", "profile", "created_at", "archived_at"]


class RunCreateInput(serializers.Serializer):
    plan = serializers.IntegerField(help_text="id of a plan of one of your teams")
    steps = serializers.IntegerField(default=1)
    scale_down = serializers.BooleanField(default=False,
                                          help_text="run a CPU-sized copy with the same layer pattern")


class RunOutput(serializers.ModelSerializer):
    event_count = serializers.SerializerMethodField()
    created_by = serializers.CharField(source="created_by.username")

    class Meta:
        model = Run
        fields = ["id", "name", "plan", "created_by", "status", "cancel_requested", "backend", "world_size", "steps",
                  "scaled_down", "error", "summary", "loss", "balancing_loss", "event_count", "executed_spec", "created_at",
                  "started_at", "finished_at", "archived_at"]

    def get_event_count(self, run: Run) -> int:
        annotated = getattr(run, "event_count", None)  # run_list_for_user annotates it: no query per row
        return annotated if annotated is not None else run.events.count()


class RunEventOutput(serializers.ModelSerializer):
    class Meta:
        model = RunEvent
        fields = ["seq", "rank", "device", "action", "stage", "kind", "microbatch", "step", "start_ms", "end_ms"]


class RunEventsOutput(serializers.Serializer):
    run = serializers.IntegerField()
    status = serializers.CharField()
    finished = serializers.BooleanField()
    last_seq = serializers.IntegerField(help_text="pass it as 'after' to get only newer events")
    events = RunEventOutput(many=True)


class RunEventsQuery(serializers.Serializer):
    after = serializers.IntegerField(min_value=0, default=0)
    limit = serializers.IntegerField(min_value=1, max_value=RUN_EVENTS_PAGE, default=RUN_EVENTS_PAGE)


class MeasuredProfileCreateInput(serializers.Serializer):
    num_ranks = serializers.IntegerField(default=2, help_text="profilers at once, one per rank of the runs to predict")
    split_backward = serializers.BooleanField(default=False, help_text="time I and W apart (zero-bubble ranks)")
    plan = serializers.IntegerField(required=False, allow_null=True, default=None,
                                    help_text="a plan of this spec: also time its stages as its ranks run them "
                                              "(num_ranks is then its devices)")


class MeasuredProfileOutput(serializers.ModelSerializer):
    profile = serializers.JSONField(source="profile_doc", help_text="adaptis.profile/v1 once measured, else null")

    class Meta:
        model = MeasuredProfile
        fields = ["id", "spec", "plan", "num_ranks", "split_backward", "status", "host", "error", "profile",
                  "created_at", "started_at", "finished_at"]
