"""A stored plan's prediction: the compact metrics live on the row, the timeline is simulated on demand.

A search stores a dozen plans per job; their timelines and transfers (about 3 MB of JSON per plan at
16 devices x 128 micro-batches) would dominate the database, while the simulator rebuilds them from the
plan, its profile and the job's cluster in tens of milliseconds, deterministically. Rows stored before
this change may still hold their timeline; they are used as they are.

Each web process keeps the predictions it simulated last (``PREDICTIONS``): the plan detail endpoint and page
asked the simulator again on every request, 28 of the 45 ms a plan detail took in-process
(``benchmarks/web_profile.py``). A plan's documents are written once, when the row is created (an edited plan
is a new, derived row; the admin site shows them read-only), so the plan's id and creation time name its
prediction for good. Who may see a plan is decided before it is asked for, on every request.
"""

from __future__ import annotations

from adaptis_web.studio.common.bounded_cache import BoundedCache
from adaptis_web.studio.models import Plan
from planner import service as planner_service

# Timeline and transfer entries kept per process: ~0.5 KB each as Python objects, so about 10 MB; the plan endpoint
# sends planning.plan_json's text and reads this only for a plan it has not encoded yet, the pages use it directly.
PREDICTION_CACHE_ENTRIES = 20_000
PREDICTIONS: BoundedCache[dict] = BoundedCache(
    PREDICTION_CACHE_ENTRIES, lambda found: len(found.get("timeline", ())) + len(found.get("transfers", ())))


def stored_plan(plan: Plan) -> planner_service.StoredPlan:
    """A plan row's documents, as the planner facade takes a stored plan."""
    job = plan.job
    return planner_service.StoredPlan(plan_doc=plan.plan_doc, profile_doc=plan.profile_doc, spec_doc=job.spec.doc,
                                      cluster_doc=job.cluster_doc, job_seq_len=getattr(job, "seq_len", None),
                                      simulation=plan.simulation)


def plan_key(plan: Plan) -> tuple:
    """What names a plan's documents for good: they are written once, with the row."""
    return plan.pk, plan.created_at


def run_prediction(plan: Plan) -> dict:
    """What a run of ``plan`` is compared with (``planner.service.run_comparison_simulation``: a hybrid plan as this
    project's executor runs it), kept as ``plan_prediction`` keeps its own."""
    if plan.plan_doc.get("parallel") is None:
        return plan_prediction(plan)
    key = (*plan_key(plan), "run")
    cached = PREDICTIONS.get(key)
    if cached is None:
        cached = planner_service.run_comparison_simulation(stored_plan(plan))
        PREDICTIONS.put(key, cached)
    return cached


def plan_prediction(plan: Plan) -> dict:
    """The simulator's full output for ``plan``: the stored metrics plus ``timeline`` and ``transfers``."""
    if "timeline" in plan.simulation:
        return plan.simulation
    key = plan_key(plan)
    cached = PREDICTIONS.get(key)
    if cached is not None:
        return cached
    prediction = planner_service.stored_plan_simulation(stored_plan(plan))
    PREDICTIONS.put(key, prediction)
    return prediction
