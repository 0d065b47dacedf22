"""Partition + placement of a candidate: where stages start and which device runs each.

Placement shapes the search starts from (any stage->device map is reachable by the tuning moves):

- ``loop``: stage s on device ``s mod p`` (sequential when S = p, Megatron's interleaving when S = kp,
  an uneven count when p does not divide S);
- ``vee``: the direction reverses every lap (``0..p-1, p-1..0, 0..``): ZB-V's V for S = 2p, a zig-zag
  beyond; consecutive stages at a turn share a device, so their transfer costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.plan import Stage

SHAPES = ("loop", "vee")


@dataclass(frozen=True)
class Layout:
    """``starts[k]`` is stage k's first layer (``starts[0] == 0``); ``stage_device[k]`` its device."""

    starts: tuple[int, ...]
    stage_device: tuple[int, ...]
    num_layers: int

    @property
    def num_stages(self) -> int:
        return len(self.starts)

    def stage_end(self, stage: int) -> int:
        """One past the stage's last layer."""
        return self.starts[stage + 1] if stage + 1 < len(self.starts) else self.num_layers

    def stages(self) -> list[Stage]:
        return [Stage(tuple(range(self.starts[k], self.stage_end(k))), self.stage_device[k])
                for k in range(self.num_stages)]

    def with_starts(self, starts: tuple[int, ...]) -> "Layout":
        return Layout(starts, self.stage_device, self.num_layers)


def shape_devices(shape: str, num_stages: int, num_devices: int) -> tuple[int, ...]:
    if shape == "loop":
        return tuple(stage % num_devices for stage in range(num_stages))
    devices = []
    for stage in range(num_stages):
        lap, position = divmod(stage, num_devices)
        devices.append(position if lap % 2 == 0 else num_devices - 1 - position)
    return tuple(devices)


def layout_from_stages(stages: list[Stage], num_layers: int) -> Layout:
    return Layout(tuple(stage.layers[0] for stage in stages), tuple(stage.device for stage in stages),
                  num_layers)
