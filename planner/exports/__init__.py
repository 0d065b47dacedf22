"""Exports: a plan in the formats other tools read. ``EXPORTS`` is the one registry (the CLI's ``--to`` choices, the
API's ``export/{fmt}/`` and the plan page's downloads all read it); ``export_plan`` writes one by its name.

``megatron-args`` and ``torchtitan-toml`` take a hybrid-parallel plan (``adaptis.plan/v2``) and its model; each opens
with a comment saying what its framework cannot express of the plan (``export_losses``)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from planner.cluster import ClusterSpec
from planner.errors import SpecError
from planner.exports.megatron_args import megatron_args, megatron_args_losses
from planner.exports.megatron_layout import megatron_layout, megatron_layout_file
from planner.exports.perfetto import perfetto_trace
from planner.exports.plan_json import plan_json
from planner.exports.torch_csv import torch_csv
from planner.exports.torchtitan_toml import torchtitan_losses, torchtitan_toml
from planner.plan import Plan
from planner.profile import Profile
from planner.simulator import simulate
from planner.spec.model import ModelSpec


@dataclass(frozen=True)
class ExportFormat:
    label: str            # the plan page's button
    content_type: str
    extension: str        # the download's file name ends .<extension>
    needs_profile: bool   # the plan's pipeline profile (perfetto simulates it; megatron-layout reads layer kinds)
    needs_model: bool     # the plan's model (its shape and layers)
    framework: bool       # another framework's configuration: says what of the plan it cannot express


EXPORTS = {
    "plan-json": ExportFormat("Plan JSON", "application/json", "json", False, False, False),
    "perfetto": ExportFormat("Perfetto trace", "application/json", "perfetto.json", True, False, False),
    "torch-csv": ExportFormat("torch CSV", "text/csv", "csv", False, False, False),
    "megatron-layout": ExportFormat("Megatron layout", "text/plain", "megatron.txt", True, False, False),
    "megatron-args": ExportFormat("Megatron-LM arguments", "text/x-shellscript", "megatron.sh", False, True, True),
    "torchtitan-toml": ExportFormat("torchtitan config", "application/toml", "torchtitan.toml", False, True, True),
}
EXPORT_FORMATS = tuple(EXPORTS)


def export_plan(fmt: str, plan: Plan, profile: Profile | None, cluster: ClusterSpec | None = None,
                model: ModelSpec | None = None, seq_len: int | None = None) -> str:
    """The text of ``plan`` in ``fmt``; the Perfetto trace simulates the plan on ``profile`` first. ``model``, where
    known, brings Megatron's rules for hybrid (Mamba) models into its layout (``megatron_layout_file``); the framework
    formats need it. ``seq_len`` defaults to the plan's ``meta.seq_len``, then the model's."""
    if fmt == "perfetto":
        return json.dumps(perfetto_trace(simulate(plan, profile, cluster))) + "\n"
    if fmt == "torch-csv":
        return torch_csv(plan)
    if fmt == "megatron-layout":
        return megatron_layout_file(plan, profile, model)
    if fmt == "plan-json":
        return plan_json(plan)
    if fmt == "megatron-args":
        return megatron_args(plan, model, seq_len)
    if fmt == "torchtitan-toml":
        return torchtitan_toml(plan, model, seq_len)
    raise SpecError("to", f"must be one of {', '.join(EXPORT_FORMATS)}; got {fmt!r}")


def export_losses(fmt: str, plan: Plan, model: ModelSpec | None, seq_len: int | None = None) -> list[str]:
    """What framework format ``fmt`` cannot express of ``plan`` (the file's opening comment, one sentence each);
    empty for the formats that are the plan itself. SpecError where the format cannot take the plan at all."""
    if fmt == "megatron-args":
        return megatron_args_losses(plan, model, seq_len)
    if fmt == "torchtitan-toml":
        return torchtitan_losses(plan, model, seq_len)
    return []


__all__ = ["EXPORTS", "EXPORT_FORMATS", "ExportFormat", "export_losses", "export_plan", "megatron_layout",
           "perfetto_trace", "plan_json", "torch_csv"]
