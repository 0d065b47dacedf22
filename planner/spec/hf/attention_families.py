"""Families whose every block mixes tokens with softmax attention: how each one's keys say which attention and
which MLP each block has. Block order, layer roles and module shapes follow the ``transformers`` modelling
file of each family (``models/<model_type>/modeling_<model_type>.py``)."""

from __future__ import annotations

from planner.errors import SpecError
from planner.spec.hf.reader import (Config, aux_loss_coeff, attention, biased_attention, layer_flags, layer_types,
                                    mlp_activation, routed_moe, router_groups, top_k)
from planner.spec.model import CLAMPED_SWIGLU_ALPHA, CLAMPED_SWIGLU_LIMIT, AttentionMixer, DenseMLP, LayerSpec, MoEMLP

SLIDING_OR_FULL = {"sliding_attention": "sliding", "full_attention": "full"}


def _decoders(mixers: list[AttentionMixer], mlps: list) -> list[LayerSpec]:
    return [LayerSpec(kind="decoder", mixer=mixer, mlp=mlp) for mixer, mlp in zip(mixers, mlps)]


def llama(cfg: Config) -> list[LayerSpec]:
    """Llama, Mistral (``sliding_window``, when set, windows every layer) and Phi-3 (its fused qkv and gate/up
    projections hold the same weights as Llama's separate ones)."""
    mixer = attention(cfg, window=cfg.optional_integer("sliding_window"))
    block = LayerSpec(kind="decoder", mixer=mixer, mlp=DenseMLP(cfg.integer("intermediate_size")))
    return [block] * cfg.integer("num_hidden_layers")


def ministral(cfg: Config) -> list[LayerSpec]:
    """Ministral: Llama whose layers slide over ``sliding_window`` per ``layer_types``, by default every layer when
    ``sliding_window`` is set (``MinistralConfig``'s rule)."""
    count = cfg.integer("num_hidden_layers")
    if "layer_types" in cfg:
        roles = layer_types(cfg, count, SLIDING_OR_FULL)
    else:
        roles = ["sliding" if cfg.optional_integer("sliding_window") is not None else "full"] * count
    mlp = DenseMLP(cfg.integer("intermediate_size"))
    return _decoders([attention(cfg, window=window) for window in _sliding_windows(cfg, roles)], [mlp] * count)


def starcoder2(cfg: Config) -> list[LayerSpec]:
    """StarCoder2: LayerNorm (the family's ``norm``), grouped-query attention with rotary positions and an MLP without
    a gate (GELU), every projection biased per ``use_bias``; ``sliding_window``, when set, windows every layer."""
    mixer = biased_attention(cfg, bias_key="use_bias", window=cfg.optional_integer("sliding_window"))
    mlp = DenseMLP(cfg.integer("intermediate_size"), gated=False, bias=cfg.flag("use_bias"),
                   activation=mlp_activation(cfg, gated=False))
    return [LayerSpec(kind="decoder", mixer=mixer, mlp=mlp)] * cfg.integer("num_hidden_layers")


def mixtral(cfg: Config) -> list[LayerSpec]:
    mixer = attention(cfg, window=cfg.optional_integer("sliding_window"))
    mlp = routed_moe(cfg, "num_local_experts")
    return [LayerSpec(kind="decoder", mixer=mixer, mlp=mlp)] * cfg.integer("num_hidden_layers")


def phimoe(cfg: Config) -> list[LayerSpec]:
    """Phi-3.5-MoE: Mixtral's layout with biased attention projections (``attention_bias``) and LayerNorm (the
    family's ``norm``); ``sliding_window`` windows every layer."""
    mixer = biased_attention(cfg, window=cfg.optional_integer("sliding_window"))
    mlp = routed_moe(cfg, "num_local_experts")
    return [LayerSpec(kind="decoder", mixer=mixer, mlp=mlp)] * cfg.integer("num_hidden_layers")


def _gemma_blocks(cfg: Config, sliding: list[bool], qk_norm: bool = False) -> list[LayerSpec]:
    window = cfg.integer("sliding_window")
    mlp = DenseMLP(cfg.integer("intermediate_size"))
    local, global_ = attention(cfg, window=window, qk_norm=qk_norm), attention(cfg, qk_norm=qk_norm)
    return [LayerSpec(kind="decoder", mixer=local if is_sliding else global_, mlp=mlp) for is_sliding in sliding]


def gemma2(cfg: Config) -> list[LayerSpec]:
    count = cfg.integer("num_hidden_layers")
    if "layer_types" in cfg:
        sliding = [role == "sliding" for role in layer_types(cfg, count, SLIDING_OR_FULL)]
    else:
        sliding = [index % 2 == 0 for index in range(count)]
    return _gemma_blocks(cfg, sliding)


