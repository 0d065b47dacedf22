"""Placement shapes, the one vocabulary for them, and checks for a user-given stage→device map.

- ``loop``: stage s on device ``s mod p`` (sequential when S = p, Megatron's interleaving when S = kp, an uneven
  count when p does not divide S);
- ``v-shape``: the direction reverses every lap (``0..p-1, p-1..0, 0..``): ZB-V's V for S = 2p, a zig-zag beyond
  (torch's ``generate_stage_to_rank_mapping(style="v")``); consecutive stages at a turn share a device, so their
  transfer costs nothing.

The baselines, the search's starting layouts and its moves, and the names plans are shown with all use these.
"""

from __future__ import annotations

from planner.errors import SpecError

def _require_positive(value: int, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(field, f"must be an integer >= 1, got {value!r}")


SHAPES = ("loop", "v-shape")


def shape_placement(shape: str, num_stages: int, num_devices: int) -> tuple[int, ...]:
    """The stage→device map of ``num_stages`` stages on ``num_devices`` devices in ``shape`` (module docstring)."""
    if shape not in SHAPES:
        raise SpecError("shape", f"must be one of {', '.join(SHAPES)}; got {shape!r}")
    _require_positive(num_stages, "num_stages")
    _require_positive(num_devices, "num_devices")
    if shape == "loop":
        return tuple(stage % num_devices for stage in range(num_stages))
    devices = []
    for stage in range(num_stages):
        lap, position = divmod(stage, num_devices)
        devices.append(position if lap % 2 == 0 else num_devices - 1 - position)
    return tuple(devices)


def loop_placement(num_stages: int, num_devices: int) -> tuple[int, ...]:
    """Cyclic placement (Megatron's virtual pipeline): stage k runs on device k mod p."""
    return shape_placement("loop", num_stages, num_devices)


def v_shape_placement(num_devices: int, chunks: int = 2) -> tuple[int, ...]:
    """Zig-zag placement (ZB-V): ``chunks`` laps over the devices, stages 0..p-1 down, p..2p-1 back up, ..."""
    _require_positive(chunks, "chunks")
    return shape_placement("v-shape", chunks * num_devices, num_devices)


def explicit_placement(stage_devices: list[int] | tuple[int, ...], num_devices: int) -> tuple[int, ...]:
    """A user-given stage→device map, checked: every entry a device index and every device used."""
    _require_positive(num_devices, "num_devices")
    if not stage_devices:
        raise SpecError("stage_devices", "must name a device for at least one stage")
    for stage, device in enumerate(stage_devices):
        if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device < num_devices:
            raise SpecError(f"stage_devices[{stage}]", f"must be a device index in [0, {num_devices}), got {device!r}")
    idle = sorted(set(range(num_devices)) - set(stage_devices))
    if idle:
        raise SpecError("stage_devices", f"device(s) {idle} run no stage; a pipeline uses every device")
    return tuple(stage_devices)


def placement_shape(stage_devices: tuple[int, ...] | list[int], num_devices: int) -> str:
    """Name the shape of a placement: ``loop``, ``v-shape`` or ``custom``."""
    stage_devices = tuple(stage_devices)
    if len(stage_devices) % num_devices == 0:
        for shape in SHAPES:   # (one lap of either is the same map: it is named a loop)
            if stage_devices == shape_placement(shape, len(stage_devices), num_devices):
                return shape
    return "custom"
