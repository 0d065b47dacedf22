"""Quantities as people read them: memory in binary units named as such ("48.0 GiB", not Django's "48.0 GB" for
48 GiB), and counts as the field writes them ("15.6 T tokens", "405 B parameters"). One home for the planner's
messages and the web's pages (its ``binary_bytes`` and ``decimal_count`` template filters)."""

from __future__ import annotations

BINARY_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")
DECIMAL_UNITS = (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3))   # as model cards count tokens and parameters


def binary_bytes(value: float | int | str | None) -> str:
    """``value`` bytes as "48.0 GiB", "512.0 MiB", "900 B"; "—" for none."""
    if value is None or value == "":
        return "—"
    amount = float(value)
    if abs(amount) < 1024:
        return f"{amount:.0f} B"
    for unit in BINARY_UNITS:
        amount /= 1024
        if abs(amount) < 1024 or unit == BINARY_UNITS[-1]:
            return f"{amount:.1f} {unit}"
    raise AssertionError("unreachable")


def signed_binary_bytes(value: float | int | str | None) -> str:
    """A change in bytes: "+1.5 GiB", "−512.0 MiB" (the sign, then ``binary_bytes`` of its size); "—" for none."""
    if value is None or value == "":
        return "—"
    return ("+" if float(value) >= 0 else "−") + binary_bytes(abs(float(value)))


def decimal_count(value: float | int | str | None) -> str:
    """A count as "15.6 T", "405 B", "1.2 M", "512"; three significant digits; "—" for none."""
    if value is None or value == "":
        return "—"
    amount = float(value)
    for unit, size in DECIMAL_UNITS:
        if abs(amount) >= size:
            return f"{amount / size:.3g} {unit}"
    return f"{amount:.3g}"
