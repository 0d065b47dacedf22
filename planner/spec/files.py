"""Read a model description from text or a file: our ``adaptis.model/v1`` (JSON or YAML) or a HF ``config.json``.

Our format, in brief (``planner.spec.model`` holds the validating loader)::

    format: adaptis.model/v1
    name: tiny-llama
    hidden_size: 64
    vocab_size: 512
    seq_len: 32
    micro_batch_size: 1        # optional, default 1
    tie_embeddings: false      # optional
    dtype: bf16                # optional: bf16, fp16 or fp32
    source: "..."              # optional provenance
    layers:
      - {kind: embedding}
      - kind: decoder
        repeat: 4              # consecutive identical layers
        mixer: {type: attention, num_heads: 4, num_kv_heads: 2, head_dim: 16, window: 8}
        mlp: {type: dense, intermediate_size: 192, gated: true}
      - {kind: head}

Mixers: ``attention`` (optionally ``window`` or ``chunk``, ``qkv_bias``, ``output_bias``, ``qk_norm``,
``qk_norm_after_rotary``, ``sinks``, ``softmax_scale``, ``softcap``; latent attention with ``kv_lora_rank``,
``q_lora_rank``, ``rope_head_dim``, ``v_head_dim``), ``linear_attention`` (``variant`` gated_delta or lightning,
``num_key_heads``, gated_delta's ``conv_kernel``), ``mamba`` (Mamba-1: ``inner_size``, ``state_size``, ``dt_rank``,
``conv_kernel``, ``conv_bias``, ``proj_bias``) and ``mamba2`` (``state_size``, ``conv_kernel``, ``n_groups``). MLPs:
``dense`` (``gated``, ``bias``, and its ``activation``: with a gate ``silu``, the default, ``gelu``, ``gelu_tanh`` or
``clamped_swiglu``; without, ``gelu``, the default, ``gelu_tanh``, ``silu``, ``squared_relu`` or ``xielu``) and
``moe`` (``num_experts``, ``top_k``, ``expert_intermediate_size``, ``num_shared_experts``,
``shared_intermediate_size``, ``aux_loss_coeff``, ``bias``, group-limited routing's ``router_groups`` and
``router_group_topk``, its experts' ``gated`` and ``activation``, as a dense MLP's but ``xielu``, and a latent MoE's
``latent_size``). The model may set
``norm: layernorm`` (default ``rmsnorm``), ``block_norms`` (``pre``, the default, ``post`` or ``sandwich``),
``embedding_multiplier``, ``residual_multiplier``, ``logits_multiplier``, ``logits_softcap`` and
``position_embeddings`` (a learned position table of that many positions,
at least ``seq_len``). A document without ``format`` but with ``model_type`` or ``architectures`` is a HuggingFace
``config.json`` and goes through
``planner.spec.hf.import_hf_config``; it is named after the model (``_name_or_path``), else after the file.
"""

from __future__ import annotations

from pathlib import Path

from planner.documents import parse_document
from planner.errors import SpecError, SpecWarning
from planner.spec.hf import hf_model_name, read_hf_config
from planner.spec.model import ModelSpec, load_model_spec

def is_hf_config(doc: dict) -> bool:
    return "format" not in doc and ("model_type" in doc or "architectures" in doc)


def parse_model_text(text: str, filename: str = "") -> ModelSpec:
    """The ModelSpec a file's text describes, in our format or as a HuggingFace ``config.json``."""
    return parse_model_document(text, filename)[0]


def parse_model_document(text: str, filename: str = "", name: str = "") -> tuple[ModelSpec, list[SpecWarning]]:
    """``parse_model_text``'s spec and the warnings about what it accepted but probably not as meant (a HF
    config's misspelt keys: ``read_hf_config``; our format refuses unknown fields outright). A HF config that names
    no model (no ``_name_or_path``, no file) is named ``name``, else after its ``model_type``."""
    doc = parse_document(text, filename)
    if not isinstance(doc, dict):
        raise SpecError("file", f"must hold an object (a mapping of fields), got {type(doc).__name__}")
    if is_hf_config(doc):
        return read_hf_config(doc, name=hf_model_name(doc, filename) or name or None)
    if "format" not in doc:
        raise SpecError("format", "is required: 'adaptis.model/v1', or upload a HuggingFace config.json "
                                  "(recognised by its model_type)")
    return load_model_spec(doc), []


def load_model_file(path: str | Path) -> ModelSpec:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError("file", f"not found: {path}") from None
    except UnicodeDecodeError as error:
        raise SpecError("file", f"is not UTF-8 text (byte {error.start})") from None
    except OSError as error:
        raise SpecError("file", f"cannot be read: {error.strerror}") from None
    return parse_model_text(text, path.name)
