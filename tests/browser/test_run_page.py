"""The run page in a real browser: predicted and observed on one time axis (each observed step drawn from its own
start), per device and per stage; a hybrid run's replicas folded and its collectives on the same axis; the "starting
ranks" state before the first event; cancelling a running run from the page, with a real Celery worker ending real
ranks.

Debian's Chromium driven by Playwright against pytest-django's live server. Screenshots in /tmp/team/screens/.
"""

from __future__ import annotations


import pytest
from django.utils import timezone
from playwright.sync_api import expect

from adaptis_web.studio.catalog.specs import spec_create
from adaptis_web.studio.models import JobStatus, MeasuredProfile, PlanningJob, Run, RunCollective, RunEvent
from adaptis_web.studio.planning.jobs import job_request_check, job_run
from adaptis_web.studio.planning.predictions import plan_prediction
from planner.observed import summarize
from planner.spec.presets import load_model_preset
from tests.browser.conftest import SCREENS, logged_in
from tests.conftest import cpu_hybrid_plan, tiny_llama_job

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


# Every dataset of the run chart with its source, axis, and its bars as [start, end].
CHART_DATASETS = """() => {
  const chart = Chart.getChart(document.getElementById("timeline"));
  return {scales: Object.keys(chart.scales).sort(),
          datasets: chart.data.datasets.map((d) => ({source: d.source, axis: d.xAxisID,
                                                     bars: d.data.map((p) => ({row: p.y, x: p.x, step: p.info.step,
                                                                               action: p.info.action}))}))};
}"""





@pytest.fixture
def plan(people):
    """tiny-llama planned with 1F1B on 2 cpu-host devices and 4 micro-batches, in-process."""
    return _planned(people, microbatches=4)


@pytest.fixture
def long_plan(people):
    """The same with 64 micro-batches: 50 steps of it run for seconds, long enough to be cancelled mid-run."""
    return _planned(people, microbatches=64)


def _planned(people, *, microbatches: int):
    _, job = tiny_llama_job(people, people.owner, num_microbatches=microbatches)
    return job_run(job_id=job.pk)


def _observed_rows(run: Run, plan, step_offsets_ms: list[float], stretch: float) -> list[RunEvent]:
    """Each step's actions as predicted, ``stretch`` times longer, starting ``step_offsets_ms[step]`` after the
    ranks' aligned start (as a CPU run's steps do: thousands of ms in)."""
    timeline = plan_prediction(plan)["timeline"]
    rows, seq = [], 0
    for step, offset in enumerate(step_offsets_ms):
        for entry in timeline:
            seq += 1
            rows.append(RunEvent(run=run, seq=seq, rank=entry["device"], device=entry["device"],
                                 action=entry["action"], stage=entry["stage"], kind=entry["type"],
                                 microbatch=entry["microbatch"], step=step,
                                 start_ms=offset + stretch * entry["start_ms"], end_ms=offset + stretch * entry["end_ms"]))
    return rows


