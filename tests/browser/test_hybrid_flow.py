"""A hybrid-parallel job in a real browser: a member saves the team's H100 pod as a cluster, uploads
Qwen3-Next-80B-A3B, is told it fits in no configuration of 16 H100s, and plans it as a whole training job on 64
H100s (the named cluster h100-sxm-8x8, sequence 4096, global batch 512); the real Celery worker searches
TP x CP x PP x DP x EP; the page shows the chosen configuration, the runners-up, all 64 GPUs with their
coordinates and every pipeline rank's memory under the H100's 80 GiB; the plan's page offers it as Megatron-LM
arguments and a torchtitan config, each with what that framework cannot express of the plan.

Debian's Chromium driven by Playwright against pytest-django's live server. Screenshots in /tmp/team/screens/.
"""

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from adaptis_web.studio.models import ClusterRecord, PlanningJob
from planner.spec.presets import MODEL_PRESET_DIR
from tests.browser.conftest import SCREENS, log_in

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_qwen3_next_on_64_h100s_as_a_whole_training_job(celery_worker, live_server, people, page):
    log_in(page, live_server)

    # The team's pod, saved once as a copy of the named cluster: every job form of the team offers it.
    page.click("text=Clusters >> nth=0")
    page.fill("#id_name", "our H100 pod")
    page.fill("#id_from_preset", "h100-sxm-8x8")
    page.click("#cluster-form button[type=submit]")
    expect(page.locator("h1")).to_have_text("our H100 pod")
    expect(page.locator("[data-metric=gpus]")).to_have_text("64")
    page.screenshot(path=str(SCREENS / "hybrid-00-saved-cluster.png"), full_page=True)
    saved = ClusterRecord.objects.get()

    page.click("text=New plan >> nth=0")
    page.set_input_files("#id_file", str(MODEL_PRESET_DIR / "qwen3-next-80b-a3b.json"))
    expect(page.locator("#id_gpus")).to_be_hidden()  # the pipeline-only fields show until the mode changes
    page.select_option("#id_mode", "hybrid")
    expect(page.locator("#id_num_devices")).to_be_hidden()
    expect(page.locator(f"#id_saved_cluster option[value='{saved.pk}']")).to_have_text(
        "our H100 pod (64 × H100-SXM-80GB, team pipeline-team)")
    # First on 8 GPUs, as a new user might: 80 B parameters fit in no configuration of 8 H100s (even fully sharded,
    # 16 bytes a parameter), and the form says so before anything is stored or queued.
    page.fill("#id_cluster_name", "h100-sxm-1x8")
    page.fill("#id_gpus", "8")
    page.fill("#id_seq_len", "4096")
    page.fill("#id_global_batch", "512")
    page.fill("#id_time_budget_s", "5")
    # Megatron-Core's mhc recompute module is not modelled: the form names the field and stores nothing
    page.fill("#id_recompute_modules", "mhc")
    page.click("#upload-form button[type=submit]")
    expect(page.locator("#upload-form")).to_contain_text("mhc is no recompute module modelled here")
    assert PlanningJob.objects.count() == 0
    page.set_input_files("#id_file", str(MODEL_PRESET_DIR / "qwen3-next-80b-a3b.json"))
    page.fill("#id_recompute_modules", "")
    page.click("#upload-form button[type=submit]")
    expect(page.locator("#form-errors")).to_contain_text("memory: no configuration fits H100-SXM-80GB's "
                                                         "85,899,345,920 bytes: the closest")
    assert PlanningJob.objects.count() == 0
    page.screenshot(path=str(SCREENS / "hybrid-01-refused-on-8-gpus.png"), full_page=True)

    page.set_input_files("#id_file", str(MODEL_PRESET_DIR / "qwen3-next-80b-a3b.json"))
    expect(page.locator("#id_gpus")).to_be_visible()  # the form came back in the hybrid mode
    page.fill("#id_cluster_name", "h100-sxm-8x8")
    page.fill("#id_gpus", "64")
    page.screenshot(path=str(SCREENS / "hybrid-01-form.png"), full_page=True)
    page.click("#upload-form button[type=submit]")

    expect(page.locator("h1")).to_contain_text("Job #")
    expect(page.locator(".subtitle").first).to_contain_text("64 GPUs · sequence 4096 · global batch 512")
    expect(page.locator("#hybrid-configuration")).to_be_visible(timeout=120_000)  # the page polls, then shows it
    expect(page.locator("[data-job-status]")).to_have_text("succeeded")
    job = PlanningJob.objects.get()
    best = job.result["best"]

    configuration = page.locator("[data-configuration]").inner_text()
    assert configuration == best["short"] and re.fullmatch(r"TP\d+ CP\d+ PP\d+ DP\d+ EP\d+ mbs\d+ m\d+ .*",
                                                            configuration)
    degrees = best["parallel"]
    assert degrees["tp"] * degrees["cp"] * degrees["pp"] * degrees["dp"] == 64
    tokens = page.locator("[data-metric=tokens-per-s]").inner_text()
    assert tokens.endswith("tokens/s") and int(re.sub(r"\D", "", tokens)) > 100_000
    mfu = float(page.locator("[data-metric=mfu]").inner_text().rstrip(" %"))
    assert 10 < mfu < 60

    rows = page.locator("#runners-up tbody tr")
    assert rows.count() == 1 + len(job.result["runners_up"]) >= 3
    expect(rows.first).to_have_attribute("data-chosen", "")
    assert rows.first.locator("td").first.inner_text() == configuration
    assert all(text == "yes" for text in page.locator("#runners-up tbody td:nth-child(8)").all_inner_texts())

    expect(page.locator("#cluster-picture .gpu-cell")).to_have_count(64)
    expect(page.locator("#cluster-picture .node-box")).to_have_count(8)
    first = page.locator(".gpu-cell[data-gpu='0']").inner_text()
    assert first == "#0 (0,0,0,0,0)"
    expect(page.locator("#cluster-rest")).to_have_count(0)
    expect(page.locator("#stage-legend [data-stage]")).to_have_count(degrees["pp"])

    bars = page.locator("#memory .memory-bar")
    expect(bars).to_have_count(degrees["pp"])
    for bar in bars.all():
        total, capacity = float(bar.get_attribute("data-total-gib")), float(bar.get_attribute("data-capacity-gib"))
        assert 0 < total <= capacity == 80.0
        assert bar.locator(".part").count() == 5
    expect(page.locator("#memory h2")).to_contain_text("GiB")

    # Where each configuration's step goes: a bar each, its parts adding up to its step; the widest is the longest.
    steps = page.locator("#step-breakdown .memory-bar")
    expect(steps).to_have_count(rows.count())
    widths = []
    for bar, score in zip(steps.all(), [best, *job.result["runners_up"]]):
        parts = bar.locator(".part")
        seconds = [float(value) for value in parts.evaluate_all("parts => parts.map(p => p.dataset.seconds)")]
        assert sum(seconds) == pytest.approx(score["predicted"]["iteration_ms"] / 1e3, abs=1e-5)
        assert seconds[0] == pytest.approx(score["predicted"]["breakdown_ms"]["compute"] / 1e3, abs=1e-6)
        widths.append(sum(parts.evaluate_all("parts => parts.map(p => p.getBoundingClientRect().width)")))
    steps_s = [score["predicted"]["iteration_ms"] for score in [best, *job.result["runners_up"]]]
    assert widths.index(max(widths)) == steps_s.index(max(steps_s))
    page.locator("#step-breakdown").screenshot(path=str(SCREENS / "hybrid-04b-step-breakdown.png"))
    page.screenshot(path=str(SCREENS / "hybrid-02-job.png"), full_page=True)
    page.locator("#cluster-picture").screenshot(path=str(SCREENS / "hybrid-03-cluster.png"))
    page.locator("#memory").screenshot(path=str(SCREENS / "hybrid-04-memory.png"))

    # The plan's page: the framework downloads, and what each cannot express of the plan (Qwen3-Next's gated
    # delta-net layers at least), with the executor offered instead.
    plan = job.plans.get()
    page.goto(f"{live_server.url}/plans/{plan.pk}/")
    expected = {"megatron-args": ("megatron.sh", f"--tensor-model-parallel-size {degrees['tp']}\n"),
                "torchtitan-toml": ("torchtitan.toml", f"tensor_parallel_degree = {degrees['tp']}\n")}
    for fmt, (extension, line) in expected.items():
        with page.expect_download() as download_info:
            page.click(f"[data-export='{fmt}']")
        download = download_info.value
        assert download.suggested_filename == f"plan-{plan.pk}-{plan.strategy}.{extension}"
        assert line in Path(download.path()).read_text()
        expect(page.locator(f"[data-export-lost='{fmt}']")).to_contain_text("linear_attention")
    page.locator("#downloads").screenshot(path=str(SCREENS / "hybrid-05-framework-downloads.png"))
