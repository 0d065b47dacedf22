"""The hybrid plan's framework exports read by the frameworks' own code: the Megatron-LM arguments built into
Megatron-Core's ``TransformerConfig`` (with its ``ModelParallelConfig`` fields), ``DistributedDataParallelConfig`` and
``ConstantNumMicroBatchesCalculator``; the torchtitan TOML loaded by torchtitan's ``ConfigManager`` and its degrees
checked by torchtitan's ``ParallelDims``; AdaPtis's order loaded by torch's ``_PipelineScheduleRuntime``.

Megatron-LM's own argument parser (``megatron/training/arguments.py``) is not in the megatron-core wheel: ``ARGS``
maps each option the export writes to the Megatron-Core field of that name (an option the map does not know fails the
test, so every argument written lands somewhere checked)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
import types
import warnings
from unittest import mock

import pytest
import torch
import torch.nn.functional as F

from planner.parallel import planning as hybrid
from planner.exports import export_losses, export_plan
from planner.editing import StoredPlan, edit_context, predict_edit
from planner.exports.hybrid_plan import is_own_order, placement
from planner.hardware import named_cluster_document
from planner.exports.megatron_args import megatron_argv
from planner.plan import load_plan
from planner.spec.model import DenseMLP
from planner.spec.presets import load_model_preset
from tests.conftest import relaid_stages

with warnings.catch_warnings():
    warnings.simplefilter("ignore")   # no Transformer Engine or Apex here: Megatron-Core falls back, and says so
    from megatron.core.activations import quick_gelu, squared_relu
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.model_parallel_config import ModelParallelConfig
    from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.transformer_config import MLATransformerConfig


def _torchtitan():
    """torchtitan's config and mesh modules. ``import torchtitan`` runs its float8 quantization import, which needs
    triton (a GPU compiler the CPU torch wheel lacks); its config and ParallelDims need neither, so the package is
    entered without its ``__init__``."""
    if "torchtitan" not in sys.modules:
        spec = importlib.util.find_spec("torchtitan")
        package = types.ModuleType("torchtitan")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["torchtitan"] = package
    from torchtitan.config.manager import ConfigManager
    from torchtitan.distributed.parallel_dims import ParallelDims
    return ConfigManager, ParallelDims


# (Megatron-LM option, Megatron-Core field, type); a flag's type is a constant, the field's value when given
ARGS = [
    ("--tensor-model-parallel-size", "tensor_model_parallel_size", int),
    ("--pipeline-model-parallel-size", "pipeline_model_parallel_size", int),
    ("--pipeline-model-parallel-layout", "pipeline_model_parallel_layout", str),
    ("--context-parallel-size", "context_parallel_size", int),
    ("--expert-model-parallel-size", "expert_model_parallel_size", int),
    ("--expert-tensor-parallel-size", "expert_tensor_parallel_size", int),
    ("--sequence-parallel", "sequence_parallel", True),
    ("--recompute-granularity", "recompute_granularity", str),
    ("--recompute-method", "recompute_method", str),
    ("--recompute-num-layers", "recompute_num_layers", int),
    ("--recompute-modules", "recompute_modules", list),
    ("--num-layers", "num_layers", int),
    ("--hidden-size", "hidden_size", int),
    ("--num-attention-heads", "num_attention_heads", int),
    ("--num-query-groups", "num_query_groups", int),
    ("--kv-channels", "kv_channels", int),
    ("--ffn-hidden-size", "ffn_hidden_size", int),
    ("--swiglu", "gated_linear_unit", True),
    ("--glu-linear-offset", "glu_linear_offset", float),
    ("--activation-func-clamp-value", "activation_func_clamp_value", float),
    ("--no-bias-gelu-fusion", "bias_activation_fusion", False),
    ("--normalization", "normalization", str),
    ("--disable-bias-linear", "add_bias_linear", False),
    ("--add-qkv-bias", "add_qkv_bias", True),
    ("--qk-layernorm", "qk_layernorm", True),
    ("--num-experts", "num_moe_experts", int),
    ("--moe-router-topk", "moe_router_topk", int),
    ("--moe-ffn-hidden-size", "moe_ffn_hidden_size", int),
    ("--moe-shared-expert-intermediate-size", "moe_shared_expert_intermediate_size", int),
    ("--moe-layer-freq", "moe_layer_freq", lambda text: eval(text, {})),   # Megatron-LM's moe_freq_type
    ("--moe-aux-loss-coeff", "moe_aux_loss_coeff", float),
    ("--moe-latent-size", "moe_latent_size", int),
    ("--moe-router-num-groups", "moe_router_num_groups", int),
    ("--moe-router-group-topk", "moe_router_group_topk", int),
    ("--moe-grouped-gemm", "moe_grouped_gemm", True),
    ("--moe-token-dispatcher-type", "moe_token_dispatcher_type", str),
    ("--moe-flex-dispatcher-backend", "moe_flex_dispatcher_backend", str),
    ("--multi-latent-attention", "multi_latent_attention", True),
    ("--q-lora-rank", "q_lora_rank", int),
    ("--kv-lora-rank", "kv_lora_rank", int),
    ("--qk-head-dim", "qk_head_dim", int),
    ("--qk-pos-emb-head-dim", "qk_pos_emb_head_dim", int),
    ("--v-head-dim", "v_head_dim", int),
    ("--mamba-state-dim", "mamba_state_dim", int),
    ("--mamba-head-dim", "mamba_head_dim", int),
    ("--mamba-num-groups", "mamba_num_groups", int),
    ("--mamba-num-heads", "mamba_num_heads", int),
    ("--bf16", "bf16", True),
    ("--fp8-format", "fp8", str),
    ("--fp8-recipe", "fp8_recipe", str),
    ("--fp16", "fp16", True),
]
# options that are not configuration fields: the training loop's, the GPT/Mamba model builder's
LOOP_ARGS = [("--micro-batch-size", int), ("--global-batch-size", int), ("--seq-length", int),
             ("--use-distributed-optimizer", True), ("--group-query-attention", True),
             ("--untie-embeddings-and-output-weights", True), ("--position-embedding-type", str),
             ("--max-position-embeddings", int), ("--hybrid-override-pattern", str),
             ("--use-megatron-fsdp", True), ("--data-parallel-sharding-strategy", str),
             # the config's activation_func (core_transformer_config_from_args), and --quick-geglu its gate too
             ("--squared-relu", True), ("--quick-geglu", True)]


def megatron_parse(argv: list[str]) -> tuple[dict, dict]:
    """(Megatron-Core config fields, the loop's and model builder's options); an unknown option is an error."""
    parser = argparse.ArgumentParser(exit_on_error=False)
    for option, field, kind in ARGS:
        if isinstance(kind, bool):
            parser.add_argument(option, dest=field, action="store_const", const=kind, default=None)
        elif kind is list:   # Megatron-LM's nargs="*" options
            parser.add_argument(option, dest=field, nargs="*", default=None)
        else:
            parser.add_argument(option, dest=field, type=kind, default=None)
    for option, kind in LOOP_ARGS:
        dest = "loop_" + option[2:].replace("-", "_")
        if isinstance(kind, bool):
            parser.add_argument(option, dest=dest, action="store_true")
        else:
            parser.add_argument(option, dest=dest, type=kind)
    namespace, unknown = parser.parse_known_args(argv)
    assert not unknown, f"options Megatron-LM's map here does not know: {unknown}"
    values = vars(namespace)
    fields = {key: value for key, value in values.items() if not key.startswith("loop_") and value is not None}
    loop = {key[5:]: value for key, value in values.items() if key.startswith("loop_")}
    return fields, loop


def megatron_config(fields: dict) -> TransformerConfig:
    config_class = MLATransformerConfig if fields.get("multi_latent_attention") else TransformerConfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return config_class(**fields, pipeline_dtype=torch.bfloat16)


# ---- the plans ---------------------------------------------------------------------------------------------------

PLANS = {   # name: (model, cluster, GPUs, sequence length, global batch, pins)
    "llama-dense": ("llama-3-8b", "h100-sxm-4x8", 32, 4096, 256, {"tp": 2, "pp": 2, "dp": 8}),
    "qwen-moe-ep": ("qwen3-30b-a3b", "h100-sxm-4x8", 32, 4096, 128, {"ep": 8, "tp": 1, "pp": 2}),
    "deepseek-mla": ("deepseek-v2-lite", "h100-sxm-2x8", 16, 4096, 128, {"ep": 4, "pp": 2}),
    "nemotron-mamba": ("nemotron-h-8b", "h100-sxm-1x8", 8, 4096, 128, {"pp": 2}),
    "llama-fsdp-fp8": ("llama-3-8b", "h100-sxm-2x8", 16, 4096, 64,
                       {"tp": 2, "pp": 2, "sharding": "full", "precision": "fp8", "recompute": "selective"}),
}


@pytest.fixture(scope="module")
def plans():
    made = {}
    for name, (model, cluster, gpus, seq_len, batch, pins) in PLANS.items():
        # A budget that never binds (each search converges in well under a second on an idle host): the plans,
        # and so which of them get AdaPtis's own order, must not depend on how busy the host is.
        result = hybrid.search(model, cluster, gpus, seq_len, batch, pins, time_budget_s=120)
        made[name] = (load_plan(result.plan_document()), load_model_preset(model))
    return made


@pytest.mark.parametrize("name", list(PLANS))
def test_megatron_args_build_megatron_cores_config_with_the_plans_degrees(plans, name):
    plan, model = plans[name]
    config = plan.parallel
    text = export_plan("megatron-args", plan, None, None, model)
    fields, loop = megatron_parse(megatron_argv(text))
    built = megatron_config(fields)
    assert isinstance(built, ModelParallelConfig)
    assert (built.tensor_model_parallel_size, built.pipeline_model_parallel_size, built.context_parallel_size,
            built.expert_model_parallel_size) == (config.tp, config.pp, config.cp, config.ep)
    assert built.sequence_parallel == (config.tp > 1)
    # Megatron's data-parallel size is what the other degrees leave of the world: the plan's GPUs
    data_parallel = plan.meta["gpus"] // (config.tp * config.cp * config.pp)
    assert data_parallel == config.dp and config.tp * config.cp * config.pp * data_parallel == config.num_gpus
    calculator = ConstantNumMicroBatchesCalculator(loop["global_batch_size"], loop["micro_batch_size"], data_parallel,
                                                   False, 0)
    assert calculator.get() == config.num_microbatches and loop["micro_batch_size"] == config.microbatch_size
    assert loop["seq_length"] == plan.meta["seq_len"]
    ddp = DistributedDataParallelConfig(use_distributed_optimizer=loop["use_distributed_optimizer"],
                                        use_megatron_fsdp=loop["use_megatron_fsdp"],
                                        data_parallel_sharding_strategy=loop["data_parallel_sharding_strategy"]
                                        or "no_shard")
    assert ddp.use_distributed_optimizer == (config.sharding == "optimizer")
    assert (ddp.use_megatron_fsdp, ddp.data_parallel_sharding_strategy) == (
        (True, "optim_grads_params") if config.sharding == "full" else (False, "no_shard"))
    assert (built.fp8, built.fp8_recipe) == (("hybrid", "delayed") if config.precision == "fp8" else (None, "delayed"))
    blocks = [layer for layer in model.layers if layer.kind in ("decoder", "mlp")]
    # Nemotron-H's MLP layers are squared ReLU, which Megatron-LM takes as the config's activation_func
    squared = [layer for layer in blocks if isinstance(layer.mlp, DenseMLP) and layer.mlp.activation == "squared_relu"]
    assert loop["squared_relu"] == bool(squared) == (name == "nemotron-mamba")
    if squared:
        assert not built.gated_linear_unit
        megatron_config({**fields, "activation_func": squared_relu})
    if loop["hybrid_override_pattern"]:   # Megatron's hybrid model: one symbol per Megatron layer
        assert built.num_layers == len(loop["hybrid_override_pattern"]) and "M" in loop["hybrid_override_pattern"]
        assert built.pipeline_model_parallel_layout is None
        assert "refuse it with them" in text or plan.num_stages == 1
    else:
        assert built.num_layers == len(blocks)
        layout = built.pipeline_model_parallel_layout   # parsed and checked against num_layers by Megatron-Core
        assert layout is not None and len(layout.layout) == config.pp
    assert built.hidden_size == model.hidden_size


def test_megatron_args_keep_the_plans_own_partition_where_its_placement_is_a_loop(plans):
    plan, model = plans["qwen-moe-ep"]
    shape, per_rank = placement(plan)
    fields, loop = megatron_parse(megatron_argv(export_plan("megatron-args", plan, None, None, model)))
    built = megatron_config(fields)
    assert built.num_moe_experts == 128 and built.moe_router_topk == 8 and built.expert_model_parallel_size == 8
    if shape == "loop" and per_rank:
        stages = [stage for rank in built.pipeline_model_parallel_layout.layout for stage in rank]
        assert (built.virtual_pipeline_model_parallel_size or 1) == per_rank
        # Megatron's layout holds per rank its virtual stages; stage k of the plan is rank k mod p's (k // p)th
        for index, stage in enumerate(plan.stages):
            megatron_stage = built.pipeline_model_parallel_layout.layout[index % plan.num_devices][
                index // plan.num_devices]
            assert len(megatron_stage) == len(stage.layers)
        assert len(stages) == plan.num_stages


def test_a_plan_with_adaptis_order_says_what_megatron_and_torchtitan_lose(plans):
    plan, model = plans["llama-dense"]
    assert plan.strategy == "adaptis"
    for fmt in ("megatron-args", "torchtitan-toml"):
        text = export_plan(fmt, plan, None, None, model)
        header = " ".join(line.lstrip("# ") for line in text.split("\n\n")[0].splitlines() if line.startswith("#"))
        assert "What this cannot express of the plan" in header and "AdaPtis executor" in header
        shape, per_rank = placement(plan)
        torch_runs_it = per_rank and (shape == "loop" or (shape == "v-shape" and per_rank == 2))
        if fmt == "torchtitan-toml" and torch_runs_it:   # torch's runtime schedule reads the order from the CSV
            assert "Write the plan's order next to this file: python -m planner export PLAN --to torch-csv" in header
            assert "own per-rank action order" not in header
        else:
            assert "AdaPtis's own per-rank action order (adaptis" in header
        if shape == "custom":   # the placement the search chose, named by its stage devices
            devices = ", ".join(str(stage.device) for stage in plan.stages)
            assert f"AdaPtis's placement (custom, stage devices [{devices}])" in header
        lost = export_losses(fmt, plan, model)   # what the plan page lists under the download
        assert lost and all(f"- {item}" in header for item in lost)


@pytest.mark.parametrize("name", ["llama-dense", "qwen-moe-ep", "deepseek-mla", "llama-fsdp-fp8"])
def test_torchtitans_config_manager_loads_the_plans_degrees_and_batch(plans, name, tmp_path):
    ConfigManager, ParallelDims = _torchtitan()
    plan, model = plans[name]
    config = plan.parallel
    path = tmp_path / "job.toml"
    path.write_text(export_plan("torchtitan-toml", plan, None, None, model))
    job = ConfigManager().parse_args(["--job.config_file", str(path)])
    parallelism, training = job.parallelism, job.training
    assert (parallelism.tensor_parallel_degree, parallelism.pipeline_parallel_degree,
            parallelism.context_parallel_degree, parallelism.expert_parallel_degree) == (
        config.tp, config.pp, config.cp, config.ep)
    assert parallelism.data_parallel_replicate_degree * parallelism.data_parallel_shard_degree == config.dp
    dims = ParallelDims(dp_replicate=parallelism.data_parallel_replicate_degree,
                        dp_shard=parallelism.data_parallel_shard_degree, cp=config.cp, tp=config.tp, pp=config.pp,
                        ep=config.ep, etp=parallelism.expert_tensor_parallel_degree, world_size=config.num_gpus)
    assert dims.world_size == plan.meta["gpus"]
    if config.ep > 1:   # torchtitan's experts borrow FSDP ranks: EP must divide dp_shard x CP
        assert (parallelism.data_parallel_shard_degree * config.cp) % config.ep == 0
    assert training.local_batch_size // parallelism.pipeline_parallel_microbatch_size == config.num_microbatches
    assert training.global_batch_size == config.global_batch and training.seq_len == plan.meta["seq_len"]
    assert job.activation_checkpoint.mode == (config.recompute if isinstance(config.recompute, str) else "full")
    if job.activation_checkpoint.mode == "selective":   # per-op, as predicted: not every second block whole
        assert job.activation_checkpoint.selective_ac_option == "op"
    if config.precision == "fp8":   # torchao's Float8Linear with per-tensor scaling; the output layer in bf16
        assert job.model.converters == ["quantize.linear.float8"]
        assert job.quantize.linear.float8.recipe_name == "tensorwise"
        assert job.quantize.linear.float8.filter_fqns == ["output"]
    stages = parallelism.module_fqns_per_model_part
    assert stages[0][0] == "tok_embeddings" and stages[-1][-2:] == ["norm", "output"]
    blocks = [fqn for stage in stages for fqn in stage if fqn.startswith("layers.")]
    assert blocks == [f"layers.{index}" for index in range(model.num_layers - 2)]
    assert len(stages) % config.pp == 0
    from torch.distributed.pipelining.schedules import get_schedule_class
    get_schedule_class(parallelism.pipeline_parallel_schedule)   # a name torch (and so torchtitan) knows


def _relaid_with_adaptis_order(name: str, plan, model, shape: str):
    """``plan`` with two stages a rank placed as ``shape`` and AdaPtis's list scheduler's order for them, as the plan
    editor makes it (``planner.editing.predict_edit``): which placement the search picks for a job changes with the
    cost model, so the loop and the V are made here, not hoped for."""
    _, cluster, *_ = PLANS[name]
    doc = plan.to_dict()
    doc["stages"] = relaid_stages(model, plan.num_devices, shape)
    doc["meta"] = {**doc.get("meta", {}), "schedule_policy": "zero-bubble"}
    stored = StoredPlan(plan_doc=plan.to_dict(), profile_doc=None, spec_doc=model.to_dict(),
                        cluster_doc=named_cluster_document(cluster), job_seq_len=plan.meta.get("seq_len"))
    return predict_edit(edit_context(stored), stored, doc).plan


@pytest.mark.parametrize("name, shape", [("qwen-moe-ep", "v-shape"), ("deepseek-mla", "loop")])
def test_torchtitan_runs_adaptis_order_from_the_csv_where_the_placement_is_a_loop_or_v(plans, name, shape, tmp_path):
    """A plan whose placement torchtitan can build gets AdaPtis's order through pipeline_parallel_schedule_csv: its
    stages are the plan's, and torch's runtime schedule loads the CSV into the plan's order."""
    ConfigManager, _ = _torchtitan()
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime
    from torch.distributed.pipelining.stage import PipelineStage

    plan, model = plans[name]
    plan = _relaid_with_adaptis_order(name, plan, model, shape)
    assert is_own_order(plan) and placement(plan) == (shape, 2)
    toml = tmp_path / f"{name}.toml"
    toml.write_text(export_plan("torchtitan-toml", plan, None, None, model))
    parallelism = ConfigManager().parse_args(["--job.config_file", str(toml)]).parallelism
    assert parallelism.pipeline_parallel_schedule_csv == "adaptis-schedule.csv"
    assert len(parallelism.module_fqns_per_model_part) == plan.num_stages
    assert parallelism.pipeline_parallel_schedule == ("ZBVZeroBubble" if shape == "v-shape" else "Interleaved1F1B")
    csv = tmp_path / f"{name}.csv"
    csv.write_text(export_plan("torch-csv", plan, None))
    stage = mock.create_autospec(PipelineStage, instance=True)
    stage.group_rank, stage.group_size, stage.submod = 0, plan.num_devices, None
    stage.num_stages = plan.num_stages
    schedule = _PipelineScheduleRuntime([stage] * 2, plan.num_microbatches)
    schedule._load_csv(str(csv))
    for device in range(plan.num_devices):
        assert [str(a) for a in schedule.pipeline_order[device]] == [str(a) for a in plan.actions[device]]
    assert schedule.stage_index_to_group_rank == {i: s.device for i, s in enumerate(plan.stages)}
    lost = export_losses("torchtitan-toml", plan, model)
    assert not [item for item in lost if "placement" in item or "order" in item], lost


