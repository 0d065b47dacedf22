"""What the framework exports of a hybrid-parallel (``adaptis.plan/v2``) plan share: the plan's configuration, the
shape of its placement, the schedule it was built with, its recomputation and its sequence length.

``planner.exports.megatron_args`` and ``planner.exports.torchtitan_toml`` each say, from these facts, what their
framework cannot express of the plan; both start the file with that list (``header_lines``).
"""

from __future__ import annotations

from collections import Counter

from planner.errors import SpecError
from planner.parallel.config import RECOMPUTE_MODES, ParallelConfig
from planner.parallel.cost import DEFAULT_FRAMEWORK, FRAMEWORKS
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


# What each framework's selective recomputation is (planner.parallel.cost.FRAMEWORKS' ``selective``), in words
SELECTIVE_WORDS = {
    "attention": "the core attention only, the rest of each layer kept (Megatron-Core's --recompute-granularity "
                 "selective)",
    "per_op": "per-op checkpointing, every other matmul's output kept and the rest of each block re-run (torchtitan's "
              "selective_ac_option = \"op\")",
}


def recompute_mode(plan: Plan, framework: str) -> tuple[str, list[str]]:
    """The one recomputation mode ``framework`` (``planner.parallel.cost.FRAMEWORKS``) applies to every layer, and
    what that loses of the plan, one sentence each.

    A per-stage list becomes the heaviest mode any stage uses, so every stage still fits in memory; the stages that
    planned a lighter mode recompute more than planned. ``selective`` is each framework's own: a plan predicted with
    another framework's (``meta.framework``) keeps a different share of each layer and re-runs a different share."""
    config, lost = plan.parallel, []
    if isinstance(config.recompute, str) or len(set(config.recompute)) == 1:
        mode = config.recompute if isinstance(config.recompute, str) else config.recompute[0]
    else:
        mode = max(set(config.recompute), key=RECOMPUTE_MODES.index)
        lighter = [index for index, each in enumerate(config.recompute) if each != mode]
        lost.append(f"per-stage recomputation ({config.recompute_text()}): one mode applies to every layer, so this "
                    f"uses {mode!r} everywhere and stage(s) {_ranges(lighter)} recompute more than planned")
    planned = plan.meta.get("framework", DEFAULT_FRAMEWORK)
    planned_kind, kind = FRAMEWORKS[planned]["selective"], FRAMEWORKS[framework]["selective"]
    if mode == "selective" and planned_kind != kind:
        lost.append(f"selective recomputation as predicted ({planned}'s: {SELECTIVE_WORDS[planned_kind]}): "
                    f"{framework} runs {SELECTIVE_WORDS[kind]}, so each stage's memory and time differ from the "
                    f"prediction (plan the job with framework {framework} to predict it)")
    return mode, lost


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
