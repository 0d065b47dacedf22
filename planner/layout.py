"""A plan's layout (its partition and placement: which layers form each stage, which device runs it) and the
layout's short human form, in the spirit of Megatron-LM's pipeline layout string.

``Layout`` is the one meaning of the word: the search's candidates, the editor and the layout string all use it.

Layout grammar (``|`` separates stages in model order, ``,`` separates items inside a stage)::

    layout := stage ('|' stage)*
    stage  := item (',' item)* ['@' device]
    item   := atom ['*' count]
    atom   := code | '(' item (',' item)* ')'
    code   := letters, one per layer (``LayerSpec.short``: E embedding, L head, t attention, ...)

``E,t*3|t*4|t*4|t*3,L`` is a 16-layer model in four stages. A stage carries ``@device`` only where its
device is not the default ``stage index mod number of devices`` (so plain and interleaved placements
print no devices, a V-shape prints the returning half's). Runs repeat with ``*``: ``(m,d)*3,t``.

``schedule_description`` summarises the per-device orders the same way, by action type:
``F*4,(B,F)*4,B*4`` is device 0 of a 4-stage 1F1B over 8 micro-batches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from planner.errors import SpecError
from planner.plan import Plan, Stage
from planner.profile import Profile
from planner.spec.model import ModelSpec

PROFILE_KIND_CODES = {"embedding": "E", "head": "L", "decoder": "t", "mlp": "d"}
LONGEST_REPEATED_UNIT = 8
TOKEN_PATTERN = re.compile(r"\s*(?:([A-Za-z]+)|(\d+)|([|,@*()]))")


def layer_codes_from_spec(spec: ModelSpec) -> list[str]:
    return [layer.short for layer in spec.layers]


def layer_codes_from_profile(profile: Profile) -> list[str]:
    """Profiles only know layer kinds; unknown kinds fall back to their first letter."""
    return [PROFILE_KIND_CODES.get(layer.kind, (layer.kind[:1] or "x").lower()) for layer in profile.layers]


def compress(tokens: list[str]) -> str:
    """Comma-joined tokens with repeated runs folded: ``t,t,t`` -> ``t*3``, ``m,d,m,d`` -> ``(m,d)*2``."""
    items, position = [], 0
    while position < len(tokens):
        best_unit, best_count = 1, 1
        for unit in range(1, LONGEST_REPEATED_UNIT + 1):
            pattern = tokens[position:position + unit]
            if len(pattern) < unit:
                break
            count = 1
            while tokens[position + count * unit:position + (count + 1) * unit] == pattern:
                count += 1
            if count > 1 and unit * count > best_unit * best_count:
                best_unit, best_count = unit, count
        body = tokens[position:position + best_unit]
        atom = body[0] if best_unit == 1 else f"({compress(body)})"
        items.append(atom if best_count == 1 else f"{atom}*{best_count}")
        position += best_unit * best_count
    return ",".join(items)


def plan_layout_string(plan: Plan, layer_codes: list[str]) -> str:
    if len(layer_codes) != sum(len(stage.layers) for stage in plan.stages):
        raise SpecError("layer_codes", f"needs one code per layer of the plan's stages, got {len(layer_codes)}")
    parts = []
    for index, stage in enumerate(plan.stages):
        text = compress([layer_codes[layer] for layer in stage.layers])
        if stage.device != index % plan.num_devices:
            text += f"@{stage.device}"
        parts.append(text)
    return "|".join(parts)


@dataclass(frozen=True)
class Layout:
    """``starts[k]`` is stage k's first layer (``starts[0] == 0``); ``stage_device[k]`` its device."""

    starts: tuple[int, ...]
    stage_device: tuple[int, ...]
    num_layers: int

    @classmethod
    def of_stages(cls, stages: list[Stage], num_layers: int) -> Layout:
        return cls(tuple(stage.layers[0] for stage in stages), tuple(stage.device for stage in stages), num_layers)

    @property
    def num_stages(self) -> int:
        return len(self.starts)

    def stage_end(self, stage: int) -> int:
        """One past the stage's last layer."""
        return self.starts[stage + 1] if stage + 1 < len(self.starts) else self.num_layers

    def stages(self) -> list[Stage]:
        return [Stage(tuple(range(self.starts[k], self.stage_end(k))), self.stage_device[k])
                for k in range(self.num_stages)]

    def with_starts(self, starts: tuple[int, ...]) -> Layout:
        return Layout(starts, self.stage_device, self.num_layers)


