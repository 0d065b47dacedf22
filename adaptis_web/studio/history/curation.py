"""Rename, archive and delete (softly) a spec, cluster, job, plan or run; an admin restores what was deleted.

Archiving or deleting takes what depends on the object along (a spec's jobs, their plans, their runs),
stamped with the same time, so that undoing it brings back exactly those; a saved cluster takes nothing along
(the jobs planned on it keep a copy of its document). ``dependents`` is what a page or the API shows before
either. A member may do this to what they created only when nothing in it is someone else's; an admin to
anything of the team (accounts.roles).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Model, QuerySet
from django.utils import timezone

from adaptis_web.studio.accounts.roles import Role, RoleRefusal, role_require, role_require_own_or_admin
from adaptis_web.studio.common.refusals import Conflict
from adaptis_web.studio.models import ClusterRecord, JobStatus, ModelSpecRecord, Plan, PlanningJob, Run, Team
from planner.errors import SpecError

MAX_NAME = 200
FINISHED_STATUSES = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


@dataclass(frozen=True)
class Kind:
    """How to reach an object's team, creator and dependents, by its model."""

    noun: str
    team_path: str
    creator_path: str


KINDS = {
    ModelSpecRecord: Kind("spec", "team", "owner_id"),
    ClusterRecord: Kind("cluster", "team", "owner_id"),
    PlanningJob: Kind("job", "spec__team", "created_by_id"),
    Plan: Kind("plan", "job__spec__team", "job__created_by_id"),
    Run: Kind("run", "plan__job__spec__team", "created_by_id"),
}


def _follow(obj: Model, path: str):
    for step in path.split("__"):
        obj = getattr(obj, step)
    return obj


def object_team(obj: Model) -> Team:
    return _follow(obj, KINDS[type(obj)].team_path)


def object_creator_id(obj: Model) -> int:
    return _follow(obj, KINDS[type(obj)].creator_path)


def _descendants(obj: Model) -> dict[str, QuerySet]:
    if isinstance(obj, ModelSpecRecord):
        return {"jobs": PlanningJob.objects.filter(spec=obj), "plans": Plan.objects.filter(job__spec=obj),
                "runs": Run.objects.filter(plan__job__spec=obj)}
    if isinstance(obj, PlanningJob):
        return {"plans": Plan.objects.filter(job=obj), "runs": Run.objects.filter(plan__job=obj)}
    if isinstance(obj, Plan):
        return {"runs": Run.objects.filter(plan=obj)}
    return {}


def dependents(obj: Model) -> dict[str, QuerySet]:
    """What depends on ``obj``, by kind (plural), deleted ones left out."""
    return {name: rows.filter(deleted_at__isnull=True) for name, rows in _descendants(obj).items()}


def dependents_summary(obj: Model) -> dict[str, list[dict]]:
    """``dependents`` as rows a person reads before archiving or deleting: id, name and who created each."""
    summary = {}
    for name, rows in dependents(obj).items():
        creator = KINDS[rows.model].creator_path.removesuffix("_id")
        summary[name] = [{"id": row.pk, "name": row.name, "created_by": _follow(row, creator).username}
                         for row in rows.select_related(creator)]
    return summary


def _require_may_change(obj: Model, user: AbstractBaseUser, doing: str) -> None:
    team = object_team(obj)
    role = role_require_own_or_admin(user=user, team=team, creator_id=object_creator_id(obj), doing=doing)
    if role in (Role.ADMIN, Role.OWNER):
        return
    for name, rows in dependents(obj).items():
        creator_path = KINDS[rows.model].creator_path
        foreign = rows.exclude(**{creator_path: user.pk}).first()
        if foreign is not None:
            raise RoleRefusal(f"{doing} takes along {KINDS[rows.model].noun} {foreign.pk}, which another user "
                              f"created; that needs the admin role in team {team.name!r}")


def object_rename(*, obj: Model, user: AbstractBaseUser, name: str) -> Model:
    role_require_own_or_admin(user=user, team=object_team(obj), creator_id=object_creator_id(obj),
                              doing=f"renaming a {KINDS[type(obj)].noun}")
    name = name.strip()
    if isinstance(obj, (ModelSpecRecord, ClusterRecord)) and not name:
        raise SpecError("name", f"is required for a {KINDS[type(obj)].noun}")
    if len(name) > MAX_NAME:
        raise SpecError("name", f"is {len(name)} characters; the limit is {MAX_NAME}")
    obj.name = name
    obj.save(update_fields=["name"])
    return obj


def _stamp(obj: Model, field: str, value) -> None:
    """Set ``field`` on ``obj`` and on its dependents that have ``field`` as ``obj`` had it."""
    before = getattr(obj, field)
    for rows in dependents(obj).values():
        rows.filter(**{field: before}).update(**{field: value})
    type(obj).objects.filter(pk=obj.pk).update(**{field: value})
    setattr(obj, field, value)


@transaction.atomic
def object_archive(*, obj: Model, user: AbstractBaseUser) -> Model:
    _require_may_change(obj, user, f"archiving a {KINDS[type(obj)].noun}")
    if obj.archived_at is not None:
        raise Conflict("archived", f"this {KINDS[type(obj)].noun} is already archived")
    _stamp(obj, "archived_at", timezone.now())
    return obj


@transaction.atomic
def object_unarchive(*, obj: Model, user: AbstractBaseUser) -> Model:
    _require_may_change(obj, user, f"unarchiving a {KINDS[type(obj)].noun}")
    if obj.archived_at is None:
        raise Conflict("archived", f"this {KINDS[type(obj)].noun} is not archived")
    _stamp(obj, "archived_at", None)
    return obj


@transaction.atomic
def object_delete(*, obj: Model, user: AbstractBaseUser) -> Model:
    _require_may_change(obj, user, f"deleting a {KINDS[type(obj)].noun}")
    if isinstance(obj, (PlanningJob, Run)) and not obj.is_finished:
        raise Conflict("status", f"the {KINDS[type(obj)].noun} is {obj.status}; cancel it or let it finish first")
    running = [rows.model for rows in dependents(obj).values()
               if rows.model in (PlanningJob, Run) and rows.exclude(status__in=FINISHED_STATUSES).exists()]
    if running:
        raise Conflict("status", f"a {KINDS[running[0]].noun} that depends on it is still going; cancel it or let "
                                  "it finish first")
    _stamp(obj, "deleted_at", timezone.now())
    return obj


@transaction.atomic
def object_restore(*, obj: Model, user: AbstractBaseUser) -> Model:
    noun = KINDS[type(obj)].noun
    role_require(user=user, team=object_team(obj), at_least=Role.ADMIN, doing=f"restoring a deleted {noun}")
    if obj.deleted_at is None:
        raise Conflict("deleted", f"this {noun} is not deleted")
    for rows in _descendants(obj).values():  # those deleted with it carry its stamp
        rows.filter(deleted_at=obj.deleted_at).update(deleted_at=None)
    type(obj).objects.filter(pk=obj.pk).update(deleted_at=None)
    obj.deleted_at = None
    return obj
