"""Objects the page and API tests look at: a spec planned in-process, and a finished run with events."""

from dataclasses import dataclass

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from adaptis_web.studio.catalog.specs import spec_create
from adaptis_web.studio.models import ClusterRecord, JobStatus, ModelSpecRecord, Plan, PlanningJob, Run, RunEvent
from adaptis_web.studio.planning.jobs import job_run
from adaptis_web.studio.planning.predictions import plan_prediction
from planner.cluster import load_cluster_preset
from planner.spec.presets import load_model_preset
from tests.conftest import tiny_llama_job


@pytest.fixture
def llama(people) -> ModelSpecRecord:
    """Llama 3 8B stored as a spec of the team."""
    return spec_create(team=people.team, owner=people.owner, spec=load_model_preset("llama-3-8b"))


def api_as(user) -> APIClient:
    """An API client signed in as ``user``."""
    client = APIClient()
    client.force_authenticate(user)
    return client


@dataclass
class Planned:
    spec: ModelSpecRecord
    job: PlanningJob
    plan: Plan


@pytest.fixture
def planned(people) -> Planned:
    """tiny-llama of the people's team, planned with 1F1B on 2 CPU-host devices and 4 micro-batches."""
    record, job = tiny_llama_job(people, people.owner, num_microbatches=4)
    plan = job_run(job_id=job.pk)
    job.refresh_from_db()
    return Planned(spec=record, job=job, plan=plan)


@pytest.fixture
def finished_run(people, planned) -> Run:
    """A succeeded run whose events mirror the predicted timeline, shifted by 100 ms."""
    run = Run.objects.create(plan=planned.plan, created_by=people.owner, status=JobStatus.SUCCEEDED, world_size=2,
                             executed_spec=planned.spec.doc, loss=6.2, summary={
                                 "iteration_ms": 40.0, "median_iteration_ms": 40.0, "bubble_ratio": 0.3,
                                 "per_device": [{"device": 0, "busy_ms": 28.0, "bubble_ms": 12.0, "bubble_ratio": 0.3},
                                                {"device": 1, "busy_ms": 28.0, "bubble_ms": 12.0, "bubble_ratio": 0.3}]})
    RunEvent.objects.bulk_create([
        RunEvent(run=run, seq=seq, rank=entry["device"], device=entry["device"], action=entry["action"],
                 stage=entry["stage"], kind=entry["type"], microbatch=entry["microbatch"], step=0,
                 start_ms=entry["start_ms"] + 100, end_ms=entry["end_ms"] + 100)
        for seq, entry in enumerate(plan_prediction(planned.plan)["timeline"], start=1)])
    return run


@dataclass
class Crew:
    """The people's team with every role in it, and the objects the role matrix acts on.

    owner alice, admin carol, member bob, viewer victor, another member erin (whom admins remove), and mallory
    (outsider) in a team of her own. The owner created the planned spec, job and plan, the finished run, a
    queued job, a deleted run, a saved cluster and a deleted one.
    """

    people: object
    admin: object
    viewer: object
    extra: object
    planned: Planned
    finished_run: Run
    queued_job: PlanningJob
    deleted_run: Run
    cluster: ClusterRecord | None = None
    deleted_cluster: ClusterRecord | None = None

    def user(self, who: str):
        return {"owner": self.people.owner, "admin": self.admin, "member": self.people.member, "viewer": self.viewer,
                "outsider": self.people.outsider, "anonymous": None}[who]


@pytest.fixture
def crew(people, planned, finished_run, django_user_model) -> Crew:
    from adaptis_web.studio.models import Membership
    from adaptis_web.studio.accounts.teams import membership_add

    admin = django_user_model.objects.create_user("carol", password="carol-pass-2026")
    viewer = django_user_model.objects.create_user("victor", password="victor-pass-2026")
    extra = django_user_model.objects.create_user("erin", password="erin-pass-2026")
    membership_add(team=people.team, user=admin, role=Membership.Role.ADMIN)
    membership_add(team=people.team, user=viewer, role=Membership.Role.VIEWER)
    membership_add(team=people.team, user=extra, role=Membership.Role.MEMBER)
    queued_job = PlanningJob.objects.create(
        spec=planned.spec, created_by=people.owner, cluster_preset="cpu-host", cluster_doc=planned.job.cluster_doc,
        num_devices=2, num_microbatches=4, schedule="1f1b")
    deleted_run = Run.objects.create(plan=planned.plan, created_by=people.owner, status=JobStatus.FAILED,
                                     world_size=2, deleted_at=timezone.now())
    cluster_doc = load_cluster_preset("h100-sxm-2x8").to_dict()
    cluster = ClusterRecord.objects.create(team=people.team, owner=people.owner, name="team pod", doc=cluster_doc,
                                           num_devices=16, device_name="H100-SXM-80GB")
    deleted_cluster = ClusterRecord.objects.create(team=people.team, owner=people.owner, name="old pod",
                                                   doc=cluster_doc, num_devices=16, device_name="H100-SXM-80GB",
                                                   deleted_at=timezone.now())
    return Crew(people=people, admin=admin, viewer=viewer, extra=extra, planned=planned, finished_run=finished_run,
                queued_job=queued_job, deleted_run=deleted_run, cluster=cluster, deleted_cluster=deleted_cluster)
