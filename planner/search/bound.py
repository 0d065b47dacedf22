"""A tighter lower bound on the iteration time: ``planner.bounds`` plus limits that see indivisible layers
and the pipeline's fill.

Every limit holds for any partition, placement and schedule (transfers only add time, so they are left
out). With ``T`` the iteration time, ``m`` micro-batches, ``p`` devices and ``c_i = F_i + I_i + W_i``:

- ``indivisible_layers_ms``: a layer runs whole on one device, so the devices' loads are a partition of
  the layer costs into ``p`` groups. Among the ``k*p + 1`` costliest layers some device gets ``k + 1``;
  its load is at least the ``k + 1`` cheapest of those (the classic P||Cmax bound), times ``m``.
- ``pipeline_fill_ms``: a device whose lowest layer is ``l`` cannot start before micro-batch 0's forward
  has run layers ``0..l-1``. The lowest layers of the devices are distinct, so the devices together idle
  at least the sum of the ``p`` smallest such prefixes (layers ``0..p-1``); ``T >= (work + idle) / p``.
- ``layer_chain_ms``: the device that runs layer ``l`` starts its first F no earlier than the forward
  prefix before ``l``, runs ``m`` F's and ``m`` I's of ``l``, and after the last I the input-gradient
  chain below ``l`` and layer 0's W still have to run; it also runs all ``m`` W's of ``l``. And the
  last micro-batch to pass layer ``l`` still has one micro-batch's chain to finish.
"""

from __future__ import annotations

from planner.bounds import lower_bound_ms
from planner.profile import Profile


def indivisible_layers_ms(costs: list[float], num_devices: int, num_microbatches: int) -> float:
    ordered = sorted(costs, reverse=True)
    best = 0.0
    per_device = 1
    while per_device * num_devices + 1 <= len(ordered):
        top = ordered[:per_device * num_devices + 1]
        best = max(best, sum(top[-(per_device + 1):]))
        per_device += 1
    return best * num_microbatches


def pipeline_fill_ms(profile: Profile, num_devices: int, num_microbatches: int) -> float:
    layers = profile.layers
    work = sum(layer.forward + layer.backward for layer in layers) * num_microbatches
    idle, prefix = 0.0, 0.0
    for layer in layers[:num_devices]:
        idle += prefix
        prefix += layer.forward
    return (work + idle) / num_devices


def layer_chain_ms(profile: Profile, num_microbatches: int) -> float:
    layers = profile.layers
    total_forward = sum(layer.forward for layer in layers)
    total_input = sum(layer.backward_input for layer in layers)
    first_weight = layers[0].backward_weight
    chain = total_forward + total_input + first_weight
    best, forward_before, input_before = 0.0, 0.0, 0.0
    for layer in layers:
        tail = max(input_before + first_weight, layer.backward_weight)
        best = max(best,
                   chain + (num_microbatches - 1) * max(layer.forward, layer.backward_input),
                   forward_before + num_microbatches * (layer.forward + layer.backward_input) + tail,
                   forward_before + num_microbatches * (layer.forward + layer.backward))
        forward_before += layer.forward
        input_before += layer.backward_input
    return best


def search_lower_bound(profile: Profile, num_devices: int, num_microbatches: int) -> dict:
    """``planner.bounds.lower_bound_ms``'s parts plus the three above; ``lower_bound_ms`` is the max."""
    parts = lower_bound_ms(profile, num_devices, num_microbatches)
    costs = [layer.forward + layer.backward for layer in profile.layers]
    parts["indivisible_layers_ms"] = indivisible_layers_ms(costs, num_devices, num_microbatches)
    parts["pipeline_fill_ms"] = pipeline_fill_ms(profile, num_devices, num_microbatches)
    parts["layer_chain_ms"] = layer_chain_ms(profile, num_microbatches)
    parts["lower_bound_ms"] = max(value for key, value in parts.items() if key != "lower_bound_ms")
    return parts
