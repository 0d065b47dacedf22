"""Per-device memory accounting for a plan: model state plus in-flight activations.

Model state follows Megatron-LM's mixed-precision accounting without a distributed optimizer,
18 bytes per parameter, expressed against the profile's ``param_bytes`` (bf16, 2 bytes/parameter):

- parameters, bf16:                                      2 bytes/param = 1 x param_bytes
- gradients, fp32 accumulation buffer:                   4 bytes/param = 2 x param_bytes
- Adam state, fp32 master copy + first + second moment: 12 bytes/param = 6 x param_bytes

Activations: a layer's ``activation_bytes`` for one micro-batch are held from the start of its forward
until the end of that micro-batch's backward of the layer: the end of ``B``, or of ``W`` when the
backward is split (``I`` keeps them: the weight gradient still needs the inputs). A device holds the
activations of every micro-batch in flight on every stage it runs. Since a device runs its actions one
after another, the order alone fixes the peak: it is reached at the start of some forward, so the peak
is a scan over the device's order and does not depend on timings. Temporary buffers inside one action
(attention workspaces, gradient scratch) and communication buffers are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.plan import Plan
from planner.profile import Profile

GRADIENT_BYTES_PER_PARAM_BYTE = 2
OPTIMIZER_BYTES_PER_PARAM_BYTE = 6
MODEL_STATE_BYTES_PER_PARAM_BYTE = 1 + GRADIENT_BYTES_PER_PARAM_BYTE + OPTIMIZER_BYTES_PER_PARAM_BYTE


@dataclass(frozen=True)
class DeviceMemory:
    device: int
    param_bytes: int
    gradient_bytes: int
    optimizer_bytes: int
    activation_peak_bytes: int

    @property
    def model_state_bytes(self) -> int:
        return self.param_bytes + self.gradient_bytes + self.optimizer_bytes

    @property
    def peak_bytes(self) -> int:
        return self.model_state_bytes + self.activation_peak_bytes

    def to_dict(self) -> dict:
        return {"device": self.device, "param_bytes": self.param_bytes, "gradient_bytes": self.gradient_bytes,
                "optimizer_bytes": self.optimizer_bytes, "activation_peak_bytes": self.activation_peak_bytes,
                "peak_bytes": self.peak_bytes}


def stage_activation_bytes(plan: Plan, profile: Profile) -> list[int]:
    """Activation bytes one micro-batch holds on each stage while it is in flight there."""
    return [sum(profile.layers[index].activation_bytes for index in stage.layers) for stage in plan.stages]


def stage_param_bytes(plan: Plan, profile: Profile) -> list[int]:
    return [sum(profile.layers[index].param_bytes for index in stage.layers) for stage in plan.stages]


def activation_peaks(plan: Plan, stage_activation: list[int]) -> list[int]:
    """Peak in-flight activation bytes per device, scanning each device's order (see module doc)."""
    peaks = []
    for device_actions in plan.actions:
        held = peak = 0
        for action in device_actions:
            action_type = action.type
            if action_type.takes_activations:
                held += stage_activation[action.stage]
                if held > peak:
                    peak = held
            elif action_type.frees_activations:
                held -= stage_activation[action.stage]
        peaks.append(peak)
    return peaks


def device_memory(plan: Plan, profile: Profile) -> list[DeviceMemory]:
    params_per_stage = stage_param_bytes(plan, profile)
    params = [0] * plan.num_devices
    for stage, stage_params in zip(plan.stages, params_per_stage):
        params[stage.device] += stage_params
    peaks = activation_peaks(plan, stage_activation_bytes(plan, profile))
    return [DeviceMemory(device=device, param_bytes=params[device],
                         gradient_bytes=GRADIENT_BYTES_PER_PARAM_BYTE * params[device],
                         optimizer_bytes=OPTIMIZER_BYTES_PER_PARAM_BYTE * params[device],
                         activation_peak_bytes=peaks[device])
            for device in range(plan.num_devices)]


def peak_memory_bytes(plan: Plan, profile: Profile) -> list[int]:
    """Per device: model state + peak in-flight activations."""
    return [memory.peak_bytes for memory in device_memory(plan, profile)]


def activation_curve(plan: Plan, stage_activation: list[int], device: int, starts: list[float],
                     ends: list[float]) -> list[tuple[float, int]]:
    """Step curve ``(time_ms, held_bytes)`` of one device's activations, given its actions' timings.

    Activations are taken at an F's start and released at the end of the B or W that frees them.
    """
    held = 0
    curve = [(0.0, 0)]
    for action, start, end in zip(plan.actions[device], starts, ends):
        if action.type.takes_activations:
            held += stage_activation[action.stage]
            curve.append((start, held))
        elif action.type.frees_activations:
            held -= stage_activation[action.stage]
            curve.append((end, held))
    return curve
