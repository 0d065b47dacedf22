"""The action kinds of the plan IR, and what each consumes and produces.

torch.distributed.pipelining's compute-only vocabulary (its ``_ComputationType``): a stage runs, per micro-batch,
an F and either one full backward B or its two halves, I (the input gradient) then W (the weight gradient).
A kind is a ``str`` enum so that plan documents, timing events and the API keep the one-letter spelling.

Between stages, two boundary tensors travel: the stage's output *activation* (from an F to the next stage's F)
and its input *gradient* (from a B or I to the previous stage's B or I); W exchanges nothing. Within a stage and
micro-batch, B and I consume what the F saved and W what the I left. On a stage's device, an F takes the
micro-batch's activations and they stay until the backward that frees them: the B, or the W of a split backward
(the I keeps them for the W).
"""

from __future__ import annotations

from enum import StrEnum

from planner.errors import SpecError

ACTIVATION = "activation"
GRADIENT = "gradient"


class ActionKind(StrEnum):
    F = "F"
    B = "B"
    I = "I"  # noqa: E741 (torch's letter for the input-gradient backward)
    W = "W"

    @classmethod
    def parse(cls, text: object, field_name: str = "type") -> ActionKind:
        """The kind spelled ``text``; SpecError naming ``field_name`` for any other value."""
        if isinstance(text, str) and text in ACTION_KINDS:
            return cls(text)
        raise SpecError(field_name, f"must be one of {', '.join(ACTION_KINDS)}, got {text!r}")

    @property
    def code(self) -> int:
        """The kind's place in ``ACTION_KINDS`` (F 0, B 1, I 2, W 3), for tables indexed by kind."""
        return _CODES[self]

    @property
    def description(self) -> str:
        return _DESCRIPTIONS[self]

    @property
    def profile_parts(self) -> tuple[str, ...]:
        """The profile's per-layer times (``planner.profile.Layer`` fields) an action of this kind runs."""
        return _PROFILE_PARTS[self]

    @property
    def boundary(self) -> str | None:
        """The boundary tensor this kind consumes from a neighbouring stage and produces for the neighbour on
        the other side (``ACTIVATION`` or ``GRADIENT``); None for W, which exchanges nothing."""
        return _BOUNDARIES[self]

    @property
    def receives_from(self) -> int | None:
        """The stage offset of the neighbour whose boundary tensor this kind consumes: -1 (F), +1 (B, I)."""
        return _RECEIVES_FROM[self]

    @property
    def sends_to(self) -> int | None:
        """The stage offset of the neighbour that consumes the boundary tensor this kind produces."""
        offset = _RECEIVES_FROM[self]
        return None if offset is None else -offset

    @property
    def needs_first(self) -> ActionKind | None:
        """The kind of the same stage and micro-batch whose result this kind consumes: F for B and I (the
        saved activations), I for W (what the input-gradient pass left for the weight gradient)."""
        return _NEEDS_FIRST[self]

    @property
    def takes_activations(self) -> bool:
        """Whether this kind starts holding the stage's activations of its micro-batch (F)."""
        return self is ActionKind.F

    @property
    def frees_activations(self) -> bool:
        """Whether this kind ends holding them: a full backward, or the W that ends a split one."""
        return self in (ActionKind.B, ActionKind.W)

    @property
    def is_split_backward(self) -> bool:
        """I and W: a backward split into its input and weight halves (zero-bubble style)."""
        return self in (ActionKind.I, ActionKind.W)


ACTION_KINDS = tuple(ActionKind)
_CODES = {kind: code for code, kind in enumerate(ACTION_KINDS)}
_DESCRIPTIONS = {ActionKind.F: "forward", ActionKind.B: "backward", ActionKind.I: "backward (input)",
                 ActionKind.W: "backward (weight)"}
_PROFILE_PARTS = {ActionKind.F: ("forward",), ActionKind.B: ("backward_input", "backward_weight"),
                  ActionKind.I: ("backward_input",), ActionKind.W: ("backward_weight",)}
_BOUNDARIES = {ActionKind.F: ACTIVATION, ActionKind.B: GRADIENT, ActionKind.I: GRADIENT, ActionKind.W: None}
_RECEIVES_FROM = {ActionKind.F: -1, ActionKind.B: 1, ActionKind.I: 1, ActionKind.W: None}
_NEEDS_FIRST = {ActionKind.F: None, ActionKind.B: ActionKind.F, ActionKind.I: ActionKind.F,
                ActionKind.W: ActionKind.I}
