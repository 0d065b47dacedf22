"""Import a HuggingFace ``config.json`` into a ModelSpec.

Every family becomes ``embedding`` + its blocks + ``head``; what differs is how a family's keys say which
mixer and which MLP each block has:

- ``llama``, ``mistral``: attention + gated MLP in every block (Mistral's ``sliding_window``, when set,
  windows every layer). ``mixtral``: the MLP is a ``num_local_experts`` top-``num_experts_per_tok`` MoE.
- ``gemma2``: ``layer_types`` when given, else sliding-window on even layers and global on odd ones (the
  rule of HF's ``Gemma2Config``). ``gemma3`` / ``gemma3_text``: the text model may sit under
  ``text_config``; ``layer_types`` when given, else layer i is global when ``(i + 1) %
  sliding_window_pattern == 0`` (every 6th). The published Gemma 3 27B config omits ``vocab_size`` and
  ``sliding_window_pattern`` and relies on ``Gemma3TextConfig``'s defaults (262 208 and 6), as we do.
- ``deepseek_v2``, ``deepseek_v3``: multi-head latent attention; the first ``first_k_dense_replace``
  blocks have a dense MLP, the others (every ``moe_layer_freq``-th) an MoE of ``n_routed_experts``
  top-``num_experts_per_tok`` experts of ``moe_intermediate_size`` plus ``n_shared_experts`` shared ones.
- ``nemotron_h``: one block per character of ``hybrid_override_pattern`` (or entry of
  ``layers_block_type``): ``M`` a Mamba-2 mixer alone, ``*`` attention alone, ``-`` a squared-ReLU
  (non-gated) MLP alone, ``E`` an MoE alone.
- ``qwen3_next``: ``layer_types`` when given, else every ``full_attention_interval``-th layer is full
  attention and the rest gated delta-net linear attention; MLPs are MoE with one shared expert except the
  ``mlp_only_layers`` and layers off the ``decoder_sparse_step``.
- ``minimax`` / ``minimax_text_01`` / ``minimax_m1``: ``attn_type_list`` (0 lightning linear attention,
  1 softmax attention) or ``layer_types``; every MLP is an MoE of ``num_local_experts`` experts of
  ``intermediate_size`` (plus a shared expert when ``shared_intermediate_size`` > 0).

Approximations, chosen because the pipeline planner needs per-layer cost and memory, not bit-exact modules:
- MLA is attention whose query/key heads are ``qk_nope_head_dim + qk_rope_head_dim`` wide and value heads
  ``v_head_dim`` wide, with the latent ranks kept so the cost model counts the down/up projections; in
  training every head materialises its own key and value, so ``num_kv_heads == num_heads``.
- Qwen3-Next's attention output gate and shared-expert gate, Nemotron-H's non-gated experts and MoE latent
  projection, DeepSeek's multi-token-prediction module, Gemma's extra norms, QK-norms and soft-capping are
  left out (each well under 1 % of a layer's FLOPs, or absent from the model that trains the pipeline).
- Linear attention keeps one head width: Qwen3-Next's ``linear_value_head_dim`` (equal to the key width in
  every released config).
- Training runs in bf16 whatever ``torch_dtype`` the checkpoint was saved in.
"""

from __future__ import annotations

from typing import Callable

from planner.errors import SpecError
from planner.spec.model import (
    GATED_DELTA_CONV_KERNEL,
    AttentionMixer,
    DenseMLP,
    LayerSpec,
    LinearAttentionMixer,
    Mamba2Mixer,
    ModelSpec,
    MoEMLP,
    load_model_spec,
)
from planner.validation import get_bool, get_int, get_number, join, require_list, require_mapping

EMBEDDING = LayerSpec(kind="embedding")
HEAD = LayerSpec(kind="head")