def test_a_v1_plan_is_refused_by_the_framework_formats_naming_the_format():
    from planner.baselines import build_baseline
    from planner.cost import analytic_profile
    from planner.cluster import load_cluster_preset
    from planner.errors import SpecError

    model = load_model_preset("tiny-llama")
    plan = build_baseline("1f1b", analytic_profile(model, load_cluster_preset("cpu-host")), 2, 4)
    for fmt in ("megatron-args", "torchtitan-toml"):
        with pytest.raises(SpecError) as error:
            export_plan(fmt, plan, None, None, model)
        assert error.value.field == "format" and "adaptis.plan/v2" in error.value.reason


def test_selective_recomputation_exported_to_another_framework_is_listed_as_not_what_was_predicted(plans):
    """Each framework's selective recomputation is its own (Megatron's: the core attention; torchtitan's: per-op
    checkpointing), so a selective plan predicted on one framework's says so when exported to the other's."""
    plan, model = plans["llama-fsdp-fp8"]   # searched on Megatron's kernels, selective pinned
    assert plan.parallel.recompute == "selective" and "framework" not in plan.meta

    def said(fmt, exported):
        return [item for item in export_losses(fmt, exported, model) if item.startswith("selective recomputation")]
    assert said("megatron-args", plan) == []
    assert said("torchtitan-toml", plan) == [
        "selective recomputation as predicted (megatron's: the core attention only, the rest of each layer kept "
        "(Megatron-Core's --recompute-granularity selective)): torchtitan runs per-op checkpointing, every other "
        "matmul's output kept and the rest of each block re-run (torchtitan's selective_ac_option = \"op\"), so each "
        "stage's memory and time differ from the prediction (plan the job with framework torchtitan to predict it)"]
    titan = load_plan({**plan.to_dict(), "meta": {**plan.meta, "framework": "torchtitan"}})
    assert said("torchtitan-toml", titan) == []
    assert len(said("megatron-args", titan)) == 1 and "(torchtitan's: per-op" in said("megatron-args", titan)[0]


