"""One rank of a run: ``python -m executor.running.worker JOB_FILE`` with RANK / WORLD_SIZE / LOCAL_RANK /
MASTER_ADDR / MASTER_PORT in the environment (set by ``executor.running.launch`` or by torchrun).

The rank lowers the whole plan itself (lowering is deterministic, so every rank agrees without talking),
builds the layers of its stages, aligns its clock with rank 0, runs the steps, and sends its events and loss
to rank 0, which writes the run's result and the ``run_finished`` event.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from executor.running.capacity import check_capacity
from executor.running.place import EXPERT_MESH_DIMENSIONS, MESH_DIMENSIONS, RankPlace
from executor.running.scope import execution_refusal, planned_spec, world_size as plan_world_size
from executor.running.config import RunConfig
from executor.running.events import EventEmitter, open_sink
from executor.running.cores import bind_local_rank
from executor.running.processes import die_with_launcher, exit_rank
from executor.running.lowering import LoweredPlan, lower_plan
from executor.model.build import build_layers, resolve_dtype, tie_tables
from executor.model.linear import enable_weight_grad_deferral
from executor.model.expert_parallel import ExpertParallel, fold_experts, shard_experts
from executor.model.context_parallel import SequenceLayout
from executor.model.tensor_parallel import SequenceGroup, full_state_dict, shard_layer
from executor.running.runtime import RankRuntime
from executor.running.sharding import ShardedParameters, shard_stages, sharded_units
from executor.running.stage import StageRunner
from planner.observed import summarize
from planner.parallel.cost import executor_options
from executor.running.timing import aligned_clock
from planner.plan import Plan, load_plan
from planner.spec.model import ModelSpec, load_model_spec

RESULT_FILE = "result.json"


def error_file(job_dir: Path, rank: int) -> Path:
    return job_dir / f"rank{rank}.error.json"


def done_file(job_dir: Path, rank: int) -> Path:
    """Written once the rank's work is over (rank 0: the result written); only teardown is left."""
    return job_dir / f"rank{rank}.done"


def run_dtype(config: RunConfig, spec: ModelSpec, device: torch.device) -> torch.dtype:
    # bf16 matmuls on a CPU are slow and gain nothing there: CPU runs default to float32.
    if config.dtype is not None:
        return resolve_dtype(config.dtype)
    return resolve_dtype(spec.dtype) if device.type == "cuda" else torch.float32


def _select_device(backend: str, local_rank: int) -> torch.device:
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


def build_runners(plan: Plan, spec: ModelSpec, pp_rank: int, seed: int, device, dtype, split_backward: bool,
                  layout: SequenceLayout | None = None, data_parallel: int = 1,
                  expert_parallel: ExpertParallel | None = None) -> dict[int, StageRunner]:
    """The stages of pipeline rank ``pp_rank``, their layers split for the layout's TP group, placed at its tokens'
    positions, and their experts spread for ``expert_parallel``, when given; each of the ``data_parallel``
    replicas' micro-batches weighs 1 / (micro-batches x replicas) in the step's loss."""
    my_stages = plan.stages_on(pp_rank)
    layer_indices = [layer for stage in my_stages for layer in plan.stages[stage].layers]
    # One call for all of this rank's layers: a tied head beside its embedding shares the table.
    modules = build_layers(spec, layer_indices, seed=seed, device=device, dtype=dtype)
    for module in modules.values():
        if expert_parallel is not None and expert_parallel.folded:
            fold_experts(module)
        if layout is not None and layout.tp is not None:
            shard_layer(module, layout.tp)
        if layout is not None:
            layout.place(module)
        if expert_parallel is not None:
            shard_experts(module, expert_parallel)
    tie_tables(modules)
    last = plan.num_stages - 1
    recompute_modules = executor_options(plan.meta).recompute_modules
    return {stage: StageRunner(stage, [modules[i] for i in plan.stages[stage].layers], is_first=stage == 0,
                               is_last=stage == last, loss_scale=1.0 / (plan.num_microbatches * data_parallel),
                               split_backward=split_backward, layout=layout,
                               recompute=plan.parallel_config().recompute_of(stage),
                               recompute_modules=recompute_modules)
            for stage in my_stages}


