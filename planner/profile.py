"""Per-layer cost profiles (``adaptis.profile/v1``): analytic or measured, loaded the same way."""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.errors import SpecError
from planner.fields import (
    check_format,
    get_int,
    get_number,
    get_str,
    require_list,
    require_mapping,
)

PROFILE_FORMAT = "adaptis.profile/v1"
TIME_UNIT_TO_MS = {"ms": 1.0, "us": 1e-3, "s": 1e3}


@dataclass(frozen=True)
class LayerProfile:
    """Costs of one layer for one micro-batch. Times are in milliseconds once loaded."""

    name: str
    kind: str
    forward: float
    backward_input: float
    backward_weight: float
    activation_bytes: int
    output_bytes: int
    param_bytes: int

    @property
    def backward(self) -> float:
        return self.backward_input + self.backward_weight

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "forward": self.forward,
                "backward_input": self.backward_input, "backward_weight": self.backward_weight,
                "activation_bytes": self.activation_bytes, "output_bytes": self.output_bytes,
                "param_bytes": self.param_bytes}


@dataclass(frozen=True)
class Profile:
    model: str
    device: str
    layers: tuple[LayerProfile, ...]
    microbatch_size: int = 1
    seq_len: int = 1
    source: str = "analytic"
    flops_per_microbatch: float = 0.0

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def scaled(self, factors: list[float]) -> "Profile":
        """A copy with every layer's times multiplied by its factor (closed-loop recalibration)."""
        if len(factors) != len(self.layers):
            raise SpecError("factors", f"needs one factor per layer ({len(self.layers)}), got {len(factors)}")
        return replace(self, layers=tuple(
            replace(layer, forward=layer.forward * f, backward_input=layer.backward_input * f,
                    backward_weight=layer.backward_weight * f)
            for layer, f in zip(self.layers, factors)))

    def to_dict(self) -> dict:
        return {"format": PROFILE_FORMAT, "model": self.model, "device": self.device, "time_unit": "ms",
                "source": self.source, "flops_per_microbatch": self.flops_per_microbatch,
                "microbatch": {"size": self.microbatch_size, "seq_len": self.seq_len},
                "layers": [layer.to_dict() for layer in self.layers]}


def load_profile(doc: object) -> Profile:
    """Validate a parsed ``adaptis.profile/v1`` document; times are converted to milliseconds."""
    doc = require_mapping(doc, "")
    check_format(doc, PROFILE_FORMAT)
    unit = get_str(doc, "time_unit", "", default="ms", choices=tuple(TIME_UNIT_TO_MS))
    to_ms = TIME_UNIT_TO_MS[unit]
    microbatch = require_mapping(doc.get("microbatch", {}), "microbatch")
    layers = []
    for index, layer_doc in enumerate(require_list(doc.get("layers"), "layers", min_length=1)):
        path = f"layers[{index}]"
        layer_doc = require_mapping(layer_doc, path)
        layers.append(LayerProfile(
            name=get_str(layer_doc, "name", path, default=f"layer{index}"),
            kind=get_str(layer_doc, "kind", path, default="decoder"),
            forward=get_number(layer_doc, "forward", path) * to_ms,
            backward_input=get_number(layer_doc, "backward_input", path) * to_ms,
            backward_weight=get_number(layer_doc, "backward_weight", path, default=0.0) * to_ms,
            activation_bytes=get_int(layer_doc, "activation_bytes", path, default=0, minimum=0),
            output_bytes=get_int(layer_doc, "output_bytes", path, default=0, minimum=0),
            param_bytes=get_int(layer_doc, "param_bytes", path, default=0, minimum=0),
        ))
    return Profile(
        model=get_str(doc, "model", "", default="unnamed"),
        device=get_str(doc, "device", "", default="unknown"),
        layers=tuple(layers),
        microbatch_size=get_int(microbatch, "size", "microbatch", default=1),
        seq_len=get_int(microbatch, "seq_len", "microbatch", default=1),
        source=get_str(doc, "source", "", default="analytic"),
        flops_per_microbatch=get_number(doc, "flops_per_microbatch", "", default=0.0),
    )