def test_a_plan_predicted_with_recompute_modules_exports_them_and_megatron_core_accepts_them():
    """DeepSeek-V2-Lite recomputing MLA's up-projections, the experts' activation, the unfused norms and the shared
    experts in FP8: Megatron-Core's ``MLATransformerConfig`` is built from the exported arguments with those modules,
    grouped expert GEMMs (which ``moe_act`` needs) and current scaling (which ``moe_act`` and ``layernorm`` need under
    FP8)."""
    from planner.parallel.cost import Software
    result = hybrid.search("deepseek-v2-lite", "h100-sxm-2x8", 16, 4096, 128,
                           {"ep": 4, "pp": 2, "recompute": "selective", "precision": "fp8"}, time_budget_s=120,
                           options=Software(recompute_modules="layernorm,mla_up_proj,moe_act,shared_experts").options())
    plan, model = load_plan(result.plan_document()), load_model_preset("deepseek-v2-lite")
    assert plan.meta["recompute_modules"] == "mla_up_proj,moe_act,layernorm,shared_experts"
    fields, _ = megatron_parse(megatron_argv(export_plan("megatron-args", plan, None, None, model)))
    # FP8 with moe_act asks for Transformer Engine 2.6 or later, which a GPU node has and this host does not install
    with mock.patch("megatron.core.transformer.transformer_config.is_te_min_version", return_value=True):
        built = megatron_config(fields)
    assert built.recompute_granularity == "selective"
    assert built.recompute_modules == ["mla_up_proj", "moe_act", "layernorm", "shared_experts"]
    assert built.moe_grouped_gemm and (built.fp8, built.fp8_recipe) == ("hybrid", "tensorwise")
    plain = hybrid.search("deepseek-v2-lite", "h100-sxm-2x8", 16, 4096, 128,
                          {"ep": 4, "pp": 2, "recompute": "selective"}, time_budget_s=120)
    fields, _ = megatron_parse(megatron_argv(export_plan("megatron-args", load_plan(plain.plan_document()), None, None,
                                                         model)))
    assert "recompute_modules" not in fields   # Megatron-Core's default, core_attn, as predicted
    assert megatron_config(fields).recompute_modules == ["core_attn"]


