"""The web's way into the executor, as ``planner.service`` is its way into the planner: one module, nothing else.

A Django process must not import torch (each web and planning process would pay for it at its start, in time and
memory): what only the runs worker needs (``run_plan``, ``scale_spec``, ``measure_for_local_runs``) is imported from
its home on first use (PEP 562's module ``__getattr__``); the rest is torch-free and imported here.
"""

from __future__ import annotations

from importlib import import_module

from executor.errors import ExecutorError, RunCancelled
from executor.running.cores import usable_cores
from executor.running.events import HTTP_BATCH_EVENTS
from executor.running.scope import execution_refusal, world_size

# Name -> its home module, imported (with torch) when the name is first used.
ON_FIRST_USE = {
    "run_plan": "executor.running.launch",
    "scale_spec": "executor.model",
    "measure_for_local_runs": "executor.measuring.profiler",
}


def __getattr__(name: str):
    if name in ON_FIRST_USE:
        return getattr(import_module(ON_FIRST_USE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [*ON_FIRST_USE, "ExecutorError", "HTTP_BATCH_EVENTS", "RunCancelled", "execution_refusal", "usable_cores",
           "world_size"]
