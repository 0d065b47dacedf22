"""The OpenAPI document says how the API's objects lead to one another: OpenAPI links (drf-spectacular's
postprocessing hook ``document_links``), from each response that names an object to the operations that take it.

- A spec opens its page, rename, profile measurement, a planning job of it (``spec`` in the body), its dependents
  and the archive actions; a saved cluster its page, rename, a job planned on it (``saved_cluster``), its
  dependents, the archive actions and a copy of its document.
- A job opens the job's operations, its spec, its saved cluster and its plans (``plans/0``: the newest); a plan
  its operations, its job, a run of it (``plan`` in the body), and with its document (``plan``), a simulation of
  that document and a derived plan; a run its operations, its events, a re-plan and its plan; a re-plan answers
  a job.
- A list opens its first row (``results/0``).
- A team opens its page, rename, invitations and new members, and its first member's role; a new member their
  role and removal.
- What ends an object (delete, leaving or handing over a team, a token's revocation) is linked only from the
  response that created it, or that cancelled it (a job or a run must be finished to be deleted): a client that
  follows links from what it reads never deletes, leaves or revokes anything. A deleted object links to its
  restore.

Each link names its target by operationId; a link to an operation or a status the document does not have fails
the schema's generation (``LinkError``), so the links cannot drift from the endpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class LinkError(ValueError):
    pass


@dataclass(frozen=True)
class Opens:
    """An operation an object's id opens: ``where`` the id goes (``path.<name>`` or ``body.<field>``), and constants
    that the link sets beside it."""

    name: str
    operation_id: str
    where: str
    constants: dict = field(default_factory=dict)
    description: str = ""


def _curated(kind: str, noun: str) -> list[Opens]:
    return [Opens(f"{noun}Dependents", "dependents_retrieve", "path.object_id", {"path.kind": kind},
                  f"what archiving or deleting this {noun.lower()} takes along"),
            Opens(f"Archive{noun}", "root_create", "path.object_id", {"path.kind": kind},
                  f"archive or unarchive this {noun.lower()}")]


# What an object's id opens, by kind; DELETE and what ends an object are in ENDS.
OPENS = {
    "spec": [Opens("GetSpec", "specs_retrieve", "path.spec_id"),
             Opens("RenameSpec", "specs_partial_update", "path.spec_id"),
             Opens("MeasureSpec", "specs_profiles_create", "path.spec_id", description="measure its layers"),
             Opens("PlanSpec", "jobs_create", "body.spec", description="plan it: a job of this spec"),
             *_curated("specs", "Spec")],
    "cluster": [Opens("GetCluster", "clusters_retrieve", "path.cluster_id"),
                Opens("RenameCluster", "clusters_partial_update", "path.cluster_id"),
                Opens("PlanOnCluster", "jobs_create", "body.saved_cluster",
                      description="a job planned on this saved cluster"),
                *_curated("clusters", "Cluster")],
    "job": [Opens("GetJob", "jobs_retrieve", "path.job_id"),
            Opens("RenameJob", "jobs_partial_update", "path.job_id"),
            Opens("CancelJob", "jobs_cancel_create", "path.job_id"),
            *_curated("jobs", "Job")],
    "plan": [Opens("GetPlan", "plans_retrieve", "path.plan_id"),
             Opens("RenamePlan", "plans_partial_update", "path.plan_id"),
             Opens("ExportPlan", "plans_export_retrieve", "path.plan_id"),
             Opens("RunPlan", "runs_create", "body.plan", description="run it: a run of this plan"),
             *_curated("plans", "Plan")],
    "run": [Opens("GetRun", "runs_retrieve", "path.run_id"),
            Opens("RenameRun", "runs_partial_update", "path.run_id"),
            Opens("CancelRun", "runs_cancel_create", "path.run_id"),
            Opens("RunEvents", "runs_events_retrieve", "path.run_id"),
            Opens("ReplanRun", "runs_replan_create", "path.run_id",
                  description="recalibrate from this run and plan again"),
            *_curated("runs", "Run")],
    "profile": [Opens("GetProfile", "profiles_retrieve", "path.profile_id")],
    "team": [Opens("GetTeam", "teams_retrieve", "path.team_id"),
             Opens("RenameTeam", "teams_partial_update", "path.team_id"),
             Opens("InviteToTeam", "teams_invitations_create", "path.team_id"),
             Opens("AddMember", "teams_members_create", "path.team_id")],
    "token": [],
}

ENDS = {
    "spec": [Opens("DeleteSpec", "specs_destroy", "path.spec_id")],
    "cluster": [Opens("DeleteCluster", "clusters_destroy", "path.cluster_id")],
    "job": [Opens("DeleteJob", "jobs_destroy", "path.job_id")],
    "plan": [Opens("DeletePlan", "plans_destroy", "path.plan_id")],
    "run": [Opens("DeleteRun", "runs_destroy", "path.run_id")],
    "profile": [],
    "team": [Opens("LeaveTeam", "teams_leave_create", "path.team_id"),
             Opens("TransferTeam", "teams_transfer_create", "path.team_id")],
    "token": [Opens("RevokeToken", "tokens_destroy", "path.token_key")],
}

# A plan's document opens a simulation of it (the document is the body) and a plan derived from it.
PLAN_DOCUMENT = [Opens("SimulatePlan", "plans_simulate_create", "path.plan_id", {"requestBody": "$response.body#/plan"},
                       "re-predict its document (edit it first)"),
                 Opens("DerivePlan", "plans_derive_create", "path.plan_id",
                       {"requestBody": {"plan": "$response.body#/plan"}}, "save its document (edited) as a new plan")]
# A saved cluster's document, saved again.
CLUSTER_DOCUMENT = [Opens("CopyCluster", "clusters_create", "", {"requestBody": {"doc": "$response.body#/doc"}},
                          "save its document again, as a new cluster")]
# A member of a team: their role; their removal only from the response that made them one (MEMBERS).
MEMBER = [Opens("ChangeRole", "teams_members_partial_update", "path.user_id")]
MEMBER_ENDS = [Opens("RemoveMember", "teams_members_destroy", "path.user_id")]
RESTORE = {"spec": "specs", "cluster": "clusters", "job": "jobs", "plan": "plans", "run": "runs"}


@dataclass(frozen=True)
class Names:
    """A response that names objects: ``pointers`` from kind to the JSON pointer of its id, ``created`` the kind
    it created (ENDS apply to it), ``extra`` links of its document (the response's own ``id``)."""

    operation_id: str
    status: str
    pointers: dict
    created: str = ""
    extra: tuple = ()


def _job(prefix: str = "") -> dict:
    return {"job": f"{prefix}/id", "spec": f"{prefix}/spec", "cluster": f"{prefix}/saved_cluster",
            "plan": f"{prefix}/plans/0/id"}


def _run(prefix: str = "") -> dict:
    return {"run": f"{prefix}/id", "plan": f"{prefix}/plan"}


RESPONSES = [
    Names("specs_create", "201", {"spec": "/id"}, created="spec"),
    Names("specs_retrieve", "200", {"spec": "/id"}),
    Names("specs_partial_update", "200", {"spec": "/id"}),
    Names("specs_list", "200", {"spec": "/results/0/id"}),
    Names("clusters_create", "201", {"cluster": "/id"}, created="cluster", extra=tuple(CLUSTER_DOCUMENT)),
    Names("clusters_retrieve", "200", {"cluster": "/id"}, extra=tuple(CLUSTER_DOCUMENT)),
    Names("clusters_partial_update", "200", {"cluster": "/id"}),
    Names("clusters_list", "200", {"cluster": "/results/0/id"}),
    Names("jobs_create", "201", _job(), created="job"),
    Names("jobs_retrieve", "200", _job()),
    Names("jobs_partial_update", "200", {"job": "/id"}),
    Names("jobs_cancel_create", "200", _job(), created="job"),  # cancelled: finished, so it may be deleted
    Names("jobs_list", "200", _job("/results/0")),
    Names("runs_replan_create", "201", _job(), created="job"),
    Names("plans_retrieve", "200", {"plan": "/id", "job": "/job"}, extra=tuple(PLAN_DOCUMENT)),
    Names("plans_derive_create", "201", {"plan": "/id", "job": "/job"}, created="plan", extra=tuple(PLAN_DOCUMENT)),
    Names("plans_partial_update", "200", {"plan": "/id"}),
    Names("plans_list", "200", {"plan": "/results/0/id", "job": "/results/0/job"}),
    Names("runs_create", "201", _run(), created="run"),
    Names("runs_retrieve", "200", _run()),
    Names("runs_partial_update", "200", {"run": "/id"}),
    Names("runs_cancel_create", "200", _run(), created="run"),  # cancelled: finished, so it may be deleted
    Names("runs_list", "200", _run("/results/0")),
    Names("runs_events_retrieve", "200", {"run": "/run"}),
    Names("specs_profiles_create", "201", {"profile": "/id", "spec": "/spec", "plan": "/plan"}),
    Names("profiles_retrieve", "200", {"spec": "/spec", "plan": "/plan"}),
    Names("teams_create", "201", {"team": "/id"}, created="team"),
    Names("teams_retrieve", "200", {"team": "/id"}),
    Names("teams_partial_update", "200", {"team": "/id"}),
    Names("teams_transfer_create", "200", {"team": "/id"}),
    Names("teams_list", "200", {"team": "/results/0/id"}),
    Names("tokens_create", "201", {"token": "/id"}, created="token"),
]
# A member's id and the team it is in, by the response that names them, and whether it created the membership (a
# new team's owner, who may leave it; a member added).
MEMBERS = [("teams_create", "201", "/members/0/user_id", "$response.body#/id", True),
           ("teams_retrieve", "200", "/members/0/user_id", "$request.path.team_id", False),
           ("teams_partial_update", "200", "/members/0/user_id", "$request.path.team_id", False),
           ("teams_transfer_create", "200", "/members/0/user_id", "$request.path.team_id", False),
           ("teams_members_create", "201", "/user_id", "$request.path.team_id", True),
           ("teams_members_partial_update", "200", "/user_id", "$request.path.team_id", False)]
# A deleted object's restore.
DELETED = [(f"{kind}s_destroy", kind) for kind in RESTORE]


def _link(opens: Opens, value: str | None) -> dict:
    link: dict = {"operationId": opens.operation_id}
    if opens.description:
        link["description"] = opens.description
    parameters = {key: constant for key, constant in opens.constants.items() if key.startswith("path.")}
    body = opens.constants.get("requestBody")
    if value is not None and opens.where.startswith("path."):
        parameters[opens.where] = value
    elif value is not None and opens.where.startswith("body."):
        body = {opens.where.removeprefix("body."): value}
    if parameters:
        link["parameters"] = parameters
    if body is not None:
        link["requestBody"] = body
    return link


def _links_of(names: Names) -> dict[str, dict]:
    links = {}
    for kind, pointer in names.pointers.items():
        value = f"$response.body#{pointer}"
        for opens in OPENS[kind] + (ENDS[kind] if kind == names.created else []):
            if opens.operation_id != names.operation_id:  # a page does not link to itself
                links[opens.name] = _link(opens, value)
    for opens in names.extra:  # the document's own links: its id is the response's
        links[opens.name] = _link(opens, "$response.body#/id" if opens.where else None)
    return links


def document_links(result: dict, generator, request, public) -> dict:
    operations = {operation["operationId"]: operation for item in result.get("paths", {}).values()
                  for operation in item.values() if isinstance(operation, dict) and "operationId" in operation}

    def response(operation_id: str, status: str) -> dict:
        if operation_id not in operations:
            raise LinkError(f"no operation {operation_id!r}")
        responses = operations[operation_id]["responses"]
        if status not in responses:
            raise LinkError(f"{operation_id} has no {status} response")
        return responses[status]

    def add(operation_id: str, status: str, links: dict[str, dict]) -> None:
        for name, link in links.items():
            if link["operationId"] not in operations:
                raise LinkError(f"link {name} of {operation_id} names no operation {link['operationId']!r}")
        response(operation_id, status).setdefault("links", {}).update(links)

    for names in RESPONSES:
        add(names.operation_id, names.status, _links_of(names))
    for operation_id, status, user_pointer, team, created in MEMBERS:
        add(operation_id, status, {opens.name: {"operationId": opens.operation_id, "parameters": {
            "path.team_id": team, "path.user_id": f"$response.body#{user_pointer}"}}
            for opens in MEMBER + (MEMBER_ENDS if created else [])})
    for operation_id, kind in DELETED:
        add(operation_id, "200", {f"Restore{kind.capitalize()}": {
            "operationId": "root_create", "description": f"restore this {kind} (an admin)",
            "parameters": {"path.kind": RESTORE[kind], "path.object_id": "$response.body#/id",
                           "path.action": "restore"}}})
    return result
