"""Studio data: teams own model specs and clusters; a spec is planned by jobs, a job produces plans, a plan is run.

Every object is reached through its team (spec → team), which is how access is decided: a user sees the
objects of the teams they belong to, and their role in that team says what they may change (accounts.roles).
Specs, clusters, jobs, plans and runs are archived and deleted softly (``Curated``): a deleted object disappears
from every list and page until an admin restores it. The JSON columns hold the planner's versioned documents
verbatim (``adaptis.model/v1``, ``adaptis.cluster/v1``, ``adaptis.plan/v1`` and ``/v2``, ``adaptis.profile/v1``,
simulator output) so what was planned and run can always be reproduced.

One module per domain, one app label (``studio``): the tables and migrations are those of the one ``models.py``
this package replaced. Import the models from here. A few help texts name a service by the path it had then
(``services.liveness``, ``services.profiling``, ...: now ``work.liveness``, ``runs.profiling``): they are written
into the migrations and the API schema, so they change with a migration of their own, not with a move.
"""

from adaptis_web.studio.models.accounts import ApiToken, Invitation, Membership, Team
from adaptis_web.studio.models.catalog import ClusterRecord, ModelSpecRecord
from adaptis_web.studio.models.curation import Curated
from adaptis_web.studio.models.planning import JobMode, Plan, PlanningJob
from adaptis_web.studio.models.runs import MeasuredProfile, Run, RunCollective, RunEvent
from adaptis_web.studio.models.work import JobStatus, TrackedWork

__all__ = ["ApiToken", "ClusterRecord", "Curated", "Invitation", "JobMode", "JobStatus", "MeasuredProfile",
           "Membership", "ModelSpecRecord", "Plan", "PlanningJob", "Run", "RunCollective", "RunEvent", "Team",
           "TrackedWork"]
