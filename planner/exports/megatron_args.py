"""A hybrid-parallel plan as Megatron-LM's command-line arguments (``pretrain_gpt.py``, or ``pretrain_mamba.py`` for
a hybrid Mamba model), a bash array to splice into the launch line with the data, tokenizer and optimizer arguments.

The option names are Megatron-LM's (``megatron/training/arguments.py``): ``--tensor-model-parallel-size``,
``--pipeline-model-parallel-size``, ``--pipeline-model-parallel-layout`` (its grammar in
``megatron/core/transformer/pipeline_parallel_layer_layout.py``; ``planner.exports.megatron_layout`` writes it),
``--context-parallel-size``, ``--expert-model-parallel-size``, ``--expert-tensor-parallel-size``,
``--micro-batch-size``, ``--global-batch-size``, ``--seq-length``, ``--recompute-granularity``,
``--recompute-method``, ``--recompute-num-layers``, ``--recompute-modules`` (where the plan was predicted with modules
other than the default ``core_attn``, its ``meta.recompute_modules``), ``--use-distributed-optimizer``,
``--sequence-parallel``, ``--fp8-format``, ``--fp8-recipe``, and the
model's shape: ``--num-layers``, ``--hidden-size``, ``--num-attention-heads``, ``--group-query-attention``,
``--num-query-groups``, ``--kv-channels``, ``--ffn-hidden-size``, the activation's ``--swiglu``, ``--quick-geglu
--glu-linear-offset --activation-func-clamp-value``, ``--squared-relu`` or ``--no-bias-gelu-fusion``,
``--normalization``, ``--disable-bias-linear``, ``--add-qkv-bias``, ``--qk-layernorm``,
``--untie-embeddings-and-output-weights``, ``--position-embedding-type``, ``--max-position-embeddings``,
``--num-experts``, ``--moe-router-topk``,
``--moe-ffn-hidden-size``, ``--moe-shared-expert-intermediate-size``, ``--moe-layer-freq``, ``--moe-aux-loss-coeff``,
``--moe-grouped-gemm``, ``--moe-token-dispatcher-type`` (``alltoall`` under EP, or ``flex`` with
``--moe-flex-dispatcher-backend deepep`` or ``hybridep`` where the plan was predicted with that dispatch, its
``meta.ep_dispatcher``),
the latent-attention ``--multi-latent-attention --q-lora-rank --kv-lora-rank --qk-head-dim --qk-pos-emb-head-dim
--v-head-dim``, and the hybrid model's ``--hybrid-override-pattern --mamba-state-dim --mamba-head-dim
--mamba-num-groups --mamba-num-heads`` (as Megatron-LM's own checkpoint loaders pass them). The parallel and model
options land in fields of Megatron-Core's ``ModelParallelConfig`` / ``TransformerConfig`` of the same name but for
``--num-experts`` (``num_moe_experts``), ``--swiglu`` (``gated_linear_unit``), ``--no-bias-gelu-fusion``
(``bias_activation_fusion``) and ``--disable-bias-linear`` (``add_bias_linear``), and ``--squared-relu`` and
``--quick-geglu``, which set its ``activation_func``; the batch options feed Megatron's micro-batch calculator,
``--use-distributed-optimizer`` its ``DistributedDataParallelConfig``, and the embedding and pattern options its GPT
or Mamba model builder.
``tests/planner/test_export_frameworks.py`` builds those classes from the arguments.

Megatron runs its own (interleaved) 1F1B schedule, virtual stage k on rank k mod p: the file's opening comment lists
what of the plan that loses (``megatron_args_losses``).
"""

from __future__ import annotations

import shlex

from planner.errors import SpecError
from planner.parallel.cost import DEFAULT_EP_DISPATCHER, DEFAULT_RECOMPUTE_MODULES
from planner.exports.hybrid_plan import (header_lines, is_own_order, placement, recompute_mode, require_model,
                                         require_v2, seq_len_of, stage_devices)