def parse_layout_string(text: str, num_devices: int | None = None) -> tuple[Layout, list[str]]:
    """Parse a layout string back into the layout (stages and devices) and the per-layer codes.

    Unannotated stages go to ``stage index mod num_devices``; ``num_devices`` defaults to the number of
    stages (one stage per device).
    """
    stage_items = _LayoutParser(text).parse()
    num_devices = num_devices or len(stage_items)
    starts, devices, codes = [], [], []
    for index, (stage_codes, device) in enumerate(stage_items):
        device = index % num_devices if device is None else device
        if device >= num_devices:
            raise SpecError("layout", f"stage {index} is placed on device {device} but there are {num_devices}")
        starts.append(len(codes))
        devices.append(device)
        codes.extend(stage_codes)
    return Layout(tuple(starts), tuple(devices), len(codes)), codes


class _LayoutParser:
    """Recursive descent over the grammar in the module docstring."""

    def __init__(self, text: str):
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []
        position = 0
        stripped_end = len(text.rstrip())
        while position < stripped_end:
            match = TOKEN_PATTERN.match(text, position)
            if not match:
                raise SpecError("layout", f"unexpected character {text[position]!r} at position {position}")
            kind = "code" if match.group(1) else "number" if match.group(2) else "symbol"
            self.tokens.append((kind, match.group(match.lastindex), match.start(match.lastindex)))
            position = match.end()
        self.index = 0

    def parse(self) -> list[tuple[list[str], int | None]]:
        if not self.tokens:
            raise SpecError("layout", "is empty")
        stages = [self._stage()]
        while self._accept("|"):
            stages.append(self._stage())
        if self.index < len(self.tokens):
            self._fail("'|', ',' or the end")
        return stages

    def _stage(self) -> tuple[list[str], int | None]:
        codes = self._items()
        device = self._number() if self._accept("@") else None
        return codes, device

    def _items(self) -> list[str]:
        codes = self._item()
        while self._accept(","):
            codes += self._item()
        return codes

    def _item(self) -> list[str]:
        if self._accept("("):
            codes = self._items()
            if not self._accept(")"):
                self._fail("')'")
        elif self._peek_kind() == "code":
            codes = [self.tokens[self.index][1]]
            self.index += 1
        else:
            self._fail("a layer code or '('")
        if self._accept("*"):
            count = self._number()
            if count < 1:
                raise SpecError("layout", f"a repeat count must be >= 1, got {count}")
            codes = codes * count
        return codes

    def _number(self) -> int:
        if self._peek_kind() != "number":
            self._fail("a number")
        value = int(self.tokens[self.index][1])
        self.index += 1
        return value

    def _peek_kind(self) -> str | None:
        return self.tokens[self.index][0] if self.index < len(self.tokens) else None

    def _accept(self, symbol: str) -> bool:
        if self.index < len(self.tokens) and self.tokens[self.index][:2] == ("symbol", symbol):
            self.index += 1
            return True
        return False

    def _fail(self, expected: str):
        if self.index < len(self.tokens):
            _, value, position = self.tokens[self.index]
            raise SpecError("layout", f"expected {expected} at position {position}, got {value!r}")
        raise SpecError("layout", f"expected {expected} at the end of {self.text!r}")


def placement_kind(plan: Plan) -> str:
    """``sequential``, ``interleaved``, ``v-shape`` or ``custom``: how stages map onto devices."""
    num_devices, devices = plan.num_devices, [stage.device for stage in plan.stages]
    if devices == list(range(num_devices)):
        return "sequential"
    if len(devices) % num_devices == 0:
        if devices == [index % num_devices for index in range(len(devices))]:
            return "interleaved"
        v_shape = [index % num_devices if (index // num_devices) % 2 == 0
                   else num_devices - 1 - index % num_devices for index in range(len(devices))]
        if devices == v_shape:
            return "v-shape"
    return "custom"


def device_pattern(plan: Plan, device: int) -> str:
    return compress([action.type for action in plan.actions[device]])


def schedule_description(plan: Plan) -> str:
    """One line: placement, micro-batches, backward form, then each device's action-type pattern."""
    backward = "split backward (I/W)" if plan.uses_split_backward() else "full backward"
    header = (f"{plan.num_stages} stages on {plan.num_devices} devices ({placement_kind(plan)}), "
              f"{plan.num_microbatches} micro-batches, {backward}")
    patterns = "; ".join(f"d{device}: {device_pattern(plan, device)}" for device in range(plan.num_devices))
    return f"{header}; {patterns}"
