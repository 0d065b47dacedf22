"""API input and output shapes. Inputs only check types; the business rules live in the services."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers
from rest_framework.utils import html

from django.conf import settings
from django.core.validators import RegexValidator

from adaptis_web.studio.api.plain_output import PlainOutputMixin
from adaptis_web.studio.api.renderers import RawJSON
from adaptis_web.studio.url_converters import MAX_ID
from adaptis_web.studio.models import (ApiToken, ClusterRecord, Invitation, JobMode, MeasuredProfile, Membership,
                                       ModelSpecRecord, Plan,
                                       PlanningJob, Run, RunEvent, Team)
from adaptis_web.studio.selectors import RUN_EVENT_FIELDS, RUN_EVENTS_PAGE
from adaptis_web.studio.services.plan_json import plan_json
from adaptis_web.studio.services.jobs import DEFAULT_PARTITION, DEFAULT_SCHEDULE, JOB_SCHEDULES
from adaptis_web.studio.services.search import DEFAULT_TIME_BUDGET_S, MAX_SEED, MAX_TIME_BUDGET_S, MIN_TIME_BUDGET_S
from adaptis_web.studio.services.jobs import MAX_MICROBATCHES
from adaptis_web.studio.services.hybrid import MAX_GLOBAL_BATCH, MAX_GPUS, MAX_SEQ_LEN
from adaptis_web.studio.services.teams import GRANTABLE_ROLES, MAX_RUN_ENVIRONMENT, NOT_ONE_LINE
from adaptis_web.studio.services.profiling import MAX_PROFILE_RANKS
from adaptis_web.studio.services.runs import DEFAULT_RUN_STEPS, MAX_RUN_STEPS
from planner.service import ACCELERATORS, MAX_PIPELINE_DEVICES, PARTITIONS, RANGES, RECOMPUTE_MODES, preset_names


NO_NUL = RegexValidator(r"^[^\x00]*$", "must not contain a NUL character")


class StrictCharField(serializers.CharField):
    """Text in a request must be sent as text: DRF's CharField turns 867 into "867", which the schema (a string)
    says is invalid. And its length is the length sent, as the schema's maxLength counts it: DRF counts it after
    taking the white space around it away."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if not any(isinstance(validator, RegexValidator) for validator in self.validators):
            self.validators.append(NO_NUL)  # refused anyway by DRF; the pattern puts it in the schema

    def run_validation(self, data=serializers.empty):
        if isinstance(data, str) and self.max_length is not None and len(data) > self.max_length:
            self.fail("max_length", max_length=self.max_length)  # before a text of white space is taken as blank
        return super().run_validation(data)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """true or false (as JSON, or as the words in a form): DRF's BooleanField also takes 0, 1, "yes", "on"...,
    which the schema (a boolean) says are invalid."""

    def to_internal_value(self, data):
        if isinstance(data, bool):  # not ``data in (True, False)``: 0 == False and 1 == True
            return data
        if isinstance(data, str) and data in ("true", "false"):
            return data == "true"
        self.fail("invalid", input=data)


class FormNullMixin:
    """A field that may be null: JSON's null, or in a form (where every value is text) the word "null" or
    nothing, as DRF already reads an empty one."""

    def get_value(self, dictionary):
        value = super().get_value(dictionary)
        if self.allow_null and html.is_html_input(dictionary) and value == "null":
            return None
        return value


class OptionalIntegerField(FormNullMixin, serializers.IntegerField):
    pass


class OptionalChoiceField(FormNullMixin, serializers.ChoiceField):
    pass


class OptionalBooleanField(FormNullMixin, StrictBooleanField):
    pass


