"""The dependency direction of DESIGN.md: planner imports neither Django nor torch; executor never Django."""

import pkgutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def modules_of(package: str) -> list[str]:
    return [package] + [info.name for info in pkgutil.walk_packages([str(ROOT / package)], prefix=f"{package}.")
                        if not info.name.endswith("__main__")]


def imported_after(modules: list[str]) -> set[str]:
    """Top-level packages loaded by importing ``modules`` in a fresh interpreter (no test plugins around)."""
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n    importlib.import_module(name)\n"
            "print(' '.join(sorted({name.split('.')[0] for name in sys.modules})))")
    output = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return set(output.stdout.split())


def test_planner_imports_neither_django_nor_torch():
    loaded = imported_after(modules_of("planner"))
    assert "planner" in loaded
    assert not {"django", "torch", "rest_framework", "celery"} & loaded


def test_executor_never_imports_django():
    loaded = imported_after(modules_of("executor"))
    assert "torch" in loaded and "executor" in loaded
    assert not {"django", "rest_framework", "celery"} & loaded