from planner.exports.megatron_layout import is_megatron_hybrid, layout_of_stages, run_lengths
from planner.plan import Plan
from planner.spec.model import (ATTENTION_SCALARS, CLAMPED_SWIGLU_LIMIT, CLAMPED_SWIGLU_OFFSET, MODEL_SCALARS,
                                AttentionMixer, DenseMLP, LayerSpec, ModelSpec, MoEMLP)

FORMAT = "megatron-args"
# Megatron-Core's schedules (megatron/core/pipeline_parallel/schedules.py): 1F1B without virtual stages, interleaved
# 1F1B with them; neither splits the backward into I and W.
MEGATRON_RUNS = {"1f1b": "1F1B", "interleaved-1f1b": "interleaved 1F1B"}


def megatron_args(plan: Plan, model: ModelSpec | None, seq_len: int | None = None) -> str:
    """The arguments as a commented bash array ``MEGATRON_ARGS=(...)``."""
    model = require_model(model, FORMAT)
    arguments, lost = _arguments(plan, model, seq_len)
    config = plan.parallel
    script = "pretrain_mamba.py" if is_megatron_hybrid(model) else "pretrain_gpt.py"
    title = (f"Megatron-LM arguments for {model.name}: {config.short()} on {config.num_gpus} GPUs "
             f"(TP x CP x PP x DP = {config.tp} x {config.cp} x {config.pp} x {config.dp}), plan {plan.strategy!r}")
    lines = header_lines(title, lost)
    lines += [f'# Use: torchrun ... {script} "${{MEGATRON_ARGS[@]}}" <data, tokenizer and optimizer arguments>',
              "MEGATRON_ARGS=("]
    lines += ["  " + " ".join(shlex.quote(token) for token in group) for group in arguments]
    lines.append(")")
    return "\n".join(lines) + "\n"


def megatron_args_losses(plan: Plan, model: ModelSpec | None, seq_len: int | None = None) -> list[str]:
    """What Megatron-LM cannot express of the plan, one sentence each (empty: nothing)."""
    return _arguments(plan, require_model(model, FORMAT), seq_len)[1]


def megatron_argv(text: str) -> list[str]:
    """The argument list of an exported file, as ``sys.argv[1:]`` of ``pretrain_gpt.py`` would hold it."""
    body = text.split("MEGATRON_ARGS=(", 1)[1].rsplit(")", 1)[0]
    return shlex.split(body, comments=True)


