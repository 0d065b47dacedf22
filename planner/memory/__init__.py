"""Memory, in one home: model state with the sharding as a parameter (``state``), activations per layer with the
schedule's in-flight micro-batches (``activations``), and buffers and overheads (``buffers``). ``pipeline``
composes them for a pure-PP plan; the hybrid planner composes them per GPU in ``planner.parallel.memory``; the
executor's capacity check (``executor.running.capacity``) with its own dtype and optimizer."""

from planner.memory.activations import (
    activation_curve,
    activation_peaks,
    in_flight_activation_bytes,
    stage_activation_bytes,
)
from planner.memory.pipeline import (
    DeviceMemory,
    device_memory,
    layer_activation_bytes,
    layer_state_bytes,
    peak_memory_bytes,
)
from planner.memory.state import (
    GRADIENT_BYTES_PER_PARAM_BYTE,
    MIXED_PRECISION_ADAM,
    MODEL_STATE_BYTES_PER_PARAM_BYTE,
    OPTIMIZER_BYTES_PER_PARAM_BYTE,
    ModelState,
    StatePrecision,
    model_state,
    single_dtype_state,
)

__all__ = ["DeviceMemory", "GRADIENT_BYTES_PER_PARAM_BYTE", "MIXED_PRECISION_ADAM", "MODEL_STATE_BYTES_PER_PARAM_BYTE",
           "ModelState", "OPTIMIZER_BYTES_PER_PARAM_BYTE", "StatePrecision", "activation_curve", "activation_peaks",
           "device_memory", "in_flight_activation_bytes", "layer_activation_bytes", "layer_state_bytes", "model_state",
           "peak_memory_bytes", "single_dtype_state", "stage_activation_bytes"]
