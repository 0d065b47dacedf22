"""Exports: a plan in the formats other tools read. ``export_plan`` picks one by its CLI name."""

from __future__ import annotations

import json

from planner.cluster import ClusterSpec
from planner.errors import SpecError
from planner.exports.megatron_layout import megatron_layout, megatron_layout_file
from planner.exports.perfetto import perfetto_trace
from planner.exports.plan_json import plan_json
from planner.exports.torch_csv import torch_csv
from planner.plan import Plan
from planner.profile import Profile
from planner.simulator import simulate
from planner.spec.model import ModelSpec

EXPORT_FORMATS = ("perfetto", "torch-csv", "megatron-layout", "plan-json")


def export_plan(fmt: str, plan: Plan, profile: Profile, cluster: ClusterSpec | None = None,
                model: ModelSpec | None = None) -> str:
    """The text of ``plan`` in ``fmt``; the Perfetto trace simulates the plan on ``profile`` first. ``model``, where
    known, brings Megatron's rules for hybrid (Mamba) models into its layout (``megatron_layout_file``)."""
    if fmt == "perfetto":
        return json.dumps(perfetto_trace(simulate(plan, profile, cluster))) + "\n"
    if fmt == "torch-csv":
        return torch_csv(plan)
    if fmt == "megatron-layout":
        return megatron_layout_file(plan, profile, model)
    if fmt == "plan-json":
        return plan_json(plan)
    raise SpecError("to", f"must be one of {', '.join(EXPORT_FORMATS)}; got {fmt!r}")


__all__ = ["EXPORT_FORMATS", "export_plan", "megatron_layout", "perfetto_trace", "plan_json", "torch_csv"]