def gemma3(cfg: Config) -> list[LayerSpec]:
    count = cfg.integer("num_hidden_layers")
    if "layer_types" in cfg:
        sliding = [role == "sliding" for role in layer_types(cfg, count, SLIDING_OR_FULL)]
    else:
        pattern = cfg.integer("sliding_window_pattern", default=6)   # Gemma3TextConfig's, read from its kwargs
        sliding = [(index + 1) % pattern != 0 for index in range(count)]
    return _gemma_blocks(cfg, sliding, qk_norm=True)


def _qwen_windows(cfg: Config, count: int) -> list[int | None]:
    """Qwen2/Qwen3: ``layer_types`` when given, else (HF's ``Qwen2Config``) layers from ``max_window_layers`` on
    slide over ``sliding_window`` when ``use_sliding_window`` is set, and none does otherwise."""
    window = cfg.optional_integer("sliding_window")
    if "layer_types" in cfg:
        roles = layer_types(cfg, count, SLIDING_OR_FULL)
    elif cfg.flag("use_sliding_window") and window is not None:
        # Qwen3-MoE has no max_window_layers: there use_sliding_window windows every layer.
        first = cfg.integer("max_window_layers", default=cfg.default("max_window_layers", 0), minimum=0)
        roles = ["sliding" if index >= first else "full" for index in range(count)]
    else:
        roles = ["full"] * count
    return _sliding_windows(cfg, roles)


def _sliding_windows(cfg: Config, roles: list[str]) -> list[int | None]:
    """Each layer's window: ``sliding_window`` on the sliding layers (required when there is one), none elsewhere."""
    window = cfg.optional_integer("sliding_window")
    if "sliding" in roles and window is None:
        raise SpecError(cfg.field("sliding_window"), "is required when a layer is sliding_attention")
    return [window if role == "sliding" else None for role in roles]


def qwen2(cfg: Config) -> list[LayerSpec]:
    """Qwen2 / Qwen2.5: Llama with biases on the query, key and value projections."""
    count = cfg.integer("num_hidden_layers")
    mlp = DenseMLP(cfg.integer("intermediate_size"))
    mixers = [attention(cfg, window=window, qkv_bias=True) for window in _qwen_windows(cfg, count)]
    return _decoders(mixers, [mlp] * count)


def _qwen3_attention(cfg: Config, count: int) -> list[AttentionMixer]:
    return [biased_attention(cfg, window=window, qk_norm=True)
            for window in _qwen_windows(cfg, count)]


def qwen3(cfg: Config) -> list[LayerSpec]:
    """Qwen3: Qwen2's layout with a per-head RMSNorm of queries and keys, and ``attention_bias`` on all four
    projections."""
    count = cfg.integer("num_hidden_layers")
    return _decoders(_qwen3_attention(cfg, count), [DenseMLP(cfg.integer("intermediate_size"))] * count)


def qwen_moe_mlps(cfg: Config, count: int, moe: MoEMLP | None) -> list[DenseMLP | MoEMLP]:
    """Qwen3-MoE / Qwen3-Next: the MoE on every ``decoder_sparse_step``-th layer except ``mlp_only_layers``,
    which keep a dense MLP of ``intermediate_size``."""
    mlp_only = set(cfg.entries("mlp_only_layers", min_length=0)) if "mlp_only_layers" in cfg else set()
    step = cfg.integer("decoder_sparse_step", default=cfg.default("decoder_sparse_step", 1))
    sparse = [moe is not None and index not in mlp_only and (index + 1) % step == 0 for index in range(count)]
    # (Qwen3.5's MoE models have MoE layers only, and no intermediate_size)
    dense = DenseMLP(cfg.integer("intermediate_size")) if not all(sparse) else None
    return [moe if is_sparse else dense for is_sparse in sparse]


def qwen_shared_expert_moe(cfg: Config) -> MoEMLP | None:
    """Qwen2-MoE's and Qwen3-Next's MoE: ``num_experts`` routed experts of ``moe_intermediate_size`` (none when 0)
    beside one shared expert of ``shared_expert_intermediate_size`` (none when 0); the shared expert's sigmoid gate
    (one weight vector) is left out."""
    experts = cfg.integer("num_experts", default=cfg.default("num_experts", 0), minimum=0)
    if not experts:
        return None
    shared_size = cfg.integer("shared_expert_intermediate_size",
                              default=cfg.default("shared_expert_intermediate_size", 0), minimum=0)
    return MoEMLP(num_experts=experts, top_k=top_k(cfg, experts),
                  expert_intermediate_size=cfg.integer("moe_intermediate_size"),
                  num_shared_experts=1 if shared_size else 0, shared_intermediate_size=shared_size,
                  aux_loss_coeff=aux_loss_coeff(cfg))


