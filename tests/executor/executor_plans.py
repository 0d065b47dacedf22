"""Hand-built plans and model specs for the executor tests.

The plans are written here rather than taken from ``planner.baselines`` so the executor's tests do not
depend on another part being right; ``list_schedule`` orders any placement by a greedy dependency walk
(backward first, forwards capped per device like 1F1B), which yields a valid order for V-shapes,
interleaving and arbitrary placements.
"""

from __future__ import annotations

from planner.plan import Action, Plan, Stage
from planner.spec.model import load_model_spec

EVERY_KIND_SPEC = {
    "format": "adaptis.model/v1", "name": "every-kind", "hidden_size": 32, "vocab_size": 96, "seq_len": 12,
    "micro_batch_size": 2, "dtype": "fp32",
    "layers": [
        {"kind": "embedding"},
        {"kind": "decoder", "mixer": {"type": "attention", "num_heads": 4, "num_kv_heads": 2, "head_dim": 8},
         "mlp": {"type": "dense", "intermediate_size": 48}},
        {"kind": "decoder", "mixer": {"type": "attention", "num_heads": 4, "num_kv_heads": 1, "head_dim": 8,
                                      "window": 4}},
        {"kind": "decoder", "mixer": {"type": "linear_attention", "num_heads": 2, "head_dim": 8,
                                      "variant": "gated_delta"},
         "mlp": {"type": "moe", "num_experts": 4, "top_k": 2, "expert_intermediate_size": 16,
                 "num_shared_experts": 1, "shared_intermediate_size": 16, "aux_loss_coeff": 0.05}},
        {"kind": "decoder", "mixer": {"type": "mamba2", "num_heads": 4, "head_dim": 8, "state_size": 8,
                                      "conv_kernel": 3, "n_groups": 2}},
        {"kind": "mlp", "mlp": {"type": "dense", "intermediate_size": 40, "gated": False}},
        {"kind": "decoder", "mixer": {"type": "linear_attention", "num_heads": 2, "head_dim": 8,
                                      "variant": "lightning"},
         "mlp": {"type": "moe", "num_experts": 3, "top_k": 1, "expert_intermediate_size": 16,
                 "aux_loss_coeff": 0.02}},
        {"kind": "head"},
    ],
}


def every_kind_spec(**changes):
    return load_model_spec({**EVERY_KIND_SPEC, **changes})


# The layer kinds the 2025-26 HuggingFace families added: gpt-oss's biased, windowed attention with sinks and
# biased MoE; Qwen3's QK-norm (here without rotary embedding, as Jamba's and Granite 4.0-H's attention); Jamba's /
# Falcon-Mamba's Mamba-1 mixer; GPT-2's LayerNorm, learned positions, biased multi-query attention and biased GELU
# MLP. (Biased keys need the rotary embedding to be trained at all: without it a key bias shifts every score of a
# query alike, which the softmax ignores.)
MODERN_KINDS_SPEC = {
    "format": "adaptis.model/v1", "name": "modern-kinds", "hidden_size": 32, "vocab_size": 96, "seq_len": 12,
    "micro_batch_size": 2, "dtype": "fp32", "norm": "layernorm", "position_embeddings": 16,
    "layers": [
        {"kind": "embedding"},
        {"kind": "decoder", "mixer": {"type": "attention", "num_heads": 4, "num_kv_heads": 2, "head_dim": 8,
                                      "window": 4, "qkv_bias": True, "output_bias": True, "sinks": True},
         "mlp": {"type": "moe", "num_experts": 4, "top_k": 2, "expert_intermediate_size": 16, "bias": True,
                 "aux_loss_coeff": 0.05}},
        {"kind": "decoder", "mixer": {"type": "attention", "num_heads": 4, "num_kv_heads": 2, "head_dim": 8,
                                      "qk_norm": True, "rotary": False},
         "mlp": {"type": "dense", "intermediate_size": 48}},
        {"kind": "decoder", "mixer": {"type": "mamba", "inner_size": 48, "state_size": 4, "dt_rank": 3,
                                      "conv_kernel": 3},
         "mlp": {"type": "dense", "intermediate_size": 40, "gated": False, "bias": True}},
        {"kind": "decoder", "mixer": {"type": "mamba", "inner_size": 64, "state_size": 8, "dt_rank": 2,
                                      "conv_kernel": 4, "conv_bias": False, "proj_bias": True}},
        {"kind": "decoder", "mixer": {"type": "attention", "num_heads": 4, "num_kv_heads": 1, "head_dim": 8,
                                      "qkv_bias": True, "output_bias": True}},
        {"kind": "head"},
    ],
}


