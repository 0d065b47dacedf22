"""The plan editor's server side: re-predict an edited plan document (``planner.service.repredict_edit``), and save
it as a plan derived from its parent (``planner.service.derive_plan``). ``planner.editing`` describes what an
edited document may ask of the scheduler; bad edits are a ``SpecError`` naming the field, and nothing is stored.
"""

from __future__ import annotations

import time

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from adaptis_web.studio.accounts.roles import Role, role_require
from adaptis_web.studio.models import Plan
from adaptis_web.studio.planning.predictions import stored_plan
from planner import service as planner_service


def plan_simulate_edit(*, plan: Plan, user: AbstractBaseUser, doc: object) -> dict:
    """Re-predict ``doc``, an edited copy of ``plan``'s document: the editor's answer, with the difference from
    ``plan`` and the server's time. Any role in the plan's team may (a what-if stores nothing)."""
    role_require(user=user, team=plan.job.spec.team, at_least=Role.VIEWER, doing="simulating a plan")
    started = time.perf_counter()
    answer = planner_service.repredict_edit(stored_plan(plan), doc)
    answer["server_ms"] = (time.perf_counter() - started) * 1e3
    return answer


@transaction.atomic
def plan_derive(*, parent: Plan, user: AbstractBaseUser, doc: object, name: str = "") -> Plan:
    """Save an edited document as a new plan of ``parent``'s job, linked to ``parent``; the member role or above."""
    role_require(user=user, team=parent.job.spec.team, at_least=Role.MEMBER, doing="saving an edited plan")
    derived = planner_service.derive_plan(stored_plan(parent), doc, derived_from=parent.pk,
                                          derived_by=user.get_username())
    return Plan.objects.create(
        job=parent.job, parent=parent, name=name, strategy=derived.strategy, layout=derived.layout,
        schedule_summary=derived.schedule_summary, plan_doc=derived.plan_doc, simulation=derived.simulation,
        profile_doc=derived.profile_doc, iteration_ms=derived.iteration_ms, bubble_ratio=derived.bubble_ratio)