def test_the_export_names_the_dispatcher_the_plan_was_predicted_with():
    """Under EP, Megatron-LM's default all-gather dispatcher is not what the cost model charges: the export says
    ``alltoall``, or the flex dispatcher with DeepEP's or HybridEP's backend for a plan predicted with it."""
    from planner.parallel.cost import Software
    model = load_model_preset("qwen3-30b-a3b")
    built = {}
    for dispatcher in ("alltoall", "deepep", "hybridep"):
        result = hybrid.search("qwen3-30b-a3b", "h100-sxm-4x8", 32, 4096, 64,
                               {"tp": 1, "pp": 1, "cp": 1, "ep": 32, "recompute": "full"}, time_budget_s=120,
                               options=Software(ep_dispatcher=dispatcher).options())
        plan = load_plan(result.plan_document())
        fields, _ = megatron_parse(megatron_argv(export_plan("megatron-args", plan, None, None, model)))
        built[dispatcher] = megatron_config(fields)
    assert built["alltoall"].moe_token_dispatcher_type == "alltoall"
    for flex in ("deepep", "hybridep"):
        assert (built[flex].moe_token_dispatcher_type, built[flex].moe_flex_dispatcher_backend) == ("flex", flex)


def test_group_limited_routing_and_a_latent_moe_are_exported_and_megatron_core_takes_them():
    """A model whose router keeps 3 of 8 expert groups (DeepSeek-V2's device-limited routing) exports Megatron-Core's
    group-limited routing, and a latent MoE its latent width; one that routes freely at the hidden size exports
    neither."""
    from dataclasses import replace
    from planner.spec.model import MoEMLP
    result = hybrid.search("deepseek-v2-lite", "h100-sxm-2x8", 16, 4096, 128,
                           {"tp": 1, "cp": 1, "ep": 4, "pp": 2, "recompute": "full"}, time_budget_s=120)
    plan, free = load_plan(result.plan_document()), load_model_preset("deepseek-v2-lite")
    limited = replace(free, layers=tuple(
        replace(layer, mlp=replace(layer.mlp, router_groups=8, router_group_topk=3, latent_size=512))
        if isinstance(layer.mlp, MoEMLP) else layer for layer in free.layers))
    fields, _ = megatron_parse(megatron_argv(export_plan("megatron-args", plan, None, None, limited)))
    built = megatron_config(fields)
    assert (built.moe_router_num_groups, built.moe_router_group_topk, built.moe_latent_size) == (8, 3, 512)
    fields, _ = megatron_parse(megatron_argv(export_plan("megatron-args", plan, None, None, free)))
    built = megatron_config(fields)
    assert "moe_router_num_groups" not in fields and built.moe_router_num_groups is None
    assert built.moe_latent_size is None


