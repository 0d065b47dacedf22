"""Per-stage costs of a plan: compute durations and the transfer lag into each stage.

A stage's F is the sum of its layers' forward times, I (input-gradient backward) the sum of their
``backward_input``, W the sum of their ``backward_weight`` and B (full backward) is I + W. What crosses
a stage boundary is the ``output_bytes`` of the sending stage's last layer going forward; the gradient
coming back has the same size. A transfer between devices costs ``cluster.transfer_ms`` and never
occupies compute; without a cluster every transfer costs 0. Links are not modelled as contended.

Each end of a cross-device message also spends the link's ``overhead_us`` on its device's stream: the
receiving action starts with it (completing the receive), the sending action ends with it (posting the
send), so the data leaves after it. That time is neither compute nor transfer: the device is simply not
computing, which is how a rank's timeline shows it, so the metrics count it as bubble.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from planner.actions import ACTIVATION, ActionKind
from planner.cluster import ClusterSpec
from planner.errors import PlanError
from planner.plan import Plan
from planner.profile import Profile


@dataclass(frozen=True)
class StageCosts:
    forward: tuple[float, ...]
    backward_input: tuple[float, ...]
    backward_weight: tuple[float, ...]
    boundary_bytes: tuple[int, ...]        # output_bytes of each stage's last layer
    forward_lag: tuple[float, ...]         # activation transfer from stage s-1 into stage s (0 for s=0)
    gradient_lag: tuple[float, ...]        # gradient transfer from stage s+1 into stage s (0 for the last)
    # message handling on the stage's own device: before its F (activation in), after its F (activation
    # out), before its B/I (gradient in), after its B/I (gradient out); all 0 without a cluster
    forward_pre: tuple[float, ...] = ()
    forward_post: tuple[float, ...] = ()
    backward_pre: tuple[float, ...] = ()
    backward_post: tuple[float, ...] = ()

    @classmethod
    def of_sums(cls, forward: tuple[float, ...], backward_input: tuple[float, ...], backward_weight: tuple[float, ...],
                boundary_bytes: tuple[int, ...], devices: tuple[int, ...] | list[int], cluster: ClusterSpec | None
                ) -> StageCosts:
        """The costs of stages with these per-stage layer sums on ``devices``: the transfer lags and message
        handling between them. ``stage_costs`` sums a plan's layers; the search sums prefix arrays."""
        num_stages = len(devices)

        def lag(src_stage: int, dst_stage: int, nbytes: int) -> float:
            return 0.0 if cluster is None else cluster.transfer_ms(devices[src_stage], devices[dst_stage], nbytes)

        forward_lag = (0.0, *(lag(s - 1, s, boundary_bytes[s - 1]) for s in range(1, num_stages)))
        gradient_lag = (*(lag(s + 1, s, boundary_bytes[s]) for s in range(num_stages - 1)), 0.0)
        return cls(tuple(forward), tuple(backward_input), tuple(backward_weight), tuple(boundary_bytes),
                   forward_lag, gradient_lag, *message_overheads(devices, cluster))

    @cached_property
    def _kind_durations(self) -> dict[ActionKind, tuple[float, ...]]:
        """Per kind, each stage's compute time: the sum of the profile parts the kind runs."""
        return {kind: tuple(sum(parts) for parts in zip(*(getattr(self, part) for part in kind.profile_parts)))
                for kind in ActionKind}

    def duration(self, stage: int, action_type: ActionKind) -> float:
        """Compute time of one action (without message handling)."""
        return self._kind_durations[action_type][stage]

    def message_time(self, stage: int, action_type: ActionKind) -> tuple[float, float]:
        """(before, after) the action's compute: time its device spends on the messages it receives and sends."""
        if not self.forward_pre or action_type.boundary is None:
            return 0.0, 0.0
        if action_type.boundary == ACTIVATION:
            return self.forward_pre[stage], self.forward_post[stage]
        return self.backward_pre[stage], self.backward_post[stage]


def message_overheads(devices: tuple[int, ...] | list[int], cluster: ClusterSpec | None
                      ) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    """Per stage on ``devices``: time spent on messages before F, after F, before B/I and after B/I."""
    num_stages = len(devices)
    zeros = (0.0,) * num_stages
    if cluster is None:
        return zeros, zeros, zeros, zeros

    def overhead(a: int, b: int) -> float:
        return cluster.message_overhead_ms(devices[a], devices[b]) if 0 <= b < num_stages else 0.0

    forward_pre = tuple(overhead(s, s - 1) for s in range(num_stages))
    forward_post = tuple(overhead(s, s + 1) for s in range(num_stages))
    return forward_pre, forward_post, forward_post, forward_pre


def stage_costs(plan: Plan, profile: Profile, cluster: ClusterSpec | None = None) -> StageCosts:
    layers = profile.layers
    forward, backward_input, backward_weight, boundary_bytes = [], [], [], []
    for stage in plan.stages:
        stage_layers = [layers[index] for index in stage.layers]
        forward.append(sum(layer.forward for layer in stage_layers))
        backward_input.append(sum(layer.backward_input for layer in stage_layers))
        backward_weight.append(sum(layer.backward_weight for layer in stage_layers))
        boundary_bytes.append(stage_layers[-1].output_bytes)
    devices = [stage.device for stage in plan.stages]
    if cluster is not None:
        for index, device in enumerate(devices):
            if device >= cluster.num_devices:
                raise PlanError(f"device {device} is not in cluster {cluster.name!r} ({cluster.num_devices} "
                                f"devices)", field=f"stages[{index}].device")
    return StageCosts.of_sums(tuple(forward), tuple(backward_input), tuple(backward_weight), tuple(boundary_bytes),
                              devices, cluster)
