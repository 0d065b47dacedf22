"""API input and output shapes of specs and saved clusters."""

from __future__ import annotations

from rest_framework import serializers

from adaptis_web.studio.api.fields import DocumentField, IdField, KnownFieldsMixin, StrictCharField
from adaptis_web.studio.api.plain_output import PlainOutputMixin
from adaptis_web.studio.models import ClusterRecord, ModelSpecRecord


class SpecOutput(PlainOutputMixin, serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username")

    class Meta:
        model = ModelSpecRecord
        fields = ["id", "team", "owner", "name", "source_filename", "num_layers", "created_at", "archived_at"]


class SpecWarningOutput(serializers.Serializer):
    field = serializers.CharField(help_text="where in the uploaded document: file.num_hiden_layers")
    reason = serializers.CharField()


class SpecDetailOutput(SpecOutput):
    warnings = SpecWarningOutput(many=True, read_only=True,
                                 help_text="what the upload was accepted with but probably not as meant (a HF "
                                           "config's misspelt key, whose default was used instead)")

    class Meta(SpecOutput.Meta):
        fields = SpecOutput.Meta.fields + ["doc", "warnings"]


def document_create_schemas(*, doc: str, file: str) -> dict:
    """The request schemas of an upload (a spec, a cluster): exactly one of the document's two ways in, said in the
    schema per media type: a file in a form, or the document in JSON; no other fields (``KnownFieldsMixin``)."""
    common = {"team": {"type": "integer", "minimum": 1, "maximum": 2**63 - 1,
                       "description": "defaults to your only team"},
              "name": {"type": "string", "maxLength": 200, "pattern": "^[^\\x00]*$",
                       "description": "defaults to the document's name"}}
    return {"application/json": {"type": "object", "required": ["doc"], "additionalProperties": False, "properties": {
                **common, "doc": {"type": "object", "description": f"{doc}, inline"}}},
            "multipart/form-data": {"type": "object", "required": ["file"], "additionalProperties": False,
                                    "properties": {**common, "file": {"type": "string", "format": "binary",
                                                                      "description": file}}}}


SPEC_CREATE_SCHEMAS = document_create_schemas(doc="an adaptis.model/v1 document or a HF config.json",
                                              file="adaptis.model/v1 JSON/YAML or a HF config.json")
CLUSTER_CREATE_SCHEMAS = document_create_schemas(doc="an adaptis.cluster/v1 document",
                                                 file="adaptis.cluster/v1 as JSON or YAML")


class SpecCreateInput(KnownFieldsMixin, serializers.Serializer):
    team = IdField(required=False, help_text="defaults to your only team")
    file = serializers.FileField(required=False, help_text="adaptis.model/v1 JSON/YAML or a HF config.json")
    doc = DocumentField(required=False, help_text="the same document inline, instead of a file")
    name = StrictCharField(required=False, allow_blank=True, max_length=200)

    def validate(self, attrs):
        if ("file" in attrs) == ("doc" in attrs):
            raise serializers.ValidationError({"file": "give exactly one of 'file' (upload) or 'doc' (inline)"})
        return attrs


class ClusterOutput(PlainOutputMixin, serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username")

    class Meta:
        model = ClusterRecord
        fields = ["id", "team", "owner", "name", "source_filename", "num_devices", "device_name", "created_at",
                  "archived_at"]


class ClusterDetailOutput(ClusterOutput):
    doc = serializers.JSONField(help_text="the adaptis.cluster/v1 document")

    class Meta(ClusterOutput.Meta):
        fields = ClusterOutput.Meta.fields + ["doc"]


class ClusterCreateInput(KnownFieldsMixin, serializers.Serializer):
    team = IdField(required=False, help_text="defaults to your only team")
    file = serializers.FileField(required=False, help_text="adaptis.cluster/v1 as JSON or YAML")
    doc = DocumentField(required=False, help_text="the same document inline, instead of a file")
    name = StrictCharField(required=False, allow_blank=True, max_length=200,
                           help_text="defaults to the document's name")

    def validate(self, attrs):
        if ("file" in attrs) == ("doc" in attrs):
            raise serializers.ValidationError({"file": "give exactly one of 'file' (upload) or 'doc' (inline)"})
        return attrs
