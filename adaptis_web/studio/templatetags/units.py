"""Units on pages: memory in binary units named as such (Django's ``filesizeformat`` divides by 1024 and prints
"GB", so an L40S's 48 GiB read "48.0 GB")."""

from django import template

register = template.Library()

BINARY_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


@register.filter
def binary_bytes(value) -> str:
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


@register.filter
def signed_binary_bytes(value) -> str:
    """A change in bytes: "+1.5 GiB", "−512.0 MiB" (the sign, then ``binary_bytes`` of its size); "—" for none."""
    if value is None or value == "":
        return "—"
    return ("+" if float(value) >= 0 else "−") + binary_bytes(abs(float(value)))
