"""Measured profiles: time each layer's F, I and W on the current device and measure its memory.

The profiler builds the model's layers and pushes a micro-batch of the spec's shape (token ids into the
embedding, labels into the head) forward through all of them in model order, then backward in reverse, each
layer's input cut from the graph as at a stage boundary so that every layer's forward, input-gradient
backward (I) and weight-gradient backward (W) is timed on its own; after warm-up passes each time is the
median of ``repeats`` passes. I and W are split exactly as the executor splits them (``executor.model.backward``;
the embedding's whole backward counts as W, as in a pipeline stage, where it runs in W). With weight-gradient
deferral off (``executor.model.linear.enable_weight_grad_deferral(False)``, as on ranks that run only F and
B) I is the whole backward and W is empty: the profile of F/B-only runs.

Layers are timed between their neighbours, as a stage runs them, not each alone in a loop: a layer repeated
back to back finds its weights, activations, allocator blocks and the interpreter's and dispatcher's paths
warm, and on a CPU ran 10-20 % faster that way than inside a stage (tiny-hybrid's stages: 8-20 % below
the stage's own measured F and B time, which the sum of the in-order layer times matched within 4 %).

The whole model is built at once. When it does not fit, either profile a scaled spec
(``executor.model.scale_spec``) or time its distinct layers (``distinct=True``): one copy of each different
layer, in the order they first appear (DeepSeek-V3: embedding, dense block, MoE block, head), each timed between
its neighbours in that shorter model, and every layer given the times and memory of the copy it equals. On a
GPU that profiles a model with the real shapes while holding one layer of each kind.

Time with the thread count the ranks use (``threads``; ``executor.running.cores.fair_share_threads`` when the ranks
share the cores). Memory comes from autograd itself: ``activation_bytes`` is the size of the tensors the
forward saves for backward (parameters excluded, shared storage counted once), ``output_bytes`` the size of
what the layer hands to the next stage.
"""

from __future__ import annotations

import platform
import statistics
import time
from dataclasses import replace

import torch

from executor.model.backward import backward_input, backward_weight
from executor.measuring.alongside import run_alongside
from executor.running.cores import bind_local_rank, fair_share_threads
from executor.model.build import build_layers
from executor.model.layers import Head
from planner.cluster import load_cluster_preset
from planner.cost import analytic_profile
from planner.profile import LayerProfile, Profile, load_profile
from planner.spec.model import LayerSpec, ModelSpec


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


