"""Units on pages: memory in binary units named as such (Django's ``filesizeformat`` divides by 1024 and prints
"GB", so an L40S's 48 GiB read "48.0 GB"). ``binary_bytes`` and ``signed_binary_bytes``: "48.0 GiB", "+1.5 GiB"."""

from django import template

from planner import service as planner_service

register = template.Library()

# The formatting itself lives in the planner (planner/units.py), which writes the same units into its messages.
binary_bytes = register.filter("binary_bytes", planner_service.binary_bytes)
signed_binary_bytes = register.filter("signed_binary_bytes", planner_service.signed_binary_bytes)
decimal_count = register.filter("decimal_count", planner_service.decimal_count)
