"""The planning page forms (upload a spec and plan it; plan a stored spec). They check input with the same planner
loaders and service checks the API uses, and put each SpecError on the form field it names, so a bad file shows
its field path and reason on the page."""

from __future__ import annotations

from django import forms

from adaptis_web.studio.accounts.selectors import team_list_for_user
from adaptis_web.studio.catalog.clusters import MAX_CLUSTER_FILE_BYTES, cluster_parse_upload
from adaptis_web.studio.catalog.selectors import cluster_choices_for_team, cluster_choices_for_user, spec_list_for_user
from adaptis_web.studio.catalog.specs import read_upload, spec_parse_upload
from adaptis_web.studio.common.forms import SpecErrorFormMixin
from adaptis_web.studio.models import ClusterRecord, JobMode, ModelSpecRecord
from adaptis_web.studio.planning.jobs import ADAPTIS_SCHEDULE, DEFAULT_PARTITION, JobRequest, job_request_check
from adaptis_web.studio.planning.search import DEFAULT_TIME_BUDGET_S
from planner import service as planner_service
from planner.errors import SpecError
from planner.service import (BASELINE_SCHEDULES, PARTITIONS, RECOMPUTE_MODES, ClusterSpec, ModelSpec,
                             load_model_preset, load_model_spec, model_preset_names, preset_names)


DEFAULT_CLUSTER_PRESET = "cpu-host"
GIB = 2**30
SCHEDULE_CHOICES = [(ADAPTIS_SCHEDULE, "AdaPtis search"), *((name, name) for name in BASELINE_SCHEDULES)]
FRAMEWORK_LABELS = {"megatron": "Megatron-Core / NeMo"}  # planner_service.FRAMEWORKS as the form names them
# planner_service.EP_DISPATCHERS as the form names them
EP_DISPATCHER_LABELS = {"alltoall": "all-to-all (Megatron-Core)", "deepep": "DeepEP (one copy per node over the NIC)",
                        "hybridep": "HybridEP (one copy per node over the NIC)"}


def _pin_field(label: str) -> forms.IntegerField:
    return forms.IntegerField(label=label, min_value=1, required=False,
                              widget=forms.NumberInput(attrs={"placeholder": "search"}))


class SavedClusterChoice(forms.ModelChoiceField):
    def label_from_instance(self, obj: ClusterRecord) -> str:
        return f"{obj.name} ({obj.num_devices:,} × {obj.device_name}, team {obj.team.name})"


