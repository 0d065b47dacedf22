"""URL parts: a row's id, a kind of curated object (specs, clusters, jobs, plans, runs) and what is done to one."""

from django.urls import register_converter


MAX_ID = 2**63 - 1  # a database's 64-bit primary key


class RowId:
    """A positive 64-bit id. Django's ``int`` takes any run of digits, and a lookup of an id past 2^63 fails in the
    database driver (a 500); past this bound the URL does not match at all (a 404)."""

    regex = "[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        number = int(value)
        if number > MAX_ID:
            raise ValueError(f"{value} is past the largest id")
        return number

    def to_url(self, value: int) -> str:
        return str(value)


class CuratedKind:
    # A group of its own: drf-spectacular anchors a converter's regex as ^...$ in the schema, and ^a|b$ would
    # mean "starts with a, or ends with b"
    regex = "(?:specs|clusters|jobs|plans|runs)"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class CuratedAction(CuratedKind):
    regex = "(?:archive|unarchive|restore)"


register_converter(RowId, "id")
register_converter(CuratedKind, "curated_kind")
register_converter(CuratedAction, "curated_action")
