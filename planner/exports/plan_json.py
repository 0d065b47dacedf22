"""The plan's own ``adaptis.plan/v1`` JSON document."""

import json

from planner.plan import Plan


def plan_json(plan: Plan) -> str:
    return json.dumps(plan.to_dict(), indent=2) + "\n"
