"""The action kinds for the pages' scripts, from the planner's one vocabulary (``planner.actions``): a page that
draws actions renders ``{% action_kinds_data %}`` and loads ``studio/action_kinds.js`` before the scripts that
read it."""

from django import template
from django.utils.html import json_script

from planner.service import ActionKind

register = template.Library()

# The timelines' colour of each kind ("R, G, B", an rgba() prefix: bars set their own opacity).
ACTION_COLOURS = {ActionKind.F: "31, 95, 191", ActionKind.B: "29, 122, 70", ActionKind.I: "214, 134, 0",
                  ActionKind.W: "124, 77, 196"}
ELEMENT_ID = "action-kinds-data"


@register.simple_tag
def action_kinds_data() -> str:
    """A JSON script element: every kind in order, with its description and colour."""
    return json_script([{"kind": kind.value, "description": kind.description, "colour": ACTION_COLOURS[kind]}
                        for kind in ActionKind], ELEMENT_ID)
