"""The interpreter: runs one rank's lowered program for every training step.

Per step: draw the synthetic batch, walk the program (issuing runs of consecutive POST_RECV / SEND ops as
one ``batch_isend_irecv`` group per channel, each channel in its own process group
(``executor.running.worker.open_channels``), waiting on receives just before the compute that needs them, timing every
compute), drain the sends, then sum the gradients where they are partial: the parameters a TP group holds whole
(``executor.model.tensor_parallel``), a tied embedding's table across the pipeline, every gradient over the
data-parallel replicas (fully sharded: each layer gathered around its forward and its backward, reduce-scattered into
the shards, ``executor.running.sharding``); step the optimizer. Every collective is an event of its own, with the rank's
coordinate.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from executor.running.data import synthetic_batch
from executor.running.events import EventEmitter
from executor.running.lowering import Op
from executor.running.place import RankPlace
from executor.running.sharding import ShardedParameters, sharded_units, stage_units
from executor.model.mlp import take_balancing_loss
from executor.model.expert_parallel import ExpertParallel, expert_parameters
from executor.model.groups import ParallelGroup
from executor.model.context_parallel import SequenceLayout
from executor.model.tensor_parallel import replicated_parameters
from executor.running.stage import StageRunner
from planner.actions import ACTIVATION, GRADIENT, ActionKind
from planner.plan import Action, Plan
from planner.spec.model import ModelSpec

COMM_OPS = ("POST_RECV", "SEND")


def zero_unreached_gradients(parameters) -> None:
    """Give a zero gradient to each parameter the step's backward did not reach (an expert no token chose), as
    Megatron-LM's gradient buffers hold one for every parameter: AdamW then still decays it and moves it by its
    momentum, however the run is split. (torch's optimizers skip a parameter whose gradient is None, so without this a
    run would step an unreached expert where a reduction made its gradient zero, and skip it where none did.)"""
    for parameter in parameters:
        if parameter.grad is None:
            parameter.grad = torch.zeros_like(parameter)


@dataclass
class StepState:
    local: dict = field(default_factory=dict)      # (kind, consuming stage, mb) -> tensor handed over locally
    outbox: dict = field(default_factory=dict)     # (kind, consuming stage, mb) -> tensor awaiting its SEND
    receives: dict = field(default_factory=dict)   # message -> (work, buffer)
    sends: list = field(default_factory=list)      # (work, tensor): kept alive until the send completes
    loss: torch.Tensor | None = None


class RankRuntime:
    def __init__(self, *, place: RankPlace, plan: Plan, spec: ModelSpec, program: list[Op],
                 runners: dict[int, StageRunner], optimizers: list[tuple[str, torch.optim.Optimizer]],
                 device: torch.device,
                 dtype: torch.dtype, seed: int, clock, emitter: EventEmitter, tied_sync=None,
                 messages_per_channel: int = 1, step_barrier_group=None, channel_groups: dict | None = None,
                 layout: SequenceLayout | None = None, expert_parallel: ExpertParallel | None = None,
                 groups: dict | None = None, sharded: dict[int, list[list[ShardedParameters]]] | None = None):
        # ``rank``: the pipeline rank, whose program this is (the plan's device); ``place.rank`` the global one
        self.place, self.rank, self.plan, self.spec, self.program = place, place.pp, plan, spec, program
        self.coordinate = place.coordinate
        self.runners, self.optimizers = runners, optimizers
        self.device, self.dtype, self.seed = device, dtype, seed
        self.clock, self.emitter = clock, emitter
        self.tied_sync = tied_sync
        self.tag_stride = max(1, messages_per_channel)
        groups = groups or {}
        tensor_parallel, context_parallel = (layout.tp, layout.cp) if layout is not None else (None, None)
        # (op, group, parameters): the gradient sums after the pipeline's last action, in this order on every rank
        self.reductions = []
        self.step, self.collectives_in_step = 0, 0
        token_group = layout.tp_cp if layout is not None else None   # a folded MoE's balancing loss counts over it
        for parallel in (tensor_parallel, context_parallel, token_group, expert_parallel):
            if parallel is not None:
                parallel.clock, parallel.record = clock, self._record_collective
        # the step's end: gradient sums and optimizer steps, recorded in a hybrid run only (a pipeline-only run's
        # events stay its actions, as the ingest of cluster runs takes them)
        self.timer = ParallelGroup(None, 0, 1, "step", clock, self._record_collective if place.hybrid else None)
        layers = [layer for runner in runners.values() for layer in runner.layers]
        if tensor_parallel is not None:
            self.reductions.append(("tp_grad_all_reduce", tensor_parallel.group, replicated_parameters(layers)))
        parameters = list({id(p): p for layer in layers for p in layer.parameters()}.values())
        experts = expert_parameters(layers)
        # fully sharded (``executor.running.sharding``): each layer gathered around its forward and its backward
        # (``StageRunner.layer_units``), the gradients reduce-scattered into the shards instead of all-reduced
        self.sharded = sharded or {}
        self.shard_units = sharded_units(self.sharded)
        for unit in self.shard_units:
            unit.timer = self.timer
        for stage, layer_units in self.sharded.items():
            runners[stage].layer_units = layer_units
        self.stage_units = {stage: stage_units(layer_units) for stage, layer_units in self.sharded.items()}
        if place.config.dp * place.config.cp > 1 and not self.sharded:   # (the "dp" group spans dp x cp ranks)
            self.reductions.append(("dp_all_reduce", groups["dp"], [p for p in parameters if id(p) not in experts]))
        if experts and place.config.expert_dp > 1 and not self.sharded:
            self.reductions.append(("edp_all_reduce", groups["edp"], [p for p in parameters if id(p) in experts]))
        shards = 1 if layout is None else layout.shards
        self.boundary_shape = (spec.micro_batch_size, spec.seq_len // shards, spec.hidden_size)
        self.step_barrier_group = step_barrier_group
        # (sender, receiver) -> the process group its messages travel in (``executor.running.worker.open_channels``);
        # a channel without one uses the default group
        self.channel_groups = channel_groups or {}
        self.step_wall_ms: list[float] = []
        self.moe = [block for runner in runners.values() for block in runner.moe]
        # per step, the MoE balancing loss this rank's layers added (None: they have none)
        self.balancing_losses: list[float | None] = []

    # -- communication -------------------------------------------------------------------------------
    def _tag(self, message, step: int) -> int:
        return step * self.tag_stride + message.sequence

    def _issue(self, ops: list[Op], state: StepState, step: int) -> None:
        """Post the receives and start the sends of ``ops``: one ``batch_isend_irecv`` per channel's group."""
        p2p: dict = defaultdict(list)
        kept: dict = defaultdict(list)
        for op in ops:
            message = op.message
            channel = (message.src, message.dst)
            group = self.channel_groups.get(channel)
            if op.type == "POST_RECV":
                buffer = torch.empty(self.boundary_shape, dtype=self.dtype, device=self.device)
                p2p[channel].append(dist.P2POp(dist.irecv, buffer, self.place.peer(message.src), group,
                                               tag=self._tag(message, step)))
                kept[channel].append(("recv", message, buffer))
            else:
                tensor = state.outbox.pop((message.kind, message.stage, message.microbatch)).contiguous()
                p2p[channel].append(dist.P2POp(dist.isend, tensor, self.place.peer(message.dst), group,
                                               tag=self._tag(message, step)))
                kept[channel].append(("send", message, tensor))
        for channel, channel_ops in p2p.items():
            for work, (direction, message, tensor) in zip(dist.batch_isend_irecv(channel_ops), kept[channel]):
                if direction == "recv":
                    state.receives[message] = (work, tensor)
                else:
                    state.sends.append((work, tensor))

    def _route(self, kind: str, consumer: int, microbatch: int, tensor: torch.Tensor, state: StepState) -> None:
        key = (kind, consumer, microbatch)
        if self.plan.stage_device(consumer) == self.rank:
            state.local[key] = tensor
        else:
            state.outbox[key] = tensor

    # -- compute -------------------------------------------------------------------------------------
    def _compute(self, action: Action, batch, state: StepState) -> None:
        try:
            self._run_action(action, batch, state)
        finally:   # what a backward left whole (a layer whose input needs no gradient frees its units here)
            for unit in self.stage_units.get(action.stage, ()):
                unit.release()

    def _run_action(self, action: Action, batch, state: StepState) -> None:
        runner = self.runners[action.stage]
        stage, microbatch = action.stage, action.microbatch
        if action.type is ActionKind.W:
            runner.backward_weight(microbatch)
            return
        if action.type is ActionKind.F:
            inputs, targets = batch.microbatch(self.coordinate["dp"] * self.plan.num_microbatches + microbatch)
            stage_input = inputs if stage == 0 else state.local.pop((ACTIVATION, stage, microbatch))
            output = runner.forward(microbatch, stage_input, targets)
            if runner.is_last:
                loss = output.detach() * runner.report_share
                state.loss = loss if state.loss is None else state.loss + loss
                return
            produced = output.detach()
        else:
            grad_output = None if runner.is_last else state.local.pop((GRADIENT, stage, microbatch))
            backward = runner.backward if action.type is ActionKind.B else runner.backward_input
            produced = backward(microbatch, grad_output)
        consumer = self.plan.output_stage(action)
        if consumer is not None:
            self._route(action.type.boundary, consumer, microbatch, produced, state)

    def _emit(self, action: Action, step: int, start, end) -> None:
        clock, rank, device, coordinate = self.clock, self.place.rank, self.rank, self.coordinate
        self.emitter.emit(lambda: {
            "type": "action", "rank": rank, "device": device, "coordinate": coordinate, "action": str(action),
            "stage": action.stage, "kind": action.type, "microbatch": action.microbatch, "step": step,
            "start_ms": clock.to_ms(start), "end_ms": clock.to_ms(end)})

    def _record_collective(self, op: str, start, end, size: int) -> None:
        """A collective as an event: ``op`` names its group first (``tp_all_gather``, ``dp_all_reduce``, ...);
        ``index`` numbers the rank's collectives in the step (with rank and step, the event's identity)."""
        clock, rank, device, coordinate, step = self.clock, self.place.rank, self.rank, self.coordinate, self.step
        index = self.collectives_in_step
        self.collectives_in_step += 1
        self.emitter.emit(lambda: {
            "type": "collective", "op": op, "group": op.split("_", 1)[0], "rank": rank, "device": device,
            "coordinate": coordinate, "step": step, "index": index, "bytes": size,
            "start_ms": clock.to_ms(start), "end_ms": clock.to_ms(end)})

    def _all_reduce_gradients(self, op: str, parameters: list, group) -> None:
        """Sum the gradients of ``parameters`` over ``group`` in one flat buffer (DDP's bucket, as one)."""
        if not parameters:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in parameters]
        flat = torch._utils._flatten_dense_tensors(grads)
        self.timer.timed(op, lambda: dist.all_reduce(flat, group=group), flat)
        for parameter, reduced in zip(parameters, torch._utils._unflatten_dense_tensors(flat, grads)):
            parameter.grad = reduced

    # -- steps ---------------------------------------------------------------------------------------
    def run_step(self, step: int) -> float | None:
        """One training step; with step barriers, its wall time (barrier to barrier) joins ``step_wall_ms``."""
        if self.step_barrier_group is None:
            return self._step(step)
        dist.barrier(group=self.step_barrier_group)
        began = time.perf_counter()
        loss = self._step(step)
        dist.barrier(group=self.step_barrier_group)
        self.step_wall_ms.append((time.perf_counter() - began) * 1e3)
        return loss

    def _step(self, step: int) -> float | None:
        self.step, self.collectives_in_step = step, 0
        # each data-parallel replica trains on its own micro-batches of the step, and draws only those
        batch = synthetic_batch(self.spec, self.plan.num_microbatches, seed=self.seed, step=step, dtype=self.dtype,
                                device=self.device, first_microbatch=self.coordinate["dp"] * self.plan.num_microbatches)
        state = StepState()
        program, position = self.program, 0
        while position < len(program):
            op = program[position]
            if op.type in COMM_OPS:
                end = position
                while end < len(program) and program[end].type in COMM_OPS:
                    end += 1
                self._issue(program[position:end], state, step)
                position = end
                continue
            if op.type == "WAIT_RECV":
                work, buffer = state.receives.pop(op.message)
                work.wait()
                state.local[(op.message.kind, op.message.stage, op.message.microbatch)] = buffer
            else:
                start = self.clock.mark()
                self._compute(op.action, batch, state)
                self._emit(op.action, step, start, self.clock.mark())
            position += 1
        for work, _ in state.sends:
            work.wait()
        for runner in self.runners.values():
            runner.check_drained()
        self.balancing_losses.append(take_balancing_loss(self.moe))
        if self.tied_sync is not None:
            self.timer.timed("pp_tied_all_reduce", self.tied_sync)
        for op, group, parameters in self.reductions:
            self._all_reduce_gradients(op, parameters, group)
        for unit in self.shard_units:
            unit.reduce_gradients()
        for op, optimizer in self.optimizers:
            zero_unreached_gradients(p for group in optimizer.param_groups for p in group["params"])
            # a sharded (ZeRO-1) optimizer broadcasts the parameters it updated over its group
            self.timer.timed(op, optimizer.step)
            optimizer.zero_grad(set_to_none=True)
        return None if state.loss is None else float(state.loss.item())
