"""The saved cluster page form: it checks a cluster with the loader and service checks the API uses."""

from __future__ import annotations

from django import forms

from adaptis_web.studio.accounts.selectors import team_list_for_user
from adaptis_web.studio.catalog.clusters import MAX_CLUSTER_FILE_BYTES, cluster_parse_upload, cluster_preset_load
from adaptis_web.studio.catalog.specs import read_upload
from adaptis_web.studio.common.forms import SpecErrorFormMixin
from planner.errors import SpecError
from planner.service import ClusterSpec


class ClusterForm(SpecErrorFormMixin, forms.Form):
    """Save a cluster for a team: an uploaded file, a pasted document, or a copy of a preset or named cluster."""

    team = forms.ModelChoiceField(queryset=None, empty_label=None)
    name = forms.CharField(max_length=200, required=False, help_text="empty: the document's name")
    file = forms.FileField(label="Cluster file", required=False, help_text="adaptis.cluster/v1 as JSON or YAML")
    text = forms.CharField(label="…or paste the document", required=False,
                           widget=forms.Textarea(attrs={"rows": 8, "class": "mono", "style": "width: 100%"}))
    from_preset = forms.CharField(label="…or copy a preset or named cluster", required=False, max_length=100,
                                  widget=forms.TextInput(attrs={"placeholder": "h100-sxm-16x8"}))

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = team_list_for_user(user=user)
        self.cluster: ClusterSpec | None = None

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        sources = [name for name in ("file", "text", "from_preset") if cleaned.get(name)]
        if len(sources) != 1:
            self.add_error("file", "give one of a file, a pasted document or a preset name")
            return cleaned
        try:
            if sources == ["file"]:
                upload = cleaned["file"]
                self.cluster = cluster_parse_upload(content=read_upload(upload, field="file",
                                                                        limit=MAX_CLUSTER_FILE_BYTES),
                                                    filename=upload.name, field="file")
            elif sources == ["text"]:
                self.cluster = cluster_parse_upload(content=cleaned["text"].encode(), field="text")
            else:
                self.cluster = cluster_preset_load(cleaned["from_preset"].strip(), field="from_preset")
        except SpecError as error:
            self.add_spec_error(error)
        return cleaned
