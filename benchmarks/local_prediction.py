"""The first prediction a user sees for a local CPU run, against what the run then observes, on a running product.

It drives AdaPtis Studio as ``make run`` starts it, over its REST API only, as a user's script would; it does not
start the product: give ``--url`` of one that runs (``ADAPTIS_PORT=8123 make run``, then ``--url
http://127.0.0.1:8123``), and ``--token`` or a login (the demo account by default). Nothing is computed in this
process. For each case: a job on ``cpu-host`` for the preset's spec (the demo team's, else uploaded), which waits
for its profile measured on the runs worker (reused when the spec has one for that many ranks and backward split,
as for any user), then plans; the plan's stored ``predicted.iteration_ms`` is the first prediction (**predicted
ms**, the job page's). ``POST /api/runs/`` then runs the plan on CPU ``--runs`` times; **observed ms** is the median
of the runs' ``summary.median_iteration_ms`` (the run page's: the median over steps 1..N-1 of each step's span).
With the login, the run page's own prediction is read too (**run page ms**: the plan's stages timed on the runs'
host after the job, ``runs.profiling.plan_local_prediction``).

A job that planned on the analytic profile (``analytic_profile_reason``) is marked in the profile column. The host's
CPUs are waited for until idle before each job and run (``shared_host.wait_for_idle_cpus``, at most 30 s), and
**others' CPU** is the share of the host's CPU time that programs other than the product (every process whose
working directory is in ``--tree``, this tree by default, with the children they reaped) used while the job (its
profile measured, unless reused, then its planning) or a run was in progress: meaningful where the product runs on
this host from that tree. A run during which others took more than ``--max-others`` is run again, up to
``--attempts`` tries, and the least disturbed one kept (as ``shared_host.measure_quietly`` does in process); a
job's profile is measured once, as for any user.

The product allows 30 runs an hour per user by default (``THROTTLE_RUNS``); the cases here take up to 72, so
start it with a higher limit:

    ADAPTIS_PORT=8123 THROTTLE_RUNS=1000/hour make run
    .venv/bin/python benchmarks/local_prediction.py --url http://127.0.0.1:8123 [--runs 3] [--steps 12]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from adaptis_client import ApiError, Client  # noqa: E402
from shared_host import cpu_times, load_average, process_times, wait_for_idle_cpus  # noqa: E402

CASES = [("tiny-llama", "1f1b", 8), ("tiny-llama", "zb-h1", 8), ("tiny-llama", "gpipe", 8),
         ("tiny-llama", "adaptis", 8),
         ("tiny-hybrid", "1f1b", 8), ("tiny-hybrid", "zb-h1", 8), ("tiny-hybrid", "gpipe", 4),
         ("tiny-hybrid", "adaptis", 8)]
SEARCH_BUDGET_S = 10


class Load:
    """CPU time of the whole host and of the product's processes (working directory in ``tree``), to tell how much
    of the host other programs used in a window."""

    def __init__(self, tree: Path):
        self.tree = str(tree.resolve())
        self.clock_ticks = os.sysconf("SC_CLK_TCK")

    def _product_ticks(self) -> int:
        total = 0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cwd = os.readlink(entry / "cwd")
            except OSError:
                continue   # gone meanwhile, or not ours to read
            times = process_times(entry) if cwd == self.tree or cwd.startswith(self.tree + "/") else None
            if times is not None:
                total += times[1]
        return total

    def mark(self) -> tuple[int, int, int]:
        idle, total = cpu_times()
        return idle, total, self._product_ticks()

    def others_share(self, before: tuple[int, int, int], after: tuple[int, int, int]) -> float:
        """Share of the host's CPU time between two marks used by programs other than the product."""
        total = max(1, after[1] - before[1])
        busy = total - (after[0] - before[0])
        return max(0.0, busy - (after[2] - before[2])) / total


@dataclass
class Row:
    model: str
    schedule: str
    microbatches: int
    profile: str
    predicted_ms: float
    observed_ms: float
    run_page_ms: float | None
    spread: float
    others_profiling: float   # while the job ran: its profile measured (unless reused), then the planning
    others_runs: float        # the most disturbed of the kept runs

    @property
    def error(self) -> float:
        return (self.predicted_ms - self.observed_ms) / self.observed_ms

    def line(self) -> str:
        run_page = "–" if self.run_page_ms is None else (
            f"{self.run_page_ms:.2f} ({(self.run_page_ms - self.observed_ms) / self.observed_ms:+.1%})")
        return (f"| {self.model} | {self.schedule} | {self.microbatches} | {self.profile} | {self.predicted_ms:.2f} | "
                f"{self.observed_ms:.2f} | {self.error:+.1%} | {run_page} | {self.spread:.0%} | "
                f"{self.others_profiling:.0%} | {self.others_runs:.0%} |")


def spec_id(studio: Client, model: str) -> int:
    """The demo team's spec of preset ``model`` (``make run`` seeds one), else the preset uploaded now."""
    found = studio.get(f"/api/specs/?q={model}&page_size=200")["results"]
    named = [spec for spec in found if spec["name"] == model]
    if named:
        return min(spec["id"] for spec in named)
    doc = json.loads((REPO_ROOT / "planner" / "presets" / "models" / f"{model}.json").read_text())
    return studio.post("/api/specs/", {"doc": doc})["id"]