def test_predicted_and_observed_share_one_time_axis_each_step_from_its_start(browser, live_server, people, plan):
    run = Run.objects.create(plan=plan, created_by=people.member, status=JobStatus.SUCCEEDED, world_size=2, steps=3)
    offsets = [12_600.0, 13_950.5, 15_420.25]
    rows = RunEvent.objects.bulk_create(_observed_rows(run, plan, offsets, stretch=3.0))
    summary = summarize([{"device": r.device, "kind": r.kind, "step": r.step, "start_ms": r.start_ms,
                          "end_ms": r.end_ms} for r in rows], num_devices=2)
    Run.objects.filter(pk=run.pk).update(summary={**summary, "losses": [6.3, 6.1, 5.9]},
                                         executed_spec=plan.job.spec.doc)
    page = logged_in(browser, live_server)
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    expect(page.locator("[data-run][data-loaded=true]")).to_have_count(1, timeout=30_000)  # after its reload, if any
    chart = page.evaluate(CHART_DATASETS)
    assert chart["scales"] == ["x", "y"], "one time axis (and the rows)"
    assert {dataset["axis"] for dataset in chart["datasets"]} == {"x"}
    predicted = [bar for d in chart["datasets"] if d["source"] == "predicted" for bar in d["bars"]]
    observed = [bar for d in chart["datasets"] if d["source"] == "observed" for bar in d["bars"]]
    timeline = {entry["action"]: entry for entry in plan_prediction(plan)["timeline"]}
    assert len(predicted) == len(timeline) and min(bar["x"][0] for bar in predicted) == 0
    # A finished run opens on its last step; every observed bar is its event less that step's first start.
    assert {bar["step"] for bar in observed} == {2} and len(observed) == len(timeline)
    assert min(bar["x"][0] for bar in observed) == pytest.approx(0.0, abs=1e-9)
    for bar in observed:
        assert bar["x"][0] == pytest.approx(3.0 * timeline[bar["action"]]["start_ms"], abs=1e-6)
        assert bar["x"][1] == pytest.approx(3.0 * timeline[bar["action"]]["end_ms"], abs=1e-6)
    page.select_option("#observed-step", "all")
    observed = [bar for d in page.evaluate(CHART_DATASETS)["datasets"] if d["source"] == "observed"
                for bar in d["bars"]]
    for step in range(3):
        starts = [bar["x"][0] for bar in observed if bar["step"] == step]
        assert len(starts) == len(timeline) and min(starts) == pytest.approx(0.0, abs=1e-9), step
    page.select_option("#chart-rows", "stage")
    rows = {bar["row"] for d in page.evaluate(CHART_DATASETS)["datasets"] for bar in d["bars"]}
    assert rows == {f"stage {stage} (device {stage}) · {source}" for stage in (0, 1)
                    for source in ("predicted", "observed")}
    page.screenshot(path=str(SCREENS / "run-01-one-axis-per-stage.png"), full_page=True)
    # Step by step: each step's span (3 x the predicted iteration, as the events were stretched), the prediction,
    # the loss; tokens per second over the steady steps' median, counted independently here.
    steps = page.evaluate("""() => window.adaptisSteps.data.datasets.map((d) => ({source: d.source, data: d.data}))""")
    predicted_ms = plan_prediction(plan)["iteration_ms"]
    by_source = {dataset["source"]: dataset["data"] for dataset in steps}
    assert by_source["observed"] == pytest.approx([3.0 * predicted_ms] * 3)
    assert by_source["predicted"] == pytest.approx([predicted_ms] * 3) and by_source["loss"] == [6.3, 6.1, 5.9]
    spec = plan.job.spec.doc
    tokens_per_s = 4 * spec.get("micro_batch_size", 1) * spec["seq_len"] / (3.0 * predicted_ms / 1e3)
    assert page.locator("[data-metric=observed-tokens]").inner_text() == f"{round(tokens_per_s):,}"


def test_a_run_cancelled_in_its_second_step_opens_on_its_one_complete_step(browser, live_server, people, plan):
    run = Run.objects.create(plan=plan, created_by=people.member, status=JobStatus.CANCELLED, world_size=2, steps=5,
                             cancel_requested=True)
    rows = _observed_rows(run, plan, [8_000.0, 9_200.0], stretch=2.0)
    partial = len(rows) - 3  # the cancel cut step 1 short of its last three actions
    RunEvent.objects.bulk_create(rows[:partial])
    page = logged_in(browser, live_server)
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    expect(page.locator("[data-run][data-loaded=true]")).to_have_count(1, timeout=30_000)
    expect(page.locator("#observed-step")).to_have_value("0")
    datasets = page.evaluate(CHART_DATASETS)["datasets"]
    shown = [bar for d in datasets if d["source"] == "observed" for bar in d["bars"]]
    assert {bar["step"] for bar in shown} == {0}
    assert len(shown) == len(plan_prediction(plan)["timeline"]) == len(rows) // 2
    page.select_option("#observed-step", "all")
    shown = [bar for d in page.evaluate(CHART_DATASETS)["datasets"] if d["source"] == "observed" for bar in d["bars"]]
    assert len(shown) == partial


def test_a_run_whose_ranks_are_starting_says_so_until_its_first_event(browser, live_server, people, plan):
    run = Run.objects.create(plan=plan, created_by=people.member, status=JobStatus.RUNNING, world_size=2, steps=1)
    page = logged_in(browser, live_server)
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    phase = page.locator("[data-run-phase]")
    expect(phase).to_be_visible()
    expect(phase).to_contain_text("Starting ranks")
    expect(page.locator("#cancel-run")).to_be_visible()
    page.screenshot(path=str(SCREENS / "run-02-starting-ranks.png"), full_page=True)
    RunEvent.objects.bulk_create(_observed_rows(run, plan, [5_000.0], stretch=1.0)[:1])
    expect(phase).to_be_hidden()
    expect(page.locator("[data-event-count]")).to_have_text("1")