def qwen2_moe(cfg: Config) -> list[LayerSpec]:
    """Qwen1.5-MoE / Qwen2-MoE: Qwen2's attention (q/k/v biased, ``qkv_bias``) and windows; on every
    ``decoder_sparse_step``-th layer but the ``mlp_only_layers`` an MoE with one shared expert
    (``qwen_shared_expert_moe``), elsewhere a dense MLP of ``intermediate_size``."""
    count = cfg.integer("num_hidden_layers")
    biased = cfg.flag("qkv_bias", default=cfg.default("qkv_bias", True))
    mixers = [attention(cfg, window=window, qkv_bias=biased) for window in _qwen_windows(cfg, count)]
    return _decoders(mixers, qwen_moe_mlps(cfg, count, qwen_shared_expert_moe(cfg)))


def qwen3_moe(cfg: Config) -> list[LayerSpec]:
    """Qwen3-MoE: Qwen3's attention; ``num_experts`` routed experts of ``moe_intermediate_size``, no shared one."""
    count = cfg.integer("num_hidden_layers")
    experts = cfg.integer("num_experts")
    moe = MoEMLP(num_experts=experts, top_k=top_k(cfg, experts),
                 expert_intermediate_size=cfg.integer("moe_intermediate_size"), aux_loss_coeff=aux_loss_coeff(cfg))
    return _decoders(_qwen3_attention(cfg, count), qwen_moe_mlps(cfg, count, moe))


def _olmo_attention(cfg: Config, window: int | None = None) -> AttentionMixer:
    """OLMo 2's, OLMo 3's and OLMoE's attention: ``attention_bias`` on all four projections, and an RMSNorm over all
    the queries and over all the keys, read as Qwen3's per-head one (the same passes; its weights are one head wide,
    not every head's)."""
    return biased_attention(cfg, window=window, qk_norm=True)


def olmo2(cfg: Config) -> list[LayerSpec]:
    """OLMo 2: ``_olmo_attention`` and a SwiGLU MLP of ``intermediate_size``; each sublayer's norm comes after it
    (before the residual add), which holds the same weights as Llama's before it."""
    block = LayerSpec(kind="decoder", mixer=_olmo_attention(cfg), mlp=DenseMLP(cfg.integer("intermediate_size")))
    return [block] * cfg.integer("num_hidden_layers")


def olmo3(cfg: Config) -> list[LayerSpec]:
    """OLMo 3: OLMo 2's blocks, sliding over ``sliding_window`` tokens on the layers ``layer_types`` marks, by default
    all but every fourth (``Olmo3Config``'s rule)."""
    count = cfg.integer("num_hidden_layers")
    if "layer_types" in cfg:
        roles = layer_types(cfg, count, SLIDING_OR_FULL)
    else:
        roles = ["full" if (index + 1) % 4 == 0 else "sliding" for index in range(count)]
    mlp = DenseMLP(cfg.integer("intermediate_size"))
    return _decoders([_olmo_attention(cfg, window) for window in _sliding_windows(cfg, roles)], [mlp] * count)


def olmoe(cfg: Config) -> list[LayerSpec]:
    """OLMoE: ``_olmo_attention`` (Llama's norm placement); every MLP a top-``num_experts_per_tok`` MoE of
    ``num_experts`` experts of ``intermediate_size``, no shared one (``clip_qkv`` clamps, holding no weights)."""
    moe = routed_moe(cfg, "num_experts")
    return [LayerSpec(kind="decoder", mixer=_olmo_attention(cfg), mlp=moe)] * cfg.integer("num_hidden_layers")


def _layer_indices(cfg: Config, key: str, count: int) -> list[int]:
    """A list of layer indices (``moe_layers``), each checked to name a layer."""
    indices = cfg.entries(key, min_length=0)
    for position, index in enumerate(indices):
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
            raise SpecError(f"{cfg.field(key)}[{position}]", f"must be a layer index in 0..{count - 1}, got {index!r}")
    return indices