def open_channels(lowered: LoweredPlan, place: RankPlace, device: torch.device) -> dict:
    """A process group of its own for every (sender, receiver) channel of the plan, connected up front.

    NCCL runs a group's point-to-point operations between two ranks on one stream, both directions in it,
    and a receive holds that stream until its data arrives: one group per pair would let a receive posted
    ahead hold back this rank's send to the same peer, which the peer may need before it can send what the
    receive waits for. With a group per direction a stream carries one channel's messages in channel order,
    which the receiver posts in the same order, so the ranks block only where ``prove_deadlock_free``'s
    model says (a compute waiting for its input). A probe message on every channel, in the same order on
    every rank, sets the communicators up (NCCL creates one at its first use) before the steps, so two
    ranks never wait for each other's first use of different channels. Every replica of a hybrid run has
    channels of its own. Every rank must take part. Keyed by pipeline ranks: this rank's replica's channels.
    """
    groups = {}
    own = place.own_replica()
    for src, dst in lowered.channels():
        for replica in place.replicas():
            sender, receiver = place.rank_in(replica, src), place.rank_in(replica, dst)
            group = dist.new_group(sorted((sender, receiver)))
            if replica != own:
                continue
            groups[(src, dst)] = group
            if place.rank in (sender, receiver):
                probe = torch.zeros(1, device=device)
                if place.rank == sender:
                    dist.send(probe, receiver, group=group)
                else:
                    dist.recv(probe, sender, group=group)
    return groups


def _tied_gradient_sync(plan: Plan, spec: ModelSpec, place: RankPlace, runners: dict[int, StageRunner]):
    """All-reduce the embedding table's gradient between the embedding's and the head's pipeline ranks, if apart
    (in every replica).

    Every rank must take part in creating the groups, so this runs on all of them.
    """
    if not (spec.tie_embeddings and spec.layers[0].kind == "embedding" and spec.layers[-1].kind == "head"):
        return None
    embedding_rank, head_rank = plan.stage_device(0), plan.stage_device(plan.num_stages - 1)
    if embedding_rank == head_rank:
        return None
    group = None
    for replica in place.replicas():
        created = dist.new_group(sorted((place.rank_in(replica, embedding_rank), place.rank_in(replica, head_rank))))
        group = created if replica == place.own_replica() else group
    if place.pp not in (embedding_rank, head_rank):
        return None
    stage = 0 if place.pp == embedding_rank else plan.num_stages - 1
    runner = runners[stage]
    table = runner.layers[0].weight if stage == 0 else runner.layers[-1].weight

    def sync() -> None:
        if table.grad is None:
            table.grad = torch.zeros_like(table)
        dist.all_reduce(table.grad, group=group)
    return sync


def _optimizers(config: RunConfig, runners: dict[int, StageRunner], sharded: bool, groups: dict,
                shard_units: list[ShardedParameters]) -> list:
    """The run's optimizers over this rank's parameters, each with the name of its step's event. ``sharded``:
    torch's ``ZeroRedundancyOptimizer`` keeps each parameter's optimizer state on one rank of the group that holds
    it, which updates it and broadcasts the result (ZeRO-1, Rajbhandari et al. 2020; Megatron's distributed
    optimizer): the data-parallel group, and for experts spread over EP the expert-data-parallel group
    (Megatron-Core shards expert state over it too). ``shard_units`` (full sharding, ``executor.running.sharding``):
    the optimizer steps on each group's flat shards, and on the whole of what no unit shards."""
    params = list({id(p): p for runner in runners.values() for module in runner.layers
                   for p in module.parameters()}.values())
    optimizer_class = torch.optim.AdamW if config.optimizer == "adamw" else torch.optim.SGD
    if shard_units:
        in_units = {id(p) for unit in shard_units for p in unit.parameters}
        optimizers = []
        for name in ("dp", "edp"):
            shards = [unit.shard for unit in shard_units if unit.name == name]
            if shards:
                optimizers.append((f"{name}_optimizer_step", optimizer_class(shards, lr=config.lr)))
        whole = [p for p in params if id(p) not in in_units]
        if whole:
            optimizers.append(("optimizer_step", optimizer_class(whole, lr=config.lr)))
        return optimizers
    experts = [p for p in params if getattr(p, "expert_parallel", False)]
    dense = [p for p in params if not getattr(p, "expert_parallel", False)]
    optimizers = []
    for part, name in ((dense, "dp"), (experts, "edp")):
        if not part:
            continue
        group = groups.get(name)
        if sharded and group is not None and dist.get_world_size(group) > 1:
            from torch.distributed.optim import ZeroRedundancyOptimizer

            optimizers.append((f"{name}_optimizer_step", ZeroRedundancyOptimizer(
                part, optimizer_class=optimizer_class, process_group=group, lr=config.lr)))
        else:
            optimizers.append(("optimizer_step", optimizer_class(part, lr=config.lr)))
    return optimizers


