"""Per-device memory of a pure-PP plan: model state (unsharded, mixed precision with Adam) plus in-flight
activations; no buffers. The profile's ``param_bytes`` are bf16 weights, so the state is 9 x param_bytes
(``planner.memory.state``)."""

from __future__ import annotations

from dataclasses import dataclass

from planner.memory.activations import activation_peaks, stage_activation_bytes
from planner.memory.state import (
    GRADIENT_BYTES_PER_PARAM_BYTE,
    MODEL_STATE_BYTES_PER_PARAM_BYTE,
    OPTIMIZER_BYTES_PER_PARAM_BYTE,
)
from planner.plan import Plan
from planner.profile import Profile


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


def layer_activation_bytes(profile: Profile) -> list[int]:
    return [layer.activation_bytes for layer in profile.layers]


def layer_state_bytes(profile: Profile) -> list[int]:
    """Model state each layer costs the device holding it, unsharded: 9 x its bf16 ``param_bytes``."""
    return [layer.param_bytes * MODEL_STATE_BYTES_PER_PARAM_BYTE for layer in profile.layers]


def device_memory(plan: Plan, profile: Profile) -> list[DeviceMemory]:
    params = [0] * plan.num_devices
    for stage in plan.stages:
        params[stage.device] += sum(profile.layers[index].param_bytes for index in stage.layers)
    peaks = activation_peaks(plan, stage_activation_bytes(plan, layer_activation_bytes(profile)))
    return [DeviceMemory(device=device, param_bytes=params[device],
                         gradient_bytes=GRADIENT_BYTES_PER_PARAM_BYTE * params[device],
                         optimizer_bytes=OPTIMIZER_BYTES_PER_PARAM_BYTE * params[device],
                         activation_peak_bytes=peaks[device])
            for device in range(plan.num_devices)]


def peak_memory_bytes(plan: Plan, profile: Profile) -> list[int]:
    """Per device: model state + peak in-flight activations."""
    return [memory.peak_bytes for memory in device_memory(plan, profile)]
