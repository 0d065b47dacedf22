"""A hybrid plan run from the web: tiny-llama's TP2 x PP2 x DP2 plan on the local 8-rank CPU cluster (``cpu-1x8``),
launched through ``POST /api/runs/`` and executed by the real runs worker (the session's: running it here as well
would race it for the row), with real executor ranks and the real Redis event stream. It finishes with every rank's
actions and every collective stored, served through one events cursor, its summary folding each pipeline rank's
replicas, and its page showing them. (A plan the executor cannot run is refused with a 400 naming ``plan``:
tests/web/test_plan_editing.py.)"""

from collections import defaultdict

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from adaptis_web.studio.models import JobStatus, PlanningJob, Run, RunCollective, RunEvent
from adaptis_web.studio.planning.comparison import compare_items
from adaptis_web.studio.runs.run_control import run_step_tokens
from tests.conftest import cpu_hybrid_plan

# the worker reads the committed rows; the ranks are the same on either database, and storing collectives once each
# is tested on both (test_live_events.py, test_cluster_runs.py)
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.any_database]
ENDED = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)
INSIDE_ACTIONS = ("tp_all_gather", "tp_reduce_scatter")   # sequence parallelism's, part of F and B


def test_a_tp2_pp2_dp2_plan_runs_on_8_ranks_with_every_ranks_actions_and_its_collectives(people, celery_worker,
                                                                                         client, wait_for):
    # not the defaults (overlap dp, megatron): the re-plan below keeps the job's own
    plan = cpu_hybrid_plan(people, people.owner, tp=2, pp=2, dp=2, overlap="tp,dp", framework="torchtitan")
    assert (plan.job.overlap, plan.job.framework) == ("tp,dp", "torchtitan")
    client.force_login(people.member)
    page = client.get(reverse("studio:plan", args=[plan.pk])).content.decode()
    assert 'id="plan-overlap">tp,dp<' in page and 'id="plan-framework">torchtitan<' in page
    api = APIClient()
    api.force_authenticate(people.member)
    response = api.post(reverse("api:runs"), {"plan": plan.pk, "steps": 1}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["world_size"] == 8
    run = wait_for(lambda: Run.objects.filter(pk=response.json()["id"], status__in=ENDED).first(), timeout_s=240,
                   message=lambda: f"the run to end\n{celery_worker.log_tail()}")
    assert run.status == JobStatus.SUCCEEDED, run.error

    # Megatron's order, tp fastest then dp: rank r is pipeline rank r // 4, which each of its 4 replicas runs whole.
    actions = sorted(RunEvent.objects.filter(run=run).values_list("rank", "device", "action"))
    assert actions == sorted((rank, rank // 4, action) for rank in range(8)
                             for action in plan.plan_doc["actions"][rank // 4])
    collectives = list(RunCollective.objects.filter(run=run).order_by("rank", "index"))
    by_rank = defaultdict(list)
    for collective in collectives:
        assert collective.device == collective.rank // 4 and collective.group == collective.op.split("_")[0]
        by_rank[collective.rank].append(collective)
    assert sorted(by_rank) == list(range(8))
    spans = defaultdict(list)
    for rank, start, end in RunEvent.objects.filter(run=run).values_list("rank", "start_ms", "end_ms"):
        spans[rank].append((start, end))
    for rank, rows in by_rank.items():
        assert [row.index for row in rows] == list(range(len(rows))), "each rank's collectives of the step, numbered"
        assert {"tp", "dp"} <= {row.group for row in rows}
        last_end = max(end for _, end in spans[rank])
        for row in rows:   # on the actions' time axis: inside one of them (part of F or B), or after the last
            inside = any(start <= row.start_ms <= row.end_ms <= end for start, end in spans[rank])
            assert inside or row.start_ms >= last_end, row
            if row.op in INSIDE_ACTIONS:
                assert inside, row
            if row.group == "dp":   # DP's reduction and optimizer step
                assert row.start_ms >= last_end, row

    # a step trains the global batch of 16 sequences of 32 tokens: every DP replica its own micro-batches
    assert run_step_tokens(run) == 16 * 32
    for device in run.summary["per_device"]:
        assert device["replicas"] == 4 and device["busy_spread_ms"] >= 0
        assert {"tp_all_gather", "tp_reduce_scatter", "dp_all_reduce"} <= set(device["collective_ms"])

    # One sequence over both: the events API pages through actions and collectives with one cursor.
    page = api.get(reverse("api:run-events", args=[run.pk])).json()
    total = len(actions) + len(collectives)
    assert (len(page["events"]), len(page["collectives"]), page["last_seq"]) == (len(actions), len(collectives), total)
    assert sorted(row["seq"] for row in page["events"] + page["collectives"]) == list(range(1, total + 1))

    # The compare page folds the replicas as the run page does: one bar per (pipeline rank, action), its bubble that of
    # the folded step (4 replicas' busy times summed into one device would leave none).
    (item,), errors = compare_items(user=people.member, plan_ids=[], run_ids=[str(run.pk)])
    assert not errors and len(item["timeline"]) == sum(len(actions) for actions in plan.plan_doc["actions"])
    assert min(entry["start_ms"] for entry in item["timeline"]) == 0.0
    busy = sum(entry["end_ms"] - entry["start_ms"] for entry in item["timeline"])
    assert item["metrics"]["bubble_ratio"] == pytest.approx(1 - busy / (2 * item["span_ms"]))

    client.force_login(people.member)
    html = client.get(reverse("studio:run", args=[run.pk])).content.decode()
    assert "8 gloo ranks (<span data-replicas>4</span>" in html and 'id="replicas-note"' in html
    # re-planning from a hybrid run is offered, and the page says what it fits
    assert 'id="replan-hybrid"' in html and 'id="replan-button"' in html
    for device in (0, 1):
        assert f'data-replicas-of="{device}">4<' in html
        assert "tp_all_gather" in html.split(f'data-collectives-of="{device}">')[1].split("</td>")[0]

    # Re-planning calibrates the cluster: its one link class fitted to every collective of a group of two ranks the
    # run stored (TP and DP; not the optimizer steps), the device's per-kernel overhead to the actions. The plan's
    # pipeline on the calibrated cluster is then nearer what the run took than on the cluster as shipped, and the
    # new job searches on that cluster with the source job's GPUs, batch, pins, overlap and framework.
    response = api.post(reverse("api:run-replan", args=[run.pk]))
    assert response.status_code == 201, response.content
    job = PlanningJob.objects.get(pk=response.json()["id"])
    calibration = job.calibration
    # each collective once, for its group: rank = tp + 2·(dp + 2·pp), a TP group the ranks 2k and 2k + 1, a DP group
    # the ranks of one (tp, pp) with dp 0 and 1
    fitted = {(row.op, row.step, row.index, ("tp", row.rank // 2) if row.group == "tp" else
               ("dp", row.rank % 2, row.rank // 4)) for row in collectives if not row.op.endswith("optimizer_step")}
    [link] = calibration["links"]
    every = [row for row in collectives if not row.op.endswith("optimizer_step")]
    assert link["link"] == "intra_node" and link["samples"] == len(fitted) == len(every) // 2
    assert job.cluster_doc["links"]["intra_node"]["latency_us"] == pytest.approx(link["latency_us"])
    assert job.cluster_doc["device"]["kernel_overhead_us"] == pytest.approx(calibration["kernel_overhead_us"])
    observed = calibration["observed_iteration_ms"]
    assert observed > 0
    assert abs(calibration["predicted_after_ms"] - observed) < abs(calibration["predicted_before_ms"] - observed)
    assert (job.is_hybrid, job.gpus, job.global_batch, job.pins, job.overlap, job.framework, job.cluster_preset) == (
        True, plan.job.gpus, plan.job.global_batch, plan.job.pins, "tp,dp", "torchtitan", "")
    job = wait_for(lambda: PlanningJob.objects.filter(pk=job.pk, status__in=ENDED).first(), timeout_s=120,
                   message=lambda: f"the re-plan to end\n{celery_worker.log_tail()}")
    assert job.status == JobStatus.SUCCEEDED, job.error
    page = client.get(reverse("studio:job", args=[job.pk])).content.decode()
    assert "Calibrated cluster." in page and f"{link['latency_us']:.0f} µs" in page