def _save_layers(directory: str, plan: Plan, place: RankPlace, runners: dict[int, StageRunner],
                 tensor_parallel: SequenceGroup | None, expert_parallel: ExpertParallel | None) -> None:
    """Each layer's whole state, as one process holds it (every rank of a TP group gathers its shards, every rank
    of an EP group its experts)."""
    os.makedirs(directory, exist_ok=True)
    for stage, runner in runners.items():
        for layer_index, module in zip(plan.stages[stage].layers, runner.layers):
            state = full_state_dict(module, tensor_parallel, expert_parallel)
            if place.writes_checkpoint():
                # On the CPU: a checkpoint loads on any host, with or without the run's GPUs.
                torch.save({name: value.cpu() for name, value in state.items()},
                           os.path.join(directory, f"layer{layer_index:04d}.pt"))


def run_rank(job: dict, *, rank: int, world_size: int, local_rank: int, job_dir: Path | None) -> dict | None:
    """Run this rank's part of the job; rank 0 returns the run's result (events, summary, losses)."""
    plan = load_plan(job["plan"])
    spec = planned_spec(plan, load_model_spec(job["spec"]))
    config = RunConfig(**job["config"])
    if world_size != plan_world_size(plan):
        raise RuntimeError(f"the plan needs {plan_world_size(plan)} ranks, but WORLD_SIZE is {world_size}")
    refusal = execution_refusal(plan, spec)   # (under torchrun, no launcher checked it first)
    if refusal is not None:
        raise refusal
    place = RankPlace.of(plan, rank)
    device = _select_device(config.backend, local_rank)
    dtype = run_dtype(config, spec, device)
    check_capacity(plan, spec, device=device, dtype=dtype, optimizer=config.optimizer, ranks=[place.pp])
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    threads = config.rank_threads(local_world_size)
    torch.set_num_threads(threads)
    cores = None
    if device.type == "cpu" and config.bind_cores:
        cores = bind_local_rank(local_rank, local_world_size, threads)
    lowered = lower_plan(plan, spec.num_layers, lookahead=config.lookahead)
    program = lowered.program(place.pp)
    # Only a rank that splits backwards into I and W pays for deferrable projections (executor.model.linear)
    # and for a separate embedding prologue (executor.running.stage).
    split_backward = any(op.action is not None and op.action.type.is_split_backward for op in program)
    enable_weight_grad_deferral(split_backward)
    dist.init_process_group(config.backend, rank=rank, world_size=world_size, timeout=timedelta(seconds=600),
                            **({"device_id": device} if device.type == "cuda" else {}))
    try:
        control = dist.new_group(backend="gloo") if config.backend != "gloo" else dist.group.WORLD
        axes = _rank_axes(place, spec, device)
        channel_groups = open_channels(lowered, place, device)
        runners = build_runners(plan, spec, place.pp, config.seed, device, dtype, split_backward,
                                layout=axes.layout, data_parallel=place.config.dp,
                                expert_parallel=axes.expert_parallel)
        tied_sync = _tied_gradient_sync(plan, spec, place, runners)
        sharded = plan.parallel is not None and plan.parallel.distributed_optimizer
        full = plan.parallel is not None and plan.parallel.sharding == "full" and place.config.dp * place.config.cp > 1
        shards = shard_stages(runners, axes.groups, place.config.expert_dp) if full else {}
        shard_units = sharded_units(shards)
        emitter = EventEmitter(open_sink(config.event_sink, config.event_token_file) if config.event_sink else None)
        clock, started_at = aligned_clock(rank, world_size, control, device)
        facts = _cluster_facts(world_size, control, device)
        if rank == 0:
            emitter.emit({"type": "run_started", "world_size": world_size, "backend": config.backend,
                          "steps": config.steps, "num_microbatches": plan.num_microbatches,
                          "strategy": plan.strategy, "model": spec.name, "started_at": started_at,
                          "facts": facts})
        runtime = RankRuntime(place=place, plan=plan, spec=spec, program=program, runners=runners,
                              optimizers=_optimizers(config, runners, sharded and not full, axes.groups,
                                                     shard_units), device=device,
                              dtype=dtype,
                              seed=config.seed, clock=clock, emitter=emitter, tied_sync=tied_sync,
                              messages_per_channel=lowered.max_channel_length(),
                              step_barrier_group=control if config.step_barriers else None,
                              channel_groups=channel_groups, layout=axes.layout,
                              expert_parallel=axes.expert_parallel, groups=axes.groups, sharded=shards)
        losses = [runtime.run_step(step) for step in range(config.steps)]
        emitter.close()
        if config.checkpoint_dir:
            for unit in shard_units:
                unit.gather(record=False)   # the updated shards, made whole to be saved
            _save_layers(config.checkpoint_dir, plan, place, runners, axes.tensor_parallel, axes.expert_parallel)
        gathered = [None] * world_size if rank == 0 else None
        own_actions = [event for event in emitter.events if event["type"] in ("action", "collective")]
        dist.gather_object({"events": own_actions, "undelivered": emitter.undelivered,
                            "losses": losses, "balancing_losses": runtime.balancing_losses,
                            "step_wall_ms": runtime.step_wall_ms,
                            "threads": threads,
                            "cores": None if cores is None else sorted(os.sched_getaffinity(0))},
                           gathered, dst=0, group=control)
        result = _finish(config, plan, gathered, job_dir) if rank == 0 else None
        if job_dir is not None:
            done_file(job_dir, rank).touch()
        dist.barrier(group=control)
        return result
    finally:
        dist.destroy_process_group()


