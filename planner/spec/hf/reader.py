"""Typed reads of a HuggingFace config mapping, and the pieces every family's builder shares.

A key the config leaves out (or sets to null) takes the value the family's ``transformers`` config class
gives it (``planner.spec.hf.defaults``); a key HF spells two ways (its ``attribute_map``, GPT-2's ``n_embd``
for ``hidden_size``) is read under either spelling. Errors name the key as the config spells it
(``text_config.hidden_size``, ``n_embd``).
"""

from __future__ import annotations

from dataclasses import replace

from planner.errors import SpecError
from planner.spec.model import (GATED_ACTIVATIONS, UNGATED_ACTIVATIONS, AttentionMixer, LayerSpec, MoEMLP,
                                check_router_groups)
from planner.fields import closest_key, get_bool, get_int, get_number, get_str, join, require_list

EMBEDDING = LayerSpec(kind="embedding")
HEAD = LayerSpec(kind="head")


class Config:
    def __init__(self, doc: dict, path: str = "", *, defaults: dict | None = None, aliases: dict | None = None):
        self.doc = doc
        self.path = path
        self.defaults = defaults or {}
        self.aliases = aliases or {}
        self.read: set[str] = set()        # every key asked for, under every spelling
        self.defaulted: set[str] = set()   # the keys the config left out, whose default was taken

    def _spellings(self, key: str) -> list[str]:
        """``key`` and the other name HF accepts for it, either way round (``hidden_size`` / ``n_embd``)."""
        other = self.aliases.get(key) or next((name for name, alias in self.aliases.items() if alias == key), None)
        spellings = [key, other] if other else [key]
        self.read.update(spellings)
        return spellings

    def _absent(self, key: str) -> bool:
        """Whether the config leaves ``key`` out (or null), noted as defaulted when it does."""
        if any(self.doc.get(spelling) is not None for spelling in self._spellings(key)):
            return False
        self.defaulted.add(key)
        return True

    def misspellings(self) -> list[tuple[str, str]]:
        """(the config's key, the key it most likely means) for each key the reads never asked for that is
        close to a key the config left out: ``num_hiden_layers`` when ``num_hidden_layers`` took its default.
        HF's config classes keep any key as an attribute, so transformers says nothing either."""
        unread = [key for key in self.doc if isinstance(key, str) and key not in self.read]
        found = [(key, closest_key(key, self.defaulted)) for key in sorted(unread)]
        return [(key, meant) for key, meant in found if meant]

    def name(self, key: str) -> str:
        """``key`` as this config spells it (its HF alias when only the alias is present)."""
        return next((spelling for spelling in self._spellings(key) if self.doc.get(spelling) is not None), key)

    def default(self, key: str, fallback=None):
        """The family's ``transformers`` default for ``key`` (under either spelling), else ``fallback``."""
        return next((self.defaults[spelling] for spelling in self._spellings(key) if spelling in self.defaults),
                    fallback)

    def _view(self, key: str, default) -> tuple[dict, str]:
        """A one-key mapping holding the config's value, else the default (empty when there is none)."""
        name = self.name(key)
        if not self._absent(key):
            return {name: self.doc[name]}, name
        fallback = self.default(key, ...) if default is ... else default
        return ({} if fallback is ... or fallback is None else {name: fallback}), name

    def __contains__(self, key: str) -> bool:
        return not self._absent(key)

    def integer(self, key: str, default=..., minimum: int = 1) -> int:
        view, name = self._view(key, default)
        return get_int(view, name, self.path, minimum=minimum)

    def optional_integer(self, key: str, minimum: int = 1) -> int | None:
        """The value, None when the config sets null; a missing key takes the family default (often None)."""
        name = self.name(key)
        if name in self.doc:
            return get_int(self.doc, name, self.path, default=None, minimum=minimum, allow_none=True)
        self._absent(key)
        return self.default(key)

    def optional_positive_number(self, key: str) -> float | None:
        """The value (above 0), None when the config sets null; a missing key takes the family default (often
        None)."""
        name = self.name(key)
        if name in self.doc:
            if self.doc[name] is None:
                return None
            return get_number(self.doc, name, self.path, minimum=0.0, exclusive_minimum=True)
        self._absent(key)
        return self.default(key)

    def number(self, key: str, default=..., minimum: float = 0.0) -> float:
        view, name = self._view(key, default)
        return get_number(view, name, self.path, minimum=minimum)

    def choice(self, key: str, choices: tuple[str, ...], default=...) -> str:
        view, name = self._view(key, default)
        return get_str(view, name, self.path, choices=choices)

    def flag(self, key: str, default=...) -> bool:
        view, name = self._view(key, default)
        if name not in view:
            raise SpecError(self.field(key), "is required")
        return get_bool(view, name, self.path, default=False)

    def entries(self, key: str, min_length: int = 1) -> list:
        view, name = self._view(key, ...)
        if name not in view:
            raise SpecError(self.field(key), "is required")
        return require_list(view[name], self.field(key), min_length=min_length)

    def per_layer_integer(self, key: str, count: int, default=...) -> list[int]:
        """An integer for every layer: one for all (``4``) or a list of ``count`` (Hunyuan's ``moe_topk``)."""
        view, name = self._view(key, default)
        if not isinstance(view.get(name), list):
            return [self.integer(key, default)] * count
        values = view[name]
        if len(values) != count:
            raise SpecError(self.field(key), f"has {len(values)} entries but num_hidden_layers is {count}")
        return [get_int({f"{name}[{index}]": value}, f"{name}[{index}]", self.path)
                for index, value in enumerate(values)]

    def field(self, key: str) -> str:
        return join(self.path, self.name(key))


