"""A lower bound on any plan's iteration time for a profile, device count and micro-batch count.

Three independent limits, each true for every partition, placement and schedule:

- ``work_per_device_ms``: all compute (F + I + W of every layer, every micro-batch) spread perfectly
  over the devices;
- ``heaviest_layer_ms``: a layer runs on one device, so that device does its F + I + W for every
  micro-batch;
- ``microbatch_chain_ms``: one micro-batch's dependency chain: every layer's forward, then every
  layer's input-gradient backward in reverse, then the first layer's weight gradient (which needs that
  layer's input gradient; every other layer's W can overlap the rest of the chain).

Transfers are left out: they depend on the placement, and a bound must hold for every plan.
"""

from __future__ import annotations

from planner.errors import SpecError
from planner.profile import Profile


def lower_bound_ms(profile: Profile, num_devices: int, num_microbatches: int) -> dict:
    if num_devices < 1:
        raise SpecError("num_devices", f"must be >= 1, got {num_devices}")
    if num_microbatches < 1:
        raise SpecError("num_microbatches", f"must be >= 1, got {num_microbatches}")
    layers = profile.layers
    per_layer = [layer.forward + layer.backward_input + layer.backward_weight for layer in layers]
    work_per_device = sum(per_layer) * num_microbatches / num_devices
    heaviest_layer = max(per_layer) * num_microbatches
    chain = (sum(layer.forward for layer in layers) + sum(layer.backward_input for layer in layers)
             + layers[0].backward_weight)
    return {"work_per_device_ms": work_per_device, "heaviest_layer_ms": heaviest_layer,
            "microbatch_chain_ms": chain, "lower_bound_ms": max(work_per_device, heaviest_layer, chain)}