def test_torchtitans_flavor_is_found_by_the_models_architecture_not_its_name(plans):
    """An uploaded Meta-Llama-3-8B config (named after its repository) is torchtitan's llama3 8B, as the preset is; a
    spec that takes the preset's name with another shape gets no flavor, and the export says so."""
    import json
    import tomllib
    from dataclasses import replace
    from pathlib import Path
    from planner.spec.hf import import_hf_config
    plan, preset = plans["llama-dense"]
    config = json.loads((Path(__file__).parent / "fixtures" / "hf" / "llama-3-8b.json").read_text())
    uploaded = import_hf_config(config, name="Meta-Llama-3-8B", seq_len=8192)
    assert uploaded.name != preset.name and uploaded.architecture() == preset.architecture()
    toml = tomllib.loads(export_plan("torchtitan-toml", plan, None, None, uploaded))
    assert toml["model"] == {"name": "llama3", "flavor": "8B"}
    assert not [item for item in export_losses("torchtitan-toml", plan, uploaded) if "flavor" in item]
    impostor = replace(preset, hidden_size=2048)
    assert any("torchtitan ships no flavor of llama-3-8b" in item
               for item in export_losses("torchtitan-toml", plan, impostor))


def _megatron_activation(config: TransformerConfig):
    """What Megatron-Core's dense ``MLP.forward`` applies between its two projections under ``config``, as a function
    of the first projection's output (gate and up halves concatenated): with ``bias_activation_fusion`` its fused
    bias-GELU (the tanh approximation) or bias-SwiGLU, refusing anything else; without, ``glu`` (its clamp and offset
    included) with a gate, else the activation."""
    from megatron.core.fusions.fused_bias_gelu import bias_gelu
    if config.bias_activation_fusion:
        if config.activation_func is F.gelu and not config.gated_linear_unit:
            return lambda x: bias_gelu(torch.zeros(x.shape[-1], dtype=x.dtype), x)
        if config.activation_func is F.silu and config.gated_linear_unit:
            return lambda x: F.silu(torch.chunk(x, 2, dim=-1)[0]) * torch.chunk(x, 2, dim=-1)[1]
        raise ValueError("Only support fusion of gelu and swiglu")   # MLP.forward's own refusal
    if config.gated_linear_unit:
        def glu(x):
            x_glu, x_linear = torch.chunk(x, 2, dim=-1)
            if (val := config.activation_func_clamp_value) is not None:
                x_glu = x_glu.clamp(min=None, max=val)
                x_linear = x_linear.clamp(min=-val, max=val)
            return config.activation_func(x_glu) * (x_linear + config.glu_linear_offset)
        return glu
    return config.activation_func


