"""Numbers as the plan pages show them: memory in GiB (2^30 bytes, labelled so), signed differences."""

from django import template

register = template.Library()
GIB = 1024 ** 3


@register.filter
def gib(value) -> str:
    """``1.23 GiB``; an em dash for no value."""
    return "—" if value is None else f"{value / GIB:.2f} GiB"


@register.filter
def gib_signed(value) -> str:
    return "—" if value is None else f"{value / GIB:+.2f} GiB"


@register.filter
def signed(value, places=3) -> str:
    return "—" if value is None else f"{value:+.{int(places)}f}"


@register.filter
def ratio_percent(value) -> str:
    """A ratio new/old as a change: 0.9 -> ``-10.0 %``."""
    return "—" if value is None else f"{(value - 1) * 100:+.1f} %"
