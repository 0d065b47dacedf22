"""The web reaches planning through one facade, ``planner.service`` (the document loaders, untrusted text or JSON
to a checked document, included), and ``planner.errors``; running and measuring through the executor's,
``executor.service``. And a web process does not import torch: the facade imports what only the runs worker needs
on first use."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

WEB = Path(__file__).resolve().parent.parent.parent / "adaptis_web"
FACADES = {"planner.service", "planner.errors", "executor.service"}


def _imports(tree: ast.AST):
    """(module, name) for every name imported; (module, None) for ``import module``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield from ((node.module, alias.name) for alias in node.names)


def _allowed(module: str, name: str | None) -> bool:
    package = module.split(".")[0]
    if package not in ("planner", "executor"):
        return True
    return module in FACADES or (module == "planner" and name in ("service", "errors")) or (
        module == "executor" and name == "service")


def test_the_web_reaches_the_planner_and_the_executor_only_through_their_facades():
    reached = []
    for path in sorted(WEB.rglob("*.py")):
        for module, name in _imports(ast.parse(path.read_text(), filename=str(path))):
            if not _allowed(module, name):
                reached.append(f"{path.relative_to(WEB.parent)}: {module}" + (f".{name}" if name else ""))
    assert reached == []


def test_the_rule_refuses_a_planner_internal_a_loader_beside_the_facade_and_an_executor_module():
    tree = ast.parse("from planner.simulator import simulate\nimport planner.search\n"
                     "from executor.running.worker import x\nfrom planner.cluster import load_cluster\n"
                     "from executor.running.launch import run_plan\nfrom planner import service\n"
                     "from executor import service\nfrom executor.service import run_plan\n")
    assert [pair for pair in _imports(tree) if not _allowed(*pair)] == [
        ("planner.simulator", "simulate"), ("planner.search", None), ("executor.running.worker", "x"),
        ("planner.cluster", "load_cluster"), ("executor.running.launch", "run_plan")]


def test_a_web_process_does_not_import_torch():
    """Django set up, every URL's view imported, a plan page's refusal checked: torch stays out (it costs each web
    and planning process about a second and a few hundred MiB at its start); the runs worker imports it on first use
    of the executor's facade."""
    probe = ("import sys, django; django.setup(); import adaptis_web.urls, adaptis_web.studio.tasks; "
             "from executor import service; service.execution_refusal; print('torch' in sys.modules); "
             "service.run_plan; print('torch' in sys.modules)")
    answer = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                            cwd=WEB.parent, env={**os.environ, "DJANGO_SETTINGS_MODULE": "adaptis_web.settings"})
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.split() == ["False", "True"]


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
