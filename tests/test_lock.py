"""The lock files are what every install uses: they must pin what pyproject.toml declares, with hashes, and the
test lock must hold the runtime lock's exact versions (what CI tests is what a user installs)."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+) \\$", re.MULTILINE)


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", requirement).lower()


def _locked(path: str) -> dict[str, str]:
    return {_name(name): version for name, version in PIN.findall((ROOT / path).read_text())}


def _declared(requirements: list[str]) -> dict[str, str]:
    declared = {}
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[a-z0-9,-]+\])?==(\S+)", requirement)
        assert match, f"{requirement!r} is not pinned to one version"
        declared[_name(match[1])] = match[3]
    return declared


def _same_release(declared: str, locked: str) -> bool:
    return locked == declared or locked.startswith(declared + "+")  # torch 2.13.0 is locked as its +cpu build


def test_every_declared_dependency_is_locked_at_its_pinned_version():
    for path, requirements in (("requirements/run.txt", PYPROJECT["dependencies"]),
                               ("requirements/test.txt",
                                PYPROJECT["dependencies"] + PYPROJECT["optional-dependencies"]["test"])):
        locked = _locked(path)
        for name, version in _declared(requirements).items():
            assert name in locked, f"{name} is declared in pyproject.toml but not locked in {path}"
            assert _same_release(version, locked[name]), f"{path} locks {name} {locked[name]}, pyproject {version}"


def test_celery_is_declared_with_its_redis_transport_and_the_lock_holds_what_that_needs():
    assert "celery[redis]==" in " ".join(PYPROJECT["dependencies"])
    locked = _locked("requirements/run.txt")
    assert {"kombu", "redis", "packaging"} <= set(locked)  # kombu's Redis transport imports packaging


def test_the_test_lock_holds_the_runtime_lock_exactly():
    run, test = _locked("requirements/run.txt"), _locked("requirements/test.txt")
    assert run.items() <= test.items()
    assert set(test) - set(run) >= set(_declared(PYPROJECT["optional-dependencies"]["test"]))


def test_every_locked_package_carries_a_hash():
    hashed = re.compile(r"^[A-Za-z0-9_.-]+==\S+ \\\n    --hash=sha256:[0-9a-f]{64}", re.MULTILINE)
    for path in ("requirements/run.txt", "requirements/test.txt", "requirements/installer.txt"):
        text = (ROOT / path).read_text()
        assert len(hashed.findall(text)) == len(PIN.findall(text)) > 0, path


def test_the_installer_is_locked_at_the_version_its_input_pins_and_nothing_else_comes_with_it():
    """scripts/lib.sh installs the lock files with uv, installed by pip from requirements/installer.txt."""
    declared = [line for line in (ROOT / "requirements/installer.in").read_text().splitlines()
                if line and not line.startswith("#")]
    assert _locked("requirements/installer.txt") == _declared(declared) == {"uv": _declared(declared)["uv"]}
