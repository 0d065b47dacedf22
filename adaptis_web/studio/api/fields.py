"""The request fields every domain's serializers share: text sent as text (no NUL, its length as sent), booleans
as true or false, a choice refused naming the choices, null from a form, a JSON document as an object, a row id in
range."""

from __future__ import annotations

from django.core.validators import RegexValidator
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.utils import html

from adaptis_web.studio.url_converters import MAX_ID


NO_NUL = RegexValidator(r"^[^\x00]*$", "must not contain a NUL character")


class StrictCharField(serializers.CharField):
    """Text in a request must be sent as text: DRF's CharField turns 867 into "867", which the schema (a string)
    says is invalid. And its length is the length sent, as the schema's maxLength counts it: DRF counts it after
    taking the white space around it away."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if not any(isinstance(validator, RegexValidator) for validator in self.validators):
            self.validators.append(NO_NUL)  # refused anyway by DRF; the pattern puts it in the schema

    def get_value(self, dictionary):
        # A form's empty value for text that may not be blank is refused, as JSON's "" is: DRF reads it as "not
        # given" where the field is optional, so a form PATCH of a team with name= was answered 200 and did nothing
        if (html.is_html_input(dictionary) and self.field_name in dictionary and dictionary[self.field_name] == ""
                and not self.allow_blank and not self.allow_null):
            return ""
        return super().get_value(dictionary)

    def run_validation(self, data=serializers.empty):
        if isinstance(data, str) and self.max_length is not None and len(data) > self.max_length:
            self.fail("max_length", max_length=self.max_length)  # before a text of white space is taken as blank
        return super().run_validation(data)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """true or false (as JSON, or as the words in a form): DRF's BooleanField also takes 0, 1, "yes", "on"...,
    which the schema (a boolean) says are invalid."""

    def to_internal_value(self, data):
        if isinstance(data, bool):  # not ``data in (True, False)``: 0 == False and 1 == True
            return data
        if isinstance(data, str) and data in ("true", "false"):
            return data == "true"
        self.fail("invalid", input=data)


class ChoiceField(serializers.ChoiceField):
    """One of a fixed set in a request: a value outside it is refused naming the set, where DRF's ChoiceField says
    only that it is not a valid choice."""

    default_error_messages = {"invalid_choice": '"{input}" is not a valid choice; give one of {choices}.'}

    def to_internal_value(self, data):
        if data == "" and self.allow_blank:
            return ""
        try:
            return self.choice_strings_to_values[str(data)]
        except KeyError:
            self.fail("invalid_choice", input=data, choices=", ".join(self.choice_strings_to_values))


class FormNullMixin:
    """A field that may be null: JSON's null, or in a form (where every value is text) the word "null" or
    nothing, as DRF already reads an empty one."""

    def get_value(self, dictionary):
        value = super().get_value(dictionary)
        if self.allow_null and html.is_html_input(dictionary) and value == "null":
            return None
        return value


class OptionalIntegerField(FormNullMixin, serializers.IntegerField):
    pass


class OptionalChoiceField(FormNullMixin, ChoiceField):
    pass


class OptionalBooleanField(FormNullMixin, StrictBooleanField):
    pass


@extend_schema_field(OpenApiTypes.OBJECT)
class DocumentField(serializers.JSONField):
    """A JSON document in a request (a model, a cluster, a plan): an object, as its schema says; DRF's JSONField
    takes any JSON value. In a form, the document's JSON text."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if not isinstance(value, dict):
            self.fail("not_a_document", type=type(value).__name__)
        return value

    default_error_messages = {"not_a_document": "must be a JSON object (a document), not {type}"}


def IdField(**kwargs) -> serializers.IntegerField:  # noqa: N802 — a field, named like one
    """A row id in a request: a positive 64-bit integer (past 2^63 the database driver fails)."""
    field = OptionalIntegerField if kwargs.get("allow_null") else serializers.IntegerField
    return field(min_value=1, max_value=MAX_ID, **kwargs)


# The characters Python's str.strip() takes away (str.isspace()), which DRF does to text before it checks it, spelt
# out: \s means other characters in Python than in the schema's regular expressions (ECMA 262: not \x1c-\x1f or
# \x85, but \ufeff), and takes NUL along with it.
WHITE_SPACE = r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
NOT_BLANK = RegexValidator(rf"^[^\x00]*[^\x00{WHITE_SPACE}][^\x00]*$",
                           "must contain a character other than white space, and no NUL")


class KnownFieldsMixin:
    """A request names only its serializer's fields: DRF drops any other key without a word, so a typo, or the pins
    sent as one ``pins`` object where the request takes them as fields, would be ignored and the job planned as if
    never asked. Each unknown key is a 400 naming it; ``unknown_hints`` says what to send instead where a key is a
    likely mistake. The schema says the same (``additionalProperties: false``,
    ``api.schema.document_request_rules``)."""

    unknown_hints: dict[str, str] = {}

    def to_internal_value(self, data):
        if hasattr(data, "keys"):
            unknown = sorted(set(data.keys()) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({
                    key: [self.unknown_hints.get(key, f"is not a field of this request; its fields are "
                                                      f"{', '.join(self.fields)}")] for key in unknown})
        return super().to_internal_value(data)