def attention(cfg: Config, *, window: int | None = None, head_dim_keys=("head_dim",), **flags) -> AttentionMixer:
    """Grouped-query attention from ``num_attention_heads``, ``num_key_value_heads`` (null or absent: one per
    query head) and the head width (``head_dim`` when given, else ``hidden_size // num_attention_heads``)."""
    heads = cfg.integer("num_attention_heads")
    kv_heads = cfg.optional_integer("num_key_value_heads") or heads
    if heads % kv_heads:
        raise SpecError(cfg.field("num_key_value_heads"),
                        f"must divide num_attention_heads ({heads}) for grouped-query attention, got {kv_heads}")
    head_dim = next((cfg.integer(key) for key in head_dim_keys if cfg.optional_integer(key) is not None), None)
    if head_dim is None:   # as HF's attention modules: the floor, even where the heads do not tile hidden_size
        head_dim = cfg.integer("hidden_size") // heads
        if head_dim < 1:
            raise SpecError(cfg.field("num_attention_heads"), f"must be <= hidden_size, got {heads}")
    return AttentionMixer(num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, window=window, **flags)


# HF's activation names (``transformers.activations.ACT2FN``) that the model format holds exactly
# (``planner.spec.model.GATED_ACTIVATIONS`` / ``UNGATED_ACTIVATIONS``): ``gelu_new`` and ``gelu_fast`` are the tanh
# approximation in other spellings; ``relu2`` the squared ReLU.
HF_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh",
                  "gelu_new": "gelu_tanh", "gelu_fast": "gelu_tanh", "relu2": "squared_relu", "xielu": "xielu"}


def mlp_activation(cfg: Config, key: str = "hidden_act", *, gated: bool) -> str:
    """The activation the config's ``key`` names, as the model format holds it, for an MLP with or without a gate
    (a name that is not an activation of that kind is refused by name); a config without the key takes the
    family's ``transformers`` default, else SwiGLU's SiLU with a gate and GELU without."""
    name = cfg.choice(key, tuple(HF_ACTIVATIONS), default=cfg.default(key, "silu" if gated else "gelu"))
    activation = HF_ACTIVATIONS[name]
    allowed = GATED_ACTIVATIONS if gated else UNGATED_ACTIVATIONS
    if activation not in allowed:
        known = ", ".join(hf for hf, ours in HF_ACTIVATIONS.items() if ours in allowed)
        raise SpecError(cfg.field(key), f"{name} is not modelled for an MLP {'with' if gated else 'without'} a "
                                        f"gate (known: {known})")
    return activation