class _Config:
    """Typed reads of one HF config mapping; errors name the HF key (``text_config.hidden_size``)."""

    def __init__(self, doc: dict, path: str = ""):
        self.doc = doc
        self.path = path

    def __contains__(self, key: str) -> bool:
        return self.doc.get(key) is not None

    def integer(self, key: str, default=..., minimum: int = 1) -> int:
        return get_int(self.doc, key, self.path, default=default, minimum=minimum)

    def optional_integer(self, key: str, minimum: int = 1) -> int | None:
        return get_int(self.doc, key, self.path, default=None, minimum=minimum, allow_none=True)

    def number(self, key: str, default=..., minimum: float = 0.0) -> float:
        return get_number(self.doc, key, self.path, default=default, minimum=minimum)

    def flag(self, key: str, default: bool) -> bool:
        return get_bool(self.doc, key, self.path, default=default)

    def entries(self, key: str) -> list:
        return require_list(self.doc[key], self.field(key), min_length=1)

    def field(self, key: str) -> str:
        return join(self.path, key)


def _attention(cfg: _Config, *, window: int | None = None, head_dim_keys=("head_dim",)) -> AttentionMixer:
    heads = cfg.integer("num_attention_heads")
    kv_heads = cfg.integer("num_key_value_heads") if "num_key_value_heads" in cfg else heads   # HF: null means MHA
    if heads % kv_heads:
        raise SpecError(cfg.field("num_key_value_heads"),
                        f"must divide num_attention_heads ({heads}) for grouped-query attention, got {kv_heads}")
    head_dim = next((cfg.integer(key) for key in head_dim_keys if key in cfg), None)
    if head_dim is None:
        hidden = cfg.integer("hidden_size")
        if hidden % heads:
            raise SpecError(cfg.field(head_dim_keys[0]),
                            f"is required: hidden_size ({hidden}) is not a multiple of num_attention_heads ({heads})")
        head_dim = hidden // heads
    return AttentionMixer(num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, window=window)


def _layer_types(cfg: _Config, count: int, allowed: dict[str, str]) -> list[str]:
    """HF's ``layer_types`` list mapped through ``allowed`` (HF name -> our role), checked entry by entry."""
    types = cfg.entries("layer_types")
    if len(types) != count:
        raise SpecError(cfg.field("layer_types"), f"has {len(types)} entries but num_hidden_layers is {count}")
    roles = []
    for index, value in enumerate(types):
        if value not in allowed:
            raise SpecError(f"{cfg.field('layer_types')}[{index}]",
                            f"must be one of {', '.join(allowed)}; got {value!r}")
        roles.append(allowed[value])
    return roles


def _llama(cfg: _Config) -> list[LayerSpec]:
    mixer = _attention(cfg, window=cfg.optional_integer("sliding_window"))
    block = LayerSpec(kind="decoder", mixer=mixer, mlp=DenseMLP(cfg.integer("intermediate_size")))
    return [block] * cfg.integer("num_hidden_layers")


def _mixtral(cfg: _Config) -> list[LayerSpec]:
    mixer = _attention(cfg, window=cfg.optional_integer("sliding_window"))
    experts = cfg.integer("num_local_experts")
    mlp = MoEMLP(num_experts=experts, top_k=_top_k(cfg, experts),
                 expert_intermediate_size=cfg.integer("intermediate_size"), aux_loss_coeff=_aux_loss_coeff(cfg))
    return [LayerSpec(kind="decoder", mixer=mixer, mlp=mlp)] * cfg.integer("num_hidden_layers")


def _top_k(cfg: _Config, experts: int) -> int:
    top_k = cfg.integer("num_experts_per_tok")
    if top_k > experts:
        raise SpecError(cfg.field("num_experts_per_tok"), f"must be <= the number of experts ({experts}), got {top_k}")
    return top_k


def _aux_loss_coeff(cfg: _Config) -> float:
    """The load-balancing loss weight HF's MoE models train with (``router_aux_loss_coef``). DeepSeek's
    ``aux_loss_alpha`` is left out: it weighs a sequence-wise loss (and V3 balances mainly with a routing bias),
    not the batch-wise loss the executor computes."""
    return cfg.number("router_aux_loss_coef", default=0.0)


def _gemma_blocks(cfg: _Config, sliding: list[bool]) -> list[LayerSpec]:
    window = cfg.integer("sliding_window")
    mlp = DenseMLP(cfg.integer("intermediate_size"))
    local, global_ = _attention(cfg, window=window), _attention(cfg)
    return [LayerSpec(kind="decoder", mixer=local if is_sliding else global_, mlp=mlp) for is_sliding in sliding]


