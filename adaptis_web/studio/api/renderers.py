"""The API's JSON renderer: DRF's, which also sends text that is already JSON (``RawJSON``) as it is.

A plan's documents and prediction are a few hundred KB of JSON that never change (planning.plan_json keeps them
encoded): decoding them from the database and encoding them again took most of a plan request's time.
"""

from __future__ import annotations

import functools
import secrets

from rest_framework import renderers
from rest_framework.utils.encoders import JSONEncoder


class RawJSON:
    """A value given as its JSON text, rendered verbatim. The text must be valid JSON (``plan_json.dumps``)."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def __eq__(self, other) -> bool:
        return isinstance(other, RawJSON) and other.text == self.text

    def __repr__(self) -> str:
        return f"RawJSON({self.text[:40]!r}...)"


class _PlaceholderEncoder(JSONEncoder):
    """Writes each RawJSON as a string naming it; the renderer puts the text in its place afterwards."""

    def __init__(self, *args, fragments: list[str], mark: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.fragments, self.mark = fragments, mark

    def default(self, obj):
        if isinstance(obj, RawJSON):
            self.fragments.append(obj.text)
            return f"{self.mark}{len(self.fragments) - 1}"
        return super().default(obj)


class JSONRenderer(renderers.JSONRenderer):
    def render(self, data, accepted_media_type=None, renderer_context=None):
        fragments: list[str] = []
        mark = f"raw-json-{secrets.token_hex(8)}-"  # random per response: no string in the data can equal it
        self.encoder_class = functools.partial(_PlaceholderEncoder, fragments=fragments, mark=mark)
        rendered = super().render(data, accepted_media_type, renderer_context)
        for index, text in enumerate(fragments):
            rendered = rendered.replace(f'"{mark}{index}"'.encode(), text.encode(), 1)
        return rendered