def with_attention_scalars(layers: list[LayerSpec], **scalars) -> list[LayerSpec]:
    """``layers`` with every softmax attention's ``softmax_scale`` / ``softcap`` set (the ones given)."""
    def scaled(layer: LayerSpec) -> LayerSpec:
        if not isinstance(layer.mixer, AttentionMixer):
            return layer
        return replace(layer, mixer=replace(layer.mixer, **scalars))
    return [scaled(layer) for layer in layers]


def gemma_scalars(cfg: Config) -> tuple[dict, dict]:
    """Gemma 2's and 3's scalars (``Gemma2Model``, ``Gemma2Attention``, ``Gemma2ForCausalLM``): the embedding times
    sqrt(hidden), the scores scaled by ``query_pre_attn_scalar ** -0.5`` and soft-capped at
    ``attn_logit_softcapping``, the logits soft-capped at ``final_logit_softcapping`` (Gemma 3: neither cap).
    (attention fields, model fields)."""
    head_dim = cfg.optional_integer("head_dim") or cfg.integer("hidden_size") // cfg.integer("num_attention_heads")
    query_scalar = cfg.optional_positive_number("query_pre_attn_scalar")
    attention = {"softmax_scale": query_scalar ** -0.5 if query_scalar not in (None, head_dim) else None,
                 "softcap": cfg.optional_positive_number("attn_logit_softcapping")}
    model = {"embedding_multiplier": cfg.integer("hidden_size") ** 0.5,
             "logits_softcap": cfg.optional_positive_number("final_logit_softcapping")}
    return attention, model


def granite_scalars(cfg: Config) -> tuple[dict, dict]:
    """Granite's multipliers (``GraniteModel``, ``GraniteAttention``, ``GraniteForCausalLM``; the MoE and hybrid
    models alike): the embedding times ``embedding_multiplier``, the scores scaled by ``attention_multiplier`` (in
    place of ``head_dim ** -0.5``), each sublayer's output times ``residual_multiplier``, the logits divided by
    ``logits_scaling``. (attention fields, model fields)."""
    def multiplier(key: str) -> float | None:
        value = cfg.optional_positive_number(key)
        return None if value == 1.0 else value

    logits_scaling = cfg.optional_positive_number("logits_scaling")
    return ({"softmax_scale": cfg.optional_positive_number("attention_multiplier")},
            {"embedding_multiplier": multiplier("embedding_multiplier"),
             "residual_multiplier": multiplier("residual_multiplier"),
             "logits_multiplier": None if logits_scaling in (None, 1.0) else 1.0 / logits_scaling})


def with_gated_activation(layers: list[LayerSpec], activation: str) -> list[LayerSpec]:
    """``layers`` with every gated MLP's (and gated experts') activation set to ``activation``: HF configs name one
    activation (``hidden_act``) for the MLPs and experts of a model."""
    def gated(layer: LayerSpec) -> LayerSpec:
        if layer.mlp is None or not layer.mlp.gated or layer.mlp.activation == activation:
            return layer
        return replace(layer, mlp=replace(layer.mlp, activation=activation))
    return [gated(layer) for layer in layers]


def biased_attention(cfg: Config, *, bias_key: str = "attention_bias", **fields) -> AttentionMixer:
    """``attention`` with biases on all four projections where the config's ``bias_key`` says so (Llama's
    ``attention_bias``, ERNIE's ``use_bias``)."""
    biased = cfg.flag(bias_key)
    return attention(cfg, qkv_bias=biased, output_bias=biased, **fields)


