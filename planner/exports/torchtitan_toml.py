"""A hybrid-parallel plan as a torchtitan job config (TOML), for ``torchtitan/train.py --job.config_file FILE``.

The sections and keys are torchtitan's ``JobConfig`` (``torchtitan/config/job_config.py`` of torchtitan 0.2, the last
release whose ``ConfigManager`` reads TOML; 0.3 takes the same ``section.key`` names as command-line overrides):
``[model] name, flavor``; ``[training] local_batch_size, global_batch_size, seq_len``; ``[parallelism]
data_parallel_replicate_degree, data_parallel_shard_degree, fsdp_reshard_after_forward, tensor_parallel_degree,
pipeline_parallel_degree, module_fqns_per_model_part, pipeline_parallel_schedule, pipeline_parallel_schedule_csv,
pipeline_parallel_microbatch_size, context_parallel_degree, expert_parallel_degree,
expert_tensor_parallel_degree``; ``[activation_checkpoint] mode, selective_ac_option``; ``[quantize.linear.float8]``.
``tests/planner/test_export_frameworks.py`` loads the file with torchtitan's own ``ConfigManager`` and checks the
degrees with its ``ParallelDims``.

What torchtitan can take of a plan (``torchtitan/distributed/pipeline_parallel.py``):

- the partition, exactly: ``module_fqns_per_model_part`` lists each stage's modules (``tok_embeddings``,
  ``layers.<i>``, ``norm`` and ``output``, the names of torchtitan's decoder models);
- the placement when it is a loop (stage k on rank k mod p) or, with two stages per rank, a V (``ZBVZeroBubble``'s);
- the schedule: a named one for our baselines, and AdaPtis's own per-rank order through
  ``pipeline_parallel_schedule_csv``, which makes torchtitan run torch's ``_PipelineScheduleRuntime`` on the CSV that
  ``python -m planner export PLAN --to torch-csv`` writes (torch lowers its sends and receives itself).

The file's opening comment lists what the plan loses there (``torchtitan_losses``): a placement neither loop nor V,
ZeRO-1 (torchtitan shards with FSDP2, parameters and gradients too), per-stage recomputation, a model torchtitan has
no flavor of.
"""

from __future__ import annotations

import json
import math

from planner.exports.hybrid_plan import (header_lines, is_own_order, placement, recompute_mode, require_model,
                                         require_v2, seq_len_of, stage_devices, wrap)
from planner.plan import Plan
from planner.spec.model import ModelSpec, MoEMLP
from planner.spec.presets import load_model_preset

FORMAT = "torchtitan-toml"
SCHEDULE_CSV = "adaptis-schedule.csv"
# our baseline schedules -> torch.distributed.pipelining's schedule names, as torchtitan's pipeline_parallel_schedule
# takes them (torch's get_schedule_class)
SCHEDULES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved-1f1b": "Interleaved1F1B", "zb-h1": "InterleavedZeroBubble",
             "zb-v": "ZBVZeroBubble"}
# model presets torchtitan ships a flavor of (torchtitan/models/<name>/__init__.py)
FLAVORS = {"llama-3-8b": ("llama3", "8B"), "tiny-llama": ("llama3", "debugmodel"),
           "deepseek-v3": ("deepseek_v3", "671B"), "deepseek-v2-lite": ("deepseek_v3", "16B"),
           "qwen3-30b-a3b": ("qwen3", "30B-A3B"), "gpt-oss-20b": ("gpt_oss", "20b")}


def _flavor(model: ModelSpec) -> tuple[str | None, str | None]:
    """torchtitan's (model, flavor) for ``model``: the flavor of the preset whose architecture it has, whatever it is
    called (an uploaded Meta-Llama-3-8B config is ``llama3`` ``8B``; a spec named ``llama-3-8b`` with other shapes is
    none); (None, None) for none."""
    shape = model.architecture()
    return next((flavor for preset, flavor in FLAVORS.items() if load_model_preset(preset).architecture() == shape),
                (None, None))


def torchtitan_toml(plan: Plan, model: ModelSpec | None, seq_len: int | None = None,
                    schedule_csv: str = SCHEDULE_CSV) -> str:
    model = require_model(model, FORMAT)
    sections, lost, notes = _config(plan, model, seq_len, schedule_csv)
    config = plan.parallel
    title = (f"torchtitan job config for {model.name}: {config.short()} on {config.num_gpus} GPUs, plan "
             f"{plan.strategy!r}. Run: torchrun --nproc-per-node ... -m torchtitan.train --job.config_file THIS_FILE")
    lines = header_lines(title, lost)
    lines += [line for note in notes for line in wrap(f"# {note}", "#   ")]
    for name, values in sections.items():
        lines += ["", f"[{name}]"]
        for key, value in values.items():
            if isinstance(value, tuple):   # (value, comment)
                value, comment = value
                lines.append(f"# {comment}")
            lines.append(f"{key} = {_toml(value)}")
    return "\n".join(lines) + "\n"