def _arguments(plan: Plan, model: ModelSpec, seq_len: int | None) -> tuple[list[tuple[str, ...]], list[str]]:
    config = require_v2(plan, FORMAT)
    if plan.stages[-1].last_layer != model.num_layers - 1:
        raise SpecError("model", f"the plan's stages cover {plan.stages[-1].last_layer + 1} layers, {model.name} has "
                                 f"{model.num_layers}")
    lost: list[str] = []
    args: list[tuple[str, ...]] = [
        ("--tensor-model-parallel-size", str(config.tp)),
        ("--pipeline-model-parallel-size", str(config.pp)),
    ]
    args += _pipeline_layout(plan, model, lost)
    args += [("--context-parallel-size", str(config.cp))]
    if config.ep > 1 or _has_moe(model):
        args += [("--expert-model-parallel-size", str(config.ep)), ("--expert-tensor-parallel-size", str(config.etp))]
    if _has_moe(model):   # one grouped GEMM over a rank's experts, as the cost model prices them (planner.cost.roofline)
        args.append(("--moe-grouped-gemm",))
    if _has_moe(model) and config.ep > 1:   # the dispatcher the plan was predicted with (its meta.ep_dispatcher)
        dispatcher = plan.meta.get("ep_dispatcher", DEFAULT_EP_DISPATCHER)
        if dispatcher != "alltoall":   # DeepEP's or HybridEP's, Megatron-Core's flex dispatcher's backends
            args += [("--moe-token-dispatcher-type", "flex"), ("--moe-flex-dispatcher-backend", dispatcher)]
        else:
            args.append(("--moe-token-dispatcher-type", "alltoall"))
    if config.tp > 1:
        args.append(("--sequence-parallel",))
    args += [("--micro-batch-size", str(config.microbatch_size)),
             ("--global-batch-size", str(config.global_batch)),   # Megatron runs global / (mbs x DP) micro-batches
             ("--seq-length", str(seq_len_of(plan, model, seq_len)))]
    mode, recompute_lost = recompute_mode(plan, "megatron")
    modules = plan.meta.get("recompute_modules", DEFAULT_RECOMPUTE_MODULES)
    lost += recompute_lost
    if mode == "selective":
        args.append(("--recompute-granularity", "selective"))
        if modules != DEFAULT_RECOMPUTE_MODULES:   # Megatron-Core's --recompute-modules, as the plan was predicted
            args.append(("--recompute-modules", *modules.split(",")))
    elif mode == "full":   # every layer: Megatron's uniform method with one layer per recomputed chunk
        args += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                 ("--recompute-num-layers", "1")]
    if config.sharding == "optimizer":
        args.append(("--use-distributed-optimizer",))
    elif config.sharding == "full":   # Megatron-FSDP (Megatron-Core 0.14+): ZeRO-3 over the data-parallel ranks
        args += [("--use-megatron-fsdp",), ("--data-parallel-sharding-strategy", "optim_grads_params")]
    if config.precision == "fp8":   # Transformer Engine's hybrid recipe: E4M3 forward, E5M2 gradients
        # per-tensor scaling, delayed; current ("tensorwise") where the experts' activation or the norms are
        # recomputed, which Megatron-Core refuses under delayed scaling (the FLOPs and bytes are the same either way)
        recipe = ("tensorwise" if mode == "selective" and {"moe_act", "layernorm"} & set(modules.split(","))
                  else "delayed")
        args += [("--fp8-format", "hybrid"), ("--fp8-recipe", recipe)]
    args += _model_shape(plan, model, seq_len, lost)
    if model.dtype in ("bf16", "fp16"):
        args.append((f"--{model.dtype}",))
    _schedule_losses(plan, _virtual_stages(plan, model) > 1, lost)
    return args, lost


def _virtual_stages(plan: Plan, model: ModelSpec) -> int:
    """Virtual stages per rank the exported layout has: the plan's, where its layout goes in as planned, else 1."""
    shape, per_rank = placement(plan)
    return per_rank if shape == "loop" and per_rank and not is_megatron_hybrid(model) else 1


def _pipeline_layout(plan: Plan, model: ModelSpec, lost: list[str]) -> list[tuple[str, ...]]:
    """``--pipeline-model-parallel-layout`` where Megatron takes one: the plan's own partition and virtual stages
    when its placement is a loop with as many stages on every rank; otherwise each rank's layers as one contiguous
    stage, as many as the plan gives the rank (the load kept, the placement lost). Hybrid Mamba models take none."""
    config = plan.parallel
    shape, per_rank = placement(plan)
    if is_megatron_hybrid(model):
        if plan.num_stages > 1:
            lost.append(f"the plan's partition ({_partition(plan)}): Megatron-LM's hybrid (Mamba) models ignore "
                        "--pipeline-model-parallel-layout without virtual stages and refuse it with them; they split "
                        "the --hybrid-override-pattern evenly over the pipeline ranks"
                        + (f", and the plan's {per_rank or 'uneven'} stages per rank become one" if
                           plan.num_stages > plan.num_devices else ""))
        return []
    if config.pp == 1 and plan.num_stages == 1:
        return []
    if shape == "loop" and per_rank:
        layout = layout_of_stages([stage.layers for stage in plan.stages], model)
        return [("--pipeline-model-parallel-layout", layout)]
    per_device = [[layer for index in plan.stages_on(device) for layer in plan.stages[index].layers]
                  for device in range(plan.num_devices)]
    split, start = [], 0
    for layers in per_device:
        split.append(list(range(start, start + len(layers))))
        start += len(layers)
    lost.append(f"AdaPtis's placement ({shape}, stage devices {stage_devices(plan)}): Megatron runs virtual stage k "
                "on rank k mod p with as many stages on every rank, so each rank here runs one contiguous stage "
                f"with as many layers as the plan gives it ({', '.join(str(len(layers)) for layers in per_device)})")
    return [("--pipeline-model-parallel-layout", layout_of_stages(split, model))]


