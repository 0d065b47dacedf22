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
    """A compute kind, spelled by its letter, with what it consumes, produces, holds and frees as plain member
    attributes (read in the simulator's and the search's inner loops):

    - ``description``;
    - ``profile_parts``: the profile's per-layer times (``planner.profile.LayerProfile`` fields) it runs;
    - ``boundary``: the boundary tensor it consumes from a neighbouring stage and produces for the neighbour on
      the other side (``ACTIVATION`` or ``GRADIENT``); None for W, which exchanges nothing;
    - ``receives_from`` / ``sends_to``: the stage offset of the neighbour it consumes that tensor from / produces
      it for (F: -1 / +1; B and I: +1 / -1; W: None);
    - ``takes_activations``: it starts holding the stage's activations of its micro-batch (F);
    - ``frees_activations``: it ends holding them (a full backward, or the W that ends a split one);
    - ``is_split_backward``: I and W, a backward split into its input and weight halves (zero-bubble style);
    - ``code``: its place in ``ACTION_KINDS``, for tables indexed by kind.
    """

    def __new__(cls, letter: str, description: str, profile_parts: tuple[str, ...], boundary: str | None,
                receives_from: int | None, takes_activations: bool, frees_activations: bool,
                is_split_backward: bool) -> ActionKind:
        kind = str.__new__(cls, letter)
        kind._value_ = letter
        kind.description = description
        kind.profile_parts = profile_parts
        kind.boundary = boundary
        kind.receives_from = receives_from
        kind.sends_to = None if receives_from is None else -receives_from
        kind.takes_activations = takes_activations
        kind.frees_activations = frees_activations
        kind.is_split_backward = is_split_backward
        return kind

    # letter, description, profile parts, boundary, receives from, takes / frees activations, split backward
    F = "F", "forward", ("forward",), ACTIVATION, -1, True, False, False
    B = "B", "backward", ("backward_input", "backward_weight"), GRADIENT, 1, False, True, False
    I = "I", "backward (input)", ("backward_input",), GRADIENT, 1, False, False, True  # noqa: E741 (torch's letter)
    W = "W", "backward (weight)", ("backward_weight",), None, None, False, True, True

    @classmethod
    def parse(cls, text: object, field_name: str = "type") -> ActionKind:
        """The kind spelled ``text``; SpecError naming ``field_name`` for any other value."""
        if isinstance(text, str) and text in ACTION_KINDS:
            return cls(text)
        raise SpecError(field_name, f"must be one of {', '.join(ACTION_KINDS)}, got {text!r}")

    @property
    def needs_first(self) -> ActionKind | None:
        """The kind of the same stage and micro-batch whose result this kind consumes: F for B and I (the
        saved activations), I for W (what the input-gradient pass left for the weight gradient)."""
        return _NEEDS_FIRST[self]


ACTION_KINDS = tuple(ActionKind)
for _code, _kind in enumerate(ACTION_KINDS):
    _kind.code = _code
_NEEDS_FIRST = {ActionKind.F: None, ActionKind.B: ActionKind.F, ActionKind.I: ActionKind.F,
                ActionKind.W: ActionKind.I}
