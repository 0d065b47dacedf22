"""Measured profiles: time each layer's F, I and W on the current device and measure its memory.

For every layer the profiler builds the module alone, feeds it a micro-batch of the spec's shape
(token ids for the embedding, hidden states otherwise, labels for the head) and, after warm-up runs, takes
the median of ``repeats`` timings of forward, input-gradient backward (I) and weight-gradient backward (W)
split exactly as the executor splits them (``executor.backward``; the embedding's whole backward counts as W,
as in a pipeline stage, where it runs in W). Memory comes from autograd itself:
``activation_bytes`` is the size of the tensors the forward saves for backward (parameters excluded,
shared storage counted once), ``output_bytes`` the size of what the layer hands to the next stage.
"""

from __future__ import annotations

import platform
import statistics
import time

import torch

from executor.backward import backward_input, backward_weight
from executor.model.build import build_layers
from executor.model.layers import Head
from planner.cluster import load_cluster_preset
from planner.cost import analytic_profile
from planner.profile import LayerProfile, Profile
from planner.spec.model import ModelSpec


class _Timer:
    def __init__(self, device: torch.device):
        self.device = device

    def __call__(self, work) -> float:
        """Milliseconds ``work()`` takes on the device (CUDA events on a GPU, the monotonic clock on a CPU)."""
        if self.device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            work()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
        began = time.perf_counter()
        work()
        return (time.perf_counter() - began) * 1e3


def _saved_bytes(run_forward, params: list[torch.Tensor]):
    """Run the forward, returning (output, bytes of the non-parameter tensors autograd saved)."""
    param_storages = {p.untyped_storage().data_ptr() for p in params}
    seen, total = set(), 0

    def pack(tensor: torch.Tensor):
        nonlocal total
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in param_storages and storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total += storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        output = run_forward()
    return output, total


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def measure_layer(spec: ModelSpec, index: int, *, device: torch.device, dtype: torch.dtype, repeats: int,
                  warmup: int, seed: int) -> LayerProfile:
    module = build_layers(spec, [index], seed=seed, device=device, dtype=dtype)[index]
    params = [p for p in module.parameters() if p.requires_grad]
    generator = torch.Generator().manual_seed(seed + index)
    shape = (spec.micro_batch_size, spec.seq_len)
    if spec.layers[index].kind == "embedding":
        fixed_input = torch.randint(0, spec.vocab_size, shape, generator=generator).to(device)
    else:
        fixed_input = torch.randn(*shape, spec.hidden_size, generator=generator).to(device=device, dtype=dtype)
    labels = torch.randint(0, spec.vocab_size, shape, generator=generator).to(device)
    timer = _Timer(device)
    samples = {"forward": [], "backward_input": [], "backward_weight": []}
    activation_bytes = output_bytes = 0
    for iteration in range(warmup + repeats):
        stage_input = fixed_input if not fixed_input.is_floating_point() else fixed_input.detach().requires_grad_()

        def forward():
            return module(stage_input, labels) if isinstance(module, Head) else module(stage_input)

        holder = {}
        forward_ms = timer(lambda: holder.update(zip(("output", "saved"), _saved_bytes(forward, params))))
        output = holder["output"]
        grad_output = None if output.dim() == 0 else torch.randn_like(output)
        deferred = {}
        input_ms = timer(lambda: deferred.update(store=backward_input(output, grad_output)))
        weight_ms = timer(lambda: backward_weight(deferred["store"]))
        for param in params:
            param.grad = None
        if iteration >= warmup:
            samples["forward"].append(forward_ms)
            if spec.layers[index].kind == "embedding":
                # Token ids have no gradient: the embedding's whole backward is its (weight) table update.
                input_ms, weight_ms = 0.0, input_ms + weight_ms
            samples["backward_input"].append(input_ms)
            samples["backward_weight"].append(weight_ms)
            activation_bytes, output_bytes = holder["saved"], output.numel() * output.element_size()
    return LayerProfile(
        name=spec.layer_names()[index], kind=spec.layers[index].kind,
        forward=statistics.median(samples["forward"]),
        backward_input=statistics.median(samples["backward_input"]),
        backward_weight=statistics.median(samples["backward_weight"]),
        activation_bytes=activation_bytes, output_bytes=output_bytes,
        param_bytes=sum(p.numel() * p.element_size() for p in params))


def measure_profile(spec: ModelSpec, *, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                    repeats: int = 5, warmup: int = 2, seed: int = 0) -> Profile:
    """A measured ``adaptis.profile/v1`` Profile of ``spec`` on ``device`` (see the module docstring)."""
    device = torch.device(device)
    layers = tuple(measure_layer(spec, index, device=device, dtype=dtype, repeats=repeats, warmup=warmup, seed=seed)
                   for index in range(spec.num_layers))
    # FLOPs do not depend on the device; the analytic model's count is what MFU is measured against.
    flops = analytic_profile(spec, load_cluster_preset("cpu-host")).flops_per_microbatch
    return Profile(model=spec.name, device=_device_name(device), layers=layers,
                   microbatch_size=spec.micro_batch_size, seq_len=spec.seq_len, source="measured",
                   flops_per_microbatch=flops)