@dataclass
class RankAxes:
    """This rank's groups besides the pipeline, and the places the model's layers need them."""

    groups: dict                                  # "tp", "cp", "dp" (dp x cp with CP), "ep", "edp", "tpcp": groups
    layout: SequenceLayout | None = None          # TP and CP: which tokens the rank holds
    expert_parallel: ExpertParallel | None = None

    @property
    def tensor_parallel(self) -> SequenceGroup | None:
        return self.layout.tp if self.layout is not None else None


def _rank_axes(place: RankPlace, spec: ModelSpec, device: torch.device) -> RankAxes:
    groups = _parallel_groups(place, device)
    tensor_parallel = (SequenceGroup(groups["tp"], place.coordinate["tp"], place.config.tp)
                       if place.config.tp > 1 else None)
    context_parallel = (SequenceGroup(groups["cp"], place.coordinate["cp"], place.config.cp, name="cp")
                        if place.config.cp > 1 else None)
    tp_cp = (SequenceGroup(groups["tpcp"], place.rank % (place.config.tp * place.config.cp),
                           place.config.tp * place.config.cp, name="tpcp") if "tpcp" in groups else None)
    layout = (SequenceLayout(spec.seq_len, tensor_parallel, context_parallel, tp_cp)
              if tensor_parallel is not None or context_parallel is not None else None)
    folded = place.config.etp < place.config.tp   # MoE parallel folding (executor.model.expert_parallel)
    expert_parallel = (ExpertParallel(groups["ep"], place.coordinate["ep"], place.config.ep, folded=folded)
                       if place.config.ep > 1 else None)
    return RankAxes(groups, layout, expert_parallel)


def _parallel_groups(place: RankPlace, device: torch.device) -> dict:
    """This rank's TP, CP and DP groups, from torch's ``DeviceMesh`` over every rank, and with EP its EP and
    expert-DP groups from a second mesh over the same ranks (none for a pipeline alone)."""
    if not place.hybrid:
        return {}
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

    mesh = init_device_mesh(device.type, place.mesh_shape, mesh_dim_names=MESH_DIMENSIONS)
    groups = {dimension: mesh.get_group(dimension) for dimension in MESH_DIMENSIONS}
    if place.config.cp > 1:
        # gradients and the sharded optimizer span the data-parallel and context-parallel ranks together
        ranks = torch.arange(place.config.num_gpus).view(place.config.pp, -1, place.config.tp)
        groups["dp"] = DeviceMesh(device.type, ranks, mesh_dim_names=("pp", "dpcp", "tp")).get_group("dpcp")
    if place.config.etp < place.config.tp and place.config.cp > 1:
        # a folded MoE's balancing loss counts the routings of the TP x CP group's tokens
        ranks = torch.arange(place.config.num_gpus).view(place.config.pp, place.config.dp, -1)
        groups["tpcp"] = DeviceMesh(device.type, ranks, mesh_dim_names=("pp", "dp", "tpcp")).get_group("tpcp")
    if place.config.ep > 1:
        ranks = torch.arange(place.config.num_gpus).view(place.expert_mesh_shape)
        experts = DeviceMesh(device.type, ranks, mesh_dim_names=EXPERT_MESH_DIMENSIONS)
        groups.update({dimension: experts.get_group(dimension) for dimension in ("ep", "edp")})
    return groups


