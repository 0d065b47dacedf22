"""Selective recomputation by Megatron-Core's recompute modules, as the executor runs them
(``executor.model.recompute``): each module gives the gradients a run without recomputation gives, and no longer keeps
at least the activations the planner credits it with freeing (``planner.cost.analytic.recompute_module_costs``,
counted here by what autograd saves)."""

from __future__ import annotations

import pytest
import torch

from executor.model.build import build_layers
from executor.model.recompute import apply_recompute_modules, held_bytes
from planner.cost.analytic import RECOMPUTE_MODULES, recompute_module_costs, recompute_modules_of
from planner.spec.model import load_model_spec

# Latent attention with and without a query latent; an MoE with a shared expert and a balancing loss; a dense MLP;
# grouped-query attention. The latent attention's values are as wide as its queries and keys: for unequal widths
# (DeepSeek's 192 and 128) PyTorch's CPU attention takes its math path, which keeps scaled copies of the queries and
# keys of its own, so ``mla_up_proj`` there frees the values and the projections' intermediates but not those copies.
SPEC = load_model_spec({
    "format": "adaptis.model/v1", "name": "modules", "hidden_size": 32, "vocab_size": 96, "seq_len": 12,
    "micro_batch_size": 2,
    "layers": [
        {"kind": "embedding"},
        {"kind": "decoder", "mixer": {"type": "attention", "num_heads": 4, "num_kv_heads": 4, "head_dim": 12,
                                      "kv_lora_rank": 16, "q_lora_rank": 12, "rope_head_dim": 4, "v_head_dim": 12},
         "mlp": {"type": "moe", "num_experts": 4, "top_k": 2, "expert_intermediate_size": 16,
                 "num_shared_experts": 1, "shared_intermediate_size": 16, "aux_loss_coeff": 0.05}},
        {"kind": "decoder", "mixer": {"type": "attention", "num_heads": 4, "num_kv_heads": 4, "head_dim": 12,
                                      "kv_lora_rank": 16, "rope_head_dim": 4, "v_head_dim": 12},
         "mlp": {"type": "dense", "intermediate_size": 48}},
        {"kind": "decoder", "mixer": {"type": "attention", "num_heads": 4, "num_kv_heads": 2, "head_dim": 8},
         "mlp": {"type": "moe", "num_experts": 4, "top_k": 1, "expert_intermediate_size": 16}},
        {"kind": "head"},
    ],
})
BODY = (1, 2, 3)
FP64_PER_BF16 = 8 / 2   # the planner counts the model's BF16 bytes; these layers run in float64


def run_layers(modules: tuple[str, ...]):
    """The body's layers under ``modules`` on one micro-batch: (the bytes autograd keeps after the forward, the input's
    and every parameter's gradient after the backward)."""
    layers = build_layers(SPEC, list(BODY), seed=1, device="cpu", dtype=torch.float64)
    apply_recompute_modules(layers.values(), modules)
    x = torch.randn(SPEC.micro_batch_size, SPEC.seq_len, SPEC.hidden_size, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(0), requires_grad=True)

    def forward():
        out = x
        for index in BODY:
            out = layers[index](out)
        return out
    out, held = held_bytes(forward, [p for layer in layers.values() for p in layer.parameters()])
    out.pow(2).sum().backward()
    grads = {f"{index}.{name}": parameter.grad for index, layer in layers.items()
             for name, parameter in layer.named_parameters()}
    return held, x.grad, grads


@pytest.fixture(scope="module")
def kept_everything():
    return run_layers(())


def test_every_module_the_planner_models_runs_in_some_layer_here():
    assert {name for index in BODY for name in recompute_modules_of(SPEC.layers[index])} | {"core_attn"} == set(
        RECOMPUTE_MODULES)


@pytest.mark.parametrize("module", RECOMPUTE_MODULES)
def test_a_recompute_module_keeps_the_gradients_and_frees_at_least_what_the_planner_credits(module, kept_everything):
    held, x_grad, grads = run_layers((module,))
    base_held, base_x_grad, base_grads = kept_everything
    torch.testing.assert_close(x_grad, base_x_grad, rtol=1e-12, atol=1e-14)
    assert grads.keys() == base_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, base_grads[name], rtol=1e-12, atol=1e-14, msg=name)
    credited = sum(sum(cost.activation_bytes for cost in costs[module].freed.values())
                   for costs in (recompute_module_costs(SPEC.layers[index], SPEC) for index in BODY)
                   if module in costs)
    freed = base_held - held
    assert freed > 0
    if module == "core_attn":
        # the planner credits nothing: FlashAttention keeps no scores (PyTorch's CPU attention neither); the
        # executor's checkpoint frees the attention's own output and statistics
        assert credited == 0
    else:
        assert freed >= credited * FP64_PER_BF16 > 0, (freed, credited * FP64_PER_BF16)


def test_all_modules_together_free_more_than_any_one_and_keep_the_gradients(kept_everything):
    held, x_grad, grads = run_layers(RECOMPUTE_MODULES)
    base_held, base_x_grad, base_grads = kept_everything
    torch.testing.assert_close(x_grad, base_x_grad, rtol=1e-12, atol=1e-14)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, base_grads[name], rtol=1e-12, atol=1e-14, msg=name)
    assert held < min(run_layers((module,))[0] for module in RECOMPUTE_MODULES)


def test_without_output_runs_the_producer_again_once_and_only_in_the_backward():
    """``layernorm``: each norm before an MoE or latent attention runs once in the forward and once more when the
    backward reaches the block after it, not in the forward's graph."""
    layers = build_layers(SPEC, list(BODY), seed=1, device="cpu", dtype=torch.float64)
    calls = []
    for index, layer in layers.items():
        layer.use_recompute_modules(("layernorm",))
        for name in ("mixer_norm", "mlp_norm"):
            getattr(layer, name).register_forward_hook(lambda module, args, output, key=(index, name):
                                                       calls.append((key, torch.is_grad_enabled())))
    x = torch.randn(2, 12, 32, dtype=torch.float64, requires_grad=True)
    out = x
    for index in BODY:
        out = layers[index](out)
    forward = list(calls)
    discarded = {(1, "mixer_norm"), (1, "mlp_norm"), (2, "mixer_norm"), (3, "mlp_norm")}
    assert sorted(forward) == sorted([(key, key not in discarded) for key in
                                      [(i, n) for i in BODY for n in ("mixer_norm", "mlp_norm")]])
    calls.clear()
    out.sum().backward()
    assert sorted(calls) == sorted((key, True) for key in discarded)
