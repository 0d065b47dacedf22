"""Scoring one parallel configuration of a job: a closed form to rank many quickly, and the simulated plan.

The pipeline sees one GPU of each TP x CP group: ``pipeline_profile`` turns every layer's time on that GPU
(``planner.parallel.cost``) into an ``adaptis.profile/v1`` profile, and ``RankMapping.pipeline_cluster``
gives the links between pipeline ranks, so any pipeline plan (a baseline schedule or the AdaPtis search) is
simulated as it would run inside the job. A step is then the pipeline's makespan, plus the data-parallel
gradient reduction and parameter gather that did not hide behind compute, plus the optimizer step, plus the
all-reduce of a tied embedding's gradient between the two pipeline ends (Megatron-LM's
``_allreduce_embedding_grads``).

The closed form (``estimate``) uses Megatron's uniform partition (the same number of blocks per virtual
stage, embedding first, head last) and the 1F1B / interleaved makespan ``m·T_max + (ΣT_r - T_max) / v``
(Narayanan et al. 2021, Sec. 2.2: the bubble is ``(p - 1)/v`` stage times), and the schedules'
in-flight micro-batches (``p - r`` on rank r for 1F1B; Megatron's ``2(p - r - 1) + (v - 1)p + 1`` chunk
micro-batches with v chunks).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from planner.cluster import ClusterSpec
from planner.memory import activation_peaks, in_flight_activation_bytes, stage_activation_bytes
from planner.cost.vocab import loss_backward_bytes
from planner.memory.buffers import ALLOCATOR_OVERHEAD, overhead_bytes
from planner.parallel.config import ParallelConfig
from planner.parallel.cost import (COMM_AXES, CostOptions, LayerTime, data_parallel_ms, exposed_data_parallel_ms,
                                   kernel_split, layer_times, layer_work, optimizer_step_ms, point_to_point_ms,
                                   reruns_forward, ring_collective_ms)
from planner.parallel.mapping import GroupSpan, RankMapping
from planner.parallel.memory import (
    GpuMemory,
    gpu_buffer_bytes,
    gpu_memory,
    held_parameters,
    layer_state_bytes,
    optimizer_parameters,
)
from planner.parallel.params import LayerParams
from planner.partition.uniform import uniform_stage_layers
from planner.plan import Plan
from planner.profile import LayerProfile, Profile
from planner.spec.model import ModelSpec


@dataclass(frozen=True)
class Job:
    """What the user asks for: a model trained on ``gpus`` GPUs of ``cluster`` at ``seq_len`` tokens per
    sequence and ``global_batch`` sequences per step."""

    model: ModelSpec
    cluster: ClusterSpec
    gpus: int
    seq_len: int
    global_batch: int
    options: CostOptions = CostOptions()


# What a step's time is made of (``Score.breakdown_ms``), in the order the job page stacks them: on the pipeline's
# critical rank (the one busiest per step), its compute, its recomputed forwards, the TP, CP and EP communication left
# exposed inside its F and B (``planner.parallel.cost``), the pipeline transfers it waited for and the rest of its idle
# time (the bubble); then the step's end: the exposed data-parallel communication and the optimizer step.
STEP_PARTS = ("compute", "recompute", "tp", "cp", "ep", "pipeline_transfers", "bubble", "dp", "optimizer")


@dataclass
class Score:
    """A configuration's predicted step: times in ms, memory per pipeline rank, metrics."""

    config: ParallelConfig
    schedule: str                  # "1f1b", "interleaved-1f1b" or "adaptis"
    chunks: int
    pipeline_ms: float
    data_parallel_ms: float
    optimizer_ms: float
    memory: list[GpuMemory]
    model_flops: float             # per step, whole job, no recomputation
    executed_flops: float          # per step, whole job, everything the GPUs run
    job: Job
    plan: Plan | None = None
    estimated: bool = True
    extra: dict = field(default_factory=dict)
    pipeline_parts: dict = field(default_factory=dict)   # the pipeline's share of STEP_PARTS (critical_rank_parts)

    @property
    def iteration_ms(self) -> float:
        return self.pipeline_ms + self.data_parallel_ms + self.optimizer_ms

    @property
    def breakdown_ms(self) -> dict[str, float]:
        """``STEP_PARTS`` in ms, summing to ``iteration_ms``."""
        parts = {**self.pipeline_parts, "optimizer": self.optimizer_ms}
        parts["dp"] = parts.get("dp", 0.0) + self.data_parallel_ms   # full sharding's per layer, and the step end's
        return {part: parts.get(part, 0.0) for part in STEP_PARTS}

    @property
    def fits(self) -> bool:
        return all(memory.fits for memory in self.memory)

    @property
    def peak_memory_bytes(self) -> float:
        return max(memory.total for memory in self.memory)

    def gpu_memory_rows(self, per_device: list[dict]) -> list[dict]:
        """The pipeline simulator's per-device rows with their memory replaced by this job's accounting (the
        simulator's knows no sharding and no buffers), so every figure of a hybrid plan is the job's."""
        return [{**device, "peak_memory_bytes": round(memory.total), "activation_peak_bytes": round(memory.activations),
                 "model_state_bytes": round(memory.params + memory.gradients + memory.optimizer)}
                for device, memory in zip(per_device, self.memory)]

    def metrics(self) -> dict:
        seconds = self.iteration_ms / 1e3
        device = self.job.cluster.device
        gpus = self.config.num_gpus
        return {"iteration_ms": self.iteration_ms, "pipeline_ms": self.pipeline_ms,
                "data_parallel_exposed_ms": self.data_parallel_ms, "optimizer_ms": self.optimizer_ms,
                "tokens_per_s": self.job.global_batch * self.job.seq_len / seconds,
                "mfu": self.model_flops / seconds / (gpus * device.peak_tflops * 1e12),
                "hardware_tflops_per_gpu": self.executed_flops / seconds / gpus / 1e12,
                "peak_memory_bytes": round(self.peak_memory_bytes), "fits": self.fits,
                "schedule": self.schedule, "chunks": self.chunks, "estimated": self.estimated,
                "breakdown_ms": self.breakdown_ms}

    def parallel_dict(self) -> dict:
        """The configuration as plan v2's ``parallel`` writes it: with ``vpp`` where every pipeline rank holds as
        many stages (always for Megatron's schedules; not for AdaPtis' uneven placements)."""
        vpp = self.chunks if self.plan is None else self.plan.virtual_stages()
        return {**self.config.to_dict(), **({"vpp": vpp} if vpp is not None else {})}

    def to_dict(self) -> dict:
        return {"parallel": self.parallel_dict(), "short": self.config.short(), "predicted": self.metrics(),
                "memory": [memory.to_dict() for memory in self.memory]}


