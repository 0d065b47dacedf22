"""A stored plan's prediction: the compact metrics live on the row, the timeline is simulated on demand.

A search stores a dozen plans per job; their timelines and transfers (about 3 MB of JSON per plan at
16 devices x 128 micro-batches) would dominate the database, while the simulator rebuilds them from the
plan, its profile and the job's cluster in tens of milliseconds, deterministically. Rows stored before
this change may still hold their timeline; they are used as they are.
"""

from __future__ import annotations

from adaptis_web.studio.models import Plan
from planner.cluster import load_cluster
from planner.parallel.mapping import RankMapping
from planner.plan import load_plan
from planner.profile import load_profile
from planner.simulator import simulate


def plan_prediction(plan: Plan) -> dict:
    """The simulator's full output for ``plan``: the stored metrics plus ``timeline`` and ``transfers``."""
    if "timeline" in plan.simulation:
        return plan.simulation
    planner_plan, cluster = load_plan(plan.plan_doc), load_cluster(plan.job.cluster_doc)
    if planner_plan.parallel is not None:  # a hybrid plan's devices are pipeline ranks, on the links between them
        cluster = RankMapping(planner_plan.parallel, cluster).pipeline_cluster()
    simulation = simulate(planner_plan, load_profile(plan.profile_doc), cluster)
    return simulation.to_dict()