def _rotary_layers(cfg: Config, count: int) -> list[bool]:
    """Which layers carry rotary positions (Llama 4, SmolLM3): ``no_rope_layers`` (1: rotary, 0: none) when given and
    not empty, else every layer but each ``no_rope_layer_interval``-th (``Llama4TextConfig``'s and ``SmolLM3Config``'s
    rule)."""
    if "no_rope_layers" in cfg and cfg.entries("no_rope_layers", min_length=0):
        return layer_flags(cfg, "no_rope_layers", count, zero="no positions", one="rotary")
    interval = cfg.integer("no_rope_layer_interval", default=cfg.default("no_rope_layer_interval", 4))
    return [(index + 1) % interval != 0 for index in range(count)]


def llama4(cfg: Config) -> list[LayerSpec]:
    """Llama 4 (Scout, Maverick): attention biased on all four projections (``attention_bias``), chunked over
    ``attention_chunk_size`` tokens with rotary positions where ``_rotary_layers`` says so, and over the whole
    sequence without positions (NoPE) elsewhere (``layer_types`` when given); its QK-norm is an L2 norm without
    weights (left out: a few elementwise passes). On the ``moe_layers`` (every ``interleave_moe_layer_step``-th by
    default) the MLP is a top-``num_experts_per_tok`` MoE of ``num_local_experts`` experts of ``intermediate_size``
    beside one shared expert as wide, elsewhere a dense MLP of ``intermediate_size_mlp``."""
    count = cfg.integer("num_hidden_layers")
    rotary = _rotary_layers(cfg, count)
    chunk = cfg.optional_integer("attention_chunk_size")
    if "layer_types" in cfg:
        roles = layer_types(cfg, count, {"chunked_attention": "chunked", "full_attention": "full"})
    else:
        roles = ["chunked" if rope and chunk is not None else "full" for rope in rotary]
    if "chunked" in roles and chunk is None:
        raise SpecError(cfg.field("attention_chunk_size"), "is required when a layer is chunked_attention")
    mixers = [biased_attention(cfg, rotary=rope,
                        chunk=chunk if role == "chunked" else None) for rope, role in zip(rotary, roles)]
    if "moe_layers" in cfg:
        sparse = set(_layer_indices(cfg, "moe_layers", count))
    else:
        step = cfg.integer("interleave_moe_layer_step", default=cfg.default("interleave_moe_layer_step", 1))
        sparse = set(range(step - 1, count, step))
    experts, width = cfg.integer("num_local_experts"), cfg.integer("intermediate_size")
    moe = MoEMLP(num_experts=experts, top_k=top_k(cfg, experts), expert_intermediate_size=width,
                 num_shared_experts=1, shared_intermediate_size=width, aux_loss_coeff=aux_loss_coeff(cfg))
    dense = DenseMLP(cfg.integer("intermediate_size_mlp"))
    return _decoders(mixers, [moe if index in sparse else dense for index in range(count)])


def smollm3(cfg: Config) -> list[LayerSpec]:
    """SmolLM3: Llama with ``attention_bias`` on all four attention projections and ``mlp_bias`` on the MLP's, and no
    positions (NoPE) on the layers ``_rotary_layers`` names (every 4th by default). With ``use_sliding_window`` the
    ``layer_types``' sliding layers (by default the NoPE ones) slide over ``sliding_window``; without it none does
    (``SmolLM3Attention``)."""
    count = cfg.integer("num_hidden_layers")
    rotary = _rotary_layers(cfg, count)
    roles = ["full"] * count
    if cfg.flag("use_sliding_window"):
        if "layer_types" in cfg:
            roles = layer_types(cfg, count, SLIDING_OR_FULL)
        elif cfg.optional_integer("sliding_window") is not None:
            roles = ["full" if rope else "sliding" for rope in rotary]
    mixers = [biased_attention(cfg, window=window, rotary=rope)
              for window, rope in zip(_sliding_windows(cfg, roles), rotary)]
    mlp = DenseMLP(cfg.integer("intermediate_size"), bias=cfg.flag("mlp_bias"))
    return _decoders(mixers, [mlp] * count)


def granite(cfg: Config) -> list[LayerSpec]:
    """Granite 3 / Granite 4.0 dense: Llama with biases per ``attention_bias`` on the attention's projections and per
    ``mlp_bias`` on the MLP's; its embedding, residual, attention and logits multipliers are the model's
    (``reader.granite_scalars``)."""
    block = LayerSpec(kind="decoder", mixer=biased_attention(cfg),
                      mlp=DenseMLP(cfg.integer("intermediate_size"), bias=cfg.flag("mlp_bias")))
    return [block] * cfg.integer("num_hidden_layers")