def test_each_mlp_activation_is_exported_as_megatron_core_computes_it_or_listed_as_lost(plans):
    """Every activation of the model format, with and without biases, exported and built into Megatron-Core's
    ``TransformerConfig`` as Megatron-LM builds it: where the arguments can say it, Megatron-Core's MLP then computes
    what the executor's does (SwiGLU; gpt-oss's clamped SwiGLU, clamp and offset included; squared ReLU; exact GELU
    with biases, its fused tanh GELU turned off; GPT-2's tanh GELU with biases, by that fused kernel); where they
    cannot (GeGLU, tanh GELU without biases, a plain SiLU or xIELU), the export says what it describes instead."""
    from dataclasses import replace
    from executor.model.mlp import GatedMLP
    plan, dense = plans["llama-dense"]
    torch.manual_seed(0)
    x = torch.randn(64, 32, dtype=torch.float64) * 6   # beyond gpt-oss's clamp at 7 on both sides
    assert (x > 7).any() and (x < -7).any()
    cases = [   # (gated, activation, bias, words of the lost line or None)
        (True, "silu", False, None), (True, "silu", True, None), (True, "clamped_swiglu", True, None),
        (True, "clamped_swiglu", False, None), (True, "gelu", False, "GeGLU (the GELU"),
        (True, "gelu_tanh", False, "GeGLU (the tanh-approximated GELU"), (False, "squared_relu", False, None),
        (False, "squared_relu", True, None), (False, "gelu", True, None), (False, "gelu", False, None),
        (False, "gelu_tanh", True, None),
        (False, "gelu_tanh", False, "tanh-approximated GELU: Megatron-LM's arguments give"),
        (False, "silu", False, "SiLU activation of an MLP without a gate"),
        (False, "xielu", False, "xIELU activation of an MLP without a gate")]
    for gated, activation, bias, words in cases:
        model = replace(dense, layers=tuple(
            replace(layer, mlp=DenseMLP(layer.mlp.intermediate_size, gated=gated, bias=bias, activation=activation))
            if isinstance(layer.mlp, DenseMLP) else layer for layer in dense.layers))
        fields, loop = megatron_parse(megatron_argv(export_plan("megatron-args", plan, None, None, model)))
        # core_transformer_config_from_args: --swiglu sets SiLU and fuses it with the bias (bias_swiglu_fusion, on
        # by default), --squared-relu and --quick-geglu set their functions; otherwise bias_gelu_fusion (on by
        # default, off by --no-bias-gelu-fusion, and off without biases: validate_args) decides the fusion
        swiglu = bool(fields.get("gated_linear_unit"))
        fields = {**fields, "bias_activation_fusion": fields.get("bias_activation_fusion", True) and (
            swiglu or fields.get("add_bias_linear", True))}
        if swiglu:
            fields["activation_func"] = F.silu
        for flag, function in (("squared_relu", squared_relu), ("quick_geglu", quick_gelu)):
            if loop[flag]:
                fields = {**fields, "activation_func": function, "gated_linear_unit": flag == "quick_geglu"}
        config = megatron_config(fields)
        assert config.gated_linear_unit == gated and config.add_bias_linear == bias
        lost = [item for item in export_losses("megatron-args", plan, model) if "activation" in item
                or "GELU" in item or "GeGLU" in item]
        if words is not None:
            assert len(lost) == 1 and words in lost[0] and lost[0].startswith(model.name), (activation, lost)
            continue
        assert not lost, (activation, lost)
        ours = GatedMLP(8, 16, gated=gated, activation=activation).activation
        theirs = _megatron_activation(config)
        expected = ours(*torch.chunk(x, 2, dim=-1)) if gated else ours(x)
        # the fused bias-GELU writes sqrt(2 / pi) to 8 places: 3e-10 off at most here
        rtol, atol = (1e-6, 1e-9) if (activation, bias) == ("gelu_tanh", True) else (1e-12, 1e-12)
        torch.testing.assert_close(theirs(x), expected, rtol=rtol, atol=atol, msg=activation)