def _hybrid_rows(run: Run, plan, step_offsets_ms: list[float]) -> tuple[list[RunEvent], list[RunCollective]]:
    """A TP2 PP2 DP2 plan's steps as its 8 ranks report them: rank r (pipeline rank r // 4, replica r % 4) runs its
    pipeline rank's predicted actions 2, 2.5, 3 or 3.5 times as long, with a TP all-gather in the middle quarter of
    each and, after its last, a DP all-reduce of 2 ms and the ZeRO-1 optimizer step of 0.5 ms."""
    timeline = plan_prediction(plan)["timeline"]
    actions, collectives, seq = [], [], 0
    for step, offset in enumerate(step_offsets_ms):
        for rank in range(8):
            device, stretch = rank // 4, 2.0 + 0.5 * (rank % 4)
            mine = [entry for entry in timeline if entry["device"] == device]
            for index, entry in enumerate(mine):
                start, end = offset + stretch * entry["start_ms"], offset + stretch * entry["end_ms"]
                seq += 1
                actions.append(RunEvent(run=run, seq=seq, rank=rank, device=device, action=entry["action"],
                                        stage=entry["stage"], kind=entry["type"], microbatch=entry["microbatch"],
                                        step=step, start_ms=start, end_ms=end))
                seq += 1
                collectives.append(RunCollective(run=run, seq=seq, rank=rank, device=device, op="tp_all_gather",
                                                 group="tp", step=step, index=index, bytes=4096,
                                                 start_ms=start + (end - start) / 4, end_ms=start + (end - start) / 2))
            last = max(row.end_ms for row in actions if row.rank == rank and row.step == step)
            for index, (op, begin, end) in enumerate((("dp_all_reduce", 0.0, 2.0), ("dp_optimizer_step", 2.0, 2.5)),
                                                     start=len(mine)):
                seq += 1
                collectives.append(RunCollective(run=run, seq=seq, rank=rank, device=device, op=op, group="dp",
                                                 step=step, index=index, bytes=1 << 20, start_ms=last + begin,
                                                 end_ms=last + end))
    return actions, collectives


# Every bar of the run chart with its dataset's label and source, and what a folded bar says of its replicas.
HYBRID_CHART = """() => {
  const chart = Chart.getChart(document.getElementById("timeline"));
  return {labels: chart.data.labels,
          datasets: chart.data.datasets.map((d) => ({label: d.label, source: d.source,
            bars: d.data.map((p) => ({row: p.y, x: p.x, action: p.info.action, collective: p.info.collective,
                                      replicas: p.info.replicas, spread: p.info.spread_ms}))}))};
}"""