def granitemoe(cfg: Config, shared_size: int = 0) -> list[LayerSpec]:
    """Granite 3 MoE: biased attention (``attention_bias``) and on every layer a top-``num_experts_per_tok`` MoE of
    ``num_local_experts`` experts of ``intermediate_size`` (beside one shared expert of ``shared_size`` when above
    0)."""
    block = LayerSpec(kind="decoder", mixer=biased_attention(cfg),
                      mlp=routed_moe(cfg, "num_local_experts", shared_size))
    return [block] * cfg.integer("num_hidden_layers")


def granitemoeshared(cfg: Config) -> list[LayerSpec]:
    """Granite MoE with a shared expert of ``shared_intermediate_size`` (none when 0)."""
    return granitemoe(cfg, cfg.integer("shared_intermediate_size", minimum=0))


def seed_oss(cfg: Config) -> list[LayerSpec]:
    """Seed-OSS: Llama with ``attention_bias`` on the query, key and value projections, ``attention_out_bias`` on the
    output's and ``mlp_bias`` on the MLP's."""
    mixer = attention(cfg, qkv_bias=cfg.flag("attention_bias"), output_bias=cfg.flag("attention_out_bias"))
    block = LayerSpec(kind="decoder", mixer=mixer,
                      mlp=DenseMLP(cfg.integer("intermediate_size"), bias=cfg.flag("mlp_bias")))
    return [block] * cfg.integer("num_hidden_layers")


def _ungated_blocks(cfg: Config, *, qk_norm: bool, mlp_bias: bool) -> list[LayerSpec]:
    """Attention (``attention_bias`` on all four projections) and an MLP without a gate whose activation is
    ``hidden_act``'s."""
    mixer = biased_attention(cfg, qk_norm=qk_norm)
    mlp = DenseMLP(cfg.integer("intermediate_size"), gated=False, bias=mlp_bias,
                   activation=mlp_activation(cfg, gated=False))
    return [LayerSpec(kind="decoder", mixer=mixer, mlp=mlp)] * cfg.integer("num_hidden_layers")


def ungated(cfg: Config) -> list[LayerSpec]:
    """Nemotron-4 and Minitron (``nemotron``, with LayerNorm, the family's ``norm``: its "1p" form holds the same
    weights) and Arcee's AFM (``arcee``): ``attention_bias`` on all four attention projections (Nemotron's rotary
    positions on part of each head hold no weights) and an MLP without a gate, ``mlp_bias`` on its two projections,
    whose ``hidden_act`` is the squared ReLU (``relu2``) in both."""
    return _ungated_blocks(cfg, qk_norm=False, mlp_bias=cfg.flag("mlp_bias"))


def apertus(cfg: Config) -> list[LayerSpec]:
    """Apertus: attention (``attention_bias`` on all four projections) with a per-head QK-norm, and an MLP without a
    gate or biases whose activation is ``hidden_act`` (xIELU in its releases, with its two learned scalars)."""
    return _ungated_blocks(cfg, qk_norm=True, mlp_bias=False)


def _exaone4_roles(cfg: Config, count: int) -> list[str]:
    """EXAONE 4's local and global layers: ``layer_types`` when given; else none slides without ``sliding_window``,
    and with it ``sliding_window_pattern`` says which do: a number n (every n-th layer global, the rest sliding;
    ``Exaone4Config``'s rule) or a string of ``L`` (local) and ``G`` (global) repeated over the layers ("LLLG" is
    4, as its docstring says; ``transformers`` 5.24.0 itself fails on the string without ``layer_types``)."""
    if "layer_types" in cfg:
        return layer_types(cfg, count, SLIDING_OR_FULL)
    if cfg.optional_integer("sliding_window") is None:
        return ["full"] * count
    pattern = cfg.doc.get("sliding_window_pattern", cfg.default("sliding_window_pattern"))
    if isinstance(pattern, str) and pattern and set(pattern) <= {"L", "G"}:
        return ["sliding" if pattern[index % len(pattern)] == "L" else "full" for index in range(count)]
    if isinstance(pattern, str):
        raise SpecError(cfg.field("sliding_window_pattern"),
                        f"must be a number or a string of L (local) and G (global), got {pattern!r}")
    every = cfg.integer("sliding_window_pattern")
    return ["full" if (index + 1) % every == 0 else "sliding" for index in range(count)]


def exaone4(cfg: Config) -> list[LayerSpec]:
    """EXAONE 4: attention with a per-head QK-norm, sliding over ``sliding_window`` with rotary positions on the local
    layers (``_exaone4_roles``) and over the whole sequence without positions on the global ones (with no window at
    all, every layer is global and rotary: ``Exaone4Attention``); each sublayer's norm comes after it, which holds the
    same weights as one before it; a SwiGLU MLP of ``intermediate_size``."""
    count = cfg.integer("num_hidden_layers")
    roles = _exaone4_roles(cfg, count)
    windowed = cfg.optional_integer("sliding_window") is not None
    mixers = [attention(cfg, window=window, qk_norm=True, rotary=window is not None or not windowed)
              for window in _sliding_windows(cfg, roles)]
    return _decoders(mixers, [DenseMLP(cfg.integer("intermediate_size"))] * count)