def _schedule_losses(plan: Plan, interleaved: bool, lost: list[str]) -> None:
    runs = f"{'interleaved ' if interleaved else ''}1F1B"
    if is_own_order(plan):
        split = ", with the backward split into input (I) and weight (W) passes" if plan.uses_split_backward() else ""
        lost.append(f"AdaPtis's own per-rank action order ({plan.strategy}{split}): Megatron runs its own {runs} "
                    "schedule")
    elif plan.strategy not in MEGATRON_RUNS:
        lost.append(f"the {plan.strategy} schedule: Megatron runs its own {runs} instead")


def _activation(model: ModelSpec, mlp: DenseMLP | MoEMLP, lost: list[str]) -> list[tuple[str, ...]]:
    """The options of ``mlp``'s gate and activation (``planner.spec.model.GATED_ACTIVATIONS`` /
    ``UNGATED_ACTIVATIONS``), as Megatron-LM's ``core_transformer_config_from_args`` reads them: ``--swiglu`` (a gate
    and SiLU), ``--quick-geglu`` with ``--glu-linear-offset`` and ``--activation-func-clamp-value`` (gpt-oss's clamped
    SwiGLU, Megatron-Core's ``MLP.glu`` or its experts' fused kernel), ``--squared-relu``; without them GELU.
    ``--no-bias-gelu-fusion`` where the MLP has biases and Megatron-LM's default fusion of bias and activation would
    compute another function (its bias-GELU is the tanh approximation) or refuse it. What it has no option for is
    listed in ``lost``."""
    # Megatron-LM fuses a biased MLP's activation with its bias unless told not to; its fused kernels compute GELU
    # with the tanh approximation, and refuse the squared ReLU and, outside the experts, the clamped SwiGLU
    unfused = [("--no-bias-gelu-fusion",)] if mlp.bias else []
    if mlp.gated:
        if mlp.activation == "clamped_swiglu":
            return [("--quick-geglu",), ("--glu-linear-offset", str(CLAMPED_SWIGLU_OFFSET)),
                    ("--activation-func-clamp-value", str(CLAMPED_SWIGLU_LIMIT))] + (
                unfused if isinstance(mlp, DenseMLP) else [])
        if mlp.activation != "silu":
            kind = "tanh-approximated GELU" if mlp.activation == "gelu_tanh" else "GELU"
            lost.append(f"{model.name}'s GeGLU (the {kind} of its gate): Megatron-LM's arguments set no gated GELU, "
                        "so these arguments describe SwiGLU MLPs of the same shapes")
        return [("--swiglu",)]
    if mlp.activation == "squared_relu":
        return [("--squared-relu",)] + unfused
    if mlp.activation == "gelu":
        return unfused
    if mlp.activation == "gelu_tanh" and not mlp.bias:
        lost.append(f"{model.name}'s tanh-approximated GELU: Megatron-LM's arguments give Megatron-Core's models the "
                    "exact GELU where an MLP has no biases (--openai-gelu reaches only its legacy model)")
    elif mlp.activation in ("silu", "xielu"):
        name = {"silu": "SiLU", "xielu": "xIELU"}[mlp.activation]
        lost.append(f"{model.name}'s {name} activation of an MLP without a gate: Megatron-LM's arguments set none, so "
                    "these describe GELU MLPs of the same shapes"
                    + (" (without its two learned scalars)" if mlp.activation_parameters else ""))
    return []


