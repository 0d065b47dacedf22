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


@register.filter
def rate(value) -> str:
    """A rate such as TFLOP/s: whole from 10 up ("1,371"), two significant digits below ("3.5", "0.012": a CPU's
    shards, which a whole number shows as 0)."""
    if value is None:
        return "—"
    amount = float(value)
    return f"{amount:,.0f}" if abs(amount) >= 10 or amount == 0 else f"{amount:.2g}"