def ernie4_5(cfg: Config) -> list[LayerSpec]:
    """ERNIE 4.5 (dense): Llama with ``use_bias`` on every attention and MLP projection (and on the head, which is
    left out: the head carries no bias here)."""
    block = LayerSpec(kind="decoder", mixer=biased_attention(cfg, bias_key="use_bias"),
                      mlp=DenseMLP(cfg.integer("intermediate_size"), bias=cfg.flag("use_bias")))
    return [block] * cfg.integer("num_hidden_layers")


def ernie4_5_moe(cfg: Config) -> list[LayerSpec]:
    """ERNIE 4.5 MoE: ERNIE 4.5's attention; on each ``moe_layer_interval``-th layer from ``moe_layer_start_index`` to
    ``moe_layer_end_index`` (-1: the last) a top-``moe_k`` MoE of ``moe_num_experts`` experts of
    ``moe_intermediate_size`` beside ``moe_num_shared_experts`` shared ones as wide, elsewhere a dense MLP of
    ``intermediate_size`` (``Ernie4_5_MoeDecoderLayer``). With ``use_bias`` the shared experts' biases are left out
    (the routed experts have none), as the head's is."""
    count = cfg.integer("num_hidden_layers")
    interval = cfg.integer("moe_layer_interval")
    first = cfg.integer("moe_layer_start_index", minimum=0)
    last = cfg.integer("moe_layer_end_index", minimum=-1)
    last = count - 1 if last == -1 else last
    experts, width = cfg.integer("moe_num_experts"), cfg.integer("moe_intermediate_size")
    shared = cfg.integer("moe_num_shared_experts", minimum=0)
    moe = MoEMLP(num_experts=experts, top_k=top_k(cfg, experts), expert_intermediate_size=width,
                 num_shared_experts=shared, shared_intermediate_size=width if shared else 0,
                 aux_loss_coeff=aux_loss_coeff(cfg))
    dense = DenseMLP(cfg.integer("intermediate_size"), bias=cfg.flag("use_bias"))
    sparse = [(index + 1) % interval == 0 and first <= index <= last for index in range(count)]
    mixer = biased_attention(cfg, bias_key="use_bias")
    return _decoders([mixer] * count, [moe if moe_layer else dense for moe_layer in sparse])


def minimax_m2(cfg: Config) -> list[LayerSpec]:
    """MiniMax-M2: grouped-query attention whose RMSNorm over all the queries (and over all the keys) is read as the
    per-head QK-norm, as OLMo's; rotary positions on part of each head (``rotary_dim``: no weights, and no other
    cost here). Every MLP is a top-``num_experts_per_tok`` MoE of ``num_local_experts`` experts of
    ``intermediate_size``, routed on sigmoid scores plus a balancing bias (a buffer, not trained by the gradient). The
    multi-token-prediction modules (``num_mtp_modules``) are not part of the model HF builds."""
    mixer = attention(cfg, qk_norm=True)
    moe = routed_moe(cfg, "num_local_experts")
    return [LayerSpec(kind="decoder", mixer=mixer, mlp=moe)] * cfg.integer("num_hidden_layers")


def gpt_oss(cfg: Config) -> list[LayerSpec]:
    """gpt-oss: ``layer_types`` alternate sliding (``sliding_window``) and full attention, every head has an
    attention sink, projections carry biases (``attention_bias``); every MLP is an MoE whose router and experts
    carry biases too."""
    count = cfg.integer("num_hidden_layers")
    if "layer_types" in cfg:
        roles = layer_types(cfg, count, SLIDING_OR_FULL)
    else:   # GptOssConfig's default: even layers slide
        roles = ["sliding" if index % 2 == 0 else "full" for index in range(count)]
    window = cfg.integer("sliding_window")
    mixers = {role: biased_attention(cfg, window=window if role == "sliding" else None, sinks=True)
              for role in ("sliding", "full")}
    experts = cfg.integer("num_local_experts")
    # its experts' clamped SwiGLU (GptOssExperts), whose constants every release keeps; hidden_act is not read
    for key, value in (("swiglu_alpha", CLAMPED_SWIGLU_ALPHA), ("swiglu_limit", CLAMPED_SWIGLU_LIMIT)):
        if cfg.number(key) != value:
            raise SpecError(cfg.field(key), f"only gpt-oss's {value} is modelled (the executor and the Megatron-LM "
                                            f"export apply it), got {cfg.number(key)}")
    moe = MoEMLP(num_experts=experts, top_k=top_k(cfg, experts),
                 expert_intermediate_size=cfg.integer("intermediate_size"), aux_loss_coeff=aux_loss_coeff(cfg),
                 bias=True, activation="clamped_swiglu")
    return _decoders([mixers[role] for role in roles], [moe] * count)