GEMMA_LAYER_TYPES = {"sliding_attention": "sliding", "full_attention": "global"}


def _gemma2(cfg: _Config) -> list[LayerSpec]:
    count = cfg.integer("num_hidden_layers")
    if "layer_types" in cfg:
        sliding = [role == "sliding" for role in _layer_types(cfg, count, GEMMA_LAYER_TYPES)]
    else:
        sliding = [index % 2 == 0 for index in range(count)]
    return _gemma_blocks(cfg, sliding)


def _gemma3(cfg: _Config) -> list[LayerSpec]:
    count = cfg.integer("num_hidden_layers")
    if "layer_types" in cfg:
        sliding = [role == "sliding" for role in _layer_types(cfg, count, GEMMA_LAYER_TYPES)]
    else:
        pattern = cfg.integer("sliding_window_pattern", default=6)
        sliding = [(index + 1) % pattern != 0 for index in range(count)]
    return _gemma_blocks(cfg, sliding)


def _deepseek(cfg: _Config) -> list[LayerSpec]:
    heads = cfg.integer("num_attention_heads")
    rope = cfg.integer("qk_rope_head_dim")
    mixer = AttentionMixer(num_heads=heads, num_kv_heads=heads, head_dim=cfg.integer("qk_nope_head_dim") + rope,
                           v_head_dim=cfg.integer("v_head_dim"), q_lora_rank=cfg.optional_integer("q_lora_rank"),
                           kv_lora_rank=cfg.integer("kv_lora_rank"), rope_head_dim=rope)
    dense = LayerSpec(kind="decoder", mixer=mixer, mlp=DenseMLP(cfg.integer("intermediate_size")))
    experts = cfg.optional_integer("n_routed_experts")
    if experts is None:
        return [dense] * cfg.integer("num_hidden_layers")
    expert_size = cfg.integer("moe_intermediate_size")
    shared = cfg.integer("n_shared_experts", default=0, minimum=0)
    moe = LayerSpec(kind="decoder", mixer=mixer, mlp=MoEMLP(
        num_experts=experts, top_k=_top_k(cfg, experts), expert_intermediate_size=expert_size,
        num_shared_experts=shared, shared_intermediate_size=expert_size if shared else 0))
    first_dense = cfg.integer("first_k_dense_replace", default=0, minimum=0)
    frequency = cfg.integer("moe_layer_freq", default=1)
    return [moe if index >= first_dense and index % frequency == 0 else dense
            for index in range(cfg.integer("num_hidden_layers"))]


NEMOTRON_PATTERN = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
NEMOTRON_BLOCK_TYPES = {"mamba": "mamba", "linear_attention": "mamba", "attention": "attention",
                        "full_attention": "attention", "mlp": "mlp", "moe": "moe"}


def _nemotron_roles(cfg: _Config) -> list[str]:
    if "layers_block_type" in cfg:
        key, entries = "layers_block_type", cfg.entries("layers_block_type")
        allowed = NEMOTRON_BLOCK_TYPES
    else:
        key, entries = "hybrid_override_pattern", cfg.doc.get("hybrid_override_pattern")
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


def _nemotron_h(cfg: _Config) -> list[LayerSpec]:
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
                                        mixer=_attention(cfg, head_dim_keys=("head_dim", "attention_head_dim")))
    if "mlp" in roles:
        blocks["mlp"] = LayerSpec(kind="mlp", mlp=DenseMLP(cfg.integer("intermediate_size"), gated=False))
    if "moe" in roles:
        experts = cfg.integer("n_routed_experts")
        shared = cfg.integer("n_shared_experts", default=0, minimum=0)
        blocks["moe"] = LayerSpec(kind="mlp", mlp=MoEMLP(
            num_experts=experts, top_k=_top_k(cfg, experts),
            expert_intermediate_size=cfg.integer("moe_intermediate_size"), num_shared_experts=shared,
            shared_intermediate_size=cfg.integer("moe_shared_expert_intermediate_size") if shared else 0))
    return [blocks[role] for role in roles]


