"""Measured profiles: time each layer's F, I and W on the current device and measure its memory.

For every layer the profiler builds the module alone, feeds it a micro-batch of the spec's shape
(token ids for the embedding, hidden states otherwise, labels for the head) and, after warm-up runs, takes
the median of ``repeats`` timings of forward, input-gradient backward (I) and weight-gradient backward (W)
split exactly as the executor splits them (``executor.backward``; the embedding's whole backward counts as W,
as in a pipeline stage, where it runs in W). With weight-gradient deferral off
(``executor.model.linear.enable_weight_grad_deferral(False)``, as on ranks that run only F and B) I is the
whole backward and W is empty: the profile of F/B-only runs. Time with the thread count the ranks use
(``torch.set_num_threads``; one per rank when the ranks share the cores). Memory comes from autograd itself:
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
from planner.profile import LayerProfile, Profile, load_profile
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

    def forward(stage_input):
        return module(stage_input, labels) if isinstance(module, Head) else module(stage_input)

    def fresh_input():
        return fixed_input if not fixed_input.is_floating_point() else fixed_input.detach().requires_grad_()

    # Memory once, outside the timed runs: the saved-tensor hooks run Python per saved tensor and would
    # inflate the forward time.
    first_input = fresh_input()
    output, activation_bytes = _saved_bytes(lambda: forward(first_input), params)
    output_bytes = output.numel() * output.element_size()
    del output
    timer = _Timer(device)
    samples = {"forward": [], "backward_input": [], "backward_weight": []}
    for iteration in range(warmup + repeats):
        stage_input = fresh_input()
        holder = {}
        forward_ms = timer(lambda: holder.update(output=forward(stage_input)))
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


def _profile_in_process(spec_doc: dict, threads: int, split_backward: bool, repeats: int, warmup: int, seed: int,
                        start, results) -> None:
    from executor.model.linear import enable_weight_grad_deferral
    from planner.spec.model import load_model_spec

    torch.set_num_threads(threads)
    enable_weight_grad_deferral(split_backward)
    spec = load_model_spec(spec_doc)
    start.wait()
    results.put(measure_profile(spec, repeats=repeats, warmup=warmup, seed=seed).to_dict())


def measure_profile_alongside(spec: ModelSpec, *, processes: int, threads: int = 1, split_backward: bool = True,
                              repeats: int = 5, warmup: int = 2, seed: int = 0, timeout_s: float = 600) -> Profile:
    """A CPU profile measured the way a local run executes: ``processes`` profilers at once (one per rank),
    each with ``threads`` threads and the ranks' weight-gradient deferral setting.

    Ranks that share a host's cores and memory bandwidth run each layer slower than one process alone does;
    timing with the same number of concurrent processes measures that. Each layer's time is the median
    over the processes.
    """
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(processes), context.Queue()
    workers = [context.Process(target=_profile_in_process, args=(spec.to_dict(), threads, split_backward, repeats,
                                                                  warmup, seed, start, results), daemon=True)
               for _ in range(processes)]
    for worker in workers:
        worker.start()
    try:
        docs = [results.get(timeout=timeout_s) for _ in workers]
    finally:
        for worker in workers:
            worker.join(timeout=5)
            if worker.is_alive():
                worker.kill()
                worker.join()
    profiles = [load_profile(doc) for doc in docs]
    layers = tuple(
        LayerProfile(name=first.name, kind=first.kind,
                     forward=statistics.median(p.layers[i].forward for p in profiles),
                     backward_input=statistics.median(p.layers[i].backward_input for p in profiles),
                     backward_weight=statistics.median(p.layers[i].backward_weight for p in profiles),
                     activation_bytes=first.activation_bytes, output_bytes=first.output_bytes,
                     param_bytes=first.param_bytes)
        for i, first in enumerate(profiles[0].layers))
    base = profiles[0]
    return Profile(model=base.model, device=f"{base.device}, {processes} processes at once", layers=layers,
                   microbatch_size=base.microbatch_size, seq_len=base.seq_len, source="measured",
                   flops_per_microbatch=base.flops_per_microbatch)