def test_norms_after_or_around_each_sublayer_are_listed_as_lost(plans):
    """OLMo 2's and Gemma's norm placements (``ModelSpec.block_norms``): the arguments build pre-norm layers and say
    so; a pre-norm model gets no such line."""
    from dataclasses import replace
    plan, dense = plans["llama-dense"]
    for placement, words in (("post", "norms after each sublayer"), ("sandwich", "norms before and after each")):
        model = replace(dense, block_norms=placement)
        assert [item for item in export_losses("megatron-args", plan, model) if "norms" in item] == [
            f"{model.name}'s {words}{' sublayer' if placement == 'sandwich' else ''}: Megatron-LM's arguments build "
            "pre-norm layers, one norm before each sublayer"]
    assert not [item for item in export_losses("megatron-args", plan, dense) if "pre-norm" in item]


def test_scalars_without_weights_are_listed_as_lost(plans):
    """Gemma's and Granite's multipliers and soft-caps: Megatron-LM's GPT arguments set none, and the export names the
    ones the model has; a model without them gets no such line."""
    from dataclasses import replace
    from planner.spec.model import AttentionMixer
    plan, dense = plans["llama-dense"]
    capped = replace(dense, embedding_multiplier=12.0, logits_softcap=30.0, layers=tuple(
        replace(layer, mixer=replace(layer.mixer, softcap=50.0)) if isinstance(layer.mixer, AttentionMixer) else layer
        for layer in dense.layers))
    assert [item for item in export_losses("megatron-args", plan, capped) if "set none of them" in item] == [
        f"{capped.name}'s embedding multiplier, logits softcap, attention softcap: Megatron-LM's arguments set none "
        "of them"]
    assert not [item for item in export_losses("megatron-args", plan, dense) if "set none of them" in item]


