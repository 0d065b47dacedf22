"""A stored plan's documents as the JSON text the API sends: its plan, its profile and its prediction.

They never change once the plan is made (``predictions.plan_key``), and are a few hundred KB: the plan endpoint
spent most of its time having the driver decode them from the database and DRF encode them again
(``benchmarks/web_profile.py``). Each process keeps the text of the plans it sent last (``PLAN_JSON``, bounded in
bytes); the endpoint's query leaves the documents out (``planning.selectors.plan_detail_for_user``) and reads them only
for a plan this process has not encoded yet.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from adaptis_web.studio.common.bounded_cache import BoundedCache
from adaptis_web.studio.models import Plan
from adaptis_web.studio.planning.predictions import plan_key, plan_prediction

PLAN_JSON_BYTES = 32 * 1024 * 1024  # per process
DOCUMENT_FIELDS = ("plan_doc", "profile_doc", "simulation")


@dataclass(frozen=True)
class PlanJSON:
    plan: str
    profile: str
    simulation: str  # the prediction (planning.predictions), timeline included

    def size(self) -> int:
        return len(self.plan) + len(self.profile) + len(self.simulation)


PLAN_JSON: BoundedCache[PlanJSON] = BoundedCache(PLAN_JSON_BYTES, PlanJSON.size)


def dumps(value) -> str:
    """JSON text as the API's renderer writes it (DRF's JSONRenderer: UTF-8, compact, no NaN, U+2028/U+2029
    escaped), to be sent in its place (``api.renderers.RawJSON``)."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def plan_json(plan: Plan) -> PlanJSON:
    """``plan``'s documents as JSON text; its document fields may be deferred (they are read only when needed)."""
    key = plan_key(plan)
    found = PLAN_JSON.get(key)
    if found is not None:
        return found
    deferred = plan.get_deferred_fields() & set(DOCUMENT_FIELDS)
    if deferred:
        plan.refresh_from_db(fields=sorted(deferred))
    found = PlanJSON(plan=dumps(plan.plan_doc), profile=dumps(plan.profile_doc),
                     simulation=dumps(plan_prediction(plan)))
    PLAN_JSON.put(key, found)
    return found
