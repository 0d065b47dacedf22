"""What a run of a hybrid plan is compared with: the plan as this project's executor runs it (nothing overlapped, CP
by all-gather: ``planner.parallel.cost.EXECUTOR_OPTIONS``), not the job's own overlaps and framework, which its page
predicts with for the frameworks it plans for. A run of a DP2 plan pays the gradient reduction after its last
backward, and a fully sharded one its gathers inside F and B; the run page's prediction says so. Its selective
recomputation runs the recompute modules the plan was made with (``planner.parallel.cost.executor_options``)."""

from dataclasses import replace

import pytest
from django.urls import reverse

from adaptis_web.studio.models import JobStatus, Run
from adaptis_web.studio.planning.predictions import plan_prediction, run_prediction
from planner.parallel import planning as planner_hybrid
from planner.parallel.cost import EXECUTOR_OPTIONS
from planner.plan import load_plan
from tests.conftest import cpu_hybrid_plan


def test_a_cpu_clusters_job_is_planned_with_what_the_executor_overlaps_unless_it_names_overlaps(people):
    """A CPU cluster only runs on this project's executor, which overlaps nothing: a job there that names no overlaps
    is planned with none, so its page predicts what its runs' page compares them with."""
    plan = cpu_hybrid_plan(people, people.owner, tp=2, pp=2, dp=2)
    assert plan.job.overlap == "none"
    job_view, run_view = plan_prediction(plan), run_prediction(plan)
    assert plan.plan_doc["predicted"]["data_parallel_exposed_ms"] > 0
    assert plan.plan_doc["predicted"]["data_parallel_exposed_ms"] == pytest.approx(
        run_view["predicted"]["data_parallel_exposed_ms"])
    assert job_view["iteration_ms"] == pytest.approx(run_view["iteration_ms"])


def test_a_hybrid_run_is_compared_with_the_plan_as_the_executor_runs_it_not_with_the_jobs_overlaps(people, client):
    plan = cpu_hybrid_plan(people, people.owner, overlap="dp", tp=2, pp=2, dp=2)   # DP overlapped, as asked
    assert plan.job.overlap == "dp"
    job_view, run_view = plan_prediction(plan), run_prediction(plan)
    assert plan.plan_doc["predicted"]["data_parallel_exposed_ms"] == 0.0, "hidden behind the last backward"
    executor = planner_hybrid.predict(load_plan(plan.plan_doc), plan.job.spec.doc["name"], "cpu-1x8",
                                      plan.job.seq_len, EXECUTOR_OPTIONS)["predicted"]
    assert run_view["predicted"] == executor and executor["data_parallel_exposed_ms"] > 0
    assert run_view["iteration_ms"] == job_view["iteration_ms"]   # TP's collectives are in F and B either way

    run = Run.objects.create(plan=plan, created_by=people.owner, status=JobStatus.RUNNING, world_size=8,
                             executed_spec=plan.job.spec.doc)
    client.force_login(people.owner)
    page = client.get(reverse("studio:run", args=[run.pk]))
    assert page.status_code == 200
    text = page.content.decode()
    assert "as\n    this executor runs the plan on the job's cluster: nothing overlapped with compute" in text
    # what the executor's selective recomputation runs: the job's recompute modules, Megatron-Core's default here
    assert '<span id="executor-recompute-modules">core_attn</span>' in text
    end = page.context["timeline_data"]["predicted_step_end"]
    assert [part["op"] for part in end] == ["data_parallel_exposed", "optimizer_step"]
    assert end[0]["ms"] == executor["data_parallel_exposed_ms"]


def test_a_run_is_predicted_with_the_recompute_modules_its_plan_was_made_with_and_its_page_names_them(people, client):
    """The executor's selective recomputation runs the modules the job named (``executor.model.recompute``): the dense
    MLPs here, re-run in every backward, which the run's prediction charges and the default modules' would not."""
    plan = cpu_hybrid_plan(people, people.owner, recompute_modules="core_attn,mlp", tp=2, pp=2, dp=2,
                           recompute="selective")
    stored = load_plan(plan.plan_doc)
    assert stored.meta["recompute_modules"] == "core_attn,mlp" and stored.parallel.recompute == "selective"

    def executor_predicted(modules):
        return planner_hybrid.predict(stored, plan.job.spec.doc["name"], "cpu-1x8", plan.job.seq_len,
                                      replace(EXECUTOR_OPTIONS, recompute_modules=modules))["predicted"]
    run_view = run_prediction(plan)
    assert run_view["predicted"] == executor_predicted(("core_attn", "mlp"))
    assert run_view["recompute_modules"] == "core_attn,mlp"
    assert (run_view["predicted"]["breakdown_ms"]["recompute"]
            > executor_predicted(("core_attn",))["breakdown_ms"]["recompute"])

    run = Run.objects.create(plan=plan, created_by=people.owner, status=JobStatus.RUNNING, world_size=8,
                             executed_spec=plan.job.spec.doc)
    client.force_login(people.owner)
    text = client.get(reverse("studio:run", args=[run.pk])).content.decode()
    assert '<span id="executor-recompute-modules">core_attn,mlp</span>' in text


def test_a_fully_sharded_run_is_predicted_with_its_gathers_paid_inside_f_and_b(people):
    plan = cpu_hybrid_plan(people, people.owner, overlap="dp", pp=2, dp=2, sharding="full")
    assert load_plan(plan.plan_doc).parallel.sharding == "full"
    # the job's view hides each layer's gathers behind its compute (FSDP2's prefetch); the executor pays them
    assert run_prediction(plan)["iteration_ms"] > plan_prediction(plan)["iteration_ms"]
