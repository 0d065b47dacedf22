"""The API's parsers.

- JSON, bounded like every other way a document comes in (``planner.documents``): the body's size is checked
  before it is read, nesting and Python's integer limits give a 400 naming ``body``, never a 500 (DRF's own parser
  hands ``json.loads`` an unbounded stream and lets RecursionError through).
- Multipart form data whose every part names a field (``StrictMultiPartParser``)."""

from __future__ import annotations

import json

from django.conf import settings
from rest_framework.exceptions import ParseError
from django.utils.http import parse_header_parameters
from rest_framework.parsers import JSONParser, MultiPartParser

from planner.service import depth_reason


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise ParseError(f"the body is larger than {limit // (1 << 20)} MiB")
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            data = json.loads(raw.decode(encoding))
        except UnicodeDecodeError as error:
            raise ParseError(f"the body is not {encoding} text (invalid byte at offset {error.start})") from None
        except json.JSONDecodeError as error:
            raise ParseError(f"invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}") from None
        except RecursionError:
            raise ParseError("the body nests too deep") from None
        except ValueError as error:  # an integer past Python's 4,300-digit conversion limit
            raise ParseError(f"invalid JSON: {str(error)[:200]}") from None
        reason = depth_reason(data)
        if reason:
            raise ParseError(f"the body {reason}")
        return data


class _DelimiterCount:
    """A request stream that counts the multipart delimiters (``--`` and the boundary) in what is read of it."""

    def __init__(self, stream, delimiter: bytes):
        self.stream, self.delimiter, self.count, self._tail = stream, delimiter, 0, b""

    def read(self, *args):
        chunk = self.stream.read(*args)
        if chunk:
            window = self._tail + chunk  # a delimiter cut between two reads
            self.count += window.count(self.delimiter) - self._tail.count(self.delimiter)
            self._tail = window[-(len(self.delimiter) - 1):]
        return chunk

    def __getattr__(self, name):
        return getattr(self.stream, name)


class StrictMultiPartParser(MultiPartParser):
    """Multipart form data in which every part is a field or a file: Django skips a part with no
    Content-Disposition name (or no headers at all) and reads the rest, so a body that is not a form at all (``[]``
    between two delimiters) came through as an empty form. Such a body is a 400 naming ``body``."""

    def parse(self, stream, media_type=None, parser_context=None):
        _, params = parse_header_parameters(media_type or "")
        boundary = params.get("boundary", "")
        counted = _DelimiterCount(stream, b"--" + boundary.encode("latin-1")) if stream is not None and boundary else None
        result = super().parse(stream if counted is None else counted, media_type, parser_context)
        if counted is not None:
            parts = counted.count - 1  # the last delimiter closes the body
            named = sum(len(values) for _, values in result.data.lists()) + sum(
                len(values) for _, values in result.files.lists())
            if parts > named:
                raise ParseError(f"the multipart body has {parts} part(s), {parts - named} of them without a "
                                 "Content-Disposition header naming a form field")
        return result
