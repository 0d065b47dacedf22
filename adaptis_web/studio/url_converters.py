"""URL parts that name a kind of curated object (specs, jobs, plans, runs) and what is done to one."""

from django.urls import register_converter


class CuratedKind:
    regex = "specs|jobs|plans|runs"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class CuratedAction(CuratedKind):
    regex = "archive|unarchive|restore"


register_converter(CuratedKind, "curated_kind")
register_converter(CuratedAction, "curated_action")