# ---- the pieces ---------------------------------------------------------------------------------------

def recompute_per_layer(config: ParallelConfig, stage_layers: list[tuple[int, ...]], num_layers: int) -> list[str]:
    modes = ["none"] * num_layers
    for stage, layers in enumerate(stage_layers):
        for layer in layers:
            modes[layer] = config.recompute_of(stage)
    return modes


def uniform_stages(model: ModelSpec, stages: int) -> list[tuple[int, ...]]:
    """Megatron's partition of the model into ``stages`` (``planner.partition.uniform``)."""
    return uniform_stage_layers([layer.kind for layer in model.layers], stages)


def rank_params(model: ModelSpec, params: list[LayerParams], rank_layers: list[list[int]]) -> list[list[LayerParams]]:
    """Each pipeline rank's layers' parameters; a tied table counted once on a rank holding both ends."""
    last = model.num_layers - 1
    tied = model.tie_embeddings and model.layers[0].kind == "embedding" and model.layers[last].kind == "head"
    result = []
    for layers in rank_layers:
        held = [params[index] for index in layers]
        if tied and 0 in layers and last in layers:
            table = params[0].tp_sharded
            held[layers.index(last)] = replace(params[last], tp_sharded=params[last].tp_sharded - table)
        result.append(held)
    return result


def pipeline_profile(job: Job, times: list[LayerTime], params: list[LayerParams], config: ParallelConfig) -> Profile:
    """The profile of one GPU of each TP x CP group; ``param_bytes`` are the bf16 parameters it holds."""
    names = job.model.layer_names()
    layers = tuple(
        LayerProfile(name=name, kind=layer.kind, forward=time.forward, backward_input=time.backward_input,
                     backward_weight=time.backward_weight, activation_bytes=round(time.activation_bytes),
                     output_bytes=round(time.output_bytes),
                     param_bytes=round(2 * param.per_gpu(config.tp, config.ep, config.etp)))
        for name, layer, time, param in zip(names, job.model.layers, times, params))
    return Profile(model=job.model.name, device=job.cluster.device.name, layers=layers,
                   microbatch_size=config.microbatch_size, seq_len=job.seq_len, source="analytic")


