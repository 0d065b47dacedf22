"""Bounds on every input: what a real model, cluster or plan can hold, so that a hostile or mistyped document is
refused with the field and the reason before anything is built from it.

The ranges are generous around today's largest published systems (and say which): a value outside them is a
typo or an attack, not a model someone trains. ``planner.fields``'s readers apply ``RANGES`` to the field of
that name wherever it appears; the document-level limits are applied where text is parsed
(``planner.spec.files``, the web's request parsers). This is the one table of input limits: the planner's checks,
the CLI, the plan editor and the web's serializers and forms all read it (through ``planner.service``).
"""

from __future__ import annotations

KIB, MIB, GIB, TIB = 1 << 10, 1 << 20, 1 << 30, 1 << 40

# A model's layers after `repeat` is expanded. Llama 3 405B has 126 decoder layers, DeepSeek-V3 61, the largest
# published dense stacks a few hundred; 4,096 leaves room for per-sublayer specs of any of them.
MAX_LAYERS = 4096
# A document as text: the largest preset is ~10 KiB, a profile of MAX_LAYERS layers ~1 MiB, a plan of the largest
# pipeline below ~20 MiB.
MAX_DOCUMENT_BYTES = 32 * MIB
# Nesting of any JSON or YAML document: ours nest 5 deep (plan -> actions -> action), HF configs about 4.
MAX_DEPTH = 32
# A pipeline's size: devices x micro-batches (each pair is an F, B and maybe W action in the plan). 128 pipeline
# stages x 512 micro-batches is beyond any published pipeline (Megatron's 1T run: PP 64, 3,072 sequences per batch).
MAX_PIPELINE_DEVICES = 1024
MAX_MICROBATCHES = 8192
MAX_PIPELINE_SLOTS = 128 * 512
# A hybrid-parallel job: GPUs beyond the largest published runs (Llama 3: 16,384 H100; xAI and Meta clusters of
# 100k+), sequences as long as the longest context a model here accepts, and global batches in sequences
# (Llama 3 405B: 16M tokens at 8,192 = 2,048 sequences; a 4k-token model at 64M tokens: 16k sequences).
MAX_GPUS = 1 << 16
MAX_SEQ_LEN = 1 << 24
MAX_GLOBAL_BATCH = 1 << 20

# field name -> (minimum, maximum), inclusive; None: no bound of ours. A minimum here is a physical floor (a device
# of 1e-300 TFLOP/s) and raises the reader's own minimum (which says what the format allows: 0 shared experts).
RANGES: dict[str, tuple[float | None, float | None]] = {
    # model (adaptis.model/v1). Widths: the largest published hidden size is 25,600 (Megatron's 1T GPT), vocabularies
    # reach 262,144 (Gemma 3); contexts 10M tokens (Llama 4 Scout).
    "hidden_size": (None, 1 << 17),
    "vocab_size": (None, 1 << 22),
    "seq_len": (None, MAX_SEQ_LEN),
    "position_embeddings": (None, 1 << 24),
    "micro_batch_size": (None, 1 << 16),
    "repeat": (None, MAX_LAYERS),
    "num_hidden_layers": (None, MAX_LAYERS),  # HF's spellings of the layer count
    "n_layer": (None, MAX_LAYERS),
    "num_layers": (None, MAX_LAYERS),
    "num_heads": (None, 1 << 12),
    "num_kv_heads": (None, 1 << 12),
    "num_key_heads": (None, 1 << 12),
    "head_dim": (None, 1 << 12),
    "window": (None, 1 << 24),
    "chunk": (None, 1 << 24),
    "kv_lora_rank": (None, 1 << 16),
    "q_lora_rank": (None, 1 << 16),
    "rope_head_dim": (None, 1 << 12),
    "v_head_dim": (None, 1 << 12),
    "conv_kernel": (None, 64),
    "inner_size": (None, 1 << 18),
    "state_size": (None, 1 << 12),
    "dt_rank": (None, 1 << 16),
    "n_groups": (None, 1 << 12),
    "intermediate_size": (None, 1 << 20),
    "expert_intermediate_size": (None, 1 << 20),
    "shared_intermediate_size": (None, 1 << 20),
    "latent_size": (None, 1 << 17),   # an MoE's latent width, at most a hidden size's
    "num_experts": (None, 1 << 14),  # DeepSeek-V3 256, Kimi K2 384 routed experts
    "top_k": (None, 1 << 10),
    "router_groups": (None, 1 << 14),
    "router_group_topk": (None, 1 << 14),
    "num_shared_experts": (None, 1 << 10),
    "aux_loss_coeff": (None, 1e3),
    # cluster (adaptis.cluster/v1). The largest published training clusters hold 100k+ GPUs in nodes of 8 (72 in an
    # NVL72 rack). Devices: B200 2.25 dense BF16 PFLOP/s and 192 GB at 8 TB/s; links: NVLink 5 at 1.8 TB/s.
    "nodes": (None, 1 << 17),
    "devices_per_node": (None, 1 << 10),
    "nvlink_domain": (None, 1 << 17),
    "memory_bytes": (MIB, 64 * TIB),
    "peak_tflops": (1e-3, 1e6),
    "memory_bandwidth_gb_s": (1e-3, 1e6),
    "bandwidth_gb_s": (1e-3, 1e6),
    "latency_us": (None, 1e7),
    "overhead_us": (None, 1e7),
    "kernel_overhead_us": (None, 1e6),
    "efficiency": (1e-3, 1.0),
    "multiprocessors": (None, 1 << 12),   # MI300X has 304 compute units, B200 148 SMs
    # plans and jobs
    "num_devices": (None, MAX_PIPELINE_DEVICES),
    "num_microbatches": (None, MAX_MICROBATCHES),
    "gpus": (None, MAX_GPUS),
    "global_batch": (None, MAX_GLOBAL_BATCH),
}


def bounds(key: str) -> tuple[float | None, float | None]:
    """(minimum, maximum) of the field named ``key``; (None, None) where no physical range applies."""
    return RANGES.get(key, (None, None))


def pipeline_slots_reason(num_devices: int, num_microbatches: int) -> str | None:
    """Why a pipeline of this size is refused (its plan would hold millions of actions), or None."""
    slots = num_devices * num_microbatches
    if slots > MAX_PIPELINE_SLOTS:
        return (f"{num_devices} devices x {num_microbatches} micro-batches = {slots:,} slots is more than "
                f"{MAX_PIPELINE_SLOTS:,}; its plan would hold over {2 * slots:,} actions")
    return None


def depth_reason(value: object) -> str | None:
    """Why a parsed document nests too deep, or None. Iterative: a deep document must not exhaust the stack."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                return f"nests deeper than {MAX_DEPTH} levels"
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return None
