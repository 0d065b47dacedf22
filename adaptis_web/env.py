"""Typed readers of environment variables that fail loudly.

A misspelt boolean or a non-numeric port must stop the process at start-up with the variable's name, not
silently fall back to a default that behaves differently in production.
"""

from __future__ import annotations

import os
from typing import Mapping

from django.core.exceptions import ImproperlyConfigured

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
_REQUIRED = object()


def _raw(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    value = (os.environ if environ is None else environ).get(name)
    return None if value is None or value.strip() == "" else value.strip()


def env_str(name: str, default: str | object = _REQUIRED, *, environ: Mapping[str, str] | None = None) -> str:
    """``environ`` (``os.environ`` by default): another process's environment, as adaptis_web.processes reads it."""
    value = _raw(name, environ)
    if value is not None:
        return value
    if default is _REQUIRED:
        raise ImproperlyConfigured(f"environment variable {name} is required")
    return default


def env_bool(name: str, default: bool) -> bool:
    value = _raw(name)
    if value is None:
        return default
    word = value.lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ImproperlyConfigured(
        f"environment variable {name} must be one of {', '.join(TRUE_WORDS + FALSE_WORDS)}; got {value!r}")


def env_int(name: str, default: int, *, minimum: int | None = None,
            environ: Mapping[str, str] | None = None) -> int:
    value = _raw(name, environ)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"environment variable {name} must be an integer; got {value!r}") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"environment variable {name} must be >= {minimum}; got {number}")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    """A comma-separated list; empty items are an error (a stray comma usually hides a typo)."""
    value = _raw(name)
    if value is None:
        return list(default)
    items = [item.strip() for item in value.split(",")]
    if any(not item for item in items):
        raise ImproperlyConfigured(f"environment variable {name} has an empty item in {value!r}")
    return items