def _dense_first_then_moe(cfg: Config, dense: DenseMLP, moe: MoEMLP | None, count: int) -> list:
    """DeepSeek / GLM-4.5: the first ``first_k_dense_replace`` layers dense, then the MoE on every
    ``moe_layer_freq``-th layer."""
    if moe is None:
        return [dense] * count
    first_dense = cfg.integer("first_k_dense_replace", default=cfg.default("first_k_dense_replace", 0),
                              minimum=0)
    frequency = cfg.integer("moe_layer_freq", default=1)
    return [moe if index >= first_dense and index % frequency == 0 else dense for index in range(count)]


def _shared_expert_moe(cfg: Config, experts: int) -> MoEMLP:
    """DeepSeek's and GLM-4.5's MoE: shared experts beside the routed ones, and the router's group limit."""
    expert_size = cfg.integer("moe_intermediate_size")
    shared = cfg.integer("n_shared_experts", default=cfg.default("n_shared_experts", 0), minimum=0)
    chosen = top_k(cfg, experts)
    return MoEMLP(num_experts=experts, top_k=chosen, expert_intermediate_size=expert_size,
                  num_shared_experts=shared, shared_intermediate_size=expert_size if shared else 0,
                  **router_groups(cfg, experts, chosen))


def _latent_attention(cfg: Config) -> AttentionMixer:
    """DeepSeek's multi-head latent attention (DeepSeek-V2, GLM-4.7-Flash)."""
    heads = cfg.integer("num_attention_heads")
    rope = cfg.integer("qk_rope_head_dim")
    return AttentionMixer(num_heads=heads, num_kv_heads=heads, head_dim=cfg.integer("qk_nope_head_dim") + rope,
                          v_head_dim=cfg.integer("v_head_dim"), q_lora_rank=cfg.optional_integer("q_lora_rank"),
                          kv_lora_rank=cfg.integer("kv_lora_rank"), rope_head_dim=rope)


def deepseek(cfg: Config) -> list[LayerSpec]:
    """DeepSeek-V2/V3 (and Kimi-K2): multi-head latent attention; dense-first-k then MoE with shared experts."""
    count = cfg.integer("num_hidden_layers")
    experts = cfg.optional_integer("n_routed_experts")
    moe = _shared_expert_moe(cfg, experts) if experts is not None else None
    mlps = _dense_first_then_moe(cfg, DenseMLP(cfg.integer("intermediate_size")), moe, count)
    return _decoders([_latent_attention(cfg)] * count, mlps)


def glm4_moe_lite(cfg: Config) -> list[LayerSpec]:
    """GLM-4.7-Flash: DeepSeek's latent attention and shared-expert MoE; ``mlp_layer_types`` says which layers are
    dense and which MoE, by default the first dense and the rest MoE (``Glm4MoeLiteConfig``'s rule; it does not read
    ``first_k_dense_replace``). The multi-token-prediction layer (``num_nextn_predict_layers``) is not part of the
    model HF builds."""
    count = cfg.integer("num_hidden_layers")
    if "mlp_layer_types" in cfg:
        kinds = layer_types(cfg, count, {"dense": "dense", "sparse": "sparse"}, key="mlp_layer_types")
    else:
        kinds = ["dense"] + ["sparse"] * (count - 1)
    dense = DenseMLP(cfg.integer("intermediate_size"))
    moe = _shared_expert_moe(cfg, cfg.integer("n_routed_experts"))
    return _decoders([_latent_attention(cfg)] * count, [moe if kind == "sparse" else dense for kind in kinds])


def glm4_moe(cfg: Config) -> list[LayerSpec]:
    """GLM-4.5: grouped-query attention with biases on q, k and v (``attention_bias``; none on the output) and
    an optional QK-norm (``use_qk_norm``); DeepSeek's dense-first-k then MoE-with-shared-experts MLPs. The
    multi-token-prediction layers (``num_nextn_predict_layers``) are not part of the model HF builds."""
    count = cfg.integer("num_hidden_layers")
    mixer = attention(cfg, qkv_bias=cfg.flag("attention_bias"), qk_norm=cfg.flag("use_qk_norm"))
    moe = _shared_expert_moe(cfg, cfg.integer("n_routed_experts"))
    dense = DenseMLP(cfg.integer("intermediate_size"))
    return _decoders([mixer] * count, _dense_first_then_moe(cfg, dense, moe, count))