def torchtitan_losses(plan: Plan, model: ModelSpec | None, seq_len: int | None = None) -> list[str]:
    """What torchtitan cannot express of the plan, one sentence each (empty: nothing)."""
    return _config(plan, require_model(model, FORMAT), seq_len, SCHEDULE_CSV)[1]


def _config(plan: Plan, model: ModelSpec, seq_len: int | None, schedule_csv: str):
    config = require_v2(plan, FORMAT)
    lost: list[str] = []
    notes: list[str] = []
    name, flavor = _flavor(model)
    if name is None:
        name, flavor = ("deepseek_v3", "16B") if any(isinstance(layer.mlp, MoEMLP) for layer in model.layers) \
            else ("llama3", "8B")
        lost.append(f"the model: torchtitan ships no flavor of {model.name}; [model] names the closest family "
                    f"({name}), register a flavor with {model.name}'s shape before running")
    mixers = sorted({layer.mixer.type for layer in model.layers if layer.mixer is not None} - {"attention"})
    if mixers:
        lost.append(f"{model.name}'s {', '.join(mixers)} layers: torchtitan's models are attention-only")
    parallelism: dict = {}
    parallelism.update(_data_parallel(config, lost))
    parallelism["tensor_parallel_degree"] = config.tp
    parallelism["context_parallel_degree"] = config.cp
    parallelism["pipeline_parallel_degree"] = config.pp
    if config.pp > 1 or plan.num_stages > 1:
        parallelism.update(_pipeline(plan, model, schedule_csv, lost, notes))
    parallelism["pipeline_parallel_microbatch_size"] = config.microbatch_size
    parallelism["expert_parallel_degree"] = config.ep
    if config.ep > 1:   # torchtitan takes expert TP = TP or 1
        parallelism["expert_tensor_parallel_degree"] = config.etp
        if config.etp not in (1, config.tp):
            lost.append(f"expert TP {config.etp}: torchtitan's experts take TP{config.tp} or 1")
    mode, recompute_lost = recompute_mode(plan, "torchtitan")
    lost += recompute_lost
    local = config.microbatch_size * config.num_microbatches
    sections = {
        "job": {"description": f"AdaPtis plan {plan.strategy}: {config.short()}"},
        "model": {"name": (name, "torchtitan's model family and flavor (torchtitan/models/<name>/__init__.py)"),
                  "flavor": flavor},
        "training": {"local_batch_size": (local, f"per data-parallel rank per step: {config.num_microbatches} "
                                                 f"micro-batches of {config.microbatch_size}"),
                     "global_batch_size": config.global_batch,
                     "seq_len": seq_len_of(plan, model, seq_len),
                     # fp32 master weights, bf16 compute (FSDP's mixed precision), as Megatron's --bf16
                     "mixed_precision_param": "bfloat16" if model.dtype == "bf16" else "float32"},
        "parallelism": parallelism,
        "activation_checkpoint": {"mode": mode},
    }
    if mode == "selective":   # torchtitan's default option is every second block whole ("2")
        sections["activation_checkpoint"]["selective_ac_option"] = (
            "op", "per-op checkpointing, as the prediction costs with --framework torchtitan")
    if config.precision == "fp8":
        # torchtitan's float8 model converter (torchao's Float8Linear; ``quantize.linear.float8`` in torchtitan 0.2's
        # converter registry and JobConfig) swaps the transformer blocks' linear layers; the embedding, the output
        # layer, norms and attention stay in bf16, as the prediction assumes
        sections["model"]["converters"] = (["quantize.linear.float8"], "FP8 linear layers (torchao), as planned")
        sections["quantize.linear.float8"] = {
            "recipe_name": ("tensorwise", "per-tensor scaling, the recipe the prediction costs"),
            "filter_fqns": ["output"]}
    return sections, lost, notes


