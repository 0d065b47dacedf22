"""Partition: which contiguous layers form each pipeline stage. ``partition_<name>(profile, num_stages)``
returns one tuple of layer indices per stage, in model order."""

from planner.errors import SpecError
from planner.partition.balanced import partition_param_balanced, partition_time_balanced
from planner.partition.uniform import partition_uniform

PARTITIONS = {
    "uniform": partition_uniform,
    "param-balanced": partition_param_balanced,
    "time-balanced": partition_time_balanced,
}
PARTITION_NAMES = tuple(PARTITIONS)


def partition_layers(name: str, profile, num_stages: int) -> list[tuple[int, ...]]:
    if name not in PARTITIONS:
        raise SpecError("partition", f"must be one of {', '.join(PARTITION_NAMES)}; got {name!r}")
    return PARTITIONS[name](profile, num_stages)


__all__ = ["PARTITIONS", "PARTITION_NAMES", "partition_layers", "partition_param_balanced",
           "partition_time_balanced", "partition_uniform"]
