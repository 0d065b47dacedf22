"""A stored plan as a download in the formats other tools read (``planner.exports``, as the CLI writes them).

| format            | content type       | file                                  |
|-------------------|--------------------|---------------------------------------|
| ``plan-json``       | application/json   | ``plan-<id>-<strategy>.json``           |
| ``perfetto``        | application/json   | ``plan-<id>-<strategy>.perfetto.json``  |
| ``torch-csv``       | text/csv           | ``plan-<id>-<strategy>.csv``            |
| ``megatron-layout`` | text/plain         | ``plan-<id>-<strategy>.megatron.txt``   |

A format that cannot express the plan is a ``SpecError`` naming ``format`` and why (Megatron's layout needs a
looped placement with as many stages on every rank; Megatron's hybrid Mamba models refuse a layout with virtual
stages). Megatron's hybrid models *ignore* a layout without virtual stages: the download says so in a comment.
Any role in the plan's team may export.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser

from adaptis_web.studio.models import Plan
from adaptis_web.studio.services.plan_editing import edit_context, predict
from adaptis_web.studio.services.roles import Role, role_require
from planner.errors import SpecError
from planner.exports import megatron_layout, perfetto_trace, plan_json, torch_csv
from planner.plan import load_plan
from planner.simulator import simulate
from planner.spec.model import ModelSpec

FORMATS = {"plan-json": ("application/json", "json"), "perfetto": ("application/json", "perfetto.json"),
           "torch-csv": ("text/csv", "csv"), "megatron-layout": ("text/plain", "megatron.txt")}
HYBRID_MIXERS = ("mamba", "mamba2")  # what makes Megatron build a MambaModel (--hybrid-override-pattern)
HYBRID_IGNORES_NOTE = (
    "# Megatron-LM's hybrid (Mamba) models ignore --pipeline-model-parallel-layout when it has no virtual stages:\n"
    "# they split the layers of --hybrid-override-pattern evenly over the pipeline ranks instead. This layout is\n"
    "# what AdaPtis planned, for reference; Megatron will not apply it to {model}.\n")


@dataclass(frozen=True)
class Export:
    content: str
    content_type: str
    filename: str


def plan_export(*, plan: Plan, user: AbstractBaseUser, fmt: str) -> Export:
    role_require(user=user, team=plan.job.spec.team, at_least=Role.VIEWER, doing="exporting a plan")
    if fmt not in FORMATS:
        raise SpecError("format", f"must be one of {', '.join(FORMATS)}; got {fmt!r}")
    content_type, extension = FORMATS[fmt]
    planner_plan = load_plan(plan.plan_doc)
    if fmt == "plan-json":
        content = plan_json(planner_plan)
    elif fmt == "torch-csv":
        content = torch_csv(planner_plan)
    else:
        context = edit_context(plan)
        profile, cluster, _ = predict(context, planner_plan, job_level=False)
        if fmt == "perfetto":
            content = json.dumps(perfetto_trace(simulate(planner_plan, profile, cluster))) + "\n"
        else:
            content = _megatron_text(planner_plan, profile, context.spec)
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", plan.strategy).strip("-") or "plan"
    return Export(content=content, content_type=content_type, filename=f"plan-{plan.pk}-{slug}.{extension}")


def _megatron_text(plan, profile, spec: ModelSpec) -> str:
    hybrid = any(layer.mixer is not None and layer.mixer.type in HYBRID_MIXERS for layer in spec.layers)
    virtual = plan.num_stages > plan.num_devices
    if hybrid and virtual:
        raise SpecError("format", f"Megatron-LM's hybrid (Mamba) models refuse a --pipeline-model-parallel-layout "
                                  f"with virtual stages, and this plan has {plan.num_stages} stages on "
                                  f"{plan.num_devices} pipeline ranks; {spec.name} mixes Mamba layers with "
                                  "attention")
    try:
        layout = megatron_layout(plan, profile)
    except SpecError as error:
        raise SpecError("format", f"Megatron's layout cannot express this plan: {error.reason}") from None
    return (HYBRID_IGNORES_NOTE.format(model=spec.name) if hybrid else "") + layout + "\n"