def step_flops(job: Job, config: ParallelConfig, times: list[LayerTime]) -> tuple[float, float]:
    """(model FLOPs without recomputation, executed FLOPs) of the whole job's step."""
    microbatches = config.num_microbatches * config.dp
    model = sum(work.model_flops for work in _works(job, config))
    executed = sum(time.executed_flops for time in times) * config.tp * config.cp
    return model * microbatches, executed * microbatches


def step_end_ms(job: Job, config: ParallelConfig, mapping: RankMapping, held: list[list[LayerParams]],
                times: list[LayerTime], rank_layers: list[list[int]]) -> tuple[float, float]:
    """(exposed data-parallel communication, optimizer step) in ms: the slowest pipeline rank's."""
    exposed, optimizer = 0.0, 0.0
    for layers, params in zip(rank_layers, held):
        dense, expert = held_parameters(params, config)
        grad_ms, param_ms = data_parallel_ms(dense, expert, config, mapping, job.options)
        last_backward = sum(times[index].backward_input + times[index].backward_weight for index in layers)
        first_forward = sum(times[index].forward for index in layers)
        exposed = max(exposed, exposed_data_parallel_ms(grad_ms, param_ms, last_backward, first_forward, job.options))
        optimizer = max(optimizer, optimizer_step_ms(optimizer_parameters(dense, expert, config), job.cluster))
    model = job.model
    if config.pp > 1 and model.tie_embeddings and model.layers[0].kind == "embedding":
        table = job.model.vocab_size * model.hidden_size / config.tp * job.options.grad_reduce_bytes
        exposed += 2 * ring_collective_ms(table, _two_ends(mapping))
    return exposed, optimizer


def critical_rank_parts(times: list[LayerTime], rank_layers: list[list[int]], microbatches: int, pipeline_ms: float,
                        rank_transfers_ms: list[float]) -> dict[str, float]:
    """The pipeline's makespan split on its critical rank, the one with the most work per step (every rank's work and
    idle time add up to the makespan; this one idles least): its work by kind (``LayerTime.parts_ms`` of its layers
    for every micro-batch), ``rank_transfers_ms[rank]`` of its idle time as the transfers it waited for, and the rest
    of its idle time as the bubble."""
    work = [microbatches * sum(times[index].total_ms for index in layers) for layers in rank_layers]
    rank = max(range(len(work)), key=work.__getitem__)
    parts = dict.fromkeys(("compute", "recompute", *COMM_AXES), 0.0)
    for index in rank_layers[rank]:
        for part, ms in times[index].parts_ms().items():
            parts[part] += microbatches * ms
    idle = max(pipeline_ms - work[rank], 0.0)
    parts["pipeline_transfers"] = min(max(rank_transfers_ms[rank], 0.0), idle)
    parts["bubble"] = idle - parts["pipeline_transfers"]
    # compute takes the rounding of these sums, so that the parts add up to the makespan exactly
    parts["compute"] = pipeline_ms - sum(ms for part, ms in parts.items() if part != "compute")
    return parts


def _two_ends(mapping: RankMapping) -> GroupSpan:
    pipeline = mapping.span("pp")
    return GroupSpan("embedding", 2, 1 if pipeline.crosses_domains else 2, pipeline.intra, pipeline.inter)


# ---- closed form --------------------------------------------------------------------------------------

