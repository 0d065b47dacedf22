"""API input and output shapes of jobs and plans (a search's and a hybrid job's results)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers

from adaptis_web.studio.api.fields import (ChoiceField, DocumentField, IdField, KnownFieldsMixin, OptionalBooleanField,
                                           OptionalChoiceField, OptionalIntegerField, StrictCharField)
from adaptis_web.studio.api.plain_output import PlainOutputMixin
from adaptis_web.studio.api.renderers import RawJSON
from adaptis_web.studio.models import JobMode, Plan, PlanningJob
from adaptis_web.studio.planning.hybrid import MAX_GLOBAL_BATCH, MAX_GPUS, MAX_SEQ_LEN
from adaptis_web.studio.planning.jobs import DEFAULT_PARTITION, DEFAULT_SCHEDULE, JOB_SCHEDULES, MAX_MICROBATCHES
from adaptis_web.studio.planning.plan_json import plan_json
from adaptis_web.studio.planning.search import DEFAULT_TIME_BUDGET_S, MAX_SEED, MAX_TIME_BUDGET_S, MIN_TIME_BUDGET_S
from planner.service import (ACCELERATORS, DEFAULT_RECOMPUTE_MODULES, EP_DISPATCHERS, EP_DISPATCHERS_TEXT, FRAMEWORKS,
                             FRAMEWORKS_TEXT, MAX_GPU_COUNTS,
                             MAX_PIPELINE_DEVICES, MAX_TOKEN_BUDGET, PARTITIONS, PRECISIONS, RANGES, RECOMPUTE_MODES,
                             RECOMPUTE_MODULES_TEXT, SHARDING_MODES,
                             STEP_PARTS, preset_names)


def _pin(help_text: str, limit: int = MAX_GPUS) -> serializers.IntegerField:
    return OptionalIntegerField(required=False, allow_null=True, default=None, min_value=1, max_value=limit,
                                    help_text=f"hybrid only, optional: {help_text}; empty lets the search choose")


# Exactly the names planner.cluster.is_cluster_preset accepts (planner.limits bounds a named cluster's nodes at
# 2^17 and its GPUs per node at 2^10; cpu-<hosts>x<ranks> is the cpu-host preset with that many local ranks), or
# empty when another cluster is given.
NODES = "0*(?:[1-9][0-9]{0,4}|1[0-2][0-9]{4}|130[0-9]{3}|1310[0-6][0-9]|13107[0-2])"
GPUS_PER_NODE = "0*(?:[1-9][0-9]{0,2}|10[01][0-9]|102[0-4])"
CLUSTER_PRESET_PATTERN = (f"^(?:{'|'.join(preset_names())}|(?:{'|'.join([*ACCELERATORS, 'cpu'])})-{NODES}x"
                          f"{GPUS_PER_NODE})?$")


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
                   "global_batch, a capacity job token_budget, seq_len and global_batch (gpu_counts optional)",
     "oneOf": [{"required": ["num_devices", "num_microbatches"], "properties": {"mode": {"enum": ["pipeline"]}}},
               {"required": ["mode", "gpus", "seq_len", "global_batch"],
                "properties": {"mode": {"enum": ["hybrid"]}, "gpus": {"type": "integer"},
                               "seq_len": {"type": "integer"}, "global_batch": {"type": "integer"}}},
               {"required": ["mode", "token_budget", "seq_len", "global_batch"],
                "properties": {"mode": {"enum": ["capacity"]}, "token_budget": {"type": "integer"},
                               "seq_len": {"type": "integer"}, "global_batch": {"type": "integer"}}}]},
]}


class JobCreateInput(KnownFieldsMixin, serializers.Serializer):
    unknown_hints = {"pins": "is not a field of this request: send each pin as a field of its own (tp, cp, pp, dp, "
                             "ep, etp, microbatch_size, vpp, recompute, sharding, precision); a job returns them "
                             "together as pins"}
    spec = IdField(help_text="id of a spec of one of your teams")
    mode = ChoiceField(choices=JobMode.choices, default=JobMode.PIPELINE,
                       help_text='"pipeline": plan the pipeline of num_devices devices (the fields below '
                                 'up to memory_limit_bytes); "hybrid": choose TP, CP, PP, DP, EP, '
                                 "micro-batch size and recomputation for gpus GPUs (gpus, seq_len, "
                                 'global_batch and the optional pins); "capacity": the hybrid search at '
                                 "each of gpu_counts GPUs of the cluster's kind and what token_budget "
                                 "tokens cost there (token_budget, gpu_counts, seq_len, global_batch, "
                                 "pins)")
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
    schedule = ChoiceField(choices=JOB_SCHEDULES, default=DEFAULT_SCHEDULE,
                           help_text='"adaptis" searches partition, placement and schedule and compares '
                                     "the result with every baseline; the others build that baseline")
    partition = ChoiceField(choices=PARTITIONS, default=DEFAULT_PARTITION,
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
    token_budget = OptionalIntegerField(required=False, allow_null=True, default=None, min_value=1,
                                        max_value=MAX_TOKEN_BUDGET,
                                        help_text="capacity only (required there): tokens to train on")
    gpu_counts = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=MAX_GPUS), required=False, allow_null=True,
        default=None, min_length=1, max_length=MAX_GPU_COUNTS,
        help_text="capacity only: the GPU counts to search (default 64 to 16,384, doubling); the cluster given is the "
                  "kind of GPU and its links, grown to each count")
    tp = _pin("tensor-parallel degree (with sequence parallelism)")
    cp = _pin("context-parallel degree")
    pp = _pin("pipeline ranks")
    dp = _pin("data-parallel degree")
    ep = _pin("expert-parallel degree (the experts re-slice a stage's tp x cp x dp GPUs as etp x ep x expert dp)")
    etp = _pin("expert tensor-parallel degree (MoE parallel folding; the search tries tp and 1)")
    microbatch_size = _pin("sequences per micro-batch", MAX_GLOBAL_BATCH)
    vpp = _pin("virtual pipeline stages per pipeline rank (Megatron's interleaving; 1 = plain 1F1B; pinned, the "
               "AdaPtis refinement is left out)")
    recompute = OptionalChoiceField(choices=RECOMPUTE_MODES, required=False, allow_null=True, default=None,
                                    help_text="hybrid only, optional: activation recomputation on every stage")
    sharding = OptionalChoiceField(choices=SHARDING_MODES, required=False, allow_null=True, default=None,
                                   help_text="hybrid only, optional: what the data-parallel ranks shard: none, "
                                             "optimizer (ZeRO-1) or full (FSDP); the search tries optimizer and full")
    precision = OptionalChoiceField(choices=PRECISIONS, required=False, allow_null=True, default=None,
                                    help_text="hybrid only, optional: bf16 (default) or fp8 (Transformer Engine's "
                                              "linear layers; needs FP8 tensor cores); never chosen for you")
    overlap = serializers.CharField(required=False, allow_null=True, default=None, max_length=20,
                                    help_text="hybrid and capacity, optional: the communication the cost model hides "
                                              "behind compute: any of tp, dp, ep (comma-separated) or none; default "
                                              "dp (Megatron's defaults), none on a CPU cluster (this project's "
                                              "executor overlaps nothing); tp and ep are upper bounds")
    framework = OptionalChoiceField(choices=list(FRAMEWORKS), required=False, allow_null=True, default=None,
                                    help_text="hybrid and capacity, optional: the training framework whose kernels, "
                                              f"recomputation and loss the cost model assumes: {FRAMEWORKS_TEXT}")
    recompute_modules = serializers.CharField(required=False, allow_null=True, default=None, max_length=60,
                                              help_text="hybrid and capacity, optional: what selective recomputation "
                                                        "re-runs in the backward to free what it kept, Megatron-Core's "
                                                        f"--recompute-modules (framework megatron): any of "
                                                        f"{RECOMPUTE_MODULES_TEXT}; comma-separated, default "
                                                        f"{DEFAULT_RECOMPUTE_MODULES}")
    ep_dispatcher = OptionalChoiceField(choices=list(EP_DISPATCHERS), required=False, allow_null=True, default=None,
                                        help_text="hybrid and capacity, optional: the MoE token dispatcher: "
                                                  f"{EP_DISPATCHERS_TEXT}")
    distributed_optimizer = OptionalBooleanField(required=False, allow_null=True, default=None,
                                                 help_text="hybrid only, deprecated: sharding optimizer (true) or none "
                                                           "(false)")

    PINS = ("tp", "cp", "pp", "dp", "ep", "etp", "microbatch_size", "vpp", "recompute", "sharding", "precision",
            "distributed_optimizer")

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
    pins = serializers.JSONField(help_text="hybrid and capacity: the pinned tp, cp, pp, dp, ep, etp, microbatch_size, "
                                           "vpp, recompute, sharding, precision")
    analytic_profile_reason = serializers.CharField(
        help_text="why this job on cpu-host planned on the analytic profile instead of one measured on the runs' host "
                  "(measuring it failed, or the runs' host does not measure this model); empty when it did not")

    class Meta:
        model = PlanningJob
        fields = ["id", "name", "spec", "spec_name", "created_by", "mode", "cluster_preset", "saved_cluster",
                  "num_devices", "num_microbatches", "schedule", "partition", "seed", "time_budget_s",
                  "memory_limit_bytes", "gpus", "seq_len", "global_batch", "pins", "overlap", "framework",
                  "recompute_modules", "ep_dispatcher",
                  "token_budget", "gpu_counts",
                  "status", "progress",
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


# one field per part of a step, in ms (planner.parallel.evaluate.STEP_PARTS)
StepBreakdownOutput = type("StepBreakdownOutput", (serializers.Serializer,),
                           {part: serializers.FloatField() for part in STEP_PARTS})


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
    breakdown_ms = StepBreakdownOutput(required=False, help_text=(
        "the step by kind, summing to iteration_ms: on the pipeline's critical rank its compute, recomputation, "
        "exposed TP, CP and EP communication, the pipeline transfers it waited for and its bubble; then the exposed "
        "DP communication and the optimizer step (absent from plans predicted before breakdowns)"))


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
    parallel = serializers.JSONField(help_text="tp, cp, pp, dp, ep, etp, microbatch_size, num_microbatches, recompute "
                                               "(a mode, or one per stage), sharding, precision, and vpp where every "
                                               "pipeline rank holds as many stages")
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


class CapacityPointOutput(serializers.Serializer):
    gpus = serializers.IntegerField()
    nodes = serializers.IntegerField(help_text="nodes of the cluster's kind that many GPUs take")
    short = serializers.CharField(required=False, help_text="the best configuration (absent where error says why none)")
    parallel = serializers.JSONField(required=False)
    predicted = HybridPredictedOutput(required=False)
    days = serializers.FloatField(required=False, help_text="token_budget / tokens_per_s, in days")
    gpu_hours = serializers.FloatField(required=False, help_text="gpus x the days, in hours")
    error = serializers.JSONField(required=False, help_text="{field, reason}: why this count has no configuration")


class CapacityResultOutput(serializers.Serializer):
    points = CapacityPointOutput(many=True, help_text="one per GPU count, ascending")
    token_budget = serializers.IntegerField()
    seq_len = serializers.IntegerField()
    global_batch = serializers.IntegerField()
    device = serializers.CharField()
    gpus_per_node = serializers.IntegerField()
    fastest_gpus = serializers.IntegerField(allow_null=True, help_text="the count that trains in the fewest days")
    cheapest_gpus = serializers.IntegerField(allow_null=True, help_text="the count that takes the fewest GPU-hours")
    cancelled = serializers.BooleanField(help_text="cancelled while sweeping: the counts searched before")


class SearchResultOutput(serializers.Serializer):
    iteration_ms = serializers.FloatField()
    bubble_ratio = serializers.FloatField()
    peak_memory_bytes = serializers.IntegerField()
    lower_bound_ms = serializers.FloatField()
    lower_bound = serializers.JSONField()
    gap = serializers.FloatField()
    binding = serializers.JSONField(help_text="the bound's term that sets it: term, ms and what it means")
    memory_binding = serializers.JSONField(
        allow_null=True, help_text="under a memory limit, the plan's device whose memory binds most: device, "
                                   "state_bytes, left_bytes, microbatch_bytes, microbatches_fit, memory_flow_ms, text")
    stats = serializers.JSONField()
    candidates = serializers.JSONField()
    baselines = serializers.JSONField(help_text="per baseline: its metrics, adaptis_speedup and plan_id")
    plan_id = serializers.IntegerField()
    cancelled = serializers.BooleanField()


class JobDetailOutput(JobOutput):
    cluster = serializers.JSONField(source="cluster_doc")
    result = serializers.SerializerMethodField(
        help_text="a pipeline search's summary (SearchResult), a hybrid job's (HybridResult), a capacity job's "
                  "(CapacityResult); empty for a baseline job and until the job succeeds")

    @extend_schema_field(PolymorphicProxySerializer(component_name="JobResult", resource_type_field_name=None,
                                                    serializers=[SearchResultOutput, HybridResultOutput,
                                                                                 CapacityResultOutput]))
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
    """One of a plan's documents, sent as the JSON text planning.plan_json keeps (api.renderers.RawJSON)."""

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


class PlanDeriveInput(KnownFieldsMixin, serializers.Serializer):
    plan = DocumentField(help_text="the edited adaptis.plan/v1 or /v2 document, as simulate/ takes it")
    name = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