class PlanningForm(SpecErrorFormMixin, forms.Form):
    """Cluster and job shape of a planning job; ``job_request`` holds the checked result.

    ``mode`` "pipeline" plans the pipeline of ``num_devices`` devices (pure PP); "hybrid" chooses TP, CP, PP,
    DP, EP, micro-batch size and recomputation for ``gpus`` GPUs, any of them pinned. The cluster is a preset
    file from the list, or instead a named cluster typed in, a saved cluster of the team, or a file."""

    mode = forms.ChoiceField(label="What to plan", choices=[
        (JobMode.PIPELINE, "The pipeline (N devices)"), (JobMode.HYBRID, "The whole job (TP × CP × PP × DP × EP)"),
        (JobMode.CAPACITY, "How many GPUs (capacity: days and GPU-hours per count)")],
        initial=JobMode.PIPELINE, required=False,
        help_text="the pipeline: partition, placement and schedule; the whole job: every parallel degree too; "
                  "capacity: the whole job's best configuration at each GPU count, and what training costs there")
    cluster_preset = forms.ChoiceField(label="Cluster", required=False)
    cluster_name = forms.CharField(label="…or a named cluster", required=False, max_length=100,
                                   widget=forms.TextInput(attrs={"placeholder": "h100-sxm-1024x8"}),
                                   help_text="<device>-<nodes>x<GPUs per node>; overrides the preset")
    saved_cluster = SavedClusterChoice(label="…or a saved cluster", queryset=ClusterRecord.objects.none(),
                                       required=False, empty_label="—")
    cluster_file = forms.FileField(label="…or a custom cluster file", required=False,
                                   help_text="adaptis.cluster/v1 as JSON or YAML; overrides the preset")
    num_devices = forms.IntegerField(label="Pipeline devices", min_value=1, initial=2, required=False)
    num_microbatches = forms.IntegerField(label="Micro-batches", min_value=1, initial=8, required=False)
    pipeline_seq_len = forms.IntegerField(label="Sequence length", min_value=1, required=False,
                                          help_text="tokens per sequence; empty: the model spec's")
    pipeline_micro_batch_size = forms.IntegerField(label="Micro-batch size", min_value=1, required=False,
                                                   help_text="sequences per micro-batch; empty: the model spec's")
    schedule = forms.ChoiceField(choices=SCHEDULE_CHOICES, initial=ADAPTIS_SCHEDULE,
                                 help_text="the search co-optimises partition, placement and schedule and compares "
                                           "its plan with every baseline")
    partition = forms.ChoiceField(choices=[(name, name) for name in PARTITIONS], initial=DEFAULT_PARTITION,
                                  required=False, help_text="baselines only: how layers are split into stages")
    seed = forms.IntegerField(label="Search seed", initial=0, required=False)
    time_budget_s = forms.FloatField(label="Search time budget (s)", initial=DEFAULT_TIME_BUDGET_S, required=False)
    memory_limit_gib = forms.FloatField(label="Memory limit per device (GiB)", required=False,
                                        help_text="empty: all of the cluster's device memory")
    gpus = forms.IntegerField(label="GPUs", min_value=1, initial=8, required=False)
    seq_len = forms.IntegerField(label="Sequence length", min_value=1, initial=4096, required=False)
    global_batch = forms.IntegerField(label="Global batch (sequences)", min_value=1, initial=256, required=False)
    token_budget_b = forms.FloatField(label="Tokens to train (billions)", min_value=0, required=False, initial=1000,
                                      help_text="e.g. 15,000 for Llama 3's 15.6 T tokens")
    gpu_counts = forms.CharField(label="GPU counts", required=False, max_length=200,
                                 widget=forms.TextInput(attrs={"placeholder": "64-16384"}),
                                 help_text="'64, 128, 256' or a doubling range '64-16384' (empty: 64 to 16,384); "
                                           "the cluster's GPU kind and links, grown to each count")
    tp = _pin_field("TP")
    cp = _pin_field("CP")
    pp = _pin_field("PP")
    dp = _pin_field("DP")
    ep = _pin_field("EP")
    etp = _pin_field("Expert TP")
    microbatch_size = _pin_field("Micro-batch size")
    vpp = _pin_field("Virtual stages per rank")
    recompute = forms.ChoiceField(label="Recomputation", required=False,
                                  choices=[("", "search"), *((mode, mode) for mode in RECOMPUTE_MODES)])
    sharding = forms.ChoiceField(label="Sharding", required=False,
                                 choices=[("", "search"), ("none", "none"), ("optimizer", "optimizer (ZeRO-1)"),
                                          ("full", "full (FSDP)")])
    overlap = forms.CharField(label="Overlapped with compute", required=False, max_length=20,
                              help_text="tp, dp, ep (comma-separated) or none; tp and ep hide all the compute beside "
                                        "them can (an upper bound). Blank: dp on GPUs; none on a CPU cluster, which "
                                        "only this project's executor runs, and it overlaps nothing")
    framework = forms.ChoiceField(label="Framework", initial=planner_service.DEFAULT_FRAMEWORK, required=False,
                                  choices=[(name, FRAMEWORK_LABELS.get(name, name))
                                           for name in planner_service.FRAMEWORKS],
                                  help_text="whose kernels and recomputation the cost model assumes: Transformer "
                                            "Engine's (cuDNN attention, FP8 inputs kept in FP8; selective recomputes "
                                            "the core attention) or PyTorch's (FlashAttention-2, torchao Float8; "
                                            "selective is per-op checkpointing)")
    recompute_modules = forms.CharField(label="Recompute modules", required=False, max_length=60,
                                        help_text="what selective recomputation re-runs, Megatron-Core's "
                                                  f"--recompute-modules: {', '.join(planner_service.RECOMPUTE_MODULES)}"
                                                  f" (comma-separated). Blank: "
                                                  f"{planner_service.DEFAULT_RECOMPUTE_MODULES}")
    ep_dispatcher = forms.ChoiceField(label="MoE dispatcher", initial=planner_service.DEFAULT_EP_DISPATCHER,
                                      required=False,
                                      choices=[(name, EP_DISPATCHER_LABELS[name])
                                               for name in planner_service.EP_DISPATCHERS],
                                      help_text="how MoE tokens reach their experts under EP: Megatron-Core's "
                                                "all-to-all sends every routed copy; DeepEP sends a token over "
                                                "InfiniBand once per other node holding one of its experts")
    precision = forms.ChoiceField(label="Precision", initial="bf16", required=False,
                                  choices=[("bf16", "BF16"), ("fp8", "FP8 (Transformer Engine)")],
                                  help_text="FP8 changes the numerics: never chosen for you")
    field_aliases = {"memory_limit_bytes": "memory_limit_gib", "token_budget": "token_budget_b"}
    PINS = ("tp", "cp", "pp", "dp", "ep", "etp", "microbatch_size", "vpp", "recompute", "sharding")

    def __init__(self, *args, clusters=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["cluster_preset"].choices = [(name, name) for name in preset_names()]
        self.fields["cluster_preset"].initial = DEFAULT_CLUSTER_PRESET
        if clusters is not None:
            self.fields["saved_cluster"].queryset = clusters.select_related("team")
        self.job_request: JobRequest | None = None
        self.spec: ModelSpec | None = None  # set by the subclass before clean(): the spec to plan
        self.unshaped_spec: ModelSpec | None = None  # the spec as given, where the job plans it at another shape
        self.team = None  # the spec's team (a saved cluster must be of it), set by the subclass

    def _cluster_upload(self) -> ClusterSpec | None:
        upload = self.cleaned_data.get("cluster_file")
        if upload is None:
            return None
        content = read_upload(upload, field="cluster_file", limit=MAX_CLUSTER_FILE_BYTES)
        return cluster_parse_upload(content=content, filename=upload.name, field="cluster_file")

    def _apply_pipeline_shape(self, cleaned: dict) -> None:
        """A pipeline job at another sequence length or micro-batch size than its spec's plans that shape of the
        model (``spec_for_shape`` stores it as a spec of its own); the hybrid job chooses its own."""
        if (cleaned.get("mode") or JobMode.PIPELINE) != JobMode.PIPELINE:
            return
        seq_len, micro_batch_size = cleaned.get("pipeline_seq_len"), cleaned.get("pipeline_micro_batch_size")
        if seq_len is None and micro_batch_size is None:
            return
        self.field_aliases = {**self.field_aliases, "seq_len": "pipeline_seq_len",
                              "micro_batch_size": "pipeline_micro_batch_size"}
        self.unshaped_spec = self.spec
        self.spec = planner_service.model_with_shape(self.spec, seq_len=seq_len, micro_batch_size=micro_batch_size)

    def clean(self):
        cleaned = super().clean()
        if self.spec is None or self.errors:
            return cleaned
        try:
            uploaded = self._cluster_upload()
            saved, name = cleaned.get("saved_cluster"), cleaned.get("cluster_name", "").strip()
            if name:  # what the planner says of the preset is said of the name typed
                self.field_aliases = {**self.field_aliases, "cluster_preset": "cluster_name"}
            preset = name or ("" if uploaded is not None or saved is not None else cleaned.get("cluster_preset", ""))
            seed, time_budget_s, memory_limit_gib = (cleaned.get(name) for name in
                                                     ("seed", "time_budget_s", "memory_limit_gib"))
            self._apply_pipeline_shape(cleaned)
            pins = {key: cleaned.get(key) for key in self.PINS}
            if cleaned.get("precision") == "fp8":  # bf16 is the search's default: not a pin
                pins["precision"] = "fp8"
            mode = cleaned.get("mode") or JobMode.PIPELINE
            token_budget_b = cleaned.get("token_budget_b")
            capacity_fields = {} if mode != JobMode.CAPACITY else {
                "gpu_counts": planner_service.parse_gpu_counts(cleaned.get("gpu_counts") or ""),
                "token_budget": None if token_budget_b is None else round(token_budget_b * 1e9)}
            self.job_request = job_request_check(
                spec=self.spec, num_devices=cleaned.get("num_devices"),
                num_microbatches=cleaned.get("num_microbatches"), cluster_preset=preset,
                cluster_doc=None if uploaded is None else uploaded.to_dict(), schedule=cleaned["schedule"],
                partition=cleaned.get("partition") or DEFAULT_PARTITION, cluster_field="cluster_file",
                seed=0 if seed is None else seed,
                time_budget_s=DEFAULT_TIME_BUDGET_S if time_budget_s is None else time_budget_s,
                memory_limit_bytes=None if memory_limit_gib is None else round(memory_limit_gib * GIB),
                mode=mode, saved_cluster=saved, team=self.team,
                gpus=cleaned.get("gpus"), seq_len=cleaned.get("seq_len"), global_batch=cleaned.get("global_batch"),
                pins=pins, software=cleaned, **capacity_fields)
        except SpecError as error:
            self.add_spec_error(error)
        return cleaned


class UploadForm(PlanningForm):
    """Plan a model in one step: a spec uploaded now, one the user's teams already have, or a preset.

    Exactly one of ``file``, ``existing_spec`` and ``preset``; the upload and the preset are stored as a spec of
    ``team``, the existing spec is planned in its own team. ``spec_record`` is the existing spec, else None (the
    view stores ``spec``, with ``source_filename`` and ``spec_warnings``, and its job together)."""

    SOURCES = ("file", "existing_spec", "preset")
    team = forms.ModelChoiceField(queryset=None, empty_label=None)
    file = forms.FileField(label="Model spec", required=False,
                           help_text="adaptis.model/v1 (JSON or YAML) or a HuggingFace config.json")
    existing_spec = forms.ModelChoiceField(label="…or a spec of your teams", queryset=ModelSpecRecord.objects.none(),
                                           required=False, empty_label="—")
    preset = forms.ChoiceField(label="…or a preset", required=False,
                               help_text="one of the shipped models (Llama 3 8B, DeepSeek-V3, Nemotron-H…)")
    field_order = ["team", "file", "existing_spec", "preset", "mode", "cluster_preset", "cluster_name",
                   "saved_cluster", "cluster_file", "num_devices", "num_microbatches", "pipeline_seq_len",
                   "pipeline_micro_batch_size", "schedule", "partition", "seed",
                   "time_budget_s", "memory_limit_gib"]

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, clusters=cluster_choices_for_user(user=user), **kwargs)
        self.fields["team"].queryset = team_list_for_user(user=user)
        self.fields["existing_spec"].queryset = spec_list_for_user(user=user).filter(
            archived_at__isnull=True).select_related("team").defer("doc")
        self.fields["existing_spec"].label_from_instance = lambda record: f"{record.name} · {record.team.name}"
        self.fields["preset"].choices = [("", "—"), *((name, name) for name in model_preset_names())]
        self.spec_record: ModelSpecRecord | None = None
        self.spec_warnings: list[dict] = []
        self.source_filename = ""

    def clean_team(self):
        self.team = self.cleaned_data["team"]
        return self.team

    def clean_file(self):
        upload = self.cleaned_data["file"]
        if upload is None:
            return None
        try:
            self.spec, self.spec_warnings = spec_parse_upload(content=read_upload(upload, field="file"),
                                                              filename=upload.name)
        except SpecError as error:
            raise forms.ValidationError(self.spec_error_message(error)[1]) from None
        self.source_filename = upload.name
        return upload

    def clean_existing_spec(self):
        record = self.cleaned_data["existing_spec"]
        if record is not None:
            self.spec_record, self.team = record, record.team
            self.spec = load_model_spec(ModelSpecRecord.objects.values_list("doc", flat=True).get(pk=record.pk))
        return record

    def clean_preset(self):
        name = self.cleaned_data["preset"]
        if name:
            self.spec, self.source_filename = load_model_preset(name), f"preset {name}"
        return name

    def clean(self):
        chosen = [name for name in self.SOURCES if self.cleaned_data.get(name) or self.has_error(name)]
        if len(chosen) != 1:
            self.spec = None   # nothing is planned unless exactly one source says what
            self.add_error("file", "choose the model once: upload a spec, pick one of your teams' specs, or a preset"
                           if chosen else "choose the model: upload a spec, pick one of your teams' specs, or a preset")
        return super().clean()


class SpecPlanningForm(PlanningForm):
    """Plan a spec that is already stored."""

    def __init__(self, *args, spec: ModelSpec, team, **kwargs):
        super().__init__(*args, clusters=cluster_choices_for_team(team=team), **kwargs)
        self.spec = spec
        self.team = team
