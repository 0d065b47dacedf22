"""Small typed readers over untrusted JSON documents; each failure names the field.

Numbers are also held to the physical range of their field (``planner.limits.RANGES``), and a value shown in an
error is shortened (``shown``): an error message must not grow with a hostile document.
"""

from __future__ import annotations

import difflib
import math
import reprlib
from typing import Any

from planner.errors import SpecError
from planner.limits import bounds

_SHORT = reprlib.Repr()  # keyword arguments only from Python 3.12
_SHORT.maxstring = _SHORT.maxother = 60
_SHORT.maxlist = _SHORT.maxdict = 4
_SHORT.maxlevel = 2
_SHORT.maxlong = 40


def shown(value: Any) -> str:
    """``repr(value)`` cut to a readable length, in time independent of the value's size."""
    try:
        return _SHORT.repr(value)
    except ValueError:  # an integer past Python's 4,300-digit conversion limit
        return f"<an integer of {value.bit_length()} bits>"


def _in_range(field: str, key: str, value: float, minimum: float | None) -> None:
    low, high = bounds(key)
    if low is not None and (minimum is None or low > minimum) and value < low:
        raise SpecError(field, f"must be >= {_limit(low)}, got {shown(value)}")
    if high is not None and value > high:
        raise SpecError(field, f"must be <= {_limit(high)}, got {shown(value)}")


def _limit(bound: float) -> str:
    """A range's end as people read it: 16,777,216 (not 1.67772e+07), 0.001, 1e+300."""
    return f"{int(bound):,}" if float(bound).is_integer() and abs(bound) < 1e18 else f"{bound:g}"


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
        raise SpecError(field, f"must be one of {', '.join(choices)}; got {shown(value)}")
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
        raise SpecError(field, f"must be an integer, got {shown(value)}")
    if minimum is not None and value < minimum:
        raise SpecError(field, f"must be >= {minimum}, got {shown(value)}")
    _in_range(field, key, value, minimum)
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
        raise SpecError(field, f"must be a number, got {shown(value)}")
    if isinstance(value, int) and abs(value) > 1e300:
        raise SpecError(field, f"is out of range: {shown(value)}")
    if not math.isfinite(value):
        raise SpecError(field, "must be finite")
    if minimum is not None and (value < minimum or (exclusive_minimum and value == minimum)):
        relation = ">" if exclusive_minimum else ">="
        raise SpecError(field, f"must be {relation} {minimum}, got {shown(value)}")
    _in_range(field, key, value, minimum)
    return float(value)


def get_bool(doc: dict, key: str, path: str, *, default: bool) -> bool:
    if key not in doc:
        return default
    value = doc[key]
    if not isinstance(value, bool):
        raise SpecError(join(path, key), f"must be true or false, got {shown(value)}")
    return value


def check_format(doc: dict, expected: str) -> None:
    fmt = doc.get("format")
    if fmt != expected:
        raise SpecError("format", f"must be {expected!r}, got {shown(fmt)}")


def closest_key(key: str, known) -> str | None:
    """The known key ``key`` most likely misspells (``num_hiden_layers`` -> ``num_hidden_layers``), if any is
    close enough to be one (difflib's ratio at least 0.8)."""
    matches = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.8)
    return matches[0] if matches else None


def reject_unknown(doc: dict, allowed: set[str], path: str) -> None:
    unknown = sorted(str(key) for key in set(doc) - allowed)
    if unknown:
        closest = closest_key(unknown[0], allowed)
        guess = f"; did you mean {closest!r}?" if closest else ""
        raise SpecError(join(path, shown(unknown[0])[1:-1]),
                        f"unknown field{guess} (allowed: {', '.join(sorted(allowed))})")