def _qwen3_next(cfg: _Config) -> list[LayerSpec]:
    count = cfg.integer("num_hidden_layers")
    if "layer_types" in cfg:
        roles = _layer_types(cfg, count, {"linear_attention": "linear", "full_attention": "full"})
    elif "full_attention_interval" in cfg:
        interval = cfg.integer("full_attention_interval")
        roles = ["full" if (index + 1) % interval == 0 else "linear" for index in range(count)]
    else:
        raise SpecError(cfg.field("full_attention_interval"), "is required when layer_types is not given")
    mixers = {"full": _attention(cfg),
              "linear": LinearAttentionMixer(num_heads=cfg.integer("linear_num_value_heads"),
                                             head_dim=cfg.integer("linear_value_head_dim"), variant="gated_delta",
                                             num_key_heads=cfg.integer("linear_num_key_heads"),
                                             conv_kernel=cfg.integer("linear_conv_kernel_dim",
                                                                     default=GATED_DELTA_CONV_KERNEL))}
    if mixers["linear"].num_heads % mixers["linear"].key_heads:
        raise SpecError(cfg.field("linear_num_key_heads"),
                        f"must divide linear_num_value_heads ({mixers['linear'].num_heads})")
    mlp_only = set(cfg.entries("mlp_only_layers")) if cfg.doc.get("mlp_only_layers") else set()
    step = cfg.integer("decoder_sparse_step", default=1)
    moe = _qwen3_next_moe(cfg)

    def mlp_of(index: int) -> DenseMLP | MoEMLP:
        if moe is not None and index not in mlp_only and (index + 1) % step == 0:
            return moe
        return DenseMLP(cfg.integer("intermediate_size"))
    return [LayerSpec(kind="decoder", mixer=mixers[role], mlp=mlp_of(index)) for index, role in enumerate(roles)]


def _qwen3_next_moe(cfg: _Config) -> MoEMLP | None:
    experts = cfg.integer("num_experts", default=0, minimum=0)
    if not experts:
        return None
    shared_size = cfg.integer("shared_expert_intermediate_size", default=0, minimum=0)
    return MoEMLP(num_experts=experts, top_k=_top_k(cfg, experts),
                  expert_intermediate_size=cfg.integer("moe_intermediate_size"),
                  num_shared_experts=1 if shared_size else 0, shared_intermediate_size=shared_size,
                  aux_loss_coeff=_aux_loss_coeff(cfg))


def _minimax(cfg: _Config) -> list[LayerSpec]:
    count = cfg.integer("num_hidden_layers")
    if "attn_type_list" in cfg:
        types = cfg.entries("attn_type_list")
        if len(types) != count:
            raise SpecError(cfg.field("attn_type_list"), f"has {len(types)} entries but num_hidden_layers is {count}")
        for index, value in enumerate(types):
            if value not in (0, 1) or isinstance(value, bool):
                raise SpecError(f"{cfg.field('attn_type_list')}[{index}]",
                                f"must be 0 (lightning attention) or 1 (softmax attention); got {value!r}")
        roles = ["full" if value == 1 else "linear" for value in types]
    elif "layer_types" in cfg:
        roles = _layer_types(cfg, count, {"linear_attention": "linear", "full_attention": "full"})
    else:
        raise SpecError(cfg.field("attn_type_list"), "is required (or give layer_types)")
    softmax = _attention(cfg)
    lightning = LinearAttentionMixer(num_heads=softmax.num_heads, head_dim=softmax.head_dim, variant="lightning")
    experts = cfg.integer("num_local_experts")
    shared_size = cfg.integer("shared_intermediate_size", default=0, minimum=0)
    mlp = MoEMLP(num_experts=experts, top_k=_top_k(cfg, experts),
                 expert_intermediate_size=cfg.integer("intermediate_size"),
                 num_shared_experts=1 if shared_size else 0, shared_intermediate_size=shared_size,
                 aux_loss_coeff=_aux_loss_coeff(cfg))
    mixers = {"full": softmax, "linear": lightning}
    return [LayerSpec(kind="decoder", mixer=mixers[role], mlp=mlp) for role in roles]