def test_a_hybrid_runs_page_folds_each_devices_replicas_and_draws_its_collectives_on_the_same_axis(
        browser, live_server, people):
    plan = cpu_hybrid_plan(people, people.owner, tp=2, pp=2, dp=2)
    run = Run.objects.create(plan=plan, created_by=people.member, status=JobStatus.SUCCEEDED, world_size=8, steps=2,
                             executed_spec=plan.job.spec.doc)
    actions, collectives = _hybrid_rows(run, plan, [7_000.0, 8_500.0])
    RunEvent.objects.bulk_create(actions)
    RunCollective.objects.bulk_create(collectives)
    events = [{"type": "action", "rank": r.rank, "device": r.device, "kind": r.kind, "step": r.step,
               "start_ms": r.start_ms, "end_ms": r.end_ms} for r in actions]
    events += [{"type": "collective", "rank": r.rank, "device": r.device, "op": r.op, "step": r.step,
                "start_ms": r.start_ms, "end_ms": r.end_ms} for r in collectives]
    Run.objects.filter(pk=run.pk).update(summary={**summarize(events, num_devices=2), "losses": [6.3, 6.1]})
    page = logged_in(browser, live_server)
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    expect(page.locator("[data-run][data-loaded=true]")).to_have_count(1, timeout=30_000)
    chart = page.evaluate(HYBRID_CHART)
    assert chart["labels"] == [f"device {device} · {row}" for device in (0, 1) for row in (
        "predicted", "observed", "collectives · predicted", "collectives · observed")]
    timeline = plan_prediction(plan)["timeline"]
    # The last step, folded: one bar per predicted action, the median of its 4 replicas (2, 2.5, 3, 3.5 times the
    # prediction: 2.75 times), from the step's start.
    observed = [bar for d in chart["datasets"] if d["source"] == "observed" for bar in d["bars"] if bar["action"]]
    assert len(observed) == len(timeline)
    for bar in observed:
        entry = next(entry for entry in timeline if entry["action"] == bar["action"])
        assert bar["x"] == pytest.approx([2.75 * entry["start_ms"], 2.75 * entry["end_ms"]], abs=1e-6)
        assert bar["replicas"] == 4
        assert bar["spread"] == pytest.approx(1.5 * (entry["end_ms"] - entry["start_ms"]), abs=1e-6)
    by_label = {d["label"]: d["bars"] for d in chart["datasets"] if d["bars"]}
    gathers = by_label["TP collectives · observed"]
    assert len(gathers) == len(timeline) and {bar["replicas"] for bar in gathers} == {4}
    for device in (0, 1):
        lane = f"device {device} · collectives · observed"
        last_end = max(2.75 * entry["end_ms"] for entry in timeline if entry["device"] == device)
        (reduce,) = [bar for bar in by_label["DP collectives · observed"] if bar["row"] == lane]
        (step,) = [bar for bar in by_label["optimizer steps · observed"] if bar["row"] == lane]
        assert reduce["x"] == pytest.approx([last_end, last_end + 2.0]) and reduce["collective"] == "dp_all_reduce"
        assert step["x"] == pytest.approx([last_end + 2.0, last_end + 2.5])
    predicted_end = [bar for d in chart["datasets"] if d["source"] == "predicted" for bar in d["bars"]
                     if bar["collective"]]
    assert {bar["row"] for bar in predicted_end} == {f"device {d} · collectives · predicted" for d in (0, 1)}
    assert min(bar["x"][0] for bar in predicted_end) == pytest.approx(plan_prediction(plan)["iteration_ms"])
    expect(page.locator("[data-replicas]")).to_have_text("4")
    expect(page.locator('[data-replicas-of="1"]')).to_have_text("4")
    expect(page.locator('[data-collectives-of="0"]')).to_contain_text("tp_all_gather")
    page.screenshot(path=str(SCREENS / "run-03-hybrid-replicas-and-collectives.png"), full_page=True)


@pytest.mark.worker
def test_cancel_a_running_run_from_its_page(celery_worker, browser, live_server, people, long_plan, wait_for):
    page = logged_in(browser, live_server)
    page.goto(f"{live_server.url}/jobs/{long_plan.job_id}/?plan={long_plan.pk}")
    page.fill("#id_steps", "50")
    page.click("#run-on-cpu")
    expect(page.locator("h1")).to_contain_text("Run #")
    page.wait_for_function("""() => {
      if (typeof Chart === "undefined") return false;  // the page's scripts, at its end, still loading
      const chart = Chart.getChart(document.getElementById("timeline"));
      return chart && chart.data.datasets.some((d) => d.source === "observed" && d.data.some((p) => p.info.step >= 1));
    }""", timeout=120_000)
    page.screenshot(path=str(SCREENS / "run-03-live-one-axis.png"), full_page=True)
    page.click("#cancel-run")
    expect(page.locator("[data-run-status]")).to_have_text("cancelled", timeout=30_000)
    expect(page.locator("#cancelled-note")).to_contain_text("are kept below")
    run = Run.objects.get(pk=int(page.url.rstrip("/").rsplit("/", 1)[1]))
    assert run.status == JobStatus.CANCELLED and run.cancel_requested
    kept = RunEvent.objects.filter(run=run).count()
    assert kept > 0 and page.locator("[data-event-count]").inner_text() == str(kept)
    expect(page.locator("#cancel-run")).to_have_count(0)
    # It opens on the last step every action was observed in, not on the one the cancel cut short.
    expect(page.locator("[data-run][data-loaded=true]")).to_have_count(1, timeout=30_000)  # after its reload, if any
    datasets = page.evaluate(CHART_DATASETS)["datasets"]
    shown = [bar for d in datasets if d["source"] == "observed" for bar in d["bars"]]
    assert len(shown) == len([bar for d in datasets if d["source"] == "predicted" for bar in d["bars"]])
    assert {bar["step"] for bar in shown} == {int(page.locator("#observed-step").input_value())}
    page.screenshot(path=str(SCREENS / "run-04-cancelled.png"), full_page=True)