@extend_schema_field(OpenApiTypes.OBJECT)
class DocumentField(serializers.JSONField):
    """A JSON document in a request (a model, a cluster, a plan): an object, as its schema says; DRF's JSONField
    takes any JSON value. In a form, the document's JSON text."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if not isinstance(value, dict):
            self.fail("not_a_document", type=type(value).__name__)
        return value

    default_error_messages = {"not_a_document": "must be a JSON object (a document), not {type}"}


def IdField(**kwargs) -> serializers.IntegerField:  # noqa: N802 — a field, named like one
    """A row id in a request: a positive 64-bit integer (past 2^63 the database driver fails)."""
    field = OptionalIntegerField if kwargs.get("allow_null") else serializers.IntegerField
    return field(min_value=1, max_value=MAX_ID, **kwargs)

class TeamOutput(serializers.ModelSerializer):
    role = serializers.SerializerMethodField()

    class Meta:
        model = Team
        fields = ["id", "name", "role"]

    def get_role(self, team: Team) -> str:
        user = self.context["request"].user
        return next(m.role for m in team.memberships.all() if m.user_id == user.pk)


# The characters Python's str.strip() takes away (str.isspace()), which DRF does to text before it checks it, spelt
# out: \s means other characters in Python than in the schema's regular expressions (ECMA 262: not \x1c-\x1f or
# \x85, but \ufeff), and takes NUL along with it.
WHITE_SPACE = r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
NOT_BLANK = RegexValidator(rf"^[^\x00]*[^\x00{WHITE_SPACE}][^\x00]*$",
                           "must contain a character other than white space, and no NUL")


class TeamCreateInput(serializers.Serializer):
    name = StrictCharField(max_length=100, validators=[NOT_BLANK])


class SingleLineCharField(StrictCharField):
    """One line of text, not blank: no line break or other control character (a tab is fine) anywhere in what was
    sent, checked before the white space around it is taken away, as the schema's pattern says."""

    default_error_messages = {"not_one_line": "must be a single line (no line breaks or other control characters)"}

    def run_validation(self, data=serializers.empty):
        if isinstance(data, str) and NOT_ONE_LINE.search(data):
            self.fail("not_one_line")
        return super().run_validation(data)


ONE_LINE = RegexValidator(
    rf"^[^\x00-\x08\x0a-\x1f\x7f]*[^\x00-\x1f\x7f{WHITE_SPACE}][^\x00-\x08\x0a-\x1f\x7f]*$",
    "must be a single line with a character other than white space")


class TeamUpdateInput(serializers.Serializer):
    name = StrictCharField(max_length=100, validators=[NOT_BLANK], required=False, help_text="rename the team")
    run_environment = SingleLineCharField(
        max_length=MAX_RUN_ENVIRONMENT, validators=[ONE_LINE], required=False,
        help_text="the shell line that readies the executor on every node of the team's cluster runs (a virtual "
                  "environment, a module load), or image:NAME, the container image of their Kubernetes PyTorchJob; "
                  "a run's own environment overrides it")


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
        fields = ["id", "name", "created_at", "run_environment", "members"]


class MemberAddInput(serializers.Serializer):
    username = StrictCharField(validators=[NOT_BLANK])
    role = serializers.ChoiceField(choices=GRANTABLE_ROLES, default=Membership.Role.MEMBER,
                                   help_text="the owner's role moves only by a transfer")


class MemberRoleInput(serializers.Serializer):
    role = serializers.ChoiceField(choices=GRANTABLE_ROLES, help_text="the owner's role moves only by a transfer")


class TransferInput(serializers.Serializer):
    user_id = IdField(help_text="the member who becomes the owner; you stay on as an admin")


class InvitationCreateInput(serializers.Serializer):
    role = serializers.ChoiceField(choices=GRANTABLE_ROLES, default=Membership.Role.MEMBER,
                                   help_text="the owner's role moves only by a transfer")


class InvitationOutput(serializers.ModelSerializer):
    url = serializers.CharField(help_text="the single-use link; shown only in this response")

    class Meta:
        model = Invitation
        fields = ["id", "team", "role", "expires_at", "url"]


class TokenCreateInput(serializers.Serializer):
    name = StrictCharField(max_length=100, validators=[NOT_BLANK])
    expires_in_days = serializers.IntegerField(default=30, min_value=1, max_value=settings.API_TOKEN_MAX_DAYS)


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
    name = StrictCharField(max_length=200, allow_blank=True, help_text="empty: the page shows the id")


@extend_schema_field({"type": "string", "maxLength": 200, "pattern": NOT_BLANK.regex.pattern})
class RequiredNameField(StrictCharField):
    """The schema says what services.curation.object_rename refuses (white space alone), which says so naming the
    kind; the text reaches it as sent."""

    def __init__(self, **kwargs):
        super().__init__(trim_whitespace=False, error_messages={"blank": "is required"}, **kwargs)