def _data_parallel(config, lost: list[str]) -> dict:
    """Full sharding is torchtitan's FSDP2 over the data-parallel ranks. ZeRO-1 (the distributed optimizer) becomes
    FSDP, kept
    unsharded between forward and backward (``fsdp_reshard_after_forward = "never"``, ZeRO-2's memory); plain data
    parallelism is DDP (replicate), unless experts need FSDP ranks to borrow (EP must divide dp_shard x CP)."""
    if config.dp == 1:
        return {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": 1}
    if config.sharding == "full":   # FSDP2 as planned: resharded after each forward
        return {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": config.dp,
                "fsdp_reshard_after_forward": "always"}
    if config.sharding == "optimizer":
        lost.append(f"ZeRO-1 (the distributed optimizer over DP{config.dp}): torchtitan shards with FSDP2, "
                    "parameters and gradients too; fsdp_reshard_after_forward = \"never\" keeps the parameters "
                    "gathered from forward to backward, so memory and communication differ from the prediction")
        return {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": config.dp,
                "fsdp_reshard_after_forward": "never"}
    shard = config.ep // math.gcd(config.ep, config.cp) if config.ep > 1 else 1
    if shard > 1:
        lost.append(f"plain data parallelism over DP{config.dp}: torchtitan's experts borrow their ranks from FSDP, so "
                    f"EP{config.ep} needs {shard} FSDP ranks: HSDP {config.dp // shard} x {shard}")
    return {"data_parallel_replicate_degree": config.dp // shard, "data_parallel_shard_degree": shard}


def _pipeline(plan: Plan, model: ModelSpec, schedule_csv: str, lost: list[str], notes: list[str]) -> dict:
    shape, per_rank = placement(plan)
    fits = per_rank and (shape == "loop" or (shape == "v-shape" and per_rank == 2))
    values: dict = {"module_fqns_per_model_part": ([_fqns(model, stage.layers) for stage in plan.stages],
                                                   "the plan's partition, stage by stage (torchtitan's module names)")}
    if not fits:
        lost.append(f"AdaPtis's placement ({shape}, stage devices {stage_devices(plan)}): torchtitan places stage k "
                    "on rank k mod p (or a V with two stages per rank for ZBVZeroBubble), as many on every rank")
        looped = plan.num_stages > plan.num_devices
        if plan.num_stages % plan.num_devices:   # torchtitan needs as many stages on every rank: one per rank
            values["module_fqns_per_model_part"] = ([_fqns(model, layers) for layers in _per_rank(plan)],
                                                    "each rank's layers as one stage, as many as the plan gives it")
            looped = False
        values["pipeline_parallel_schedule"] = "Interleaved1F1B" if looped else "1F1B"
        if is_own_order(plan):
            lost.append(f"AdaPtis's own per-rank action order ({plan.strategy}): it needs the plan's placement; "
                        f"torchtitan runs {values['pipeline_parallel_schedule']}")
        return values
    if not is_own_order(plan):
        values["pipeline_parallel_schedule"] = SCHEDULES[plan.strategy]
        return values
    # AdaPtis's order: torch's runtime schedule reads it from the CSV; the named schedule only picks the stage style
    values["pipeline_parallel_schedule"] = ("ZBVZeroBubble" if shape == "v-shape" else
                                            "Interleaved1F1B" if per_rank > 1 else "1F1B",
                                            "with a CSV this picks only how stages sit on ranks (loop or V)")
    values["pipeline_parallel_schedule_csv"] = (schedule_csv, "AdaPtis's per-rank order, loaded by torch's "
                                                              "_PipelineScheduleRuntime")
    notes.append(f"Write the plan's order next to this file: python -m planner export PLAN --to torch-csv --out "
                 f"{schedule_csv} (the page's torch CSV download)")
    return values


def _per_rank(plan: Plan) -> list[list[int]]:
    per_device = [sum(len(plan.stages[index].layers) for index in plan.stages_on(device))
                  for device in range(plan.num_devices)]
    split, start = [], 0
    for count in per_device:
        split.append(list(range(start, start + count)))
        start += count
    return split


def _fqns(model: ModelSpec, layers) -> list[str]:
    """torchtitan's module names of our layers: the embedding ``tok_embeddings``, block i ``layers.<i>``, the head
    ``norm`` and ``output`` (torchtitan's decoder models; ``generate_llm_fqn_per_model_part``)."""
    names = model.layer_names()
    fqns: list[str] = []
    for layer in layers:
        name = names[layer]
        fqns += ["tok_embeddings"] if name == "embed" else ["norm", "output"] if name == "head" else [name]
    return fqns


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)   # a TOML basic string: JSON's escapes are TOML's
    if isinstance(value, list) and value and isinstance(value[0], list):
        return "[\n" + "".join(f"  {_toml(item)},\n" for item in value) + "]"
    return "[" + ", ".join(_toml(item) for item in value) + "]"


__all__ = ["FORMAT", "SCHEDULES", "torchtitan_losses", "torchtitan_toml"]
