"""The interpreter: runs one rank's lowered program for every training step.

Per step: draw the synthetic batch, walk the program (issuing runs of consecutive POST_RECV / SEND ops as
one ``batch_isend_irecv`` group per channel, each channel in its own process group
(``executor.running.worker.open_channels``), waiting on receives just before the compute that needs them, timing every
compute), drain the sends, all-reduce tied-embedding gradients across ranks, step the optimizer.
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
from executor.model.mlp import take_balancing_loss
from executor.running.stage import StageRunner
from planner.actions import ACTIVATION, GRADIENT, ActionKind
from planner.plan import Action, Plan
from planner.spec.model import ModelSpec

COMM_OPS = ("POST_RECV", "SEND")


@dataclass
class StepState:
    local: dict = field(default_factory=dict)      # (kind, consuming stage, mb) -> tensor handed over locally
    outbox: dict = field(default_factory=dict)     # (kind, consuming stage, mb) -> tensor awaiting its SEND
    receives: dict = field(default_factory=dict)   # message -> (work, buffer)
    sends: list = field(default_factory=list)      # (work, tensor): kept alive until the send completes
    loss: torch.Tensor | None = None


class RankRuntime:
    def __init__(self, *, rank: int, plan: Plan, spec: ModelSpec, program: list[Op], runners: dict[int, StageRunner],
                 optimizer: torch.optim.Optimizer | None, device: torch.device, dtype: torch.dtype, seed: int,
                 clock, emitter: EventEmitter, tied_sync=None, messages_per_channel: int = 1,
                 step_barrier_group=None, channel_groups: dict | None = None):
        self.rank, self.plan, self.spec, self.program = rank, plan, spec, program
        self.runners, self.optimizer = runners, optimizer
        self.device, self.dtype, self.seed = device, dtype, seed
        self.clock, self.emitter = clock, emitter
        self.tied_sync = tied_sync
        self.tag_stride = max(1, messages_per_channel)
        self.boundary_shape = (spec.micro_batch_size, spec.seq_len, spec.hidden_size)
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
                p2p[channel].append(dist.P2POp(dist.irecv, buffer, message.src, group, tag=self._tag(message, step)))
                kept[channel].append(("recv", message, buffer))
            else:
                tensor = state.outbox.pop((message.kind, message.stage, message.microbatch)).contiguous()
                p2p[channel].append(dist.P2POp(dist.isend, tensor, message.dst, group, tag=self._tag(message, step)))
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
        runner = self.runners[action.stage]
        stage, microbatch = action.stage, action.microbatch
        if action.type is ActionKind.W:
            runner.backward_weight(microbatch)
            return
        if action.type is ActionKind.F:
            inputs, targets = batch.microbatch(microbatch)
            stage_input = inputs if stage == 0 else state.local.pop((ACTIVATION, stage, microbatch))
            output = runner.forward(microbatch, stage_input, targets)
            if runner.is_last:
                loss = output.detach()
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
        clock, rank = self.clock, self.rank
        self.emitter.emit(lambda: {
            "type": "action", "rank": rank, "device": rank, "action": str(action), "stage": action.stage,
            "kind": action.type, "microbatch": action.microbatch, "step": step,
            "start_ms": clock.to_ms(start), "end_ms": clock.to_ms(end)})

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
        batch = synthetic_batch(self.spec, self.plan.num_microbatches, seed=self.seed, step=step,
                                dtype=self.dtype, device=self.device)
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
            self.tied_sync()
        if self.optimizer is not None:
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return None if state.loss is None else float(state.loss.item())
