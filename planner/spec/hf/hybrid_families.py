"""Hybrid families: blocks that mix tokens with a state-space model or linear attention, alone or interleaved
with softmax attention (Mamba, Mamba-2, Falcon-Mamba, Jamba, Nemotron-H, Granite 4.0-H, Qwen3-Next, MiniMax).
Layer roles and module shapes follow each family's ``transformers`` modelling file."""

from __future__ import annotations

import math

from planner.errors import SpecError
from planner.spec.hf.attention_families import qwen_moe_mlps, qwen_shared_expert_moe
from planner.spec.hf.reader import (Config, aux_loss_coeff, attention, biased_attention, layer_flags, layer_types,
                                    mlp_activation, routed_moe, router_groups, top_k)
from planner.spec.model import (
    GATED_DELTA_CONV_KERNEL,
    DenseMLP,
    LayerSpec,
    LinearAttentionMixer,
    Mamba2Mixer,
    MambaMixer,
    MoEMLP,
)

NEMOTRON_PATTERN = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
NEMOTRON_BLOCK_TYPES = {"mamba": "mamba", "linear_attention": "mamba", "attention": "attention",
                        "full_attention": "attention", "mlp": "mlp", "moe": "moe"}


def _nemotron_roles(cfg: Config) -> list[str]:
    if "layers_block_type" in cfg:
        key, entries = "layers_block_type", cfg.entries("layers_block_type")
        allowed = NEMOTRON_BLOCK_TYPES
    else:
        key, entries = "hybrid_override_pattern", cfg.doc.get(cfg.name("hybrid_override_pattern"))
        if not isinstance(entries, str) or not entries:
            raise SpecError(cfg.field(key), "is required: a string such as 'M-M*-' (or give layers_block_type)")
        allowed = NEMOTRON_PATTERN
    roles = []
    for index, entry in enumerate(entries):
        if entry not in allowed:
            raise SpecError(cfg.field(key), f"entry {entry!r} at position {index} is not one of {', '.join(allowed)}")
        roles.append(allowed[entry])
    declared = cfg.optional_integer("num_hidden_layers")
    if declared is not None and declared != len(roles):
        raise SpecError(cfg.field(key), f"describes {len(roles)} layers but num_hidden_layers is {declared}")
    return roles


def nemotron_h(cfg: Config) -> list[LayerSpec]:
    roles = _nemotron_roles(cfg)
    blocks: dict[str, LayerSpec] = {}
    if "mamba" in roles:
        heads = cfg.integer("mamba_num_heads")
        groups = cfg.integer("mamba_n_groups") if "mamba_n_groups" in cfg else cfg.integer("n_groups")
        if heads % groups:
            raise SpecError(cfg.field("n_groups"), f"must divide mamba_num_heads ({heads}), got {groups}")
        blocks["mamba"] = LayerSpec(kind="decoder", mixer=Mamba2Mixer(
            num_heads=heads, head_dim=cfg.integer("mamba_head_dim"), state_size=cfg.integer("ssm_state_size"),
            conv_kernel=cfg.integer("conv_kernel", default=4), n_groups=groups))
    if "attention" in roles:
        blocks["attention"] = LayerSpec(kind="decoder",
                                        mixer=attention(cfg, head_dim_keys=("head_dim", "attention_head_dim")))
    biased = cfg.flag("mlp_bias")
    if "mlp" in roles:
        activation = mlp_activation(cfg, "mlp_hidden_act", gated=False)
        blocks["mlp"] = LayerSpec(kind="mlp", mlp=DenseMLP(cfg.integer("intermediate_size"), gated=False, bias=biased,
                                                          activation=activation))
    if "moe" in roles:
        if biased:   # NemotronHMoE: biased shared experts and latent projections beside unbiased experts and router
            raise SpecError(cfg.field("mlp_bias"), "with MoE layers is not supported: Nemotron-H's shared experts "
                                                   "and latent projections would take a bias its routed experts and "
                                                   "router do not, which an MoE here cannot hold")
        experts = cfg.integer("n_routed_experts")
        shared = cfg.integer("n_shared_experts", default=0, minimum=0)
        # its experts (routed and shared) are plain MLPs with the dense layers' activation (NemotronHMoE), the routed
        # ones at moe_latent_size where that is set (Nemotron 3's LatentMoE)
        chosen = top_k(cfg, experts)
        # its router limits the groups as DeepSeek-V3's does (n_group / topk_group; n_groups is Mamba-2's)
        blocks["moe"] = LayerSpec(kind="mlp", mlp=MoEMLP(
            num_experts=experts, top_k=chosen, **router_groups(cfg, experts, chosen),
            expert_intermediate_size=cfg.integer("moe_intermediate_size"), num_shared_experts=shared,
            shared_intermediate_size=cfg.integer("moe_shared_expert_intermediate_size") if shared else 0,
            gated=False, activation=mlp_activation(cfg, "mlp_hidden_act", gated=False),
            latent_size=cfg.optional_integer("moe_latent_size")))
    return [blocks[role] for role in roles]