def _model_shape(plan: Plan, model: ModelSpec, seq_len: int | None, lost: list[str]) -> list[tuple[str, ...]]:
    blocks = [layer for layer in model.layers if layer.kind in ("decoder", "mlp")]
    attention = [layer.mixer for layer in blocks if isinstance(layer.mixer, AttentionMixer)]
    dense = [layer.mlp for layer in blocks if isinstance(layer.mlp, DenseMLP)]
    moe = [layer.mlp for layer in blocks if isinstance(layer.mlp, MoEMLP)]
    hybrid = is_megatron_hybrid(model)
    pattern = _hybrid_pattern(model) if hybrid else ""
    args: list[tuple[str, ...]] = [("--num-layers", str(len(pattern) if hybrid else len(blocks))),
                                   ("--hidden-size", str(model.hidden_size))]
    if attention:
        first = attention[0]
        args.append(("--num-attention-heads", str(first.num_heads)))
        if first.is_latent:
            args += [("--multi-latent-attention",), ("--kv-lora-rank", str(first.kv_lora_rank)),
                     ("--qk-head-dim", str(first.head_dim - first.rope_head_dim)),
                     ("--qk-pos-emb-head-dim", str(first.rope_head_dim)), ("--v-head-dim", str(first.value_dim))]
            if first.q_lora_rank is not None:
                args.append(("--q-lora-rank", str(first.q_lora_rank)))
        else:
            if first.num_kv_heads != first.num_heads:
                args += [("--group-query-attention",), ("--num-query-groups", str(first.num_kv_heads))]
            if first.head_dim * first.num_heads != model.hidden_size:
                args.append(("--kv-channels", str(first.head_dim)))
        if first.qkv_bias:
            args.append(("--add-qkv-bias",))
        if first.qk_norm:
            args.append(("--qk-layernorm",))
            if first.qk_norm_after_rotary:   # Megatron-Core's q_layernorm / k_layernorm run before the rotary embedding
                lost.append(f"{model.name}'s QK-norm after the rotary embedding: Megatron-Core applies it before")
        if len({(m.num_heads, m.num_kv_heads, m.head_dim, m.window, m.chunk, m.rotary) for m in attention}) > 1:
            lost.append(f"{model.name}'s attention layers differ (heads, head width, sliding window, chunk or rotary "
                        "positions): the arguments describe its first attention layer for all of them")
        chunks = sorted({m.chunk for m in attention if m.chunk})
        if chunks:
            sizes = ", ".join(map(str, chunks))
            lost.append(f"{model.name}'s chunked attention (blocks of {sizes} tokens, Llama 4's): these arguments "
                        "do not set it, so its layers attend over the whole sequence")
    if dense:
        args.append(("--ffn-hidden-size", str(dense[0].intermediate_size)))
    elif moe:
        args.append(("--ffn-hidden-size", str(moe[0].expert_intermediate_size)))
    mlps = dense + moe   # Megatron-LM has one gate and activation for its MLPs and its experts
    if mlps:
        args += _activation(model, mlps[0], lost)
    if len({(mlp.gated, mlp.activation) for mlp in mlps}) > 1:
        lost.append(f"{model.name}'s MLPs and experts differ in gate or activation: the arguments describe its first "
                    "for all of them")
    if moe:
        first = moe[0]
        args += [("--num-experts", str(first.num_experts)), ("--moe-router-topk", str(first.top_k)),
                 ("--moe-ffn-hidden-size", str(first.expert_intermediate_size))]
        if first.num_shared_experts:
            args.append(("--moe-shared-expert-intermediate-size",
                         str(first.num_shared_experts * first.shared_intermediate_size)))
        if first.aux_loss_coeff:
            args.append(("--moe-aux-loss-coeff", repr(first.aux_loss_coeff)))
        if first.latent_size:     # Nemotron 3's LatentMoE (Megatron-Core's MoELayer fc1/fc2_latent_proj)
            args.append(("--moe-latent-size", str(first.latent_size)))
        if first.group_limited:   # DeepSeek's node-limited routing, as the cost model's DeepEP dispatch assumes
            args += [("--moe-router-num-groups", str(first.router_groups)),
                     ("--moe-router-group-topk", str(first.router_group_topk))]
        if dense and not hybrid:   # some layers dense (DeepSeek's first k): 1 marks a MoE layer, 0 a dense one
            args.append(("--moe-layer-freq", _freq([isinstance(layer.mlp, MoEMLP) for layer in blocks])))
    if hybrid:
        args += [("--hybrid-override-pattern", pattern)] + _mamba_args(model)
    args.append(("--normalization", "RMSNorm" if model.norm == "rmsnorm" else "LayerNorm"))
    scalars = [name.replace("_", " ") for name in MODEL_SCALARS if getattr(model, name) is not None] + [
        f"attention {name.replace('_', ' ')}" for name in ATTENTION_SCALARS
        if any(getattr(mixer, name) is not None for mixer in attention)]
    if scalars:   # Megatron-LM's GPT arguments have none of them (Megatron-Bridge's Gemma and Granite providers do)
        lost.append(f"{model.name}'s {', '.join(scalars)}: Megatron-LM's arguments set none of them")
    if model.block_norms != "pre":   # Megatron-Core's post-sublayer norms are layer-spec modules, not arguments
        where = "after each sublayer" if model.block_norms == "post" else "before and after each sublayer"
        lost.append(f"{model.name}'s norms {where}: Megatron-LM's arguments build pre-norm layers, one norm before "
                    "each sublayer")
    if not any(getattr(mlp, "bias", False) for mlp in dense + moe) and not any(m.output_bias for m in attention):
        args.append(("--disable-bias-linear",))
    if not model.tie_embeddings:
        args.append(("--untie-embeddings-and-output-weights",))
    if model.position_embeddings is not None:
        args += [("--position-embedding-type", "learned_absolute"),
                 ("--max-position-embeddings", str(model.position_embeddings))]
    else:
        rotary = bool(attention) and attention[0].rotary
        args += [("--position-embedding-type", "rope" if rotary else "none"),
                 ("--max-position-embeddings", str(seq_len_of(plan, model, seq_len)))]
    others = sorted({layer.mixer.type for layer in blocks if layer.mixer is not None
                     and layer.mixer.type not in ("attention", "mamba2")})
    if others:
        lost.append(f"{model.name}'s {', '.join(others)} layers: Megatron-LM's GPT and hybrid models build no such "
                    "layer, so these arguments describe a model without them")
    return args


