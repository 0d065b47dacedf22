"""The I/W split computes exactly the full backward's gradients, with the matmul weight part deferred to W."""

from __future__ import annotations

import pytest
import torch

from executor.model.backward import backward_full, backward_input, backward_weight
from executor.model.build import build_layers
from executor.model.linear import Linear
from executor_plans import every_kind_spec


def _grads(module):
    return {name: None if p.grad is None else p.grad.clone() for name, p in module.named_parameters()}


@pytest.mark.parametrize("layer_index", range(1, 8))
def test_input_then_weight_equals_full_backward_for_every_layer_kind(layer_index):
    spec = every_kind_spec()
    generator = torch.Generator().manual_seed(layer_index)
    x = torch.randn(2, spec.seq_len, spec.hidden_size, dtype=torch.float64, generator=generator)
    labels = torch.randint(0, spec.vocab_size, (2, spec.seq_len), generator=generator)
    grad_output = torch.randn(2, spec.seq_len, spec.hidden_size, dtype=torch.float64, generator=generator)
    is_head = layer_index == spec.num_layers - 1

    def run_forward():
        layer = build_layers(spec, [layer_index], seed=0, dtype=torch.float64)[layer_index]
        stage_input = x.clone().requires_grad_()
        output = layer(stage_input, labels) if is_head else layer(stage_input)
        return layer, stage_input, output, None if is_head else grad_output

    layer, stage_input, output, gradient = run_forward()
    backward_full(output, gradient)
    expected, expected_input = _grads(layer), stage_input.grad.clone()

    layer, stage_input, output, gradient = run_forward()
    deferred = backward_input(output, gradient)
    torch.testing.assert_close(stage_input.grad, expected_input, rtol=1e-12, atol=1e-14)
    matmul_weights = {id(m.weight) for m in layer.modules() if isinstance(m, Linear)}
    for name, param in layer.named_parameters():
        if id(param) in matmul_weights:
            assert param.grad is None, f"I computed {name}, a matmul weight gradient that belongs to W"
    assert len(deferred) > 0
    backward_weight(deferred)
    assert len(deferred) == 0
    for name, grad in _grads(layer).items():
        torch.testing.assert_close(grad, expected[name], rtol=1e-12, atol=1e-14, msg=lambda m: f"{name}: {m}")


def test_a_weight_used_twice_gets_both_contributions_once():
    projection = Linear(4, 4).double()
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    grad_output = torch.randn(3, 4, dtype=torch.float64)
    expected = torch.autograd.grad(torch.nn.functional.linear(torch.nn.functional.linear(x, projection.weight),
                                                              projection.weight), projection.weight, grad_output)[0]
    deferred = backward_input(projection(projection(x)), grad_output)
    assert len(deferred) == 2 and projection.weight.grad is None
    backward_weight(deferred)
    torch.testing.assert_close(projection.weight.grad, expected, rtol=1e-12, atol=1e-14)


def test_weight_gradients_accumulate_across_micro_batches_without_holding_their_activations():
    projection = Linear(4, 4).double()
    inputs = [torch.randn(3, 4, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    grad_outputs = [torch.randn(3, 4, dtype=torch.float64) for _ in range(3)]
    for x, grad_output in zip(inputs, grad_outputs):
        backward_weight(backward_input(projection(x * 2), grad_output))
    # independent: dL/dW = sum over micro-batches of grad_output^T (2x)
    expected = sum(g.T @ (2 * x.detach()) for x, g in zip(inputs, grad_outputs))
    torch.testing.assert_close(projection.weight.grad, expected, rtol=1e-12, atol=1e-14)
    # a plain accumulated tensor: no graph reaching back into the micro-batches' activations
    assert projection.weight.grad.grad_fn is None and not projection.weight.grad.requires_grad