def dots1(cfg: Config) -> list[LayerSpec]:
    """dots.llm1: Qwen3's attention (a per-head QK-norm, ``attention_bias`` on all four projections) and DeepSeek-V3's
    dense-first-k then shared-expert MoE (its router's group limit included). Its layers slide over
    ``sliding_window`` from ``max_window_layers`` on (``layer_types`` when given): ``Dots1Config``'s rule, which reads
    no ``use_sliding_window`` (its defaults, 62 and 4,096, window none of dots.llm1's 62 layers)."""
    count = cfg.integer("num_hidden_layers")
    if "layer_types" in cfg:
        roles = layer_types(cfg, count, SLIDING_OR_FULL)
    else:
        first = cfg.integer("max_window_layers", default=cfg.default("max_window_layers", count), minimum=0)
        windowed = cfg.optional_integer("sliding_window") is not None
        roles = ["sliding" if windowed and index >= first else "full" for index in range(count)]
    mixers = [biased_attention(cfg, window=window, qk_norm=True) for window in _sliding_windows(cfg, roles)]
    moe = _shared_expert_moe(cfg, cfg.integer("n_routed_experts"))
    return _decoders(mixers, _dense_first_then_moe(cfg, DenseMLP(cfg.integer("intermediate_size")), moe, count))


def hunyuan_v1_dense(cfg: Config) -> list[LayerSpec]:
    """Hunyuan (dense): Llama with a per-head QK-norm after the rotary embedding (``HunYuanDenseV1Attention``) and
    ``attention_bias`` on all four projections."""
    mixer = _hunyuan_attention(cfg)
    block = LayerSpec(kind="decoder", mixer=mixer, mlp=DenseMLP(cfg.integer("intermediate_size")))
    return [block] * cfg.integer("num_hidden_layers")


def hunyuan_v1_moe(cfg: Config) -> list[LayerSpec]:
    """Hunyuan MoE (Hunyuan-A13B): Hunyuan's attention, and on every layer a top-``moe_topk`` (one for all layers, or
    one each) MoE of ``num_experts`` experts beside one shared MLP, experts and shared MLP all of ``intermediate_size``
    (``HunYuanMoEV1Moe``; it reads no ``moe_intermediate_size``)."""
    count = cfg.integer("num_hidden_layers")
    experts, width = cfg.integer("num_experts"), cfg.integer("intermediate_size")
    chosen = cfg.per_layer_integer("moe_topk", count)
    if max(chosen) > experts:
        raise SpecError(cfg.field("moe_topk"), f"must be <= the number of experts ({experts}), got {max(chosen)}")
    mlps = [MoEMLP(num_experts=experts, top_k=top, expert_intermediate_size=width, num_shared_experts=1,
                   shared_intermediate_size=width, aux_loss_coeff=aux_loss_coeff(cfg)) for top in chosen]
    return _decoders([_hunyuan_attention(cfg)] * count, mlps)


def _hunyuan_attention(cfg: Config) -> AttentionMixer:
    return biased_attention(cfg, qk_norm=True, qk_norm_after_rotary=True)


def gpt2(cfg: Config) -> list[LayerSpec]:
    """GPT-2 and GPT-BigCode (StarCoder): biased attention (BigCode's ``multi_query`` shares one key and value
    head) and a biased MLP of ``n_inner`` (null: 4 × ``n_embd``); the family's LayerNorm and learned
    positions are model-level fields."""
    hidden, heads = cfg.integer("n_embd"), cfg.integer("n_head")
    if hidden % heads:
        raise SpecError(cfg.field("n_head"), f"must divide n_embd ({hidden}), got {heads}")
    kv_heads = 1 if cfg.flag("multi_query", default=cfg.default("multi_query", False)) else heads
    mixer = AttentionMixer(num_heads=heads, num_kv_heads=kv_heads, head_dim=hidden // heads, qkv_bias=True,
                           output_bias=True, rotary=False)
    inner = cfg.optional_integer("n_inner") or 4 * hidden
    mlp = DenseMLP(inner, gated=False, bias=True, activation=mlp_activation(cfg, "activation_function", gated=False))
    return [LayerSpec(kind="decoder", mixer=mixer, mlp=mlp)] * cfg.integer("n_layer")
