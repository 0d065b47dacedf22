"""What a search returns: the best plan, the runners-up, every baseline on the same profile (metrics and plans), and
stats. ``to_dict`` leaves the baselines' plans out: their metrics say what they are."""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.plan import Plan


@dataclass
class SearchResult:
    plan: Plan                       # strategy "adaptis", ``predicted`` from the simulator, ``meta`` below
    lower_bound: dict                # the bound's parts in ms; ``lower_bound_ms`` is the bound
    gap: float                       # iteration_ms / lower_bound_ms - 1
    candidates: list[dict]           # the top candidates, best first, each with its score
    baselines: dict[str, dict]       # baseline name -> metrics on the same profile and cluster
    stats: dict = field(default_factory=dict)
    cancelled: bool = False
    baseline_plans: dict[str, Plan] = field(default_factory=dict)   # the plans ``baselines`` scored, by name

    @property
    def iteration_ms(self) -> float:
        return self.plan.predicted["iteration_ms"]

    @property
    def lower_bound_ms(self) -> float:
        return self.lower_bound["lower_bound_ms"]

    def speedup_over(self, baseline: str) -> float | None:
        metrics = self.baselines.get(baseline)
        if not metrics or metrics.get("iteration_ms") is None:
            return None
        return metrics["iteration_ms"] / self.iteration_ms

    def to_dict(self) -> dict:
        return {"plan": self.plan.to_dict(), "iteration_ms": self.iteration_ms,
                "lower_bound_ms": self.lower_bound_ms, "lower_bound": self.lower_bound, "gap": self.gap,
                "candidates": self.candidates, "baselines": self.baselines, "stats": self.stats,
                "cancelled": self.cancelled}