def layer_types(cfg: Config, count: int, allowed: dict[str, str], key: str = "layer_types") -> list[str]:
    """HF's ``layer_types`` list mapped through ``allowed`` (HF name -> our role), checked entry by entry."""
    types = cfg.entries(key)
    if len(types) != count:
        raise SpecError(cfg.field(key), f"has {len(types)} entries but num_hidden_layers is {count}")
    roles = []
    for index, value in enumerate(types):
        if value not in allowed:
            raise SpecError(f"{cfg.field(key)}[{index}]", f"must be one of {', '.join(allowed)}; got {value!r}")
        roles.append(allowed[value])
    return roles


def layer_flags(cfg: Config, key: str, count: int, zero: str, one: str) -> list[bool]:
    """A per-layer list of 0 / 1 (MiniMax's ``attn_type_list``, Llama 4's ``no_rope_layers``), checked entry by
    entry; True where 1. ``zero`` and ``one`` say what each value means, for the error."""
    flags = cfg.entries(key)
    if len(flags) != count:
        raise SpecError(cfg.field(key), f"has {len(flags)} entries but num_hidden_layers is {count}")
    for index, value in enumerate(flags):
        if isinstance(value, bool) or not isinstance(value, int) or value not in (0, 1):
            raise SpecError(f"{cfg.field(key)}[{index}]", f"must be 0 ({zero}) or 1 ({one}); got {value!r}")
    return [value == 1 for value in flags]


def routed_moe(cfg: Config, experts_key: str, shared_size: int = 0) -> MoEMLP:
    """A top-``num_experts_per_tok`` MoE of ``experts_key`` experts of ``intermediate_size``, trained with the routers'
    balancing loss (Mixtral's, Phi-3.5-MoE's, OLMoE's, Jamba's and MiniMax-M2's MoE), beside one shared expert of
    ``shared_size`` when that is above 0 (Granite's)."""
    experts = cfg.integer(experts_key)
    return MoEMLP(num_experts=experts, top_k=top_k(cfg, experts),
                  expert_intermediate_size=cfg.integer("intermediate_size"), num_shared_experts=1 if shared_size else 0,
                  shared_intermediate_size=shared_size, aux_loss_coeff=aux_loss_coeff(cfg))


def top_k(cfg: Config, experts: int) -> int:
    chosen = cfg.integer("num_experts_per_tok")
    if chosen > experts:
        raise SpecError(cfg.field("num_experts_per_tok"), f"must be <= the number of experts ({experts}), got {chosen}")
    return chosen


TOPK_METHODS = ("greedy", "group_limited_greedy", "noaux_tc")


def router_groups(cfg: Config, experts: int, chosen: int) -> dict:
    """Group-limited routing (``MoEMLP.router_groups``), as transformers' routers run it: DeepSeek-V3's (and
    GLM-4.5's, Kimi-K2's, whose 1 and 1 route freely) always choose among ``topk_group`` of ``n_group`` groups;
    DeepSeek-V2's only with ``topk_method`` ``group_limited_greedy``."""
    if cfg.choice("topk_method", TOPK_METHODS, default=cfg.default("topk_method", "noaux_tc")) == "greedy":
        return {}
    groups = cfg.integer("n_group", default=cfg.default("n_group", 1))
    group_topk = cfg.integer("topk_group", default=cfg.default("topk_group", groups))
    check_router_groups(experts, chosen, groups, group_topk, cfg.path, cfg.name("n_group"), cfg.name("topk_group"))
    return {"router_groups": groups, "router_group_topk": group_topk}


def aux_loss_coeff(cfg: Config) -> float:
    """The load-balancing loss weight HF's MoE models train with (``router_aux_loss_coef``). DeepSeek's
    ``aux_loss_alpha`` is left out: it weighs a sequence-wise loss (and V3 balances mainly with a routing bias),
    not the batch-wise loss the executor computes."""
    return cfg.number("router_aux_loss_coef", default=cfg.default("router_aux_loss_coef", 0.0))
