"""The plan IR: partition into stages, stage placement, per-device action order.

``adaptis.plan/v2`` adds ``parallel`` (``planner.parallel.config``): the pipeline then is one axis of a
TP x CP x PP x DP x EP job, ``num_devices`` counts pipeline ranks and ``stages[].device`` / ``actions[d]`` are
indexed by pipeline rank. A plan without a parallel configuration is written as ``adaptis.plan/v1`` (the same
document with tp = cp = dp = ep = 1), and both formats load.

Actions use torch.distributed.pipelining's compute-only notation ``<stage><F|B|I|W><microbatch>``:
F forward, B full backward, I input-gradient backward, W weight-gradient backward.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from planner.actions import ACTION_KINDS, ActionKind
from planner.errors import SpecError
from planner.parallel.config import ParallelConfig, load_parallel
from planner.fields import get_int, get_str, require_list, require_mapping

PLAN_FORMAT = "adaptis.plan/v1"
PLAN_FORMAT_V2 = "adaptis.plan/v2"
PLAN_FORMATS = (PLAN_FORMAT, PLAN_FORMAT_V2)
ACTION_PATTERN = re.compile(rf"^(\d+)([{''.join(ACTION_KINDS)}])(\d+)$")


@dataclass(frozen=True, order=True)
class Action:
    stage: int
    type: ActionKind
    microbatch: int

    def __post_init__(self) -> None:
        if type(self.type) is not ActionKind:
            object.__setattr__(self, "type", ActionKind.parse(self.type))

    @classmethod
    def parse(cls, text: str, field_name: str = "action") -> "Action":
        match = ACTION_PATTERN.match(text) if isinstance(text, str) else None
        if not match:
            raise SpecError(field_name, f"must look like '<stage><{'|'.join(ACTION_KINDS)}><microbatch>' (e.g. '2F0'), "
                                        f"got {text!r}")
        return cls(int(match.group(1)), ActionKind(match.group(2)), int(match.group(3)))

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
    parallel: ParallelConfig | None = None

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    def stage_device(self, stage: int) -> int:
        return self.stages[stage].device

    def parallel_config(self) -> ParallelConfig:
        """The hybrid configuration; for a plan without one, its pipeline alone (every other degree 1)."""
        return self.parallel or ParallelConfig(pp=self.num_devices, num_microbatches=self.num_microbatches)

    def stages_on(self, device: int) -> list[int]:
        return [index for index, stage in enumerate(self.stages) if stage.device == device]

    def input_stage(self, action: Action) -> int | None:
        """The neighbouring stage whose boundary tensor ``action`` consumes: the stage before's activation for
        an F, the stage after's input gradient (from its B or I) for a B or I; None for W and at the ends."""
        return self._neighbour(action.stage, action.type.receives_from)

    def output_stage(self, action: Action) -> int | None:
        """The neighbouring stage that consumes the boundary tensor ``action`` produces: the stage after for an
        F, the stage before for a B or I; None for W and at the ends."""
        return self._neighbour(action.stage, action.type.sends_to)

    def _neighbour(self, stage: int, offset: int | None) -> int | None:
        neighbour = None if offset is None else stage + offset
        return neighbour if neighbour is not None and 0 <= neighbour < self.num_stages else None

    def virtual_stages(self) -> int | None:
        """Stages per device when every device holds as many (Megatron's ``vpp``), else None (AdaPtis' uneven
        placements)."""
        counts = {len(self.stages_on(device)) for device in range(self.num_devices)}
        return counts.pop() if len(counts) == 1 else None

    def num_actions(self) -> int:
        return sum(len(device_actions) for device_actions in self.actions)

    def uses_split_backward(self) -> bool:
        return any(action.type.is_split_backward for device_actions in self.actions for action in device_actions)

    def to_dict(self) -> dict:
        doc = {"format": PLAN_FORMAT if self.parallel is None else PLAN_FORMAT_V2, "strategy": self.strategy,
               "num_devices": self.num_devices, "num_microbatches": self.num_microbatches,
               "stages": [{"layers": list(stage.layers), "device": stage.device} for stage in self.stages],
               "actions": [[str(action) for action in device_actions] for device_actions in self.actions],
               "predicted": self.predicted}
        if self.parallel is not None:
            doc["parallel"] = self.parallel.to_dict()
            vpp = self.virtual_stages()
            if vpp is not None:
                doc["parallel"]["vpp"] = vpp
        if self.meta:
            doc["meta"] = self.meta
        return doc


def load_plan(doc: object) -> Plan:
    """Parse an ``adaptis.plan/v1`` or ``/v2`` document. Structural checks only; see ``planner.plan_check`` for
    the rest."""
    doc = require_mapping(doc, "")
    if doc.get("format") not in PLAN_FORMATS:
        raise SpecError("format", f"must be one of {', '.join(map(repr, PLAN_FORMATS))}, got {doc.get('format')!r}")
    parallel = None
    if doc["format"] == PLAN_FORMAT_V2:
        parallel = _load_parallel_of_plan(doc)
    elif "parallel" in doc:
        raise SpecError("parallel", f"needs format {PLAN_FORMAT_V2!r}")
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
                predicted=require_mapping(predicted, "predicted"), meta=require_mapping(doc.get("meta") or {}, "meta"),
                parallel=parallel)


def _load_parallel_of_plan(doc: dict) -> ParallelConfig:
    if "parallel" not in doc:
        raise SpecError("parallel", f"is required in an {PLAN_FORMAT_V2!r} plan")
    parallel = load_parallel(doc["parallel"])
    num_devices = doc.get("num_devices")
    if isinstance(num_devices, int) and parallel.pp != num_devices:
        raise SpecError("parallel.pp", f"must equal num_devices ({num_devices}): the plan's devices are the "
                                       f"pipeline ranks; got {parallel.pp}")
    if doc.get("num_microbatches") != parallel.num_microbatches:
        raise SpecError("parallel.num_microbatches",
                        f"must equal num_microbatches ({doc.get('num_microbatches')}), got {parallel.num_microbatches}")
    stages = doc.get("stages")
    vpp = get_int(doc["parallel"], "vpp", "parallel", default=None)
    if vpp is not None and isinstance(stages, list) and isinstance(num_devices, int):
        held = [sum(1 for stage in stages if isinstance(stage, dict) and stage.get("device") == device)
                for device in range(num_devices)]
        if any(count != vpp for count in held):
            raise SpecError("parallel.vpp", f"says {vpp} stages on each pipeline rank, but the plan's stages put "
                                            f"{held} on them")
    if not isinstance(parallel.recompute, str) and isinstance(stages, list) and len(parallel.recompute) != len(stages):
        raise SpecError("parallel.recompute", f"a per-stage list needs one mode per stage ({len(stages)}), got "
                                              f"{len(parallel.recompute)}")
    return parallel
