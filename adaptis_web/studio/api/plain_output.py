"""Output serializers for rows the API lists by the dozen: DRF's ``to_representation`` with the work it repeats
per row and field done once per serializer.

DRF walks a generator of the readable fields for every row and reads each value through ``Field.get_attribute``
(a loop over the source's parts, a callable check on each); a jobs list page spent a third of its time there
(``benchmarks/web_profile.py``). Here the readable fields are listed once and a plain attribute (a model field,
or one through a loaded relation: ``spec.name``) is read with ``operator.attrgetter``. Every value is still
turned into its output by the field's own ``to_representation``; anything else (related fields, nested
serializers, method fields, a value that is callable or missing) goes DRF's way, so the output is the same.

A ModelSerializer also builds its fields anew for every instance, reading the model's field definitions each time
(``get_fields``: a fifth of a run detail request's Python time). Here they are built once per class and each
instance gets a deep copy, which is what DRF already does with the declared fields.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable

from rest_framework import relations, serializers
from rest_framework.fields import HiddenField, SkipField
from rest_framework.relations import PKOnlyObject

_DRF_WAY = (relations.RelatedField, relations.ManyRelatedField, serializers.BaseSerializer,
            serializers.SerializerMethodField, HiddenField)


def _reader(field: serializers.Field) -> Callable:
    if isinstance(field, _DRF_WAY) or not field.source_attrs:  # source="*" is the row itself
        return field.get_attribute
    path = operator.attrgetter(".".join(field.source_attrs))

    def read(instance):
        try:
            value = path(instance)
        except Exception:  # noqa: BLE001 - a missing relation, ObjectDoesNotExist...: DRF decides what it means
            return field.get_attribute(instance)
        return field.get_attribute(instance) if callable(value) else value

    return read


class PlainOutputMixin:
    # First in the bases of a read-only ModelSerializer: class JobOutput(PlainOutputMixin, ...). No docstring:
    # drf-spectacular would describe every such serializer in the schema with it.

    def get_fields(self):
        cls = type(self)
        built = cls.__dict__.get("_built_fields")  # this class's own, not a base class's
        if built is None:
            built = super().get_fields()  # unbound fields: each instance binds its copies
            cls._built_fields = built
        return copy.deepcopy(built)

    def to_representation(self, instance):
        readers = self.__dict__.get("_plain_readers")
        if readers is None:
            readers = self._plain_readers = [(field.field_name, _reader(field), field.to_representation)
                                             for field in self._readable_fields]
        ret = {}
        for name, read, represent in readers:
            try:
                attribute = read(instance)
            except SkipField:
                continue
            check_for_none = attribute.pk if isinstance(attribute, PKOnlyObject) else attribute
            ret[name] = None if check_for_none is None else represent(attribute)
        return ret
