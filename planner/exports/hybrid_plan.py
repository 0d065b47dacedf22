"""What the framework exports of a hybrid-parallel (``adaptis.plan/v2``) plan share: the plan's configuration, the
shape of its placement, the schedule it was built with, its recomputation and its sequence length.

``planner.exports.megatron_args`` and ``planner.exports.torchtitan_toml`` each say, from these facts, what their
framework cannot express of the plan; both start the file with that list (``header_lines``).
"""

from __future__ import annotations

from collections import Counter

from planner.errors import SpecError
from planner.parallel.config import RECOMPUTE_MODES, ParallelConfig
from planner.placement import placement_shape
from planner.plan import Plan
from planner.scheduling import SCHEDULE_NAMES
from planner.spec.model import ModelSpec


def require_v2(plan: Plan, fmt: str) -> ParallelConfig:
    """The plan's parallel configuration; a v1 plan is a SpecError on ``format``: it says no TP, CP, DP, micro-batch
    size or sequence length, which every framework's configuration needs."""
    if plan.parallel is None:
        raise SpecError("format", f"{fmt} exports a hybrid-parallel plan (adaptis.plan/v2: TP, CP, PP, DP, EP, "
                                  "micro-batch size); this is a pipeline plan (adaptis.plan/v1): plan the job with "
                                  "the hybrid planner, or run this plan with the AdaPtis executor")
    return plan.parallel


def require_model(model: ModelSpec | None, fmt: str) -> ModelSpec:
    if model is None:
        raise SpecError("model", f"{fmt} needs the plan's model (its layers and shape): give --model")
    return model


def placement(plan: Plan) -> tuple[str, int]:
    """(``loop``, ``v-shape`` or ``custom``, stages per rank; 0 when ranks hold different numbers of stages)."""
    devices = [stage.device for stage in plan.stages]
    counts = Counter(devices)
    per_rank = counts[0] if len(set(counts.values())) == 1 and len(counts) == plan.num_devices else 0
    return placement_shape(devices, plan.num_devices), per_rank


def is_own_order(plan: Plan) -> bool:
    """Whether the plan's per-rank action order is AdaPtis's own (searched or edited), not a named schedule's."""
    return plan.strategy not in SCHEDULE_NAMES


def recompute_mode(config: ParallelConfig) -> tuple[str, str]:
    """The one recomputation mode a framework applies to every layer, and what that loses (empty when nothing).

    A per-stage list becomes the heaviest mode any stage uses, so every stage still fits in memory; the stages that
    planned a lighter mode recompute more than planned."""
    if isinstance(config.recompute, str):
        return config.recompute, ""
    modes = set(config.recompute)
    if len(modes) == 1:
        return config.recompute[0], ""
    heaviest = max(modes, key=RECOMPUTE_MODES.index)
    lighter = [index for index, mode in enumerate(config.recompute) if mode != heaviest]
    return heaviest, (f"per-stage recomputation ({config.recompute_text()}): one mode applies to every layer, so "
                      f"this uses {heaviest!r} everywhere and stage(s) {_ranges(lighter)} recompute more than planned")


def seq_len_of(plan: Plan, model: ModelSpec, seq_len: int | None = None) -> int:
    value = seq_len or plan.meta.get("seq_len") or model.seq_len
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SpecError("meta.seq_len", f"must be a positive integer, got {value!r}")
    return value


def stage_devices(plan: Plan) -> str:
    return "[" + ", ".join(str(stage.device) for stage in plan.stages) + "]"


def header_lines(title: str, lost: list[str]) -> list[str]:
    """The export's opening comment: the title, then what the target cannot express of this plan (computed from
    the plan), or that it expresses all of it."""
    lines = wrap(f"# {title}", "#   ")
    if lost:
        lines.append("# What this cannot express of the plan (the AdaPtis executor runs the plan as planned:")
        lines.append("#   python -m executor run PLAN, or Run on the plan's page):")
        for item in lost:
            lines.extend(wrap(f"#   - {item}", "#     "))
    else:
        lines.append("# It expresses all of the plan: partition, placement, schedule, degrees and batch.")
    return lines


def wrap(text: str, indent: str, width: int = 116) -> list[str]:
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = indent + word
        else:
            line = f"{line} {word}" if line else word
    return lines + [line]


def _ranges(indices: list[int]) -> str:
    runs: list[list[int]] = []
    for index in indices:
        if runs and runs[-1][1] == index - 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
