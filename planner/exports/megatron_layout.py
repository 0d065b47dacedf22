"""Megatron-LM's ``--pipeline-model-parallel-layout`` string for a plan, where Megatron can express it.

Megatron's grammar (``megatron/core/transformer/pipeline_parallel_layer_layout.py``): virtual stages in
order separated by ``|``, one letter per layer — ``E`` embedding, ``t`` transformer layer, ``L`` loss
(the output layer and loss) — with ``x*n`` and ``(...)*n`` repeats and cosmetic commas; virtual stage k
runs on pipeline rank k mod p. So a plan is expressible when its placement is a loop with the same number
of chunks on every device, its first layer is the only embedding and its last the only head. Decoder and
mlp layers both become ``t`` (Megatron's hybrid models describe their layer types separately). The
string carries partition and placement only; Megatron picks its own schedule.

Megatron's hybrid (Mamba) models (``MambaModel``, built from ``--hybrid-override-pattern``) refuse a layout with
virtual stages and *ignore* one without: they split the pattern's layers evenly over the pipeline ranks. The file
``megatron_layout_file`` writes says so in a comment for such a model; the CLI and the web write that file.
"""

from __future__ import annotations

from itertools import groupby

from planner.errors import SpecError
from planner.placement import loop_placement
from planner.plan import Plan
from planner.profile import Profile
from planner.spec.model import ModelSpec

KIND_LETTERS = {"embedding": "E", "decoder": "t", "mlp": "t", "head": "L"}
HYBRID_MIXERS = ("mamba", "mamba2")  # what makes Megatron build a MambaModel (--hybrid-override-pattern)
HYBRID_IGNORES_NOTE = (
    "# Megatron-LM's hybrid (Mamba) models ignore --pipeline-model-parallel-layout when it has no virtual stages:\n"
    "# they split the layers of --hybrid-override-pattern evenly over the pipeline ranks instead. This layout is\n"
    "# what AdaPtis planned, for reference; Megatron will not apply it to {model}.\n")


def _layer_letters(profile: Profile | ModelSpec) -> list[str]:
    letters = []
    for index, layer in enumerate(profile.layers):
        if layer.kind not in KIND_LETTERS:
            raise SpecError(f"layers[{index}].kind", f"Megatron's layout has no letter for {layer.kind!r} layers")
        letters.append(KIND_LETTERS[layer.kind])
    last = len(letters) - 1
    for index, letter in enumerate(letters):
        if letter == "E" and index != 0:
            raise SpecError(f"layers[{index}].kind", "Megatron allows one embedding layer, and only first")
        if letter == "L" and index != last:
            raise SpecError(f"layers[{index}].kind", "Megatron allows one head (loss) layer, and only last")
    if letters[0] != "E":
        raise SpecError("layers[0].kind", "Megatron's layout must start with the embedding layer")
    if letters[last] != "L":
        raise SpecError(f"layers[{last}].kind", "Megatron's layout must end with the head (loss) layer")
    return letters


def run_lengths(items: list) -> list[tuple[object, int]]:
    """Consecutive equal items folded into (item, count): the run-length form both Megatron files write."""
    return [(item, sum(1 for _ in group)) for item, group in groupby(items)]


def _stage_text(letters: list[str]) -> str:
    return ",".join(letter if count == 1 else f"{letter}*{count}" for letter, count in run_lengths(letters))


def _join_stages(stage_texts: list[str]) -> str:
    """Fold runs of identical stages: ``t*2|t*2|t*2|L`` -> ``(t*2|)*3,L``."""
    parts, index = [], 0
    while index < len(stage_texts):
        count = 1
        while index + count < len(stage_texts) and stage_texts[index + count] == stage_texts[index]:
            count += 1
        is_last_group = index + count == len(stage_texts)
        repeated = count - 1 if is_last_group else count   # the final stage takes no trailing '|'
        if repeated >= 2:
            parts.append(f"({stage_texts[index]}|)*{repeated}" + ("," if index + repeated < len(stage_texts) else ""))
        else:
            parts.extend(f"{stage_texts[index]}|" for _ in range(repeated))
        if is_last_group:
            parts.append(stage_texts[index])
        index += count
    return "".join(parts)


def megatron_layout(plan: Plan, profile: Profile) -> str:
    if sum(len(stage.layers) for stage in plan.stages) != profile.num_layers:
        raise SpecError("stages", f"cover {sum(len(s.layers) for s in plan.stages)} layers; "
                                  f"the profile has {profile.num_layers}")
    devices = tuple(stage.device for stage in plan.stages)
    if plan.num_stages % plan.num_devices or devices != loop_placement(plan.num_stages, plan.num_devices):
        raise SpecError("stages", "Megatron runs virtual stage k on rank k mod p with the same number of "
                                  "stages on every rank; this plan's placement differs "
                                  f"(stage devices {list(devices)})")
    return layout_of_stages([stage.layers for stage in plan.stages], profile)


def layout_of_stages(stage_layers: list, profile: Profile | ModelSpec) -> str:
    """The layout string of consecutive stages given as lists of layer indices, in virtual-stage order (virtual stage
    k on rank k mod p). ``profile`` (or a ``ModelSpec``: both have ``layers`` with a ``kind``) names the layer
    kinds. ``megatron_layout`` checks the plan's placement first; ``planner.exports.megatron_args`` also lays out a
    per-rank split of its own."""
    letters = _layer_letters(profile)
    return _join_stages([_stage_text([letters[layer] for layer in layers]) for layers in stage_layers])


def is_megatron_hybrid(model: ModelSpec) -> bool:
    """Whether Megatron-LM builds ``model`` as a hybrid (Mamba) model."""
    return any(layer.mixer is not None and layer.mixer.type in HYBRID_MIXERS for layer in model.layers)


def megatron_layout_file(plan: Plan, profile: Profile, model: ModelSpec | None = None) -> str:
    """The layout as a file: one line, after a note where ``model`` is a hybrid (Mamba) model that ignores it.

    A hybrid model's plan with virtual stages is a SpecError on ``format``: Megatron refuses that layout."""
    hybrid = model is not None and is_megatron_hybrid(model)
    if hybrid and plan.num_stages > plan.num_devices:
        raise SpecError("format", f"Megatron-LM's hybrid (Mamba) models refuse a --pipeline-model-parallel-layout "
                                  f"with virtual stages, and this plan has {plan.num_stages} stages on "
                                  f"{plan.num_devices} pipeline ranks; {model.name} mixes Mamba layers with "
                                  "attention")
    layout = megatron_layout(plan, profile)
    return (HYBRID_IGNORES_NOTE.format(model=model.name) if hybrid else "") + layout + "\n"