def _layer_call(module, layer_input: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return module(layer_input, labels) if isinstance(module, Head) else module(layer_input)


def _boundary(tensor: torch.Tensor) -> torch.Tensor:
    """A layer's input cut from the graph (as at a stage boundary), so its backward stops there and is timed
    alone; token ids stay as they are."""
    return tensor.detach().requires_grad_() if tensor.is_floating_point() else tensor


def _model_input(spec: ModelSpec, device: torch.device, dtype: torch.dtype, seed: int):
    """One micro-batch of the spec's shape: (first layer's input, labels for the head)."""
    generator = torch.Generator().manual_seed(seed)
    shape = (spec.micro_batch_size, spec.seq_len)
    if spec.layers[0].kind == "embedding":
        first_input = torch.randint(0, spec.vocab_size, shape, generator=generator).to(device)
    else:
        first_input = torch.randn(*shape, spec.hidden_size, generator=generator).to(device=device, dtype=dtype)
    return first_input, torch.randint(0, spec.vocab_size, shape, generator=generator).to(device)


def _layer_memory(modules: list, first_input: torch.Tensor, labels: torch.Tensor) -> list[tuple[int, int]]:
    """(activation_bytes, output_bytes) of every layer, from one untimed pass: the saved-tensor hooks run
    Python per saved tensor and would inflate the forward time."""
    memory, hidden = [], first_input
    for module in modules:
        params = [p for p in module.parameters() if p.requires_grad]
        layer_input = _boundary(hidden)
        output, activation_bytes = _saved_bytes(lambda: _layer_call(module, layer_input, labels), params)
        memory.append((activation_bytes, output.numel() * output.element_size()))
        hidden = output.detach()
    return memory


def _timed_pass(modules: list, first_input: torch.Tensor, labels: torch.Tensor, timer: _Timer,
                kinds: list[str]) -> list[tuple[float, float, float]]:
    """One micro-batch forward through every layer in model order, then backward in reverse, each layer
    timed on its own: (F, I, W) milliseconds per layer."""
    inputs, outputs, forward_ms = [], [], []
    hidden = first_input
    for module in modules:
        layer_input, holder = _boundary(hidden), {}
        forward_ms.append(timer(lambda: holder.update(output=_layer_call(module, layer_input, labels))))
        inputs.append(layer_input)
        outputs.append(holder["output"])
        hidden = holder["output"]
    backward_ms: list[tuple[float, float]] = [(0.0, 0.0)] * len(modules)
    grad_output = None
    for index in reversed(range(len(modules))):
        output, deferred = outputs[index], {}
        if grad_output is None and output.dim() > 0:
            grad_output = torch.randn_like(output)   # a model without a head ends in hidden states
        input_ms = timer(lambda: deferred.update(store=backward_input(output, grad_output)))
        # An empty store (weight-gradient deferral off, or a layer with nothing to defer) leaves W no work:
        # timing the empty call would only record the timer's noise.
        weight_ms = timer(lambda: backward_weight(deferred["store"])) if len(deferred["store"]) else 0.0
        if kinds[index] == "embedding":
            # Token ids have no gradient: the embedding's whole backward is its (weight) table update.
            input_ms, weight_ms = 0.0, input_ms + weight_ms
        backward_ms[index] = (input_ms, weight_ms)
        grad_output = inputs[index].grad if inputs[index].is_floating_point() else None
    # Parameter gradients stay: every pass after the first accumulates into them, as every micro-batch after
    # a step's first does (in place, in autograd's AccumulateGrad and in the deferred W).
    return [(forward, *backward) for forward, backward in zip(forward_ms, backward_ms)]


def distinct_layers(spec: ModelSpec) -> tuple[ModelSpec, list[int]]:
    """``spec`` with one copy of each different layer, in the order they first appear, and for every layer of
    ``spec`` the index of its copy."""
    copies: dict[LayerSpec, int] = {}
    for layer in spec.layers:
        copies.setdefault(layer, len(copies))
    return replace(spec, layers=tuple(copies)), [copies[layer] for layer in spec.layers]


def _measure_distinct_layers(spec: ModelSpec, **measure) -> tuple[LayerProfile, ...]:
    reduced, copy_of = distinct_layers(spec)
    measured = _measure_layers(reduced, **measure)
    return tuple(replace(measured[copy_of[index]], name=name) for index, name in enumerate(spec.layer_names()))


def _measure_layers(spec: ModelSpec, *, device: torch.device, dtype: torch.dtype, repeats: int, warmup: int,
                    seed: int) -> tuple[LayerProfile, ...]:
    modules = list(build_layers(spec, range(spec.num_layers), seed=seed, device=device, dtype=dtype,
                                draw_on_device=True).values())
    kinds = [layer.kind for layer in spec.layers]
    first_input, labels = _model_input(spec, device, dtype, seed)
    memory = _layer_memory(modules, first_input, labels)
    timer = _Timer(device)
    passes = [_timed_pass(modules, first_input, labels, timer, kinds) for _ in range(warmup + repeats)][warmup:]
    return tuple(
        LayerProfile(name=name, kind=kinds[index],
                     forward=statistics.median(timings[index][0] for timings in passes),
                     backward_input=statistics.median(timings[index][1] for timings in passes),
                     backward_weight=statistics.median(timings[index][2] for timings in passes),
                     activation_bytes=memory[index][0], output_bytes=memory[index][1],
                     param_bytes=sum(p.numel() * p.element_size() for p in modules[index].parameters()
                                     if p.requires_grad))
        for index, name in enumerate(spec.layer_names()))


def measure_profile(spec: ModelSpec, *, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                    repeats: int = 5, warmup: int = 2, seed: int = 0, threads: int | None = None,
                    distinct: bool = False) -> Profile:
    """A measured ``adaptis.profile/v1`` Profile of ``spec`` on ``device`` (see the module docstring).

    ``threads``: time with this many intra-op threads (a run's ``RunConfig.rank_threads``), restored after;
    None keeps the caller's setting. ``distinct``: build and time one copy of each different layer only.
    """
    device = torch.device(device)
    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        measure = _measure_distinct_layers if distinct else _measure_layers
        layers = measure(spec, device=device, dtype=dtype, repeats=repeats, warmup=warmup, seed=seed)
        device_name = _device_name(device)
    finally:
        torch.set_num_threads(previous_threads)
    # FLOPs do not depend on the device; the analytic model's count is what MFU is measured against.
    flops = analytic_profile(spec, load_cluster_preset("cpu-host")).flops_per_microbatch
    return Profile(model=spec.name, device=device_name, layers=layers,
                   microbatch_size=spec.micro_batch_size, seq_len=spec.seq_len, source="measured",
                   flops_per_microbatch=flops)


def _profile_in_process(spec_doc: dict, threads: int, split_backward: bool, repeats: int, warmup: int, seed: int,
                        distinct: bool, index: int, processes: int, start, results) -> None:
    from executor.model.linear import enable_weight_grad_deferral
    from planner.spec.model import load_model_spec

    bind_local_rank(index, processes, threads)
    enable_weight_grad_deferral(split_backward)
    spec = load_model_spec(spec_doc)
    start.wait()
    results.put(measure_profile(spec, repeats=repeats, warmup=warmup, seed=seed, threads=threads,
                                distinct=distinct).to_dict())


def measure_profile_alongside(spec: ModelSpec, *, processes: int, threads: int | None = None,
                              split_backward: bool = True, repeats: int = 5, warmup: int = 2, seed: int = 0,
                              distinct: bool = False, timeout_s: float = 600) -> Profile:
    """A CPU profile measured the way a local run executes: ``processes`` profilers at once (one per rank),
    each with ``threads`` threads (default: its share of this host's cores, as a run's ranks get) and the
    ranks' weight-gradient deferral setting, each bound to cores of its own as the ranks are
    (``executor.running.cores.bind_to_cores``).

    Ranks that share a host's cores and memory bandwidth run each layer slower than one process alone does;
    timing with the same number of concurrent processes measures that. Each layer's time is the least of the
    processes' (each already a median over passes): interference from outside the run only ever adds time,
    and with two processes a median is their mean, half set by whichever was disturbed.
    """
    threads = threads or fair_share_threads(processes)
    docs = run_alongside(_profile_in_process, [(spec.to_dict(), threads, split_backward, repeats, warmup, seed,
                                                distinct, index, processes) for index in range(processes)],
                         timeout_s=timeout_s)
    return fastest_of([load_profile(doc) for doc in docs])


def fastest_of(profiles: list[Profile]) -> Profile:
    """One profile from several processes' profiles of the same model: each layer's F, I and W the least
    of theirs (see ``measure_profile_alongside``)."""
    layers = tuple(
        LayerProfile(name=first.name, kind=first.kind,
                     forward=min(p.layers[i].forward for p in profiles),
                     backward_input=min(p.layers[i].backward_input for p in profiles),
                     backward_weight=min(p.layers[i].backward_weight for p in profiles),
                     activation_bytes=first.activation_bytes, output_bytes=first.output_bytes,
                     param_bytes=first.param_bytes)
        for i, first in enumerate(profiles[0].layers))
    base = profiles[0]
    return Profile(model=base.model, device=f"{base.device}, {len(profiles)} processes at once", layers=layers,
                   microbatch_size=base.microbatch_size, seq_len=base.seq_len, source="measured",
                   flops_per_microbatch=base.flops_per_microbatch)


def measure_for_local_runs(spec: ModelSpec, *, ranks: int, split_backward: bool, plan=None, repeats: int = 15,
                           warmup: int = 5) -> Profile:
    """The profile a local run of ``ranks`` ranks is predicted from, measured as those ranks will run: one profiler
    per rank at once with each rank's share of the cores (``fair_share_threads``, what ``run_plan`` gives them)
    and their weight-gradient setting; with ``plan``, its stages are also timed as its ranks run them and the
    layers scaled to those times (``executor.measuring.stage_timing``, as ``executor profile --plan`` does)."""
    threads = fair_share_threads(ranks)
    profile = measure_profile_alongside(spec, processes=ranks, threads=threads, split_backward=split_backward,
                                        repeats=repeats, warmup=warmup)
    if plan is None:
        return profile
    from executor.measuring.stage_timing import measure_stage_timings
    from planner.calibrate import recalibrate_durations, stage_durations

    timings = measure_stage_timings(plan, spec, threads=threads, repeats=repeats, warmup=warmup)
    return recalibrate_durations(profile, plan, stage_durations(plan, timings))
