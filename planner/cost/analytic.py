"""The analytic profile: every layer of a ModelSpec costed on a cluster's device.

Per micro-batch of ``micro_batch_size x seq_len`` tokens, a layer's F, B (input gradient) and W (weight
gradient) times are its kernels' roofline times; its activation bytes are the tensors its parts keep for the
backward (listed in each part's module); its output is the ``tokens x hidden`` hidden state (the head's
output is the loss); its parameter bytes are its parameters in the training dtype. A decoder block is
``norm → mixer → residual → norm → MLP → residual`` (the norms after each sublayer instead, or both before and
after it, per ``ModelSpec.block_norms``: the same kernels, twice as many norms for both); a standalone MLP layer is
``norm → MLP → residual``.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.cluster import ClusterSpec
from planner.cost.attention import attention_cost, mla_hidden_input, mla_up_projections
from planner.cost.linear_attention import linear_attention_cost
from planner.cost.mlp import dense_mlp_body, mlp_cost, moe_parts
from planner.cost.primitives import norm, residual_add
from planner.cost.roofline import pass_ms
from planner.cost.ssm import mamba2_cost, mamba_cost
from planner.cost.vocab import LOSS_BYTES, embedding_cost, head_cost
from planner.cost.work import Cost
from planner.profile import LayerProfile, Profile
from planner.spec.model import (AttentionMixer, DenseMLP, LayerSpec, LinearAttentionMixer, MambaMixer, ModelSpec,
                                MoEMLP, sublayer_norms)

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


def _mixer_cost(layer: LayerSpec, spec: ModelSpec, dtype_bytes: int) -> Cost:
    shape = dict(hidden=spec.hidden_size, batch=spec.micro_batch_size, seq_len=spec.seq_len, dtype_bytes=dtype_bytes)
    if isinstance(layer.mixer, AttentionMixer):
        return attention_cost(layer.mixer, **shape)
    if isinstance(layer.mixer, LinearAttentionMixer):
        return linear_attention_cost(layer.mixer, **shape)
    if isinstance(layer.mixer, MambaMixer):
        return mamba_cost(layer.mixer, **shape)
    return mamba2_cost(layer.mixer, **shape)


def layer_cost(layer: LayerSpec, spec: ModelSpec) -> Cost:
    """The cost of one layer of ``spec`` for one micro-batch."""
    dtype_bytes = DTYPE_BYTES[spec.dtype]
    tokens = spec.micro_batch_size * spec.seq_len
    hidden = spec.hidden_size
    if layer.kind == "embedding":
        return embedding_cost(vocab=spec.vocab_size, hidden=hidden, tokens=tokens, dtype_bytes=dtype_bytes,
                              positions=spec.position_embeddings)
    if layer.kind == "head":
        return head_cost(vocab=spec.vocab_size, hidden=hidden, tokens=tokens, dtype_bytes=dtype_bytes,
                         norm_kind=spec.norm,
                         softcap=spec.logits_softcap is not None)
    # each sublayer's norms (``ModelSpec.block_norms``: before it, after it, or both; a standalone MLP's before it)
    norms = [norm(spec.norm, tokens, hidden, dtype_bytes)] * sublayer_norms(layer, spec.block_norms)
    parts = []
    if layer.mixer is not None:
        parts += [*norms, _mixer_cost(layer, spec, dtype_bytes), residual_add(tokens, hidden, dtype_bytes)]
    if layer.mlp is not None:
        parts += [*norms, mlp_cost(layer.mlp, hidden=hidden, tokens=tokens, dtype_bytes=dtype_bytes),
                  residual_add(tokens, hidden, dtype_bytes)]
    return Cost.total(parts)


# Megatron-Core's selective recomputation by module (``TransformerConfig.recompute_modules`` under
# ``--recompute-granularity selective``), the modules modelled here: ``core_attn`` (its default; FlashAttention
# already recomputes the scores, so it frees and costs nothing more), ``mla_up_proj``, ``moe_act``, ``mlp``,
# ``layernorm``, ``moe`` and ``shared_experts``. Megatron-Core's ``gdn_norm_out``, ``gdp_in_proj``, ``gdp_qkv`` and
# ``mhc`` are not modelled.
RECOMPUTE_MODULES = ("core_attn", "mla_up_proj", "moe_act", "mlp", "layernorm", "moe", "shared_experts")


@dataclass(frozen=True)
class RecomputeModule:
    """One of Megatron-Core's recompute modules in a layer: the forward kernels its backward re-runs (``rerun``'s),
    whether those include the MoE's dispatch and combine (``moe``), and the kept tensors it frees, by name (each a
    Cost's activations): two modules that free one tensor (``moe`` and ``moe_act`` the experts' activation output,
    ``layernorm`` and ``shared_experts`` the shared experts' FP8 cast) free it once."""

    rerun: Cost
    freed: dict[str, Cost]
    dispatch: bool = False