def _cluster_facts(world_size: int, group, device: torch.device) -> dict:
    """What ran the run, as rank 0 reports it: each rank's host and device, torch's version and NCCL's (on CUDA)."""
    own = {"host": socket.gethostname(),
           "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"}
    ranks = [None] * world_size
    dist.all_gather_object(ranks, own, group=group)
    facts = {"hosts": [rank["host"] for rank in ranks], "devices": [rank["device"] for rank in ranks],
             "torch": torch.__version__}
    if device.type == "cuda":
        facts["nccl"] = ".".join(str(part) for part in torch.cuda.nccl.version())
    return facts


def _finish(config: RunConfig, plan: Plan, gathered: list[dict], job_dir: Path | None) -> dict:
    events = sorted((e for part in gathered for e in part["events"]), key=lambda e: (e["start_ms"], e["rank"]))
    # the last stage's ranks hold the loss: in a hybrid run each TP rank its tokens', each DP replica its batch's
    step_losses = []
    for step in range(config.steps):
        parts = [part["losses"][step] for part in gathered if part["losses"][step] is not None]
        step_losses.append(sum(parts) if parts else None)
    # every rank's MoE layers add their own part of a step's balancing loss
    balancing = [[part["balancing_losses"][step] for part in gathered if part["balancing_losses"][step] is not None]
                 for step in range(config.steps)]
    balancing_losses = [sum(parts) if parts else None for parts in balancing]
    summary = summarize(events, plan.num_devices)
    summary["threads_per_rank"] = [part["threads"] for part in gathered]
    summary["cores_per_rank"] = [part["cores"] for part in gathered]   # None: left to the OS scheduler
    # Events the sink never took during an outage: the result below still carries every one of them.
    summary["events_undelivered"] = sum(part["undelivered"] for part in gathered)
    finished = {"type": "run_finished", "summary": summary, "loss": step_losses[-1], "losses": step_losses,
                "balancing_losses": balancing_losses}
    if config.event_sink:
        emitter = EventEmitter(open_sink(config.event_sink, config.event_token_file))
        emitter.emit(finished)
        emitter.close()  # retried through an outage like every event; the result file is the copy that counts
    result = {"events": events, "summary": summary, "loss": step_losses[-1], "losses": step_losses,
              "balancing_losses": balancing_losses, "step_wall_ms": gathered[0]["step_wall_ms"]}
    if job_dir is not None:
        (job_dir / RESULT_FILE).write_text(json.dumps(result))
    return result


def report_failure(job: dict, rank: int, job_dir: Path | None) -> None:
    text = traceback.format_exc()
    error = f"{sys.exc_info()[0].__name__}: {sys.exc_info()[1]}"
    if job_dir is not None:
        error_file(job_dir, rank).write_text(json.dumps({"rank": rank, "error": error, "traceback": text,
                                                                 "time": time.time()}))
    config = job.get("config", {})
    if config.get("report_failures", True) and config.get("event_sink"):
        try:
            sink = open_sink(config["event_sink"], config.get("event_token_file"))
            sink.write([{"type": "run_failed", "rank": rank, "error": error}])
            sink.close()
        except Exception:  # noqa: BLE001 - the traceback above is the error that matters
            pass
    sys.stderr.write(text)


def main(argv: list[str]) -> int:
    die_with_launcher()
    job_path = Path(argv[0])
    job = json.loads(job_path.read_text())
    rank = int(os.environ["RANK"])
    try:
        run_rank(job, rank=rank, world_size=int(os.environ["WORLD_SIZE"]),
                 local_rank=int(os.environ.get("LOCAL_RANK", rank)), job_dir=job_path.parent)
    except BaseException:  # noqa: BLE001 - every failure is reported, then the process exits non-zero
        report_failure(job, rank, job_path.parent)
        return 1
    return 0


if __name__ == "__main__":
    exit_rank(main(sys.argv[1:]))