def test_chunked_attention_the_arguments_do_not_set_is_listed_as_lost(plans):
    """Llama 4's chunked attention: the Megatron-LM arguments describe its layers without it, and say so under the
    download; a model without chunks gets no such line."""
    from dataclasses import replace
    from planner.spec.model import AttentionMixer
    plan, dense = plans["llama-dense"]
    chunked = replace(dense, layers=tuple(
        replace(layer, mixer=replace(layer.mixer, chunk=2048)) if isinstance(layer.mixer, AttentionMixer) else layer
        for layer in dense.layers))
    lost = [item for item in export_losses("megatron-args", plan, chunked) if "chunked attention" in item]
    assert lost == [f"{chunked.name}'s chunked attention (blocks of 2048 tokens, Llama 4's): these arguments do not "
                    "set it, so its layers attend over the whole sequence"]
    assert not [item for item in export_losses("megatron-args", plan, dense) if "chunked" in item]
    # Llama 4's NoPE layers (every fourth without rotary positions) differ from the first attention layer
    nope = replace(chunked, layers=tuple(
        replace(layer, mixer=replace(layer.mixer, chunk=None, rotary=False)) if index % 4 == 0 and layer.mixer
        else layer for index, layer in enumerate(chunked.layers)))
    assert any("attention layers differ (heads, head width, sliding window, chunk or rotary positions)" in item
               for item in export_losses("megatron-args", plan, nope))
    assert not any("attention layers differ" in item for item in export_losses("megatron-args", plan, dense))