def estimate(job: Job, config: ParallelConfig, chunks: int = 1) -> Score:
    """The closed-form score of ``config`` with Megatron's uniform partition and (interleaved) 1F1B."""
    mapping = RankMapping(config, job.cluster)
    pp, m = config.pp, config.num_microbatches
    stage_layers = uniform_stages(job.model, pp * chunks)
    modes = recompute_per_layer(config, stage_layers, job.model.num_layers)
    times = layer_times(job.model, job.cluster, config, mapping, job.seq_len, modes, job.options)
    rank_layers = [[index for stage in range(rank, pp * chunks, pp) for index in stage_layers[stage]]
                   for rank in range(pp)]
    rank_ms = [sum(times[i].forward + times[i].backward_input + times[i].backward_weight for i in layers)
               for layers in rank_layers]
    transfer = point_to_point_ms(times[0].output_bytes, mapping.span("pp")) if pp > 1 else 0.0
    slowest = max(rank_ms)
    transfers_ms = 2 * (pp - 1) * chunks * transfer
    pipeline_ms = m * slowest + (sum(rank_ms) - slowest) / chunks + transfers_ms
    params = rank_params(job.model, _layer_params(job), rank_layers)
    memory = []
    for rank, layers in enumerate(rank_layers):
        per_microbatch = sum(times[i].activation_bytes for i in layers)
        in_flight = in_flight_activation_bytes(per_microbatch, rank=rank, pp=pp, num_microbatches=m, chunks=chunks)
        memory.append(_rank_memory(job, config, rank, params[rank], in_flight, layers, modes))
    exposed, optimizer = step_end_ms(job, config, mapping, params, times, rank_layers)
    model_flops, executed = step_flops(job, config, times)
    return Score(config=config, schedule="1f1b" if chunks == 1 else "interleaved-1f1b", chunks=chunks,
                 pipeline_ms=pipeline_ms, data_parallel_ms=exposed, optimizer_ms=optimizer, memory=memory,
                 model_flops=model_flops, executed_flops=executed, job=job,
                 pipeline_parts=critical_rank_parts(times, rank_layers, m, pipeline_ms, [transfers_ms] * pp))


def _works(job: Job, config: ParallelConfig):
    return layer_work(job.model, job.cluster, config.microbatch_size, job.seq_len, job.options.flash_attention,
                      config.precision, kernel_split(config), job.options.attention_kernel)


def _layer_params(job: Job) -> list[LayerParams]:
    return [work.params for work in layer_work(job.model, job.cluster, 1, job.seq_len)]


def backward_workspace_bytes(job: Job, config: ParallelConfig, layers: list[int], modes: list[str]) -> float:
    """What a GPU allocates during the backward of one layer among ``layers`` beside what the layers kept, the
    largest of: a recomputed layer's whole activations again, beside what it kept (per-op selective checkpointing's
    outputs; with Megatron's recompute modules only what they re-run), and the loss's gradient buffers in the head
    (``planner.cost.vocab.loss_backward_bytes``)."""
    shards = config.tp * config.cp
    needs = []
    works = None
    for index in layers:
        layer = job.model.layers[index]
        if layer.kind == "head":
            logits = config.microbatch_size * job.seq_len * job.model.vocab_size
            needs.append(logits * loss_backward_bytes(job.options.cross_entropy, config.tp) / shards)
        elif reruns_forward(layer, modes[index], job.options):
            works = works or _works(job, config)
            work, options = works[index], job.options
            if modes[index] == "selective" and options.selective == "attention":   # the re-run modules' outputs
                needs.append(work.modules_freed_bytes(config.precision, job.cluster, options) / shards)
                continue
            kept = work.per_op_kept_bytes if modes[index] == "selective" else 0.0
            needs.append((work.held_bytes(config.precision, job.cluster, options) - kept) / shards)
    return max(needs, default=0.0)


def _rank_memory(job: Job, config: ParallelConfig, rank: int, params: list[LayerParams], in_flight: float,
                 layers: list[int], modes: list[str]) -> GpuMemory:
    workspace = backward_workspace_bytes(job, config, layers, modes)
    return gpu_memory(pipeline_rank=rank, params=params, activation_peak=in_flight, backward_workspace=workspace,
                      spec=job.model, config=config, seq_len=job.seq_len, capacity=job.cluster.device.memory_bytes,
                      gradient_bytes=job.options.grad_reduce_bytes)


# ---- a simulated plan ---------------------------------------------------------------------------------

