"""The ModelSpec data model and its validating loader.

A model is a list of layers in execution order: an optional ``embedding`` first, ``decoder`` blocks
(a token mixer plus an optional MLP), standalone ``mlp`` layers (hybrid patterns such as Nemotron-H's
``-``), and an optional ``head`` (final norm, vocabulary projection and the loss) last. In the JSON form
consecutive identical layers may be written once with ``"repeat": n``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Union

from planner.errors import SpecError
from planner.limits import MAX_LAYERS
from planner.fields import (
    check_format,
    get_bool,
    get_int,
    get_number,
    get_str,
    join,
    reject_unknown,
    require_list,
    require_mapping,
)

MODEL_FORMAT = "adaptis.model/v1"
LAYER_KINDS = ("embedding", "decoder", "mlp", "head")
LINEAR_ATTENTION_VARIANTS = ("gated_delta", "lightning")
GATED_DELTA_CONV_KERNEL = 4   # Qwen3-Next's linear_conv_kernel_dim
DTYPES = ("bf16", "fp16", "fp32")
NORMS = ("rmsnorm", "layernorm")
# Where a block's norms sit around each of its sublayers (mixer, MLP): ``pre``, x + f(norm(x)) (GPT-2 on, Llama,
# most); ``post``, x + norm(f(x)) (OLMo 2 and 3, EXAONE 4); ``sandwich``, x + norm(f(norm(x))) (Gemma 2 and 3's
# pre- and post-norms, four a layer). A standalone MLP layer (Nemotron-H's) is pre-norm.
BLOCK_NORMS = ("pre", "post", "sandwich")


MODEL_SCALARS = ("embedding_multiplier", "residual_multiplier", "logits_multiplier", "logits_softcap")


def sublayer_norms(layer: "LayerSpec", block_norms: str) -> int:
    """How many norms each sublayer (mixer, MLP) of ``layer`` has in a model whose ``block_norms`` is given: two in a
    sandwich, else one; a standalone MLP layer one (it is pre-norm)."""
    return 2 if block_norms == "sandwich" and layer.mixer is not None else 1

ATTENTION_FLAGS = ("qkv_bias", "output_bias", "qk_norm", "qk_norm_after_rotary", "sinks")
ATTENTION_SCALARS = ("softmax_scale", "softcap")   # an attention's scalars without weights (``AttentionMixer``)


@dataclass(frozen=True)
class AttentionMixer:
    """Causal softmax attention with grouped-query heads; ``window`` set means sliding-window (a query attends the
    ``window`` keys up to itself); ``chunk`` set means chunked attention (Llama 4's ``attention_chunk_size``: the
    sequence is cut into blocks of ``chunk`` tokens and a query attends, causally, the keys of its own block only).

    Multi-head latent attention (DeepSeek-V2/V3 MLA) is this mixer with ``kv_lora_rank`` set: keys and values
    are up-projected from a ``kv_lora_rank`` latent (queries from a ``q_lora_rank`` latent when set), every
    head has its own key and value (``num_kv_heads == num_heads``), ``head_dim`` is the query/key width
    (``qk_nope_head_dim + qk_rope_head_dim``) of which ``rope_head_dim`` is the shared rotary part, and
    ``v_head_dim`` is the value width. ``v_head_dim`` unset means values are ``head_dim`` wide.

    ``qkv_bias`` / ``output_bias``: the query, key and value projections / the output projection add a bias
    (Qwen2 the first, GPT-2, Phi-3.5-MoE and gpt-oss both). ``qk_norm``: queries and keys pass a per-head RMSNorm
    before the rotary embedding (Qwen3, GLM-4.5), or after it with ``qk_norm_after_rotary`` (Hunyuan). ``sinks``:
    every head has a learned logit that joins the softmax's denominator as an extra key with no value (gpt-oss's
    attention sinks). ``rotary`` False: queries and
    keys carry no rotary embedding, the model's positions being learned (GPT-2) or left implicit (Jamba, Granite
    4.0-H's NoPE). ``softmax_scale``: the scores' scale where it is not ``head_dim ** -0.5`` (Gemma's
    ``query_pre_attn_scalar ** -0.5``, Granite's ``attention_multiplier``); ``softcap``: scores pass
    ``c * tanh(s / c)`` before the softmax (Gemma 2's attention logit soft-capping, Gemma Team 2024, Sec. 2). Neither
    holds weights nor changes the kernels' work (FlashAttention-2 fuses the soft-cap).
    """

    num_heads: int
    num_kv_heads: int
    head_dim: int
    window: int | None = None
    v_head_dim: int | None = None
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    rope_head_dim: int | None = None
    qkv_bias: bool = False
    output_bias: bool = False
    qk_norm: bool = False
    qk_norm_after_rotary: bool = False
    sinks: bool = False
    rotary: bool = True
    chunk: int | None = None
    softmax_scale: float | None = None
    softcap: float | None = None
    type: str = field(default="attention", init=False)

    @property
    def value_dim(self) -> int:
        return self.v_head_dim if self.v_head_dim is not None else self.head_dim

    @property
    def is_latent(self) -> bool:
        return self.kv_lora_rank is not None

    def to_dict(self) -> dict:
        doc = {"type": self.type, "num_heads": self.num_heads, "num_kv_heads": self.num_kv_heads,
               "head_dim": self.head_dim}
        for key in ("window", "chunk", "v_head_dim", "q_lora_rank", "kv_lora_rank", "rope_head_dim"):
            if getattr(self, key) is not None:
                doc[key] = getattr(self, key)
        for key in ATTENTION_FLAGS:
            if getattr(self, key):
                doc[key] = True
        if not self.rotary:
            doc["rotary"] = False
        for key in ATTENTION_SCALARS:
            if getattr(self, key) is not None:
                doc[key] = getattr(self, key)
        return doc


@dataclass(frozen=True)
class LinearAttentionMixer:
    """Linear attention with a (head_dim x head_dim) recurrent state per head (gated delta-net, lightning).

    ``num_heads`` counts value heads (one recurrent state each); queries and keys may use fewer heads,
    ``num_key_heads`` (Qwen3-Next: 16 key heads broadcast over 32 value heads). Unset means as many as values.
    Gated delta-net runs q, k and v through a short causal convolution of ``conv_kernel`` taps first
    (Qwen3-Next's ``linear_conv_kernel_dim``); lightning attention has none.
    """

    num_heads: int
    head_dim: int
    variant: str = "gated_delta"
    num_key_heads: int | None = None
    conv_kernel: int = GATED_DELTA_CONV_KERNEL
    type: str = field(default="linear_attention", init=False)

    @property
    def key_heads(self) -> int:
        return self.num_key_heads if self.num_key_heads is not None else self.num_heads

    def to_dict(self) -> dict:
        doc = {"type": self.type, "num_heads": self.num_heads, "head_dim": self.head_dim, "variant": self.variant}
        if self.num_key_heads is not None:
            doc["num_key_heads"] = self.num_key_heads
        if self.variant == "gated_delta" and self.conv_kernel != GATED_DELTA_CONV_KERNEL:
            doc["conv_kernel"] = self.conv_kernel   # lightning attention has no convolution to describe
        return doc


@dataclass(frozen=True)
class Mamba2Mixer:
    """A Mamba-2 selective state-space mixer (SSD) with a short causal convolution."""

    num_heads: int
    head_dim: int
    state_size: int
    conv_kernel: int = 4
    n_groups: int = 1
    type: str = field(default="mamba2", init=False)

    def to_dict(self) -> dict:
        return {"type": self.type, "num_heads": self.num_heads, "head_dim": self.head_dim,
                "state_size": self.state_size, "conv_kernel": self.conv_kernel, "n_groups": self.n_groups}


@dataclass(frozen=True)
class MambaMixer:
    """A Mamba-1 selective state-space mixer (Gu & Dao 2023): input projection to ``x`` and the gate ``z``
    (``inner_size`` each), a depthwise causal convolution over ``x``, an ``x_proj`` to the per-token step size's
    ``dt_rank`` latent and ``B``, ``C`` (``state_size`` each), ``dt_proj`` back to ``inner_size`` channels, the
    selective scan with a diagonal ``A`` per channel and state, and the output projection. ``conv_bias`` and
    ``proj_bias`` are the biases of the convolution and of the in/out projections (HF's ``use_conv_bias``,
    ``use_bias``)."""

    inner_size: int
    state_size: int
    dt_rank: int
    conv_kernel: int = 4
    conv_bias: bool = True
    proj_bias: bool = False
    type: str = field(default="mamba", init=False)

    def to_dict(self) -> dict:
        return {"type": self.type, "inner_size": self.inner_size, "state_size": self.state_size,
                "dt_rank": self.dt_rank, "conv_kernel": self.conv_kernel, "conv_bias": self.conv_bias,
                "proj_bias": self.proj_bias}


# An MLP's activation. A gated MLP computes ``act(gate) * up``: SwiGLU with ``silu`` (Shazeer 2020, "GLU Variants
# Improve Transformer"; the default), GeGLU with ``gelu`` or ``gelu_tanh`` (GELU's tanh approximation, HF's
# ``gelu_pytorch_tanh``: Gemma 2's and 3's), or gpt-oss's ``clamped_swiglu``. A plain MLP computes ``act(up)``: ``gelu``
# (the default), ``gelu_tanh`` (GPT-2's ``gelu_new``, StarCoder's), ``silu``, the squared ReLU of Nemotron-4 and
# Nemotron-H (So et al. 2021, "Primer"; Megatron-LM's --squared-relu), or xIELU (Huang et al. 2024, arXiv 2411.13010;
# Apertus's), whose two learned scalars each MLP holds (``ACTIVATION_PARAMETERS``; a dense MLP's only).
GATED_ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "clamped_swiglu")
UNGATED_ACTIVATIONS = ("gelu", "gelu_tanh", "silu", "squared_relu", "xielu")
ACTIVATION_PARAMETERS = {"xielu": 2}   # xIELU's alpha_p and alpha_n
# gpt-oss's clamped SwiGLU (HF ``GptOssExperts._apply_gate``; Megatron-Core's gated ``quick_gelu`` with
# ``activation_func_clamp_value`` and ``glu_linear_offset``): ``gate`` clamped to at most the limit, ``up`` to within
# it, then ``gate * sigmoid(alpha * gate) * (up + 1)``. Every gpt-oss release sets these (HF ``swiglu_alpha``,
# ``swiglu_limit``).
CLAMPED_SWIGLU_ALPHA = 1.702
CLAMPED_SWIGLU_LIMIT = 7.0
CLAMPED_SWIGLU_OFFSET = 1.0


def default_activation(gated: bool) -> str:
    """An MLP's activation when its document names none: SwiGLU's SiLU with a gate, GELU without."""
    return "silu" if gated else "gelu"


@dataclass(frozen=True)
class DenseMLP:
    """A gated (SwiGLU by default) or plain two-matrix MLP; ``bias`` adds biases to its projections (GPT-2);
    ``activation``: ``GATED_ACTIVATIONS`` or ``UNGATED_ACTIVATIONS`` (none given: ``default_activation``)."""

    intermediate_size: int
    gated: bool = True
    bias: bool = False
    activation: str = ""
    type: str = field(default="dense", init=False)

    def __post_init__(self):
        if not self.activation:
            object.__setattr__(self, "activation", default_activation(self.gated))

    @property
    def activation_parameters(self) -> int:
        """The parameters its activation learns (xIELU's two scalars; ``ACTIVATION_PARAMETERS``), none when gated."""
        return 0 if self.gated else ACTIVATION_PARAMETERS.get(self.activation, 0)

    def to_dict(self) -> dict:
        doc = {"type": self.type, "intermediate_size": self.intermediate_size, "gated": self.gated}
        if self.bias:
            doc["bias"] = True
        if self.activation != default_activation(self.gated):
            doc["activation"] = self.activation
        return doc


@dataclass(frozen=True)
class MoEMLP:
    """Routed experts (top-k of ``num_experts``) plus always-active shared experts.

    ``aux_loss_coeff`` weighs the load-balancing loss added per micro-batch in training (Switch Transformer's,
    normalised by top-k as Megatron-LM's ``moe_aux_loss_coeff``); 0 trains without it. ``bias``: the router and
    every expert projection add a bias (gpt-oss). ``router_groups`` and ``router_group_topk``: group-limited routing
    (DeepSeek-V2 Sec. 2.2.2's device-limited routing, DeepSeek-V3 Sec. 2.1.2's node-limited routing; HF
    ``n_group`` / ``topk_group``, Megatron-Core ``--moe-router-num-groups`` / ``--moe-router-group-topk``): the
    experts form ``router_groups`` groups of consecutive experts, and a token's ``top_k`` are chosen among the
    ``router_group_topk`` groups whose two best experts score highest; 1 and 1 route freely. ``gated`` and
    ``activation``: the experts' (routed and shared), as a dense MLP's: SwiGLU by default, gpt-oss's clamped SwiGLU,
    or without a gate (Nemotron-H's squared ReLU experts). ``latent_size``: a latent MoE (Nemotron 3's LatentMoE;
    HF's ``moe_latent_size``, Megatron-Core's ``--moe-latent-size``): after routing on the hidden state, every token is
    projected down to ``latent_size`` (``fc1_latent_proj``), sent to its experts and computed there at that width,
    combined, and projected back up (``fc2_latent_proj``); so the experts' weights and the dispatch and combine carry
    ``latent_size`` per token, not the hidden size. The shared experts run on the hidden state. Megatron-Core
    duplicates both projections on every TP rank, each running its sequence-parallel tokens, as the router.
    """

    num_experts: int
    top_k: int
    expert_intermediate_size: int
    num_shared_experts: int = 0
    shared_intermediate_size: int = 0
    aux_loss_coeff: float = 0.0
    bias: bool = False
    router_groups: int = 1
    router_group_topk: int = 1
    gated: bool = True
    activation: str = ""
    latent_size: int | None = None
    type: str = field(default="moe", init=False)

    def __post_init__(self):
        if not self.activation:
            object.__setattr__(self, "activation", default_activation(self.gated))

    @property
    def group_limited(self) -> bool:
        return self.router_group_topk < self.router_groups

    def expert_width(self, hidden: int) -> int:
        """The width a routed token has from dispatch to combine, and so the experts' input and output: the latent
        width of a latent MoE, else the hidden size."""
        return self.latent_size or hidden

    def to_dict(self) -> dict:
        doc = {"type": self.type, "num_experts": self.num_experts, "top_k": self.top_k,
               "expert_intermediate_size": self.expert_intermediate_size,
               "num_shared_experts": self.num_shared_experts,
               "shared_intermediate_size": self.shared_intermediate_size}
        if self.aux_loss_coeff:
            doc["aux_loss_coeff"] = self.aux_loss_coeff
        if self.bias:
            doc["bias"] = True
        if self.group_limited:
            doc["router_groups"] = self.router_groups
            doc["router_group_topk"] = self.router_group_topk
        if not self.gated:
            doc["gated"] = False
        if self.activation != default_activation(self.gated):
            doc["activation"] = self.activation
        if self.latent_size:
            doc["latent_size"] = self.latent_size
        return doc


Mixer = Union[AttentionMixer, LinearAttentionMixer, MambaMixer, Mamba2Mixer]
MLP = Union[DenseMLP, MoEMLP]


class HashedOnce:
    """A frozen dataclass whose hash is computed once: models and their layers key every cost cache (a search
    looks them up millions of times), and hashing one walks all its layers. The cached hash is not pickled: string
    hashes differ between interpreters."""

    def __hash__(self) -> int:
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, item.name) for item in fields(self)))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __getstate__(self) -> dict:
        return {key: value for key, value in self.__dict__.items() if key != "_hash"}

    def __setstate__(self, state: dict) -> None:
        for key, value in state.items():
            object.__setattr__(self, key, value)


@dataclass(frozen=True)
class LayerSpec(HashedOnce):
    __hash__ = HashedOnce.__hash__   # in the body, so that dataclass keeps it
    kind: str
    mixer: Mixer | None = None
    mlp: MLP | None = None

    def to_dict(self) -> dict:
        doc: dict = {"kind": self.kind}
        if self.mixer is not None:
            doc["mixer"] = self.mixer.to_dict()
        if self.mlp is not None:
            doc["mlp"] = self.mlp.to_dict()
        return doc

    @property
    def short(self) -> str:
        """One-letter code used in the human plan form: E embedding, L head, t/s/l/m mixers (s: local attention, a
        window or chunks), d/e MLPs."""
        if self.kind == "embedding":
            return "E"
        if self.kind == "head":
            return "L"
        if self.kind == "mlp":
            return "e" if isinstance(self.mlp, MoEMLP) else "d"
        local = getattr(self.mixer, "window", None) or getattr(self.mixer, "chunk", None)
        mixer_code = {"attention": "s" if local else "t",
                      "linear_attention": "l", "mamba": "m", "mamba2": "m"}[self.mixer.type]
        return mixer_code + ("e" if isinstance(self.mlp, MoEMLP) else "")


@dataclass(frozen=True)
class ModelSpec(HashedOnce):
    __hash__ = HashedOnce.__hash__
    name: str
    hidden_size: int
    vocab_size: int
    seq_len: int
    layers: tuple[LayerSpec, ...]
    micro_batch_size: int = 1
    tie_embeddings: bool = False
    dtype: str = "bf16"
    source: str | None = None   # provenance, e.g. the HuggingFace config an import came from
    norm: str = "rmsnorm"       # every block's and the head's norm: "rmsnorm", or "layernorm" (with a bias)
    position_embeddings: int | None = None   # a learned table of this many absolute positions (GPT-2)
    block_norms: str = "pre"    # where the blocks' norms sit (``BLOCK_NORMS``)
    # Scalars that hold no weights (``MODEL_SCALARS``): the embedding's output times ``embedding_multiplier``
    # (Gemma's sqrt(hidden), Granite's), each sublayer's output times ``residual_multiplier`` before the residual add
    # (Granite's), the logits times ``logits_multiplier`` (Granite's 1 / logits_scaling) and soft-capped at
    # ``logits_softcap`` (Gemma 2's final logit soft-capping, ``c * tanh(z / c)``).
    embedding_multiplier: float | None = None
    residual_multiplier: float | None = None
    logits_multiplier: float | None = None
    logits_softcap: float | None = None

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def architecture(self) -> tuple:
        """What the network is, apart from what it is called and how it is trained (name, provenance, sequence,
        micro-batch, dtype): two specs with the same architecture hold the same parameters and compute the same
        function (an uploaded Meta-Llama-3-8B config and the ``llama-3-8b`` preset)."""
        return (self.hidden_size, self.vocab_size, self.layers, self.tie_embeddings, self.norm,
                self.position_embeddings, self.block_norms, *(getattr(self, key) for key in MODEL_SCALARS))

    def layer_names(self) -> list[str]:
        """Stable names: ``embed``, ``layers.<i>`` for the blocks in between, ``head``."""
        names, block = [], 0
        for layer in self.layers:
            if layer.kind == "embedding":
                names.append("embed")
            elif layer.kind == "head":
                names.append("head")
            else:
                names.append(f"layers.{block}")
                block += 1
        return names

    def to_dict(self) -> dict:
        """The JSON form, with runs of identical layers folded into ``repeat``."""
        folded: list[dict] = []
        previous: LayerSpec | None = None
        for layer in self.layers:
            if layer == previous:
                folded[-1]["repeat"] = folded[-1].get("repeat", 1) + 1
            else:
                folded.append(layer.to_dict())
            previous = layer
        doc = {"format": MODEL_FORMAT, "name": self.name, "hidden_size": self.hidden_size,
               "vocab_size": self.vocab_size, "seq_len": self.seq_len,
               "micro_batch_size": self.micro_batch_size, "tie_embeddings": self.tie_embeddings,
               "dtype": self.dtype, "layers": folded}
        if self.source is not None:
            doc["source"] = self.source
        if self.norm != "rmsnorm":
            doc["norm"] = self.norm
        if self.position_embeddings is not None:
            doc["position_embeddings"] = self.position_embeddings
        if self.block_norms != "pre":
            doc["block_norms"] = self.block_norms
        for key in MODEL_SCALARS:
            if getattr(self, key) is not None:
                doc[key] = getattr(self, key)
        return doc


def _load_attention(doc: dict, path: str) -> AttentionMixer:
    reject_unknown(doc, {"type", "num_heads", "num_kv_heads", "head_dim", "window", "chunk", "v_head_dim",
                         "q_lora_rank", "kv_lora_rank", "rope_head_dim", "rotary", *ATTENTION_SCALARS,
                         *ATTENTION_FLAGS}, path)
    heads = get_int(doc, "num_heads", path)
    kv_heads = get_int(doc, "num_kv_heads", path, default=heads)
    if heads % kv_heads:
        raise SpecError(join(path, "num_kv_heads"),
                        f"must divide num_heads ({heads}) for grouped-query attention, got {kv_heads}")
    head_dim = get_int(doc, "head_dim", path)
    optional = {key: get_int(doc, key, path, default=None, allow_none=True)
                for key in ("window", "chunk", "v_head_dim", "q_lora_rank", "kv_lora_rank", "rope_head_dim")}
    if optional["window"] is not None and optional["chunk"] is not None:
        raise SpecError(join(path, "chunk"), "cannot be set with window: attention is sliding-window or chunked")
    if optional["kv_lora_rank"] is None:
        for key in ("q_lora_rank", "rope_head_dim"):
            if optional[key] is not None:
                raise SpecError(join(path, key), "only applies to latent attention (set kv_lora_rank)")
    else:
        if optional["rope_head_dim"] is None:
            raise SpecError(join(path, "rope_head_dim"), "is required for latent attention (kv_lora_rank set)")
        if optional["rope_head_dim"] >= head_dim:
            raise SpecError(join(path, "rope_head_dim"),
                            f"must be < head_dim ({head_dim}): head_dim is the non-rotary plus the rotary part")
        if kv_heads != heads:
            raise SpecError(join(path, "num_kv_heads"),
                            f"latent attention up-projects a key and value per head: must equal num_heads ({heads})")
    flags = {key: get_bool(doc, key, path, default=False) for key in ATTENTION_FLAGS}
    flags["rotary"] = get_bool(doc, "rotary", path, default=True)
    if not flags["rotary"] and optional["kv_lora_rank"] is not None:
        raise SpecError(join(path, "rotary"), "latent attention always has its rotary part (rope_head_dim)")
    if flags["qk_norm_after_rotary"] and not (flags["qk_norm"] and flags["rotary"]):
        raise SpecError(join(path, "qk_norm_after_rotary"), "places a QK-norm after the rotary embedding: needs "
                                                            "qk_norm and the rotary embedding (rotary true)")
    scalars = {key: get_number(doc, key, path, default=None, minimum=0.0, exclusive_minimum=True)
               for key in ATTENTION_SCALARS}
    return AttentionMixer(num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, **optional, **flags, **scalars)


def _load_mixer(doc: object, path: str) -> Mixer:
    doc = require_mapping(doc, path)
    kind = get_str(doc, "type", path, choices=("attention", "linear_attention", "mamba", "mamba2"))
    if kind == "attention":
        return _load_attention(doc, path)
    if kind == "mamba":
        reject_unknown(doc, {"type", "inner_size", "state_size", "dt_rank", "conv_kernel", "conv_bias", "proj_bias"},
                       path)
        return MambaMixer(inner_size=get_int(doc, "inner_size", path), state_size=get_int(doc, "state_size", path),
                          dt_rank=get_int(doc, "dt_rank", path), conv_kernel=get_int(doc, "conv_kernel", path, default=4),
                          conv_bias=get_bool(doc, "conv_bias", path, default=True),
                          proj_bias=get_bool(doc, "proj_bias", path, default=False))
    if kind == "linear_attention":
        reject_unknown(doc, {"type", "num_heads", "head_dim", "variant", "num_key_heads", "conv_kernel"}, path)
        heads = get_int(doc, "num_heads", path)
        key_heads = get_int(doc, "num_key_heads", path, default=None, allow_none=True)
        if key_heads is not None and heads % key_heads:
            raise SpecError(join(path, "num_key_heads"),
                            f"must divide num_heads ({heads}) so key heads broadcast over value heads, "
                            f"got {key_heads}")
        variant = get_str(doc, "variant", path, default="gated_delta", choices=LINEAR_ATTENTION_VARIANTS)
        if variant != "gated_delta" and "conv_kernel" in doc:
            raise SpecError(join(path, "conv_kernel"), f"only gated_delta has a short convolution, not {variant}")
        return LinearAttentionMixer(num_heads=heads, head_dim=get_int(doc, "head_dim", path), variant=variant,
                                    num_key_heads=key_heads,
                                    conv_kernel=get_int(doc, "conv_kernel", path, default=GATED_DELTA_CONV_KERNEL))
    reject_unknown(doc, {"type", "num_heads", "head_dim", "state_size", "conv_kernel", "n_groups"}, path)
    heads = get_int(doc, "num_heads", path)
    groups = get_int(doc, "n_groups", path, default=1)
    if heads % groups:
        raise SpecError(join(path, "n_groups"), f"must divide num_heads ({heads}), got {groups}")
    return Mamba2Mixer(num_heads=heads, head_dim=get_int(doc, "head_dim", path),
                       state_size=get_int(doc, "state_size", path),
                       conv_kernel=get_int(doc, "conv_kernel", path, default=4), n_groups=groups)


def _load_mlp(doc: object, path: str) -> MLP:
    doc = require_mapping(doc, path)
    kind = get_str(doc, "type", path, choices=("dense", "moe"))
    if kind == "dense":
        reject_unknown(doc, {"type", "intermediate_size", "gated", "bias", "activation"}, path)
        gated, activation = _gate_and_activation(doc, path)
        return DenseMLP(intermediate_size=get_int(doc, "intermediate_size", path), gated=gated,
                        bias=get_bool(doc, "bias", path, default=False), activation=activation)
    reject_unknown(doc, {"type", "num_experts", "top_k", "expert_intermediate_size", "num_shared_experts",
                         "shared_intermediate_size", "aux_loss_coeff", "bias", "router_groups",
                         "router_group_topk", "gated", "activation", "latent_size"}, path)
    gated, activation = _gate_and_activation(doc, path)
    if activation in ACTIVATION_PARAMETERS:
        choices = ", ".join(name for name in UNGATED_ACTIVATIONS if name not in ACTIVATION_PARAMETERS)
        raise SpecError(join(path, "activation"), f"{activation} applies to a dense MLP; an MoE's experts without a "
                                                  f"gate take {choices}")
    experts = get_int(doc, "num_experts", path)
    top_k = get_int(doc, "top_k", path)
    if top_k > experts:
        raise SpecError(join(path, "top_k"), f"must be <= num_experts ({experts}), got {top_k}")
    shared = get_int(doc, "num_shared_experts", path, default=0, minimum=0)
    expert_size = get_int(doc, "expert_intermediate_size", path)
    groups = get_int(doc, "router_groups", path, default=1)
    group_topk = get_int(doc, "router_group_topk", path, default=groups)
    check_router_groups(experts, top_k, groups, group_topk, path, "router_groups", "router_group_topk")
    return MoEMLP(num_experts=experts, top_k=top_k, expert_intermediate_size=expert_size,
                  num_shared_experts=shared,
                  shared_intermediate_size=get_int(doc, "shared_intermediate_size", path,
                                                   default=expert_size if shared else 0, minimum=0),
                  aux_loss_coeff=get_number(doc, "aux_loss_coeff", path, default=0.0),
                  bias=get_bool(doc, "bias", path, default=False),
                  router_groups=groups, router_group_topk=group_topk, gated=gated, activation=activation,
                  latent_size=get_int(doc, "latent_size", path, default=None))


def _gate_and_activation(doc: dict, path: str) -> tuple[bool, str]:
    """An MLP's (or MoE experts') ``gated`` (default true) and ``activation`` (``GATED_ACTIVATIONS`` with a gate,
    ``UNGATED_ACTIVATIONS`` without; default ``default_activation``)."""
    gated = get_bool(doc, "gated", path, default=True)
    activation = get_str(doc, "activation", path, choices=tuple(dict.fromkeys(GATED_ACTIVATIONS + UNGATED_ACTIVATIONS)),
                         default=default_activation(gated))
    allowed = GATED_ACTIVATIONS if gated else UNGATED_ACTIVATIONS
    if activation not in allowed:
        kind = "a gated MLP (the default)" if gated else "an MLP without a gate"
        raise SpecError(join(path, "activation"), f"{activation} does not apply to {kind}, which takes "
                                                  f"{', '.join(allowed)}")
    return gated, activation


def check_router_groups(experts: int, top_k: int, groups: int, group_topk: int, path: str, groups_field: str,
                        topk_field: str) -> None:
    """Group-limited routing's rules (``MoEMLP``): the groups split the experts evenly, a token takes its experts
    from at most all of them, and the groups it may use hold at least ``top_k`` experts."""
    if experts % groups:
        raise SpecError(join(path, groups_field), f"must divide the {experts} experts into equal groups, got {groups}")
    if group_topk > groups:
        raise SpecError(join(path, topk_field), f"must be <= the {groups} groups, got {group_topk}")
    if group_topk > top_k:
        raise SpecError(join(path, topk_field), f"must be <= top_k ({top_k}): each group a token uses holds at least "
                                                f"one of its experts, got {group_topk}")
    if group_topk * (experts // groups) < top_k:
        raise SpecError(join(path, topk_field), f"{group_topk} groups of {experts // groups} experts cannot hold a "
                                                f"token's {top_k} experts")


def _load_layer(doc: object, path: str) -> tuple[LayerSpec, int]:
    doc = require_mapping(doc, path)
    reject_unknown(doc, {"kind", "mixer", "mlp", "repeat"}, path)
    kind = get_str(doc, "kind", path, choices=LAYER_KINDS)
    repeat = get_int(doc, "repeat", path, default=1)
    mixer = _load_mixer(doc["mixer"], join(path, "mixer")) if doc.get("mixer") is not None else None
    mlp = _load_mlp(doc["mlp"], join(path, "mlp")) if doc.get("mlp") is not None else None
    if kind == "decoder" and mixer is None:
        raise SpecError(join(path, "mixer"), "is required for a decoder layer (use kind 'mlp' for an MLP alone)")
    if kind == "mlp" and (mlp is None or mixer is not None):
        raise SpecError(join(path, "mlp" if mlp is None else "mixer"),
                        "an 'mlp' layer holds exactly one mlp and no mixer")
    if kind in ("embedding", "head") and (mixer is not None or mlp is not None):
        raise SpecError(join(path, "mixer" if mixer is not None else "mlp"), f"is not allowed on a {kind} layer")
    return LayerSpec(kind=kind, mixer=mixer, mlp=mlp), repeat


def load_model_spec(doc: object) -> ModelSpec:
    """Validate a parsed ``adaptis.model/v1`` document and build the ModelSpec."""
    doc = require_mapping(doc, "")
    check_format(doc, MODEL_FORMAT)
    reject_unknown(doc, {"format", "name", "hidden_size", "vocab_size", "seq_len", "micro_batch_size",
                         "tie_embeddings", "dtype", "layers", "source", "norm", "position_embeddings",
                         "block_norms", *MODEL_SCALARS}, "")
    layers: list[LayerSpec] = []
    for index, layer_doc in enumerate(require_list(doc.get("layers"), "layers", min_length=1)):
        layer, repeat = _load_layer(layer_doc, f"layers[{index}]")
        if len(layers) + repeat > MAX_LAYERS:  # checked before the layers are built: repeat may be huge
            raise SpecError(f"layers[{index}].repeat", f"makes the model more than {MAX_LAYERS} layers long")
        layers.extend([layer] * repeat)
    for index, layer in enumerate(layers):
        if layer.kind == "embedding" and index != 0:
            raise SpecError("layers", "an embedding layer may only come first")
        if layer.kind == "head" and index != len(layers) - 1:
            raise SpecError("layers", "a head layer may only come last")
    positions = get_int(doc, "position_embeddings", "", default=None, allow_none=True)
    if positions is not None:
        if layers[0].kind != "embedding":
            raise SpecError("position_embeddings", "needs an embedding layer first to hold the position table")
        if positions < get_int(doc, "seq_len", ""):
            raise SpecError("seq_len", f"must be <= position_embeddings ({positions}): the model has learned "
                                       f"positions only that far")
    return ModelSpec(
        name=get_str(doc, "name", ""),
        hidden_size=get_int(doc, "hidden_size", ""),
        vocab_size=get_int(doc, "vocab_size", ""),
        seq_len=get_int(doc, "seq_len", ""),
        micro_batch_size=get_int(doc, "micro_batch_size", "", default=1),
        tie_embeddings=get_bool(doc, "tie_embeddings", "", default=False),
        dtype=get_str(doc, "dtype", "", default="bf16", choices=DTYPES),
        layers=tuple(layers),
        source=get_str(doc, "source", "", default=None),
        norm=get_str(doc, "norm", "", default="rmsnorm", choices=NORMS),
        position_embeddings=positions,
        block_norms=get_str(doc, "block_norms", "", default="pre", choices=BLOCK_NORMS),
        **{key: get_number(doc, key, "", default=None, minimum=0.0, exclusive_minimum=True) for key in MODEL_SCALARS},
    )