def _hybrid_pattern(model: ModelSpec) -> str:
    """``--hybrid-override-pattern``: one symbol per Megatron layer, ``M`` Mamba, ``*`` attention, ``-`` MLP,
    ``E`` MoE (``megatron/core/ssm/mamba_hybrid_layer_allocation.py``); a decoder block with a mixer and an MLP is
    two Megatron layers."""
    symbols = []
    for layer in model.layers:
        if layer.kind not in ("decoder", "mlp"):
            continue
        if layer.mixer is not None:
            symbols.append("*" if isinstance(layer.mixer, AttentionMixer) else "M")
        if layer.mlp is not None:
            symbols.append(_mlp_symbol(layer))
    return "".join(symbols)


def _mlp_symbol(layer: LayerSpec) -> str:
    return "E" if isinstance(layer.mlp, MoEMLP) else "-"


def _mamba_args(model: ModelSpec) -> list[tuple[str, ...]]:
    mamba = [layer.mixer for layer in model.layers if layer.mixer is not None and layer.mixer.type == "mamba2"]
    if not mamba:
        return []
    first = mamba[0]
    return [("--mamba-state-dim", str(first.state_size)), ("--mamba-head-dim", str(first.head_dim)),
            ("--mamba-num-groups", str(first.n_groups)), ("--mamba-num-heads", str(first.num_heads))]


def _has_moe(model: ModelSpec) -> bool:
    return any(isinstance(layer.mlp, MoEMLP) for layer in model.layers)


def _freq(flags: list[bool]) -> str:
    """Megatron's ``--moe-layer-freq`` list form, folded: ``([0]*3+[1]*58)``."""
    return "(" + "+".join(f"[{int(flag)}]*{count}" for flag, count in run_lengths(flags)) + ")"


def _partition(plan: Plan) -> str:
    return ", ".join(str(len(stage.layers)) for stage in plan.stages) + " layers per stage"


__all__ = ["FORMAT", "megatron_args", "megatron_args_losses", "megatron_argv"]
