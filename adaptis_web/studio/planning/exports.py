"""A stored plan as a download in the formats other tools read (``planner.service.export_stored_plan``: the file
``python -m planner export`` writes).

| format              | content type         | file                                    |
|---------------------|----------------------|-----------------------------------------|
| ``plan-json``         | application/json     | ``plan-<id>-<strategy>.json``             |
| ``perfetto``          | application/json     | ``plan-<id>-<strategy>.perfetto.json``    |
| ``torch-csv``         | text/csv             | ``plan-<id>-<strategy>.csv``              |
| ``megatron-layout``   | text/plain           | ``plan-<id>-<strategy>.megatron.txt``     |
| ``megatron-args``     | text/x-shellscript   | ``plan-<id>-<strategy>.megatron.sh``      |
| ``torchtitan-toml``   | application/toml     | ``plan-<id>-<strategy>.torchtitan.toml``  |

(``planner.exports.EXPORTS``, the one registry the CLI reads too.) The framework formats (Megatron-LM arguments,
torchtitan config) take a hybrid-parallel plan (adaptis.plan/v2) and open with what they cannot express of it.
A format that cannot express the plan is a ``SpecError`` naming ``format`` and why (Megatron's layout needs a
looped placement with as many stages on every rank; Megatron's hybrid Mamba models refuse a layout with virtual
stages). Megatron's hybrid models *ignore* a layout without virtual stages: the download says so in a comment.
Any role in the plan's team may export.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser

from adaptis_web.studio.accounts.roles import Role, role_require
from adaptis_web.studio.models import Plan
from adaptis_web.studio.planning.predictions import stored_plan
from planner import service as planner_service
from planner.errors import SpecError

FORMATS = {fmt: (spec.content_type, spec.extension) for fmt, spec in planner_service.EXPORTS.items()}


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
    content = planner_service.export_stored_plan(stored_plan(plan), fmt)
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", plan.strategy).strip("-") or "plan"
    return Export(content=content, content_type=content_type, filename=f"plan-{plan.pk}-{slug}.{extension}")
