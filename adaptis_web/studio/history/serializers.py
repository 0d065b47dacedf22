"""API input and output shapes of curation: renaming, archiving, deleting, what depends on an object."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from adaptis_web.studio.api.fields import NOT_BLANK, KnownFieldsMixin, StrictCharField


class RenameInput(KnownFieldsMixin, serializers.Serializer):
    name = StrictCharField(max_length=200, allow_blank=True, help_text="empty: the page shows the id")


@extend_schema_field({"type": "string", "maxLength": 200, "pattern": NOT_BLANK.regex.pattern})
class RequiredNameField(StrictCharField):
    """The schema says what history.curation.object_rename refuses (white space alone), which says so naming the
    kind; the text reaches it as sent."""

    def __init__(self, **kwargs):
        super().__init__(trim_whitespace=False, error_messages={"blank": "is required"}, **kwargs)


class RequiredNameInput(KnownFieldsMixin, serializers.Serializer):
    """A spec's or a saved cluster's new name: one is required (jobs, plans and runs may have none)."""

    name = RequiredNameField(max_length=200)


class CuratedOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    archived_at = serializers.DateTimeField(allow_null=True)
    deleted_at = serializers.DateTimeField(allow_null=True)


class DependentOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    created_by = serializers.CharField()


class DependentsOutput(serializers.Serializer):
    jobs = DependentOutput(many=True, required=False)
    plans = DependentOutput(many=True, required=False)
    runs = DependentOutput(many=True, required=False)