def run_page_prediction(studio: Client, run_id: int) -> float | None:
    """The iteration time the run page predicts (its chart's data); None with a token (the pages want a login)."""
    if studio.token:
        return None
    page = studio.request("GET", f"/runs/{run_id}/", accept="text/html").decode()
    marker = '<script id="timeline-data" type="application/json">'
    if marker not in page:
        return None
    return json.loads(page.split(marker)[1].split("</script>")[0]).get("iteration_ms")


def measure_case(studio: Client, load: Load, model: str, schedule: str, microbatches: int, *, runs: int,
                 steps: int, attempts: int, max_others: float) -> Row:
    body = {"spec": spec_id(studio, model), "cluster_preset": "cpu-host", "num_devices": 2,
            "num_microbatches": microbatches, "schedule": schedule}
    if schedule == "adaptis":
        body.update(seed=0, time_budget_s=SEARCH_BUDGET_S)
    wait_for_idle_cpus()
    before = load.mark()
    job = studio.wait(f"/api/jobs/{studio.post('/api/jobs/', body)['id']}/", timeout_s=1800)
    job_others = load.others_share(before, load.mark())
    if job["status"] != "succeeded":
        sys.exit(f"job {job['id']} {job['status']}: {job['error']}")
    if job["analytic_profile_reason"]:
        profile = f"analytic: {job['analytic_profile_reason']}"
    else:
        profile = f"measured #{job['measured_profile']}"
    plan = studio.get(f"/api/plans/{job['plans'][0]['id']}/")
    predicted = plan["plan"]["predicted"]["iteration_ms"]
    kept = [quiet_run(studio, load, plan["id"], steps=steps, attempts=attempts, max_others=max_others)
            for _ in range(runs)]
    medians = [run["summary"]["median_iteration_ms"] for run, _ in kept]
    observed = statistics.median(medians)
    return Row(model, schedule, microbatches, profile, predicted, observed,
               run_page_prediction(studio, kept[-1][0]["id"]), (max(medians) - min(medians)) / observed, job_others,
               max(others for _, others in kept))


def quiet_run(studio: Client, load: Load, plan_id: int, *, steps: int, attempts: int,
              max_others: float) -> tuple[dict, float]:
    """A CPU run of the plan, run again (up to ``attempts`` in all) while other programs took more than
    ``max_others`` of the host's CPU meanwhile; the least disturbed run and that share."""
    best: tuple[dict, float] | None = None
    for _ in range(attempts):
        wait_for_idle_cpus()
        before = load.mark()
        run = studio.wait(f"/api/runs/{studio.post('/api/runs/', {'plan': plan_id, 'steps': steps})['id']}/",
                          timeout_s=1800)
        others = load.others_share(before, load.mark())
        if run["status"] != "succeeded":
            sys.exit(f"run {run['id']} {run['status']}: {run['error']}")
        if best is None or others < best[1]:
            best = (run, others)
        if others <= max_others:
            break
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the running product")
    parser.add_argument("--token", help="an API token (else --user and --password log in)")
    parser.add_argument("--user", default="demo")
    parser.add_argument("--password", default="demo-pass-2026")
    parser.add_argument("--tree", type=Path, default=REPO_ROOT, help="where the product runs from (others' CPU)")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--runs", type=int, default=3, help="runs per plan; the median of their observed medians")
    parser.add_argument("--attempts", type=int, default=3, help="tries per run while others disturb it")
    parser.add_argument("--max-others", type=float, default=0.10,
                        help="a run during which other programs took more of the host's CPU is run again")
    parser.add_argument("--only", help="only the cases whose 'model/schedule' contains this text")
    args = parser.parse_args()
    studio = Client(args.url, token=args.token, username=args.user, password=args.password)
    load = Load(args.tree)
    print(f"{args.url}: 2 ranks on cpu-host; load average {load_average()} at start; observed = median over "
          f"{args.runs} runs of each run's median over steps 1-{args.steps - 1}\n")
    print("| model | schedule | micro-batches | profile | predicted ms (job page) | observed ms | error "
          "| run page ms (error) | run-to-run spread | others' CPU: job | others' CPU: runs, worst |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for model, schedule, microbatches in CASES:
        if args.only and args.only not in f"{model}/{schedule}":
            continue
        rows.append(measure_case(studio, load, model, schedule, microbatches, runs=args.runs, steps=args.steps,
                                 attempts=args.attempts, max_others=args.max_others))
        print(rows[-1].line(), flush=True)
    errors = [abs(row.error) for row in rows]
    print(f"\nfirst prediction: median |error| {statistics.median(errors):.1%}, worst {max(errors):.1%}, within 10 % on "
          f"{sum(error <= 0.10 for error in errors)} of {len(rows)} plans; load average {load_average()} at end")


if __name__ == "__main__":
    try:
        main()
    except ApiError as error:
        sys.exit(str(error))
