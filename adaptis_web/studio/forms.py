"""Page forms. They check input with the same planner loaders and service checks the API uses, and put
each SpecError on the form field it names, so a bad file shows its field path and reason on the page."""

from __future__ import annotations

from django import forms

from adaptis_web.studio.selectors import team_list_for_user
from adaptis_web.studio.services.jobs import ADAPTIS_SCHEDULE, DEFAULT_PARTITION, JobRequest, job_request_check
from adaptis_web.studio.services.search import DEFAULT_TIME_BUDGET_S
from adaptis_web.studio.services.specs import read_upload, spec_parse_upload
from planner.baselines import BASELINE_SCHEDULES, PARTITIONS
from planner.cluster import preset_names
from planner.documents import parse_document
from planner.errors import SpecError
from planner.spec.model import ModelSpec

DEFAULT_CLUSTER_PRESET = "cpu-host"
MAX_CLUSTER_FILE_BYTES = 256 * 1024
GIB = 2**30
SCHEDULE_CHOICES = [(ADAPTIS_SCHEDULE, "AdaPtis search"), *((name, name) for name in BASELINE_SCHEDULES)]


class SpecErrorFormMixin:
    """Put a SpecError on the form field its dotted path starts with: ``file.layers[2].mlp`` goes on
    ``file`` as "layers[2].mlp: <reason>"; a path that names no form field becomes a form-wide error."""

    # Request fields the form shows under another name (in other units).
    field_aliases: dict[str, str] = {}

    def spec_error_message(self, error: SpecError) -> tuple[str | None, str]:
        root = error.field.split(".", 1)[0].split("[", 1)[0]
        inner = error.field[len(root):].lstrip(".")
        root = self.field_aliases.get(root, root)
        if root not in self.fields:
            return None, str(error)
        return root, f"{inner}: {error.reason}" if inner else error.reason

    def add_spec_error(self, error: SpecError) -> None:
        self.add_error(*self.spec_error_message(error))


class PlanningForm(SpecErrorFormMixin, forms.Form):
    """Cluster and pipeline shape of a planning job; ``job_request`` holds the checked result."""

    cluster_preset = forms.ChoiceField(label="Cluster", required=False)
    cluster_file = forms.FileField(label="…or a custom cluster file", required=False,
                                   help_text="adaptis.cluster/v1 as JSON or YAML; overrides the preset")
    num_devices = forms.IntegerField(label="Pipeline devices", min_value=1, initial=2)
    num_microbatches = forms.IntegerField(label="Micro-batches", min_value=1, initial=8)
    schedule = forms.ChoiceField(choices=SCHEDULE_CHOICES, initial=ADAPTIS_SCHEDULE,
                                 help_text="the search co-optimises partition, placement and schedule and compares "
                                           "its plan with every baseline")
    partition = forms.ChoiceField(choices=[(name, name) for name in PARTITIONS], initial=DEFAULT_PARTITION,
                                  required=False, help_text="baselines only: how layers are split into stages")
    seed = forms.IntegerField(label="Search seed", initial=0, required=False)
    time_budget_s = forms.FloatField(label="Search time budget (s)", initial=DEFAULT_TIME_BUDGET_S, required=False)
    memory_limit_gib = forms.FloatField(label="Memory limit per device (GiB)", required=False,
                                        help_text="empty: all of the cluster's device memory")
    field_aliases = {"memory_limit_bytes": "memory_limit_gib"}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["cluster_preset"].choices = [(name, name) for name in preset_names()]
        self.fields["cluster_preset"].initial = DEFAULT_CLUSTER_PRESET
        self.job_request: JobRequest | None = None
        self.spec: ModelSpec | None = None  # set by the subclass before clean(): the spec to plan

    def _cluster_doc(self) -> dict | None:
        upload = self.cleaned_data.get("cluster_file")
        if upload is None:
            return None
        if upload.size > MAX_CLUSTER_FILE_BYTES:
            raise SpecError("cluster_file", f"is {upload.size} bytes; the limit is {MAX_CLUSTER_FILE_BYTES}")
        try:
            text = upload.read().decode("utf-8")
        except UnicodeDecodeError as error:
            raise SpecError("cluster_file", f"is not UTF-8 text (invalid byte at offset {error.start})") from None
        doc = parse_document(text, upload.name, field="cluster_file")
        if not isinstance(doc, dict):
            raise SpecError("cluster_file", "must hold an adaptis.cluster/v1 object")
        return doc

    def clean(self):
        cleaned = super().clean()
        if self.spec is None or self.errors:
            return cleaned
        try:
            cluster_doc = self._cluster_doc()
            seed, time_budget_s, memory_limit_gib = (cleaned.get(name) for name in
                                                     ("seed", "time_budget_s", "memory_limit_gib"))
            self.job_request = job_request_check(
                spec=self.spec, num_devices=cleaned["num_devices"], num_microbatches=cleaned["num_microbatches"],
                cluster_preset="" if cluster_doc is not None else cleaned.get("cluster_preset", ""),
                cluster_doc=cluster_doc, schedule=cleaned["schedule"], partition=cleaned.get("partition") or DEFAULT_PARTITION,
                cluster_field="cluster_file", seed=0 if seed is None else seed,
                time_budget_s=DEFAULT_TIME_BUDGET_S if time_budget_s is None else time_budget_s,
                memory_limit_bytes=None if memory_limit_gib is None else round(memory_limit_gib * GIB))
        except SpecError as error:
            self.add_spec_error(error)
        return cleaned


class UploadForm(PlanningForm):
    """Upload a model spec and plan it in one step."""

    team = forms.ModelChoiceField(queryset=None, empty_label=None)
    file = forms.FileField(label="Model spec", help_text="adaptis.model/v1 (JSON or YAML) or a HuggingFace "
                                                          "config.json")
    field_order = ["team", "file", "cluster_preset", "cluster_file", "num_devices", "num_microbatches", "schedule",
                   "partition", "seed", "time_budget_s", "memory_limit_gib"]

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = team_list_for_user(user=user)

    def clean_file(self):
        upload = self.cleaned_data["file"]
        try:
            self.spec = spec_parse_upload(content=read_upload(upload, field="file"), filename=upload.name)
        except SpecError as error:
            raise forms.ValidationError(self.spec_error_message(error)[1]) from None
        return upload


class SpecPlanningForm(PlanningForm):
    """Plan a spec that is already stored."""

    def __init__(self, *args, spec: ModelSpec, **kwargs):
        super().__init__(*args, **kwargs)
        self.spec = spec


class RunForm(SpecErrorFormMixin, forms.Form):
    steps = forms.IntegerField(min_value=1, initial=1, help_text="training steps (iterations) to run")
    scale_down = forms.BooleanField(required=False, label="Run a scaled-down copy (same layer pattern, hidden 64)")


class TokenForm(SpecErrorFormMixin, forms.Form):
    name = forms.CharField(max_length=100, help_text="what will use it, e.g. \"CI nightly\"")
    expires_in_days = forms.IntegerField(label="Expires in (days)", min_value=1, initial=30)


class TeamForm(SpecErrorFormMixin, forms.Form):
    name = forms.CharField(max_length=100, label="Team name")
