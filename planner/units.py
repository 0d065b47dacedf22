"""Quantities as people read them: memory in binary units named as such ("48.0 GiB", not Django's "48.0 GB" for
48 GiB). One home for the planner's messages and the web's pages (its ``binary_bytes`` template filter)."""

from __future__ import annotations

BINARY_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


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
