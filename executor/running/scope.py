"""What this executor runs, checked before anything imports torch: the web's plan pages and run requests ask it.

This executor runs pipeline parallelism: a hybrid plan (``adaptis.plan/v2``) whose tensor, context, data or expert
parallel degree is above 1 would run as its pipeline alone, less than planned, so it is refused with the reason.
"""

from __future__ import annotations

from planner.errors import SpecError
from planner.plan import Plan


def execution_refusal(plan: Plan) -> SpecError | None:
    """Why this executor cannot run ``plan`` as planned, or None (see the module docstring)."""
    parallel = plan.parallel
    dropped = [] if parallel is None else [f"{degree.upper()}{getattr(parallel, degree)}" for degree in
                                           ("tp", "cp", "dp", "ep") if getattr(parallel, degree) > 1]
    if not dropped:
        return None
    return SpecError("plan", f"is {parallel.short()}; the executor runs pipeline parallelism only, so its "
                             f"{' '.join(dropped)} would not run: export it to Megatron-LM or torchtitan to run it")
