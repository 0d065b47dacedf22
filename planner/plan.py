"""The plan IR (``adaptis.plan/v1``): partition into stages, stage placement, per-device action order.

Actions use torch.distributed.pipelining's compute-only notation ``<stage><F|B|I|W><microbatch>``:
F forward, B full backward, I input-gradient backward, W weight-gradient backward.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from planner.errors import SpecError
from planner.validation import check_format, get_int, get_str, require_list, require_mapping

PLAN_FORMAT = "adaptis.plan/v1"
ACTION_PATTERN = re.compile(r"^(\d+)([FBIW])(\d+)$")
COMPUTE_TYPES = ("F", "B", "I", "W")


@dataclass(frozen=True, order=True)
class Action:
    stage: int
    type: str
    microbatch: int

    @classmethod
    def parse(cls, text: str, field_name: str = "action") -> "Action":
        match = ACTION_PATTERN.match(text) if isinstance(text, str) else None
        if not match:
            raise SpecError(field_name, f"must look like '<stage><F|B|I|W><microbatch>' (e.g. '2F0'), got {text!r}")
        return cls(int(match.group(1)), match.group(2), int(match.group(3)))

    def __str__(self) -> str:
        return f"{self.stage}{self.type}{self.microbatch}"


@dataclass(frozen=True)
class Stage:
    layers: tuple[int, ...]
    device: int

    @property
    def first_layer(self) -> int:
        return self.layers[0]

    @property
    def last_layer(self) -> int:
        return self.layers[-1]


@dataclass
class Plan:
    num_devices: int
    num_microbatches: int
    stages: list[Stage]
    actions: list[list[Action]]
    strategy: str = "custom"
    predicted: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    def stage_device(self, stage: int) -> int:
        return self.stages[stage].device

    def stages_on(self, device: int) -> list[int]:
        return [index for index, stage in enumerate(self.stages) if stage.device == device]

    def input_stage(self, action: Action) -> int | None:
        """The neighbouring stage whose boundary tensor ``action`` consumes: the stage before's activation for
        an F, the stage after's input gradient (from its B or I) for a B or I; None for W and at the ends."""
        if action.type == "F":
            return action.stage - 1 if action.stage > 0 else None
        if action.type in ("B", "I"):
            return action.stage + 1 if action.stage < self.num_stages - 1 else None
        return None

    def output_stage(self, action: Action) -> int | None:
        """The neighbouring stage that consumes the boundary tensor ``action`` produces: the stage after for an
        F, the stage before for a B or I; None for W and at the ends."""
        if action.type == "F":
            return action.stage + 1 if action.stage < self.num_stages - 1 else None
        if action.type in ("B", "I"):
            return action.stage - 1 if action.stage > 0 else None
        return None

    def num_actions(self) -> int:
        return sum(len(device_actions) for device_actions in self.actions)

    def uses_split_backward(self) -> bool:
        return any(action.type in ("I", "W") for device_actions in self.actions for action in device_actions)

    def to_dict(self) -> dict:
        doc = {"format": PLAN_FORMAT, "strategy": self.strategy, "num_devices": self.num_devices,
               "num_microbatches": self.num_microbatches,
               "stages": [{"layers": list(stage.layers), "device": stage.device} for stage in self.stages],
               "actions": [[str(action) for action in device_actions] for device_actions in self.actions],
               "predicted": self.predicted}
        if self.meta:
            doc["meta"] = self.meta
        return doc


def load_plan(doc: object) -> Plan:
    """Parse a ``adaptis.plan/v1`` document. Structural checks only; see ``planner.validate`` for the rest."""
    doc = require_mapping(doc, "")
    check_format(doc, PLAN_FORMAT)
    num_devices = get_int(doc, "num_devices", "")
    stages = []
    for index, stage_doc in enumerate(require_list(doc.get("stages"), "stages", min_length=1)):
        path = f"stages[{index}]"
        stage_doc = require_mapping(stage_doc, path)
        layers = require_list(stage_doc.get("layers"), f"{path}.layers", min_length=1)
        for position, layer in enumerate(layers):
            if isinstance(layer, bool) or not isinstance(layer, int) or layer < 0:
                raise SpecError(f"{path}.layers[{position}]", f"must be a layer index >= 0, got {layer!r}")
        stages.append(Stage(layers=tuple(layers), device=get_int(stage_doc, "device", path, minimum=0)))
    action_lists = require_list(doc.get("actions"), "actions")
    if len(action_lists) != num_devices:
        raise SpecError("actions", f"needs one action list per device ({num_devices}), got {len(action_lists)}")
    actions = [
        [Action.parse(text, f"actions[{device}][{position}]")
         for position, text in enumerate(require_list(device_actions, f"actions[{device}]"))]
        for device, device_actions in enumerate(action_lists)
    ]
    predicted = doc.get("predicted") or {}
    return Plan(num_devices=num_devices, num_microbatches=get_int(doc, "num_microbatches", ""),
                stages=stages, actions=actions, strategy=get_str(doc, "strategy", "", default="custom"),
                predicted=require_mapping(predicted, "predicted"), meta=require_mapping(doc.get("meta") or {}, "meta"))