def recompute_modules_of(layer: LayerSpec) -> tuple[str, ...]:
    """Which of ``RECOMPUTE_MODULES`` re-run something in ``layer``: MLA's up-projections in latent attention, the
    experts' activation, the whole MoE and its shared experts in an MoE, a dense MLP, and the norms before MLA and
    before an MoE (``layernorm``; the others are fused into the Transformer Engine linear layer after them,
    ``TELayerNormColumnParallelLinear``, which Megatron-Core's ``layernorm`` leaves alone: ``input_layernorm`` and
    ``pre_mlp_layernorm`` are ``IdentityOp`` there, in ``megatron/core/models/gpt/gpt_layer_specs.py``)."""
    names = []
    if _latent(layer):
        names.append("mla_up_proj")
    if isinstance(layer.mlp, MoEMLP):
        names.append("moe_act")
    elif isinstance(layer.mlp, DenseMLP):
        names.append("mlp")
    if _latent(layer) or isinstance(layer.mlp, MoEMLP):
        names.append("layernorm")
    if isinstance(layer.mlp, MoEMLP):
        names.append("moe")
        if layer.mlp.num_shared_experts:
            names.append("shared_experts")
    return tuple(names)


def _latent(layer: LayerSpec) -> bool:
    return isinstance(layer.mixer, AttentionMixer) and layer.mixer.is_latent


def recompute_module_costs(layer: LayerSpec, spec: ModelSpec) -> dict[str, RecomputeModule]:
    """For each of ``recompute_modules_of(layer)``, what its backward re-runs and what the forward no longer keeps:
    MLA's up-projections (``planner.cost.attention.mla_up_projections``), a dense MLP but its input
    (``planner.cost.mlp.dense_mlp_body``), the unfused norms (``layernorm``, below), and of an MoE
    (``planner.cost.mlp.moe_parts``) the experts' activation (``moe_act``), the shared experts with their FP8 cast of
    the input (``shared_experts``: ``SharedExpertMLP`` under ``checkpoint``, which keeps the original input) or the
    whole layer but its input (``moe``: ``MoELayer`` under ``checkpoint``, router, dispatch, experts, combine and
    shared experts, the all-to-alls too).

    ``layernorm`` (``TransformerLayer`` under ``CheckpointWithoutOutput``): the norm before MLA and the one before an
    MoE run again in the backward and their outputs are not kept. Their consumers held them: MLA's two
    down-projections (``planner.cost.attention.mla_hidden_input``; in FP8 Megatron-Core has them keep the original
    input instead of their FP8 casts, ``set_for_recompute_input_layernorm``) and the MoE's router and shared experts
    (``set_for_recompute_pre_mlp_layernorm``), so that is what is freed."""
    dtype_bytes = DTYPE_BYTES[spec.dtype]
    tokens, hidden = spec.micro_batch_size * spec.seq_len, spec.hidden_size
    moe = (moe_parts(layer.mlp, hidden=hidden, tokens=tokens, dtype_bytes=dtype_bytes)
           if isinstance(layer.mlp, MoEMLP) else {})
    inside = {f"moe.{name}": part for name, part in moe.items() if name != "input"}

    def alone(name: str, cost: Cost) -> RecomputeModule:
        return RecomputeModule(cost, {name: cost})

    def norms() -> RecomputeModule:
        freed = {"mla.input": mla_hidden_input(hidden, tokens, dtype_bytes)} if _latent(layer) else {}
        if moe:
            freed.update({"moe.input": moe["input"], "moe.shared_cast": moe["shared_cast"]})
        one = Cost(forward=norm(spec.norm, tokens, hidden, dtype_bytes).forward)
        return RecomputeModule(Cost.total([one] * (_latent(layer) + bool(moe))), freed)

    builders = {
        "mla_up_proj": lambda: alone("mla_up_proj", mla_up_projections(layer.mixer, hidden, tokens, dtype_bytes)),
        "moe_act": lambda: RecomputeModule(moe["act"], {"moe.act": moe["act"]}),
        "mlp": lambda: alone("mlp", dense_mlp_body(layer.mlp, hidden=hidden, tokens=tokens, dtype_bytes=dtype_bytes)),
        "layernorm": norms,
        "moe": lambda: RecomputeModule(Cost.total(inside.values()), inside, dispatch=True),
        "shared_experts": lambda: RecomputeModule(moe["shared"], {"moe.shared": moe["shared"],
                                                                  "moe.shared_cast": moe["shared_cast"]}),
    }
    return {name: builders[name]() for name in recompute_modules_of(layer)}