def test_the_spec_page_charts_cost_and_memory_per_layer_analytic_beside_measured(browser, live_server, people):
    from executor.measuring.profiler import measure_profile

    spec = load_model_preset("tiny-hybrid")
    record = spec_create(team=people.team, owner=people.owner, spec=spec)
    measured = measure_profile(spec, repeats=2, warmup=1)
    MeasuredProfile.objects.create(spec=record, created_by=people.owner, num_ranks=1, split_backward=True,
                                   status=JobStatus.SUCCEEDED, host="this-host (2 cores)",
                                   profile_doc=measured.to_dict(), finished_at=timezone.now())
    page = logged_in(browser, live_server)
    page.goto(f"{live_server.url}/specs/{record.pk}/")
    charts = page.evaluate("""() => Object.fromEntries(Object.entries(window.adaptisLayerCharts).map(([name, chart]) =>
      [name, {labels: chart.data.labels, sets: chart.data.datasets.map((d) => ({label: d.label, data: d.data}))}]))""")
    assert charts["time"]["labels"] == [f"{index} {layer.kind}" for index, layer in enumerate(spec.layers)]
    analytic, observed = charts["time"]["sets"]
    assert analytic["label"].startswith("analytic") and observed["label"].startswith("measured on this-host")
    assert observed["data"] == pytest.approx([layer.forward + layer.backward_input + layer.backward_weight
                                              for layer in measured.layers])
    memory = {dataset["label"].split(" on ")[0]: dataset["data"] for dataset in charts["memory"]["sets"]}
    mib = 2**20
    assert memory["parameters · measured"] == pytest.approx([layer.param_bytes / mib for layer in measured.layers])
    assert memory["activations · measured"] == pytest.approx([layer.activation_bytes / mib for layer in measured.layers])
    expect(page.locator("#layer-costs")).to_contain_text("measured on the runs' host this-host (2 cores)")
    page.screenshot(path=str(SCREENS / "spec-01-layer-costs.png"), full_page=True)


def test_the_baseline_table_keeps_long_layouts_inside_its_card(browser, live_server, people):
    spec = load_model_preset("gemma-2-9b")
    record = spec_create(team=people.team, owner=people.owner, spec=spec)
    # 16 devices: more ranks than a CPU run starts (CPU_RUN_MAX_RANKS, 8), so the job page shows why instead
    request = job_request_check(spec=spec, num_devices=16, num_microbatches=16, cluster_preset="h100-sxm-2x8",
                                schedule="adaptis", time_budget_s=2)
    job = PlanningJob.objects.create(spec=record, created_by=people.owner, cluster_preset="h100-sxm-2x8",
                                     cluster_doc=request.cluster.to_dict(), num_devices=16, num_microbatches=16,
                                     schedule="adaptis", partition="", time_budget_s=2)
    job_run(job_id=job.pk)
    page = logged_in(browser, live_server)
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    expect(page.locator("#comparison")).to_be_visible()
    overflow = page.evaluate("""() => {
      const card = document.getElementById("comparison").getBoundingClientRect();
      return Array.from(document.querySelectorAll("#comparison table")).map((table) =>
        table.getBoundingClientRect().right - card.right);
    }""")
    assert overflow and all(excess <= 0 for excess in overflow), overflow
    longest = max(len(text) for text in page.locator("#comparison td.layout-cell").all_inner_texts())
    assert longest > 40, "long layouts, wrapped"
    expect(page.locator("#candidates tbody tr").first).to_have_attribute("data-kept", "")
    expect(page.locator("#run-refusal")).to_contain_text("uses 16 devices")
    expect(page.locator("#run-on-cpu")).to_have_count(0)
    page.screenshot(path=str(SCREENS / "job-01-long-layouts-and-refusal.png"), full_page=True)
