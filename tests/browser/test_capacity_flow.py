"""How many GPUs, in a real browser: a member picks the Llama 3 8B preset, asks for a capacity plan (15 T tokens,
sequence 4096, global batch 1024) over 64 to 1,024 H100s, first with a malformed range (the form says which field and
why, nothing is stored), then right; the real Celery worker sweeps the counts with progress, and the job page charts
days to train against GPU-hours, one labelled point per count, beside the table with the fastest and cheapest marked
and where each count's step goes; one count is then planned in full as a whole job from its row.

Debian's Chromium driven by Playwright against pytest-django's live server. Screenshots in /tmp/team/screens/.
"""

import pytest
from playwright.sync_api import expect

from adaptis_web.studio.models import PlanningJob
from tests.browser.conftest import SCREENS, log_in

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_llama_3_8b_from_64_to_1024_h100s(celery_worker, live_server, people, page):
    log_in(page, live_server)

    page.click("text=New plan >> nth=0")
    page.select_option("#id_preset", "llama-3-8b")
    expect(page.locator("#id_token_budget_b")).to_be_hidden()
    page.select_option("#id_mode", "capacity")
    expect(page.locator("#id_token_budget_b")).to_be_visible()
    expect(page.locator("#id_gpus")).to_be_hidden()       # the counts replace the hybrid job's one GPU count
    expect(page.locator("#id_num_devices")).to_be_hidden()
    page.fill("#id_cluster_name", "h100-sxm-1x8")
    page.fill("#id_token_budget_b", "15000")
    page.fill("#id_gpu_counts", "64-x")
    page.fill("#id_seq_len", "4096")
    page.fill("#id_global_batch", "1024")
    page.click("#upload-form button[type=submit]")
    expect(page.locator("#id_gpu_counts + .help + .errorlist, .field:has(#id_gpu_counts) .errorlist")).to_contain_text(
        "doubling range '64-16384'")
    assert not PlanningJob.objects.exists()

    page.select_option("#id_preset", "llama-3-8b")
    expect(page.locator("#id_token_budget_b")).to_be_visible()   # the form came back in the capacity mode
    page.fill("#id_gpu_counts", "64-1024")
    page.screenshot(path=str(SCREENS / "capacity-01-form.png"), full_page=True)
    page.click("#upload-form button[type=submit]")

    expect(page.locator("h1")).to_contain_text("Job #")
    expect(page.locator(".subtitle").first).to_contain_text("5 GPU counts, 64 to 1024")
    expect(page.locator("#capacity")).to_be_visible(timeout=120_000)   # the page polls, then shows it
    expect(page.locator("[data-job-status]")).to_have_text("succeeded")
    job = PlanningJob.objects.get()
    points = job.result["points"]
    assert [point["gpus"] for point in points] == [64, 128, 256, 512, 1024]

    rows = page.locator("#capacity-table tbody tr")
    expect(rows).to_have_count(5)
    page.wait_for_function("window.adaptisCapacity !== undefined")   # drawn once the page has loaded
    charted = page.evaluate("window.adaptisCapacity.data.datasets[0].data.map(p => [p.gpus, p.x, p.y])")
    assert charted == [[point["gpus"], point["days"], point["gpu_hours"]] for point in points]
    scales = page.evaluate("[window.adaptisCapacity.scales.x.type, window.adaptisCapacity.scales.y.type]")
    assert scales == ["logarithmic", "logarithmic"]
    fastest = min(points, key=lambda point: point["days"])["gpus"]
    expect(page.locator(f"[data-capacity-gpus='{fastest}']")).to_contain_text("fastest")
    # perfect scaling costs every count the same GPU-hours: the cheapest is then the fastest of those as cheap
    fewest = min(point["gpu_hours"] for point in points)
    cheapest = max(point["gpus"] for point in points if point["gpu_hours"] <= 1.01 * fewest)
    expect(page.locator(f"[data-capacity-gpus='{cheapest}']")).to_contain_text("cheapest")
    expect(page.locator("#capacity-table").get_by_text("cheapest")).to_have_count(1)
    bars = page.locator("#capacity-steps .memory-bar")
    expect(bars).to_have_count(5)
    page.locator("#capacity").screenshot(path=str(SCREENS / "capacity-02-chart.png"))

    # The count to train on, planned in full: a hybrid job on 512 of the same GPUs, with the same batch.
    page.click("[data-plan-count='512']")
    expect(page.locator(".subtitle").first).to_contain_text("512 GPUs · sequence 4096 · global batch 1024")
    expect(page.locator("#hybrid-configuration")).to_be_visible(timeout=120_000)
    hybrid = PlanningJob.objects.exclude(pk=job.pk).get()
    degrees = hybrid.result["best"]["parallel"]
    assert degrees["tp"] * degrees["cp"] * degrees["pp"] * degrees["dp"] == 512
    expect(page.locator("[data-configuration]")).to_have_text(hybrid.result["best"]["short"])