def qwen3_next(cfg: Config) -> list[LayerSpec]:
    count = cfg.integer("num_hidden_layers")
    if "layer_types" in cfg:
        roles = layer_types(cfg, count, {"linear_attention": "linear", "full_attention": "full"})
    else:   # the config classes' rule: full attention every full_attention_interval-th layer, 4 by default
        interval = cfg.integer("full_attention_interval", default=4)
        roles = ["full" if (index + 1) % interval == 0 else "linear" for index in range(count)]
    mixers = {"full": attention(cfg, qk_norm=True),
              "linear": LinearAttentionMixer(num_heads=cfg.integer("linear_num_value_heads"),
                                             head_dim=cfg.integer("linear_value_head_dim"), variant="gated_delta",
                                             num_key_heads=cfg.integer("linear_num_key_heads"),
                                             conv_kernel=cfg.integer("linear_conv_kernel_dim",
                                                                     default=GATED_DELTA_CONV_KERNEL))}
    if mixers["linear"].num_heads % mixers["linear"].key_heads:
        raise SpecError(cfg.field("linear_num_key_heads"),
                        f"must divide linear_num_value_heads ({mixers['linear'].num_heads})")
    mlps = qwen_moe_mlps(cfg, count, qwen_shared_expert_moe(cfg))
    return [LayerSpec(kind="decoder", mixer=mixers[role], mlp=mlp) for role, mlp in zip(roles, mlps)]


def minimax(cfg: Config) -> list[LayerSpec]:
    count = cfg.integer("num_hidden_layers")
    if "attn_type_list" in cfg:
        softmax_layers = layer_flags(cfg, "attn_type_list", count, zero="lightning attention", one="softmax attention")
        roles = ["full" if softmax_layer else "linear" for softmax_layer in softmax_layers]
    elif "layer_types" in cfg:
        roles = layer_types(cfg, count, {"linear_attention": "linear", "full_attention": "full"})
    else:
        raise SpecError(cfg.field("attn_type_list"), "is required (or give layer_types)")
    softmax = attention(cfg)
    lightning = LinearAttentionMixer(num_heads=softmax.num_heads, head_dim=softmax.head_dim, variant="lightning")
    experts = cfg.integer("num_local_experts")
    shared_size = cfg.integer("shared_intermediate_size", default=0, minimum=0)
    mlp = MoEMLP(num_experts=experts, top_k=top_k(cfg, experts),
                 expert_intermediate_size=cfg.integer("intermediate_size"),
                 num_shared_experts=1 if shared_size else 0, shared_intermediate_size=shared_size,
                 aux_loss_coeff=aux_loss_coeff(cfg))
    mixers = {"full": softmax, "linear": lightning}
    return [LayerSpec(kind="decoder", mixer=mixers[role], mlp=mlp) for role in roles]



def _time_step_rank(cfg: Config, key: str) -> int:
    """Mamba's ``dt_rank``: an integer, or ``"auto"`` for ``ceil(hidden_size / 16)`` (HF's ``MambaConfig``)."""
    name = cfg.name(key)
    if cfg.doc.get(name, cfg.default(key)) == "auto":
        return math.ceil(cfg.integer("hidden_size") / 16)
    return cfg.integer(key)


def mamba(cfg: Config) -> list[LayerSpec]:
    """Mamba and Falcon-Mamba: every block is a Mamba-1 mixer alone. ``intermediate_size`` when the config gives it
    (Falcon-Mamba 7B gives it beside an ``expand`` it does not use), else ``expand × hidden_size``. Falcon-Mamba's
    extra RMSNorms of B, C and dt have no weights."""
    inner = cfg.integer("intermediate_size") if "intermediate_size" in cfg \
        else round(cfg.number("expand") * cfg.integer("hidden_size"))
    mixer = MambaMixer(inner_size=inner, state_size=cfg.integer("state_size"),
                       dt_rank=_time_step_rank(cfg, "time_step_rank"), conv_kernel=cfg.integer("conv_kernel"),
                       conv_bias=cfg.flag("use_conv_bias"), proj_bias=cfg.flag("use_bias"))
    return [LayerSpec(kind="decoder", mixer=mixer)] * cfg.integer("num_hidden_layers")


