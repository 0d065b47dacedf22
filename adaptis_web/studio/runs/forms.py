"""The Run on CPU form (the plan and job pages' run card)."""

from __future__ import annotations

from django import forms

from adaptis_web.studio.common.forms import SpecErrorFormMixin
from adaptis_web.studio.runs.local_runs import DEFAULT_RUN_STEPS, MAX_RUN_STEPS


class RunForm(SpecErrorFormMixin, forms.Form):
    steps = forms.IntegerField(min_value=1, max_value=MAX_RUN_STEPS, initial=DEFAULT_RUN_STEPS,
                               help_text=f"training steps (iterations), at most {MAX_RUN_STEPS}: the first warms up, "
                                         f"the ones after it show the steady state compared with the prediction")
    scale_down = forms.BooleanField(required=False, label="Run a scaled-down copy (same layer pattern, hidden 64)")
