"""Numbers as the plan pages show them: signed differences and ratios (memory: ``units``' binary_bytes)."""

from django import template

register = template.Library()


@register.filter
def signed(value, places=3) -> str:
    return "—" if value is None else f"{value:+.{int(places)}f}"


@register.filter
def ratio_percent(value) -> str:
    """A ratio new/old as a change: 0.9 -> ``-10.0 %``."""
    return "—" if value is None else f"{(value - 1) * 100:+.1f} %"
