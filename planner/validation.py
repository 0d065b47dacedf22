"""Small typed readers over untrusted JSON documents; each failure names the field."""

from __future__ import annotations

from typing import Any

from planner.errors import SpecError


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def require_mapping(value: Any, path: str) -> dict:
    if not isinstance(value, dict):
        raise SpecError(path, f"must be an object, got {type(value).__name__}")
    return value


def require_list(value: Any, path: str, *, min_length: int = 0) -> list:
    if not isinstance(value, list):
        raise SpecError(path, f"must be a list, got {type(value).__name__}")
    if len(value) < min_length:
        raise SpecError(path, f"must hold at least {min_length} item(s)")
    return value


def get_str(doc: dict, key: str, path: str, *, default: Any = ..., choices: tuple | None = None) -> str:
    field = join(path, key)
    if key not in doc:
        if default is ...:
            raise SpecError(field, "is required")
        return default
    value = doc[key]
    if not isinstance(value, str) or not value:
        raise SpecError(field, "must be a non-empty string")
    if choices is not None and value not in choices:
        raise SpecError(field, f"must be one of {', '.join(choices)}; got {value!r}")
    return value


def get_int(doc: dict, key: str, path: str, *, default: Any = ..., minimum: int | None = 1,
            allow_none: bool = False) -> int | None:
    field = join(path, key)
    if key not in doc or (allow_none and doc[key] is None):
        if key not in doc and default is ...:
            raise SpecError(field, "is required")
        return None if key in doc else default
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(field, f"must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise SpecError(field, f"must be >= {minimum}, got {value}")
    return value


def get_number(doc: dict, key: str, path: str, *, default: Any = ..., minimum: float | None = 0.0,
               exclusive_minimum: bool = False) -> float:
    field = join(path, key)
    if key not in doc:
        if default is ...:
            raise SpecError(field, "is required")
        return default
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(field, f"must be a number, got {value!r}")
    if value != value or value in (float("inf"), float("-inf")):
        raise SpecError(field, "must be finite")
    if minimum is not None and (value < minimum or (exclusive_minimum and value == minimum)):
        relation = ">" if exclusive_minimum else ">="
        raise SpecError(field, f"must be {relation} {minimum}, got {value}")
    return float(value)


def get_bool(doc: dict, key: str, path: str, *, default: bool) -> bool:
    if key not in doc:
        return default
    value = doc[key]
    if not isinstance(value, bool):
        raise SpecError(join(path, key), f"must be true or false, got {value!r}")
    return value


def check_format(doc: dict, expected: str) -> None:
    fmt = doc.get("format")
    if fmt != expected:
        raise SpecError("format", f"must be {expected!r}, got {fmt!r}")


def reject_unknown(doc: dict, allowed: set[str], path: str) -> None:
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise SpecError(join(path, unknown[0]), f"unknown field (allowed: {', '.join(sorted(allowed))})")