class RequiredNameInput(serializers.Serializer):
    """A spec's or a saved cluster's new name: one is required (jobs, plans and runs may have none)."""

    name = RequiredNameField(max_length=200)


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


class SpecOutput(PlainOutputMixin, serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username")

    class Meta:
        model = ModelSpecRecord
        fields = ["id", "team", "owner", "name", "source_filename", "num_layers", "created_at", "archived_at"]


class SpecWarningOutput(serializers.Serializer):
    field = serializers.CharField(help_text="where in the uploaded document: file.num_hiden_layers")
    reason = serializers.CharField()


class SpecDetailOutput(SpecOutput):
    warnings = SpecWarningOutput(many=True, read_only=True,
                                 help_text="what the upload was accepted with but probably not as meant (a HF "
                                           "config's misspelt key, whose default was used instead)")

    class Meta(SpecOutput.Meta):
        fields = SpecOutput.Meta.fields + ["doc", "warnings"]


def document_create_schemas(*, doc: str, file: str) -> dict:
    """The request schemas of an upload (a spec, a cluster): exactly one of the document's two ways in, said in the
    schema per media type: a file in a form, or the document in JSON."""
    common = {"team": {"type": "integer", "minimum": 1, "maximum": 2**63 - 1,
                       "description": "defaults to your only team"},
              "name": {"type": "string", "maxLength": 200, "pattern": "^[^\\x00]*$",
                       "description": "defaults to the document's name"}}
    return {"application/json": {"type": "object", "required": ["doc"], "properties": {
                **common, "doc": {"type": "object", "description": f"{doc}, inline"}}},
            "multipart/form-data": {"type": "object", "required": ["file"], "properties": {
                **common, "file": {"type": "string", "format": "binary", "description": file}}}}


SPEC_CREATE_SCHEMAS = document_create_schemas(doc="an adaptis.model/v1 document or a HF config.json",
                                              file="adaptis.model/v1 JSON/YAML or a HF config.json")
CLUSTER_CREATE_SCHEMAS = document_create_schemas(doc="an adaptis.cluster/v1 document",
                                                 file="adaptis.cluster/v1 as JSON or YAML")


class SpecCreateInput(serializers.Serializer):
    team = IdField(required=False, help_text="defaults to your only team")
    file = serializers.FileField(required=False, help_text="adaptis.model/v1 JSON/YAML or a HF config.json")
    doc = DocumentField(required=False, help_text="the same document inline, instead of a file")
    name = StrictCharField(required=False, allow_blank=True, max_length=200)

    def validate(self, attrs):
        if ("file" in attrs) == ("doc" in attrs):
            raise serializers.ValidationError({"file": "give exactly one of 'file' (upload) or 'doc' (inline)"})
        return attrs


class ClusterOutput(PlainOutputMixin, serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username")

    class Meta:
        model = ClusterRecord
        fields = ["id", "team", "owner", "name", "source_filename", "num_devices", "device_name", "created_at",
                  "archived_at"]


class ClusterDetailOutput(ClusterOutput):
    doc = serializers.JSONField(help_text="the adaptis.cluster/v1 document")

    class Meta(ClusterOutput.Meta):
        fields = ClusterOutput.Meta.fields + ["doc"]


class ClusterCreateInput(serializers.Serializer):
    team = IdField(required=False, help_text="defaults to your only team")
    file = serializers.FileField(required=False, help_text="adaptis.cluster/v1 as JSON or YAML")
    doc = DocumentField(required=False, help_text="the same document inline, instead of a file")
    name = StrictCharField(required=False, allow_blank=True, max_length=200,
                           help_text="defaults to the document's name")

    def validate(self, attrs):
        if ("file" in attrs) == ("doc" in attrs):
            raise serializers.ValidationError({"file": "give exactly one of 'file' (upload) or 'doc' (inline)"})
        return attrs


def _pin(help_text: str, limit: int = MAX_GPUS) -> serializers.IntegerField:
    return OptionalIntegerField(required=False, allow_null=True, default=None, min_value=1, max_value=limit,
                                    help_text=f"hybrid only, optional: {help_text}; empty lets the search choose")


# Exactly the names planner.cluster.is_cluster_preset accepts (planner.limits bounds a named cluster's nodes at
# 2^17 and its GPUs per node at 2^10), or empty when another cluster is given.
NODES = "0*(?:[1-9][0-9]{0,4}|1[0-2][0-9]{4}|130[0-9]{3}|1310[0-6][0-9]|13107[0-2])"
GPUS_PER_NODE = "0*(?:[1-9][0-9]{0,2}|10[01][0-9]|102[0-4])"
CLUSTER_PRESET_PATTERN = (f"^(?:{'|'.join(preset_names())}|(?:{'|'.join(ACCELERATORS)})-{NODES}x{GPUS_PER_NODE})?$")


@extend_schema_field({"type": "string", "pattern": CLUSTER_PRESET_PATTERN})
class ClusterPresetField(StrictCharField):
    """A cluster preset's name, as sent: the schema states which (the planner's refusal names the known ones)."""

    def __init__(self, **kwargs):
        super().__init__(trim_whitespace=False, **kwargs)


# What JSON Schema can say of a job beyond its fields (api.schema.document_request_rules adds it to the schema)
JOB_CREATE_RULES = {"allOf": [
    {"description": "one cluster: a preset, a custom document or a saved cluster",
     "oneOf": [{"required": ["cluster_preset"], "properties": {"cluster_preset": {"minLength": 1}}},
               {"required": ["cluster"]},
               {"required": ["saved_cluster"], "properties": {"saved_cluster": {"type": "integer"}}}]},
    {"description": "a pipeline job takes num_devices and num_microbatches, a hybrid job gpus, seq_len and "
                   "global_batch",
     "oneOf": [{"required": ["num_devices", "num_microbatches"], "properties": {"mode": {"enum": ["pipeline"]}}},
               {"required": ["mode", "gpus", "seq_len", "global_batch"],
                "properties": {"mode": {"enum": ["hybrid"]}, "gpus": {"type": "integer"},
                               "seq_len": {"type": "integer"}, "global_batch": {"type": "integer"}}}]},
]}


class JobCreateInput(serializers.Serializer):
    spec = IdField(help_text="id of a spec of one of your teams")
    mode = serializers.ChoiceField(choices=JobMode.choices, default=JobMode.PIPELINE,
                                   help_text='"pipeline": plan the pipeline of num_devices devices (the fields below '
                                             'up to memory_limit_bytes); "hybrid": choose TP, CP, PP, DP, EP, '
                                             "micro-batch size and recomputation for gpus GPUs (gpus, seq_len, "
                                             "global_batch and the optional pins)")
    cluster_preset = ClusterPresetField(required=False, allow_blank=True, default="",
                                        help_text="a preset file (see /api/presets/) or a named cluster "
                                                  "'<device>-<nodes>x<gpus per node>', e.g. h100-sxm-1024x8")
    cluster = DocumentField(required=False, help_text="a custom adaptis.cluster/v1 document")
    saved_cluster = IdField(required=False, allow_null=True, default=None,
                            help_text="id of a saved cluster of the spec's team (/api/clusters/)")
    num_devices = serializers.IntegerField(required=False, min_value=1, max_value=MAX_PIPELINE_DEVICES,
                                           help_text="pipeline only (required there): devices, at most the "
                                                     "cluster's")
    num_microbatches = serializers.IntegerField(required=False, min_value=1, max_value=MAX_MICROBATCHES,
                                                help_text="pipeline only (required there)")
    schedule = serializers.ChoiceField(choices=JOB_SCHEDULES, default=DEFAULT_SCHEDULE,
                                       help_text='"adaptis" searches partition, placement and schedule and compares '
                                                 "the result with every baseline; the others build that baseline")
    partition = serializers.ChoiceField(choices=PARTITIONS, default=DEFAULT_PARTITION,
                                        help_text="baselines only: the search chooses its own")
    seed = serializers.IntegerField(default=0, min_value=0, max_value=MAX_SEED, help_text="search only")
    time_budget_s = serializers.FloatField(default=DEFAULT_TIME_BUDGET_S, min_value=MIN_TIME_BUDGET_S,
                                           max_value=MAX_TIME_BUDGET_S,
                                           help_text="search and hybrid (a hybrid job's bounds the AdaPtis search "
                                                     "inside its best configurations)")
    memory_limit_bytes = OptionalIntegerField(allow_null=True, default=None, min_value=1,
                                                  max_value=int(RANGES["memory_bytes"][1]),
                                                  help_text="search only: per device; default the device memory")
    gpus = OptionalIntegerField(required=False, allow_null=True, default=None, min_value=1, max_value=MAX_GPUS,
                                    help_text="hybrid only (required there): GPUs of the training job")
    seq_len = OptionalIntegerField(required=False, allow_null=True, default=None, min_value=1,
                                       max_value=MAX_SEQ_LEN, help_text="hybrid only (required there): tokens per "
                                                                        "sequence")
    global_batch = OptionalIntegerField(required=False, allow_null=True, default=None, min_value=1,
                                            max_value=MAX_GLOBAL_BATCH,
                                            help_text="hybrid only (required there): sequences per step")
    tp = _pin("tensor-parallel degree (with sequence parallelism)")
    cp = _pin("context-parallel degree")
    pp = _pin("pipeline ranks")
    dp = _pin("data-parallel degree")
    ep = _pin("expert-parallel degree (carved out of dp x cp)")
    microbatch_size = _pin("sequences per micro-batch", MAX_GLOBAL_BATCH)
    recompute = OptionalChoiceField(choices=RECOMPUTE_MODES, required=False, allow_null=True, default=None,
                                    help_text="hybrid only, optional: activation recomputation on every stage")
    distributed_optimizer = OptionalBooleanField(required=False, allow_null=True, default=None,
                                                 help_text="hybrid only: ZeRO-1 over DP (default true)")

    PINS = ("tp", "cp", "pp", "dp", "ep", "microbatch_size", "recompute", "distributed_optimizer")

    def pins(self) -> dict:
        return {key: self.validated_data[key] for key in self.PINS if self.validated_data[key] is not None}


class JobPlanOutput(PlainOutputMixin, serializers.ModelSerializer):
    parent = serializers.IntegerField(source="parent_id", allow_null=True,
                                      help_text="the plan this one was edited from; null for a plan the job made")

    class Meta:
        model = Plan
        fields = ["id", "name", "strategy", "iteration_ms", "bubble_ratio", "parent"]


class JobOutput(PlainOutputMixin, serializers.ModelSerializer):
    spec_name = serializers.CharField(source="spec.name")
    created_by = serializers.CharField(source="created_by.username")
    plan = serializers.IntegerField(source="own_plan.pk", allow_null=True, default=None, read_only=True,
                                    help_text="the plan this job made (a search's AdaPtis plan); plans edited from "
                                              "it never take its place; null until the job has planned")
    plans = JobPlanOutput(source="plans_own_first", many=True, read_only=True,
                          help_text="the job's own plan first, then the plans stored beside it (a search's "
                                    "baselines) and those edited from them, newest first")
    saved_cluster = serializers.IntegerField(source="cluster_record_id", allow_null=True,
                                             help_text="the saved cluster it was planned on, if any")
    num_devices = serializers.IntegerField(help_text="pipeline devices; a hybrid job's GPUs")
    num_microbatches = serializers.IntegerField(help_text="0 for a hybrid job: the search chooses them")
    pins = serializers.JSONField(help_text="hybrid: the pinned tp, cp, pp, dp, ep, microbatch_size, recompute, "
                                           "distributed_optimizer")
    analytic_profile_reason = serializers.CharField(
        help_text="why this job on cpu-host planned on the analytic profile instead of one measured on the runs' host "
                  "(measuring it failed, or the runs' host does not measure this model); empty when it did not")

    class Meta:
        model = PlanningJob
        fields = ["id", "name", "spec", "spec_name", "created_by", "mode", "cluster_preset", "saved_cluster",
                  "num_devices", "num_microbatches", "schedule", "partition", "seed", "time_budget_s",
                  "memory_limit_bytes", "gpus", "seq_len", "global_batch", "pins", "status", "progress",
                  "progress_message", "cancel_requested", "error", "analytic_profile_reason", "plan", "plans",
                  "created_at",
                  "started_at", "finished_at", "archived_at"]


class PlanListOutput(PlainOutputMixin, serializers.ModelSerializer):
    spec_name = serializers.CharField(source="job.spec.name")
    created_by = serializers.CharField(source="job.created_by.username")

    class Meta:
        model = Plan
        fields = ["id", "name", "job", "spec_name", "created_by", "strategy", "layout", "iteration_ms",
                  "bubble_ratio", "created_at", "archived_at"]


class HybridPredictedOutput(serializers.Serializer):
    iteration_ms = serializers.FloatField(help_text="one training step: pipeline + exposed DP + optimizer")
    pipeline_ms = serializers.FloatField()
    data_parallel_exposed_ms = serializers.FloatField()
    optimizer_ms = serializers.FloatField()
    tokens_per_s = serializers.FloatField()
    mfu = serializers.FloatField(help_text="model FLOPs (no recomputation) over the GPUs' dense BF16 peak")
    hardware_tflops_per_gpu = serializers.FloatField(help_text="every executed FLOP, recomputation included")
    peak_memory_bytes = serializers.IntegerField(help_text="the fullest GPU")
    fits = serializers.BooleanField()
    schedule = serializers.CharField(help_text="1f1b, interleaved-1f1b or adaptis")
    chunks = serializers.IntegerField()
    estimated = serializers.BooleanField(help_text="true: the closed form's estimate, not a simulated pipeline")


class HybridMemoryOutput(serializers.Serializer):
    pipeline_rank = serializers.IntegerField()
    params_bytes = serializers.IntegerField()
    gradients_bytes = serializers.IntegerField()
    optimizer_bytes = serializers.IntegerField()
    activations_bytes = serializers.IntegerField()
    buffers_bytes = serializers.IntegerField()
    overhead_bytes = serializers.IntegerField()
    total_bytes = serializers.IntegerField()
    capacity_bytes = serializers.IntegerField()
    fits = serializers.BooleanField()


class HybridScoreOutput(serializers.Serializer):
    parallel = serializers.JSONField(help_text="tp, cp, pp, dp, ep, microbatch_size, num_microbatches, recompute "
                                               "(a mode, or one per stage), distributed_optimizer")
    short = serializers.CharField(help_text='e.g. "TP2 CP4 PP4 DP2 EP4 mbs8 m32 none ZeRO-1"')
    predicted = HybridPredictedOutput()
    memory = HybridMemoryOutput(many=True, help_text="one GPU of each pipeline rank (all its GPUs hold the same)")


class RankOutput(serializers.Serializer):
    gpu = serializers.IntegerField()
    node = serializers.IntegerField()
    tp = serializers.IntegerField()
    cp = serializers.IntegerField()
    dp = serializers.IntegerField()
    pp = serializers.IntegerField()
    ep = serializers.IntegerField()


class RankMappingOutput(serializers.Serializer):
    order = serializers.CharField(help_text="tp-cp-dp-pp: Megatron's, tp fastest")
    gpus_per_node = serializers.IntegerField()
    nvlink_domain = serializers.IntegerField()
    groups = serializers.JSONField(help_text="tp, cp, dp, ep, edp, pp: size, per_domain, crosses_domains, "
                                             "ring_bandwidth_gb_s")
    ranks = RankOutput(many=True, help_text="the first 1,024 GPUs' coordinates (every GPU of a smaller job); GPU "
                                            "r = tp + TP·(cp + CP·(dp + DP·pp))")


class HybridBestOutput(HybridScoreOutput):
    rank_mapping = RankMappingOutput()
    plan_id = serializers.IntegerField(help_text="the stored adaptis.plan/v2 plan (/api/plans/ID/)")
    layout = serializers.CharField()


class HybridResultOutput(serializers.Serializer):
    best = HybridBestOutput()
    runners_up = HybridScoreOutput(many=True)
    considered = serializers.IntegerField(help_text="configurations scored")
    pruned_by_memory = serializers.IntegerField()
    seconds = serializers.FloatField()
    stats = serializers.JSONField()
    cancelled = serializers.BooleanField(help_text="cancelled while searching: best is the best simulated so far")


class SearchResultOutput(serializers.Serializer):
    iteration_ms = serializers.FloatField()
    bubble_ratio = serializers.FloatField()
    peak_memory_bytes = serializers.IntegerField()
    lower_bound_ms = serializers.FloatField()
    lower_bound = serializers.JSONField()
    gap = serializers.FloatField()
    stats = serializers.JSONField()
    candidates = serializers.JSONField()
    baselines = serializers.JSONField(help_text="per baseline: its metrics, adaptis_speedup and plan_id")
    plan_id = serializers.IntegerField()
    cancelled = serializers.BooleanField()


class JobDetailOutput(JobOutput):
    cluster = serializers.JSONField(source="cluster_doc")
    result = serializers.SerializerMethodField(
        help_text="a pipeline search's summary (SearchResult), a hybrid job's (HybridResult); empty for a baseline "
                  "job and until the job succeeds")

    @extend_schema_field(PolymorphicProxySerializer(component_name="JobResult", resource_type_field_name=None,
                                                    serializers=[SearchResultOutput, HybridResultOutput]))
    def get_result(self, job: PlanningJob) -> dict:
        return job.result
    calibration = serializers.JSONField(help_text="for a job planned with a profile calibrated from a run: run_id, "
                                                  "plan_id, observed_iteration_ms, predicted_before_ms, "
                                                  "predicted_compute_calibrated_ms, predicted_after_ms, "
                                                  "message_overhead_us (measured, or null with message_overhead_note "
                                                  "saying why not), observed_actions, scaled_down; else empty")

    class Meta(JobOutput.Meta):
        fields = JobOutput.Meta.fields + ["cluster", "result", "calibrated_from", "calibration", "measured_profile"]


class PlanDocumentField(serializers.JSONField):
    """One of a plan's documents, sent as the JSON text services.plan_json keeps (api.renderers.RawJSON)."""

    def __init__(self, document: str, **kwargs):
        super().__init__(source="*", **kwargs)
        self.document = document

    def to_representation(self, plan: Plan) -> RawJSON:
        return RawJSON(getattr(plan_json(plan), self.document))


class PlanOutput(serializers.ModelSerializer):
    plan = PlanDocumentField("plan")
    profile = PlanDocumentField("profile")
    simulation = serializers.SerializerMethodField(
        help_text="the simulator's output: metrics, per_device, timeline and transfers (simulated on request)")

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_simulation(self, plan: Plan) -> RawJSON:
        return RawJSON(plan_json(plan).simulation)

    class Meta:
        model = Plan
        fields = ["id", "name", "job", "strategy", "layout", "schedule_summary", "iteration_ms", "bubble_ratio",
                  "plan", "simulation", "profile", "created_at", "archived_at", "parent"]


class RunCreateInput(serializers.Serializer):
    plan = IdField(help_text="id of a plan of one of your teams")
    steps = serializers.IntegerField(default=DEFAULT_RUN_STEPS, min_value=1, max_value=MAX_RUN_STEPS,
                                     help_text="training steps; the first warms up, the rest show the steady state")
    scale_down = StrictBooleanField(default=False,
                                          help_text="run a CPU-sized copy with the same layer pattern")
    target = serializers.ChoiceField(choices=["local", "cluster"], default="local",
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


class IngestBatchInput(serializers.Serializer):
    events = serializers.ListField(child=serializers.DictField(), min_length=1, max_length=1000,
                                   help_text="executor events (executor.events): actions and the run's lifecycle")


class IngestOutput(serializers.Serializer):
    stored = serializers.IntegerField()
    duplicates = serializers.IntegerField(help_text="actions already stored (a retried batch)")
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
    """The shape of an event; the events endpoint sends ``selectors.run_event_rows_after``'s rows, which have it."""

    class Meta:
        model = RunEvent
        fields = list(RUN_EVENT_FIELDS)


class RunEventsOutput(serializers.Serializer):
    run = serializers.IntegerField()
    status = serializers.CharField()
    finished = serializers.BooleanField()
    last_seq = serializers.IntegerField(help_text="pass it as 'after' to get only newer events")
    events = RunEventOutput(many=True)


class RunEventsQuery(serializers.Serializer):
    after = serializers.IntegerField(min_value=0, max_value=MAX_ID, default=0, help_text="only events with a larger seq")
    limit = serializers.IntegerField(min_value=1, max_value=RUN_EVENTS_PAGE, default=RUN_EVENTS_PAGE,
                                     help_text="at most this many")


class MeasuredProfileCreateInput(serializers.Serializer):
    num_ranks = serializers.IntegerField(default=2, min_value=1, max_value=MAX_PROFILE_RANKS, help_text="profilers at once, one per rank of the runs to predict")
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