def modern_kinds_spec(**changes):
    return load_model_spec({**MODERN_KINDS_SPEC, **changes})


def gpipe(stage_layers, stage_devices, num_microbatches) -> Plan:
    """All forwards in micro-batch order, then all backwards; one stage per device."""
    stages = [Stage(tuple(layers), device) for layers, device in zip(stage_layers, stage_devices)]
    actions = [[] for _ in range(max(stage_devices) + 1)]
    for kind, order in (("F", list(range(len(stages)))), ("B", list(reversed(range(len(stages)))))):
        for microbatch in range(num_microbatches):
            for stage in order:
                actions[stages[stage].device].append(Action(stage, kind, microbatch))
    return Plan(len(actions), num_microbatches, stages, actions, strategy="gpipe")


def one_f_one_b(stage_layers, num_microbatches) -> Plan:
    """PipeDream-flush 1F1B with stage d on device d: D-d-1 warm-up forwards, then alternate, then drain."""
    num_devices = len(stage_layers)
    stages = [Stage(tuple(layers), device) for device, layers in enumerate(stage_layers)]
    actions = []
    for device in range(num_devices):
        warmup = min(num_devices - device - 1, num_microbatches)
        order = [Action(device, "F", mb) for mb in range(warmup)]
        for microbatch in range(num_microbatches - warmup):
            order += [Action(device, "F", microbatch + warmup), Action(device, "B", microbatch)]
        order += [Action(device, "B", mb) for mb in range(num_microbatches - warmup, num_microbatches)]
        actions.append(order)
    return Plan(num_devices, num_microbatches, stages, actions, strategy="1f1b")


def list_schedule(stage_layers, stage_devices, num_microbatches, *, split_backward=False,
                  strategy="list") -> Plan:
    """Greedy valid order for any placement: each round every device runs one ready action, preferring
    backward (I/B) of the oldest micro-batch, then a forward if fewer than 2 x stages-ahead are in flight,
    and weight passes (W) only when nothing else is ready (zero-bubble style)."""
    stages = [Stage(tuple(layers), device) for layers, device in zip(stage_layers, stage_devices)]
    num_stages, num_devices = len(stages), max(stage_devices) + 1
    backward = ("I", "W") if split_backward else ("B",)
    todo = {Action(s, kind, mb) for s in range(num_stages) for mb in range(num_microbatches)
            for kind in ("F",) + backward}
    done: set[Action] = set()
    actions = [[] for _ in range(num_devices)]

    def deps(action):
        s, mb = action.stage, action.microbatch
        if action.type == "F":
            return [Action(s - 1, "F", mb)] if s else []
        if action.type == "W":
            return [Action(s, "I", mb)]
        own = [Action(s, "F", mb)]
        return own + ([Action(s + 1, backward[0], mb)] if s + 1 < num_stages else [])

    def rank(action):
        in_flight = sum(1 for a in done if a.type == "F" and stages[a.stage].device == stages[action.stage].device) - \
            sum(1 for a in done if a.type in ("B", "I") and stages[a.stage].device == stages[action.stage].device)
        if action.type in ("B", "I"):
            return (0, action.microbatch, -action.stage)
        if action.type == "F":
            return (1 if in_flight < 2 * num_stages else 3, action.microbatch, action.stage)
        return (2, action.microbatch, action.stage)

    while todo:
        progressed = False
        ready_now = [a for a in todo if all(d in done for d in deps(a))]
        for device in range(num_devices):
            candidates = [a for a in ready_now if stages[a.stage].device == device]
            if candidates:
                chosen = min(candidates, key=rank)
                actions[device].append(chosen)
                todo.discard(chosen)
                done.add(chosen)
                progressed = True
        assert progressed, "list_schedule stalled"
    return Plan(num_devices, num_microbatches, stages, actions, strategy=strategy)