def _layer_costs(spec: ModelSpec) -> list[Cost]:
    # Models repeat a handful of distinct layers many times; cost each distinct one once.
    by_layer: dict[LayerSpec, Cost] = {}
    for layer in spec.layers:
        if layer not in by_layer:
            by_layer[layer] = layer_cost(layer, spec)
    return [by_layer[layer] for layer in spec.layers]


def layer_parameters(spec: ModelSpec) -> list[int]:
    """Parameters held by each layer; with tied embeddings the embedding and the head each hold the table
    (pipeline stages keep a copy each)."""
    return [cost.params for cost in _layer_costs(spec)]


def _tied_table(spec: ModelSpec) -> int:
    kinds = {layer.kind for layer in spec.layers}
    return spec.vocab_size * spec.hidden_size if spec.tie_embeddings and {"embedding", "head"} <= kinds else 0


def count_parameters(spec: ModelSpec) -> int:
    """Distinct parameters of the model (a tied embedding table counted once)."""
    return sum(layer_parameters(spec)) - _tied_table(spec)


def active_parameters(spec: ModelSpec) -> int:
    """Parameters one token passes through: MoE layers count their router, ``top_k`` routed experts and the
    shared experts; everything else counts whole (the usual "activated parameters" of MoE model cards)."""
    return sum(cost.active_params for cost in _layer_costs(spec)) - _tied_table(spec)


def analytic_profile(spec: ModelSpec, cluster: ClusterSpec) -> Profile:
    """``adaptis.profile/v1`` for ``spec`` on ``cluster``'s device; layer i profiles layer i of the spec."""
    device = cluster.device
    dtype_bytes = DTYPE_BYTES[spec.dtype]
    hidden_bytes = spec.micro_batch_size * spec.seq_len * spec.hidden_size * dtype_bytes
    costs = _layer_costs(spec)
    layers = tuple(
        LayerProfile(name=name, kind=layer.kind,
                     forward=pass_ms(cost.forward, device),
                     backward_input=pass_ms(cost.backward_input, device),
                     backward_weight=pass_ms(cost.backward_weight, device),
                     activation_bytes=round(cost.activation_bytes),
                     output_bytes=LOSS_BYTES if layer.kind == "head" else hidden_bytes,
                     param_bytes=cost.params * dtype_bytes)
        for name, layer, cost in zip(spec.layer_names(), spec.layers, costs))
    return Profile(model=spec.name, device=device.name, layers=layers, microbatch_size=spec.micro_batch_size,
                   seq_len=spec.seq_len, source="analytic",
                   flops_per_microbatch=sum(cost.model_flops() for cost in costs))