def score_plan(job: Job, config: ParallelConfig, plan: Plan, schedule: str, chunks: int) -> Score:
    """Simulate ``plan`` (its devices are the pipeline ranks) inside the job and account every GPU's memory."""
    from planner.simulator import simulate

    mapping = RankMapping(config, job.cluster)
    modes, times, profile = _plan_layer_times(job, config, plan, mapping)
    simulation = simulate(plan, profile, mapping.pipeline_cluster())
    rank_layers = [[index for stage in plan.stages_on(rank) for index in plan.stages[stage].layers]
                   for rank in range(config.pp)]
    peaks = activation_peaks(plan, stage_activation_bytes(plan, [time.activation_bytes for time in times]))
    params = rank_params(job.model, _layer_params(job), rank_layers)
    memory = [_rank_memory(job, config, rank, params[rank], peaks[rank], rank_layers[rank], modes)
              for rank in range(config.pp)]
    exposed, optimizer = step_end_ms(job, config, mapping, params, times, rank_layers)
    model_flops, executed = step_flops(job, config, times)
    # a rank's transfers: the idle time that would vanish were they free, and the posting of its messages
    transfers = [stats.time.exposed_comm_ms + stats.time.message_ms for stats in simulation.per_device]
    return Score(config=config, schedule=schedule, chunks=chunks, pipeline_ms=simulation.iteration_ms,
                 data_parallel_ms=exposed, optimizer_ms=optimizer, memory=memory, model_flops=model_flops,
                 executed_flops=executed, job=job, plan=plan, estimated=False,
                 extra={"bubble_ratio": simulation.bubble_ratio},
                 pipeline_parts=critical_rank_parts(times, rank_layers, config.num_microbatches,
                                                    simulation.iteration_ms, transfers))


def _plan_layer_times(job: Job, config: ParallelConfig, plan: Plan, mapping: RankMapping):
    stage_layers = [stage.layers for stage in plan.stages]
    modes = recompute_per_layer(config, stage_layers, job.model.num_layers)
    times = layer_times(job.model, job.cluster, config, mapping, job.seq_len, modes, job.options)
    return modes, times, pipeline_profile(job, times, _layer_params(job), config)


def plan_pipeline(job: Job, config: ParallelConfig, plan: Plan) -> tuple[Profile, ClusterSpec]:
    """The profile (one TP x CP group's share of every layer, with the plan's recomputation) and the pipeline
    ranks' cluster that ``score_plan`` simulates ``plan`` on: what a timeline of a v2 plan is drawn from."""
    mapping = RankMapping(config, job.cluster)
    return _plan_layer_times(job, config, plan, mapping)[2], mapping.pipeline_cluster()


def pipeline_memory_budget(job: Job, config: ParallelConfig, profile: Profile) -> tuple[Profile, list[float], float]:
    """What a pure-PP search inside the job charges against one GPU, so that its plans fit the job's accounting
    (``planner.parallel.memory``): the profile with the allocator's overhead on each layer's activations, each
    layer's model state under the job's sharding, and the memory limit left by what no partition changes
    (communication buffers, the CUDA context, the backward's workspace; any rank may hold any layer).
    ``config`` has one recomputation mode for every stage: a per-stage one belongs to a fixed partition."""
    modes = [config.recompute] * job.model.num_layers
    fixed = (gpu_buffer_bytes(job.model, config, job.seq_len, _layer_params(job)) + overhead_bytes(0.0)
             + backward_workspace_bytes(job, config, list(range(job.model.num_layers)), modes))
    with_overhead = replace(profile, layers=tuple(
        replace(layer, activation_bytes=round(layer.activation_bytes * (1 + ALLOCATOR_OVERHEAD)))
        for layer in profile.layers))
    return (with_overhead, layer_state_bytes(_layer_params(job), config, job.options.grad_reduce_bytes),
            job.cluster.device.memory_bytes - fixed)


def shard_profile(job: Job, config: ParallelConfig, chunks: int = 1) -> tuple[Profile, ClusterSpec]:
    """The profile and pipeline cluster a pure-PP planner (baseline or AdaPtis search) plans on; a per-stage
    recomputation applies to the stages of Megatron's uniform partition into ``pp x chunks`` stages."""
    mapping = RankMapping(config, job.cluster)
    if isinstance(config.recompute, str):
        modes = [config.recompute] * job.model.num_layers
    else:
        modes = recompute_per_layer(config, uniform_stages(job.model, config.pp * chunks), job.model.num_layers)
    times = layer_times(job.model, job.cluster, config, mapping, job.seq_len, modes, job.options)
    return pipeline_profile(job, times, _layer_params(job), config), mapping.pipeline_cluster()