# model_type -> (block builder, tie_word_embeddings default of the family's HF config class)
FAMILIES: dict[str, tuple[Callable[[_Config], list[LayerSpec]], bool]] = {
    "llama": (_llama, False),
    "mistral": (_llama, False),
    "mixtral": (_mixtral, False),
    "gemma2": (_gemma2, True),
    "gemma3": (_gemma3, True),
    "gemma3_text": (_gemma3, True),
    "deepseek_v2": (_deepseek, False),
    "deepseek_v3": (_deepseek, False),
    "nemotron_h": (_nemotron_h, False),
    "qwen3_next": (_qwen3_next, False),
    "minimax": (_minimax, False),
    "minimax_text_01": (_minimax, False),
    "minimax_m1": (_minimax, False),
}

ARCHITECTURE_MODEL_TYPES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "MixtralForCausalLM": "mixtral",
    "Gemma2ForCausalLM": "gemma2", "Gemma3ForConditionalGeneration": "gemma3", "Gemma3ForCausalLM": "gemma3_text",
    "DeepseekV2ForCausalLM": "deepseek_v2", "DeepseekV3ForCausalLM": "deepseek_v3",
    "NemotronHForCausalLM": "nemotron_h", "Qwen3NextForCausalLM": "qwen3_next", "MiniMaxForCausalLM": "minimax",
    "MiniMaxText01ForCausalLM": "minimax_text_01", "MiniMaxM1ForCausalLM": "minimax_m1",
}

# Keys the published config leaves to the family's HF config class (Gemma 3 27B: vocabulary size).
FAMILY_DEFAULTS = {"gemma3": {"vocab_size": 262_208}, "gemma3_text": {"vocab_size": 262_208}}


def supported_model_types() -> list[str]:
    return sorted(FAMILIES)


def _model_type(config: dict) -> str:
    model_type = config.get("model_type")
    if model_type is None:
        architectures = config.get("architectures") or []
        known = [ARCHITECTURE_MODEL_TYPES[arch] for arch in architectures if arch in ARCHITECTURE_MODEL_TYPES]
        if not known:
            raise SpecError("model_type", "is required (no known entry in architectures); supported: "
                            + ", ".join(supported_model_types()))
        return known[0]
    if model_type not in FAMILIES:
        raise SpecError("model_type", f"unsupported {model_type!r}; supported: {', '.join(supported_model_types())}")
    return model_type


def _text_config(config: dict, model_type: str) -> _Config:
    """The text model's keys: Gemma 3's multimodal config nests them under ``text_config``."""
    if model_type == "gemma3" and "text_config" in config:
        return _Config(require_mapping(config["text_config"], "text_config"), "text_config")
    return _Config(config)


def _default_name(config: dict, model_type: str) -> str:
    path = config.get("_name_or_path")
    if isinstance(path, str) and path.strip("/"):
        return path.rstrip("/").rsplit("/", 1)[-1]
    return model_type


def import_hf_config(config: dict, *, name: str | None = None, seq_len: int = 4096, micro_batch_size: int = 1,
                     source: str | None = None) -> ModelSpec:
    """Build the ModelSpec of a HuggingFace ``config.json`` (parsed); errors name the HF key at fault."""
    config = require_mapping(config, "")
    for field, value in (("seq_len", seq_len), ("micro_batch_size", micro_batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(field, f"must be a positive integer, got {value!r}")
    model_type = _model_type(config)
    build_blocks, tie_default = FAMILIES[model_type]
    cfg = _text_config(config, model_type)
    defaults = FAMILY_DEFAULTS.get(model_type, {})
    spec = ModelSpec(
        name=name or _default_name(config, model_type),
        hidden_size=cfg.integer("hidden_size"),
        vocab_size=cfg.integer("vocab_size", default=defaults.get("vocab_size", ...)),
        seq_len=seq_len,
        micro_batch_size=micro_batch_size,
        tie_embeddings=cfg.flag("tie_word_embeddings", _Config(config).flag("tie_word_embeddings", tie_default)),
        layers=(EMBEDDING, *build_blocks(cfg), HEAD),
        source=source or f"huggingface config.json (model_type {model_type})",
    )
    # The spec loader owns the invariants; a spec it would reject must not leave the importer.
    return load_model_spec(spec.to_dict())
