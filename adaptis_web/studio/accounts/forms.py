"""The team and API token page forms."""

from __future__ import annotations

from django import forms

from adaptis_web.studio.common.forms import SpecErrorFormMixin


class TokenForm(SpecErrorFormMixin, forms.Form):
    name = forms.CharField(max_length=100, help_text="what will use it, e.g. \"CI nightly\"")
    expires_in_days = forms.IntegerField(label="Expires in (days)", min_value=1, initial=30)


class TeamForm(SpecErrorFormMixin, forms.Form):
    name = forms.CharField(max_length=100, label="Team name")
