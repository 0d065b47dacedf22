"""The placement shapes pipeline schedules assume, and checks for a user-given stage→device map."""

from __future__ import annotations

from planner.errors import SpecError

def _require_positive(value: int, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(field, f"must be an integer >= 1, got {value!r}")


def loop_placement(num_stages: int, num_devices: int) -> tuple[int, ...]:
    """Cyclic placement (Megatron's virtual pipeline): stage k runs on device k mod p."""
    _require_positive(num_stages, "num_stages")
    _require_positive(num_devices, "num_devices")
    return tuple(stage % num_devices for stage in range(num_stages))


def v_shape_placement(num_devices: int, chunks: int = 2) -> tuple[int, ...]:
    """Zig-zag placement (ZB-V): stages 0..p-1 go down devices 0..p-1, stages p..2p-1 come back up p-1..0.

    With more than two chunks the zig-zag continues, as torch's ``generate_stage_to_rank_mapping(style="v")``.
    """
    _require_positive(num_devices, "num_devices")
    _require_positive(chunks, "chunks")
    placement = []
    for chunk in range(chunks):
        devices = range(num_devices) if chunk % 2 == 0 else range(num_devices - 1, -1, -1)
        placement.extend(devices)
    return tuple(placement)


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
        chunks = len(stage_devices) // num_devices
        if stage_devices == loop_placement(len(stage_devices), num_devices):
            return "loop"
        if chunks >= 2 and stage_devices == v_shape_placement(num_devices, chunks):
            return "v-shape"
    return "custom"