def _mamba2_mixer(cfg: Config, *, heads: str, head_dim: str, state: str, conv: str, groups: str,
                  expand: str) -> Mamba2Mixer:
    """A Mamba-2 mixer whose heads tile its ``expand × hidden_size`` inner width, as HF's modules assume."""
    num_heads = cfg.integer(heads)
    inner = round(cfg.number(expand) * cfg.integer("hidden_size"))
    # Granite's mamba_d_head "auto" (its class default) splits the inner width evenly over the heads.
    width = inner // num_heads if cfg.doc.get(cfg.name(head_dim), cfg.default(head_dim)) == "auto" \
        else cfg.integer(head_dim)
    if num_heads * width != inner:
        raise SpecError(cfg.field(heads), f"{heads} × {head_dim} ({num_heads} × {width}) must equal {expand} × "
                                          f"hidden_size ({inner})")
    n_groups = cfg.integer(groups)
    if num_heads % n_groups:
        raise SpecError(cfg.field(groups), f"must divide {heads} ({num_heads}), got {n_groups}")
    return Mamba2Mixer(num_heads=num_heads, head_dim=width, state_size=cfg.integer(state),
                       conv_kernel=cfg.integer(conv), n_groups=n_groups)


def mamba2(cfg: Config) -> list[LayerSpec]:
    """Mamba-2 (Mamba-Codestral): every block is a Mamba-2 mixer alone."""
    mixer = _mamba2_mixer(cfg, heads="num_heads", head_dim="head_dim", state="state_size", conv="conv_kernel",
                          groups="n_groups", expand="expand")
    return [LayerSpec(kind="decoder", mixer=mixer)] * cfg.integer("num_hidden_layers")


def jamba(cfg: Config) -> list[LayerSpec]:
    """Jamba: layer i is attention when ``i % attn_layer_period == attn_layer_offset``, else a Mamba-1 mixer;
    its MLP is an MoE of ``num_experts`` when ``i % expert_layer_period == expert_layer_offset``, else dense.
    Jamba's RMSNorms of the Mamba mixer's dt, B and C (``dt_rank + 2 × state`` weights) are left out."""
    count = cfg.integer("num_hidden_layers")
    mamba_mixer = MambaMixer(inner_size=cfg.integer("mamba_expand") * cfg.integer("hidden_size"),
                             state_size=cfg.integer("mamba_d_state"), dt_rank=_time_step_rank(cfg, "mamba_dt_rank"),
                             conv_kernel=cfg.integer("mamba_d_conv"), conv_bias=cfg.flag("mamba_conv_bias"),
                             proj_bias=cfg.flag("mamba_proj_bias"))
    softmax = attention(cfg, rotary=False)   # Jamba's attention has no positional encoding
    attention_period, attention_offset = cfg.integer("attn_layer_period"), cfg.integer("attn_layer_offset", minimum=0)
    expert_period, expert_offset = cfg.integer("expert_layer_period"), cfg.integer("expert_layer_offset", minimum=0)
    moe = routed_moe(cfg, "num_experts")
    dense = DenseMLP(cfg.integer("intermediate_size"))
    return [LayerSpec(kind="decoder",
                      mixer=softmax if index % attention_period == attention_offset else mamba_mixer,
                      mlp=moe if moe.num_experts > 1 and index % expert_period == expert_offset else dense)
            for index in range(count)]


def granitemoehybrid(cfg: Config) -> list[LayerSpec]:
    """Granite 4.0-H: ``layer_types`` (``mamba`` a Mamba-2 mixer, ``attention`` grouped-query attention; absent,
    all Mamba-2) and on
    every layer an MLP: an MoE of ``num_local_experts`` experts of ``intermediate_size`` plus one shared expert
    of ``shared_intermediate_size``, or (``num_local_experts`` 0, the H-Micro models) a dense MLP of
    ``shared_intermediate_size``. Attention is rotary only with ``position_embedding_type`` "rope" (the released
    H models say "nope")."""
    count = cfg.integer("num_hidden_layers")
    if "layer_types" in cfg:   # the released configs' "mamba"/"attention", or transformers 5's names for them
        roles = layer_types(cfg, count, {"mamba": "mamba", "attention": "attention",
                                         "linear_attention": "mamba", "full_attention": "attention"})
    else:                      # GraniteMoeHybridConfig's default: Mamba-2 everywhere
        roles = ["mamba"] * count
    rotary = cfg.doc.get("position_embedding_type", cfg.default("position_embedding_type")) == "rope"
    mixers = {"attention": biased_attention(cfg, rotary=rotary),
              "mamba": _mamba2_mixer(cfg, heads="mamba_n_heads", head_dim="mamba_d_head", state="mamba_d_state",
                                     conv="mamba_d_conv", groups="mamba_n_groups", expand="mamba_expand")}
    shared_size = cfg.integer("shared_intermediate_size")
    if cfg.integer("num_local_experts", minimum=0):
        mlp = routed_moe(cfg, "num_local_experts", shared_size)
    else:
        mlp = DenseMLP(shared_size)
    return [LayerSpec(kind="decoder", mixer=mixers[role], mlp=mlp) for role in roles]
