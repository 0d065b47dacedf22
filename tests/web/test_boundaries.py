"""The web reaches planning through one facade, ``planner.service`` (the document loaders, untrusted text or JSON
to a checked document, included), and ``planner.errors``. Running and measuring go through the executor's own entry
points, each named below with the reason the web calls it."""

from __future__ import annotations

import ast
from pathlib import Path

WEB = Path(__file__).resolve().parent.parent.parent / "adaptis_web"
PLANNER_ANY_NAME = {"planner.service", "planner.errors"}
EXECUTOR_ENTRY_POINTS = {
    ("executor.running.launch", "run_plan"): "a local run's ranks, on the runs worker",
    ("executor.errors", "ExecutorError"): "a failed run's message and its ranks' traceback",
    ("executor.errors", "RunCancelled"): "a run stopped on request",
    ("executor.model", "scale_spec"): "the scaled-down copy a CPU run executes",
    ("executor.measuring.profiler", "measure_for_local_runs"): "a profile measured on the runs' host",
    ("executor.running.cores", "usable_cores"): "the runs' host's cores, recorded with a measured profile",
    ("executor.running.capacity", "execution_refusal"): "a plan the executor cannot run as planned, refused (and "
                                                        "its page's run buttons replaced by the reason)",
    ("executor.running.events", "HTTP_BATCH_EVENTS"):
        "the ingest's bound on a batch, the one the ranks' HTTPS sink keeps to",
}


def _imports(tree: ast.AST):
    """(module, name) for every name imported; (module, None) for ``import module``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield from ((node.module, alias.name) for alias in node.names)


def _allowed(module: str, name: str | None) -> bool:
    if module.split(".")[0] == "executor":
        return (module, name) in EXECUTOR_ENTRY_POINTS
    if module.split(".")[0] != "planner":
        return True
    return module in PLANNER_ANY_NAME or (module == "planner" and name in ("service", "errors"))


def test_the_web_reaches_the_planner_only_through_the_facade_and_the_errors():
    reached = []
    for path in sorted(WEB.rglob("*.py")):
        for module, name in _imports(ast.parse(path.read_text(), filename=str(path))):
            if not _allowed(module, name):
                reached.append(f"{path.relative_to(WEB.parent)}: {module}" + (f".{name}" if name else ""))
    assert reached == []


def test_the_rule_refuses_a_planner_internal_a_loader_beside_the_facade_and_an_unlisted_executor_module():
    tree = ast.parse("from planner.simulator import simulate\nimport planner.search\n"
                     "from executor.running.worker import x\nfrom planner.cluster import load_cluster\n"
                     "from planner import service\n")
    assert [pair for pair in _imports(tree) if not _allowed(*pair)] == [
        ("planner.simulator", "simulate"), ("planner.search", None), ("executor.running.worker", "x"),
        ("planner.cluster", "load_cluster")]


def _studio_imports(path: Path) -> set[str]:
    """The studio modules ``path`` imports, wherever in the file (a function-level import is still a dependency)."""
    modules = set()
    for module, name in _imports(ast.parse(path.read_text(), filename=str(path))):
        if not module.startswith("adaptis_web.studio"):
            continue
        named = f"{module}.{name}"  # ``from adaptis_web.studio.planning import jobs`` imports the module jobs
        modules.add(named if name and (WEB.parent / f"{named.replace('.', '/')}.py").exists() else module)
    return modules


def test_tasks_import_services_and_services_never_import_tasks():
    """One way: a task takes an id and calls its service; a service sends tasks by name (work.queueing). No module
    of the studio but the tasks module itself imports it (Celery finds it by autodiscovery)."""
    tasks_path = WEB / "studio" / "tasks.py"
    modules = sorted(path for path in (WEB / "studio").rglob("*.py") if path != tasks_path)
    assert len(modules) > 50, "the studio moved: update this test"
    assert [str(path.relative_to(WEB.parent)) for path in modules
            if "adaptis_web.studio.tasks" in _studio_imports(path)] == []
    assert _studio_imports(tasks_path) == {"adaptis_web.studio.planning.jobs", "adaptis_web.studio.runs.local_runs",
                                           "adaptis_web.studio.runs.profiling", "adaptis_web.studio.work.queueing"}
