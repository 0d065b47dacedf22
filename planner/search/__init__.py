"""The AdaPtis plan search: partition, placement and schedule co-optimised against the simulator."""

from planner.bounds import search_lower_bound
from planner.search.list_scheduler import SchedulePolicy
from planner.search.result import SearchResult
from planner.search.search import DEFAULT_TIME_BUDGET_S, check_model_state_fits, search_plan

__all__ = ["DEFAULT_TIME_BUDGET_S", "SchedulePolicy", "SearchResult", "check_model_state_fits", "search_lower_bound",
           "search_plan"]
