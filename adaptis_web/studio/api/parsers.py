"""The API's JSON parser, bounded like every other way a document comes in (``planner.documents``): the body's
size is checked before it is read, nesting and Python's integer limits give a 400 naming ``body``, never a 500
(DRF's own parser hands ``json.loads`` an unbounded stream and lets RecursionError through)."""

from __future__ import annotations

import json

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from planner.limits import depth_reason


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
