"""Untrusted text to a parsed document (JSON or YAML), bounded: size, nesting, no YAML aliases, Python's integer
limits. Every failure is a ``SpecError`` on ``field`` (default ``file``) with the reason, never an exception from the
parser, and never one whose message grows with the document.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from planner.errors import SpecError
from planner.limits import MAX_DEPTH, MAX_DOCUMENT_BYTES, depth_reason

YAML_SUFFIXES = (".yaml", ".yml")


def _parse_json(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise SpecError("file", f"invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}") from None
    except RecursionError:
        raise SpecError("file", f"nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as error:  # e.g. an integer past Python's 4,300-digit conversion limit
        raise SpecError("file", f"invalid JSON: {str(error)[:200]}") from None


class _NoAliasLoader(yaml.SafeLoader):
    """YAML without anchors and aliases: a few hundred bytes of nested aliases expand to billions of nodes (the
    "billion laughs"), and nothing in our formats needs them."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise SpecError("file", f"YAML aliases (*name) are not accepted (line {mark.line + 1}, column "
                                    f"{mark.column + 1}): write the value out")
        return super().compose_node(parent, index)


def _parse_yaml(text: str) -> object:
    try:
        return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 — a SafeLoader subclass
    except SpecError:
        raise
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error)
        raise SpecError("file", f"invalid YAML{where}: {problem}") from None
    except RecursionError:
        raise SpecError("file", f"nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as error:
        raise SpecError("file", f"invalid YAML: {str(error)[:200]}") from None


def parse_document(text: str, filename: str = "", field: str = "file") -> object:
    """JSON or YAML by the file's suffix; without a telling suffix, JSON when it looks like JSON."""
    try:
        return _parse_document(text, filename)
    except SpecError as error:
        raise SpecError(field, error.reason) from None


def _parse_document(text: str, filename: str) -> object:
    if not text.strip():
        raise SpecError("file", "is empty")
    if len(text) > MAX_DOCUMENT_BYTES:
        raise SpecError("file", f"is larger than {MAX_DOCUMENT_BYTES // (1 << 20)} MiB")
    suffix = Path(filename).suffix.lower()
    if suffix in YAML_SUFFIXES:
        doc = _parse_yaml(text)
    elif suffix == ".json" or text.lstrip().startswith(("{", "[")):
        doc = _parse_json(text)
    else:
        doc = _parse_yaml(text)
    reason = depth_reason(doc)
    if reason:
        raise SpecError("file", reason)
    return doc
