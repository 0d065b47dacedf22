"""Shared fixtures: an isolated test database and Redis namespace per session, a real Celery worker, and the
people every view test checks access with (a team owner, a team member, an outsider).

Isolation: several pytest sessions may run at once on this machine (helpers and the lead), so the test
database, the Celery queue and the live-event stream prefix all carry this session's pid, and Redis uses
its own database number. The workers (``planner`` and ``runner``) and the web server of the browser tests are
the product's own processes, started from their one definition (adaptis_web/processes.py, which ``make run``'s
supervisord and docker-compose run too) and pointed at the same test database; tests that use them must be
``django_db(transaction=True)`` so their rows are committed where those processes can see them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
import redis

REPO_ROOT = Path(__file__).resolve().parent.parent
SESSION_TAG = f"test-{os.getpid()}"
TEST_REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/13")
TEST_QUEUE = f"adaptis-{SESSION_TAG}"
TEST_EVENTS_PREFIX = f"adaptis-{SESSION_TAG}"
WORKER_START_TIMEOUT_S = 90


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def delete_test_keys(*patterns: str) -> None:
    """Delete the keys of the tests' Redis database that match any of ``patterns`` (other sessions share it)."""
    client = redis.Redis.from_url(TEST_REDIS_URL)
    keys = [key for pattern in patterns for key in client.scan_iter(pattern)]
    if keys:
        client.delete(*keys)
    client.close()


def parent_of(pid: int) -> int | None:
    """The parent of process ``pid``, read from /proc (None once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[1])


DATABASE_FIXTURES = {"db", "transactional_db", "django_db_setup", "live_server"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    _keep_shared_module_fixtures_on_one_worker(items)
    _only_tests_of_the_database(config, items)


@pytest.hookimpl(tryfirst=True)  # before a pytest-xdist worker sends the node ids it collected
def pytest_collection_finish(session):
    _name_the_xdist_groups(session.config, session.items)


def _name_the_xdist_groups(config, items) -> None:
    """``--dist loadgroup`` sends the tests whose node ids end in ``@GROUP`` to one worker. pytest-xdist 3.8 appends
    the ``xdist_group`` there by assigning ``item._nodeid``, which pytest 9.2 no longer reads (a node id is now
    ``str(item._id)``): without this, every group is spread over the workers as if it had none."""
    if not getattr(config.option, "loadgroup", False):   # (set in a worker of --dist loadgroup only)
        return
    from _pytest.nodeid import NodeId

    for item in items:
        groups = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                         for mark in item.iter_markers("xdist_group")})
        suffix = f"@{'_'.join(groups)}"
        if groups and not item.nodeid.endswith(suffix):   # (a pytest-xdist that does it again someday)
            item._id = NodeId.parse(item.nodeid + suffix)


def _keep_shared_module_fixtures_on_one_worker(items) -> None:
    """The tests of a module that use a module- or class-scoped fixture of that module (one run of the ranks that
    several tests look at) go to one pytest-xdist worker (``--dist loadgroup``, as scripts/test.sh runs the
    suite): spread over both, each worker would build the fixture again. Tests that already name a group keep it."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        fixtures = item._fixtureinfo.name2fixturedefs.values()
        if any(definition.scope in ("module", "class") and definition.func.__module__ == item.module.__name__
               for definitions in fixtures for definition in definitions):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))   # its file


def _only_tests_of_the_database(config, items) -> None:
    """``ADAPTIS_TESTS_OF_THE_DATABASE=1`` keeps only the tests that use the test database (scripts/test.sh runs
    them again on SQLite after the whole suite ran on PostgreSQL), but those marked ``any_database``: the others,
    and these, would run the same code twice and prove nothing more."""
    if os.environ.get("ADAPTIS_TESTS_OF_THE_DATABASE") != "1":
        return
    kept, dropped = [], []
    for item in items:
        uses = item.get_closest_marker("django_db") is not None or DATABASE_FIXTURES & set(item.fixturenames)
        (kept if uses and item.get_closest_marker("any_database") is None else dropped).append(item)
    config.hook.pytest_deselected(items=dropped)
    items[:] = kept


def runs_queue(queue: str) -> str:
    """The runs queue next to planning queue ``queue`` (adaptis_web.processes, which settings reads too)."""
    from adaptis_web.processes import runs_queue as derived

    return derived({"CELERY_QUEUE": queue})


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix) -> None:
    """A test database of our own: PostgreSQL when DATABASE_URL says so, otherwise a SQLite *file* (the
    worker process must open the same database, which an in-memory SQLite cannot offer)."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    test_settings = database.setdefault("TEST", {})  # Django's connections share this dict: edit in place
    if database["ENGINE"] == "django.db.backends.sqlite3":
        test_settings["NAME"] = str(REPO_ROOT / "var" / f"{SESSION_TAG}.sqlite3")
    else:
        test_settings["NAME"] = f"test_{database['NAME']}_{os.getpid()}"


@pytest.fixture(scope="session", autouse=True)
def isolated_redis():
    """Point the broker, the result backend and the live-event streams at this session's namespace."""
    from django.conf import settings

    from adaptis_web.celery import app

    settings.REDIS_URL = TEST_REDIS_URL
    settings.LIVE_EVENTS_PREFIX = TEST_EVENTS_PREFIX
    app.conf.update(broker_url=TEST_REDIS_URL, result_backend=TEST_REDIS_URL, task_default_queue=TEST_QUEUE,
                    task_routes={task: {"queue": runs_queue(TEST_QUEUE)}
                                 for task in ("studio.run_execute", "studio.profile_measure")})
    yield
    delete_test_keys(f"*{TEST_QUEUE}*", f"{TEST_EVENTS_PREFIX}:*")
    for suffix in ("-wal", "-shm"):  # SQLite's WAL companions of the destroyed test database
        (REPO_ROOT / "var" / f"{SESSION_TAG}.sqlite3{suffix}").unlink(missing_ok=True)


TEST_CACHE_PREFIX = f"{TEST_QUEUE}-cache"


@pytest.fixture(scope="session", autouse=True)
def private_cache():
    """The cache (throttling counts) in the real Redis as in production, under this session's own prefix, which
    is emptied for every test below: one test's failed attempts never throttle another's, nor another session's.
    (``cache.clear()`` would flush the whole Redis database, which other sessions share.)"""
    from django.test.utils import override_settings

    with override_settings(CACHES={"default": {"BACKEND": "adaptis_web.cache.RedisCache",
                                               "LOCATION": TEST_REDIS_URL, "KEY_PREFIX": TEST_CACHE_PREFIX}}):
        yield


@pytest.fixture(autouse=True)
def empty_cache(private_cache):
    delete_test_keys(f"{TEST_CACHE_PREFIX}:*")


FAST_PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(scope="session", autouse=True)
def fast_password_hashing():
    """The production hasher spends ~0.5 s per password by design; tests create many users."""
    from django.conf import settings

    settings.PASSWORD_HASHERS = FAST_PASSWORD_HASHERS


def _database_url(settings_dict: dict) -> str:
    if settings_dict["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{settings_dict['NAME']}"
    credentials = quote(settings_dict["USER"] or "")
    if settings_dict.get("PASSWORD"):
        credentials += ":" + quote(settings_dict["PASSWORD"])
    port = f":{settings_dict['PORT']}" if settings_dict.get("PORT") else ""
    return f"postgres://{credentials}@{settings_dict['HOST']}{port}/{settings_dict['NAME']}"


@dataclass
class WorkerProcess:
    process: subprocess.Popen
    log_path: Path

    def log_tail(self, characters: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-characters:]


def service_env(queue: str, **extra_env: str) -> dict[str, str]:
    """The environment of a process of ours (worker, warden) on ``queue`` against the test database and Redis."""
    from django.db import connection

    return dict(os.environ, DATABASE_URL=_database_url(connection.settings_dict), REDIS_URL=TEST_REDIS_URL,
                CELERY_QUEUE=queue, LIVE_EVENTS_PREFIX=TEST_EVENTS_PREFIX, DB_CONN_MAX_AGE="0",
                PASSWORD_HASHERS=",".join(FAST_PASSWORD_HASHERS),  # the test users' passwords are hashed so
                PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
                **extra_env)


def spawn_worker(log_path: Path, *, queue: str, service: str, **extra_env: str) -> WorkerProcess:
    """Start ``service`` (``planner`` or ``runner``) as ``make run`` starts it (adaptis_web/processes.py: the prefork
    pool, its concurrency, its queue: ``queue`` or its runs queue) against the test database; wait until it is
    ready. ``ADAPTIS_NODE_PREFIX`` names it apart from other sessions' workers."""
    from adaptis_web.processes import command

    env = service_env(queue, ADAPTIS_NODE_PREFIX=f"{log_path.stem}-", **extra_env)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command(service, env).argv, cwd=REPO_ROOT, env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    worker = WorkerProcess(process, log_path)
    deadline = time.monotonic() + WORKER_START_TIMEOUT_S
    while "ready." not in log_path.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            stop_worker(process)
            pytest.fail(f"the Celery worker did not start:\n{worker.log_tail()}")
        time.sleep(0.2)
    return worker


@dataclass
class WebServer:
    """The product's web server (gunicorn, as ``make run`` starts it) on a free port of 127.0.0.1."""
    process: subprocess.Popen
    url: str
    log_path: Path


def start_web_server(log_path: Path, *, queue: str, **extra_env: str) -> WebServer:
    """Start the web process as ``make run`` does (adaptis_web/processes.py: gunicorn, gunicorn.conf.py) against the
    test database and Redis, its jobs sent to ``queue``; wait until ``/healthz`` answers."""
    from adaptis_web.processes import command

    port = free_port()
    env = service_env(queue, ADAPTIS_HOST="127.0.0.1", ADAPTIS_PORT=str(port), **extra_env)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command("web", env).argv, cwd=REPO_ROOT, env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    server = WebServer(process, f"http://127.0.0.1:{port}", log_path)
    deadline = time.monotonic() + WORKER_START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            pytest.fail(f"the web server exited:\n{log_path.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(f"{server.url}/healthz", timeout=5) as response:
                if response.status == 200:
                    return server
        except OSError:
            pass
        if time.monotonic() > deadline:
            stop_worker(process)
            pytest.fail(f"the web server did not answer:\n{log_path.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)


@dataclass
class Workers:
    """The test session's two workers, as ``make run`` has them: ``planner`` and ``runner``."""
    planner: WorkerProcess
    runner: WorkerProcess

    def log_tail(self, characters: int = 4000) -> str:
        return (f"--- planner ---\n{self.planner.log_tail(characters)}\n"
                f"--- runner ---\n{self.runner.log_tail(characters)}")


@pytest.fixture(scope="session")
def celery_worker(django_db_setup, tmp_path_factory) -> Workers:
    """The planning and the runs worker (``make run``'s, adaptis_web/processes.py) on this session's queues against
    the test database."""
    logs = tmp_path_factory.mktemp("workers")
    planner = spawn_worker(logs / f"{SESSION_TAG}-planner.log", queue=TEST_QUEUE, service="planner")
    runner = spawn_worker(logs / f"{SESSION_TAG}-runner.log", queue=TEST_QUEUE, service="runner")
    yield Workers(planner, runner)
    stop_worker(planner.process)
    stop_worker(runner.process)


def stop_worker(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)  # its own session: the worker and any rank it started
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _wait_for(condition, *, timeout_s: float = 60.0, interval_s: float = 0.1, message="condition"):
    """``condition()``'s first true value within ``timeout_s``, else a failure naming ``message`` (a string, or a
    function called then, for what a log says at the time of the failure)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval_s)
    pytest.fail(f"timed out after {timeout_s:g} s waiting for {message() if callable(message) else message}")


@pytest.fixture
def wait_for():
    """``wait_for(condition, timeout_s=, message=)``: poll until ``condition()`` is truthy, else fail."""
    return _wait_for


@dataclass
class People:
    """A team with its owner and a member, and an outsider who owns a team of their own."""

    team: object
    owner: object
    member: object
    outsider: object
    outsider_team: object


@pytest.fixture
def people(db, django_user_model) -> People:
    from adaptis_web.studio.models import Membership
    from adaptis_web.studio.accounts.teams import membership_add, team_create

    owner = django_user_model.objects.create_user("alice", password="alice-pass-2026")
    member = django_user_model.objects.create_user("bob", password="bob-pass-2026")
    outsider = django_user_model.objects.create_user("mallory", password="mallory-pass-2026")
    team = team_create(name="pipeline-team", owner=owner)
    membership_add(team=team, user=member, role=Membership.Role.MEMBER)
    outsider_team = team_create(name="other-team", owner=outsider)
    return People(team=team, owner=owner, member=member, outsider=outsider, outsider_team=outsider_team)


def tiny_llama_job(people: People, owner, *, num_microbatches: int, schedule: str = "1f1b", **fields):
    """tiny-llama uploaded to the people's team by ``owner`` (as tiny.json) and a job of it on 2 cpu-host devices,
    stored as the job form stores it, sent to no worker: (the spec's record, the queued job)."""
    from adaptis_web.studio.catalog.specs import spec_create
    from adaptis_web.studio.models import PlanningJob
    from adaptis_web.studio.planning.jobs import job_request_check
    from planner.spec.presets import load_model_preset

    spec = load_model_preset("tiny-llama")
    record = spec_create(team=people.team, owner=owner, spec=spec, source_filename="tiny.json")
    request = job_request_check(spec=spec, num_devices=2, num_microbatches=num_microbatches, cluster_preset="cpu-host")
    job = PlanningJob.objects.create(spec=record, created_by=owner, cluster_preset="cpu-host",
                                     cluster_doc=request.cluster.to_dict(), num_devices=2,
                                     num_microbatches=num_microbatches, schedule=schedule, **fields)
    return record, job


def relaid_stages(model, num_devices: int, shape: str, per_rank: int = 2) -> list[dict]:
    """A plan document's stages re-placed as a plan editor's user would: Megatron's uniform split of ``model``'s layers
    into ``per_rank`` stages on each of ``num_devices`` ranks, placed as ``shape`` (``loop`` or ``v-shape``)."""
    from planner.partition.uniform import uniform_stage_layers
    from planner.placement import shape_placement

    stages = per_rank * num_devices
    split = uniform_stage_layers([layer.kind for layer in model.layers], stages)
    return [{"layers": list(layers), "device": device}
            for layers, device in zip(split, shape_placement(shape, stages, num_devices))]


def cpu_hybrid_plan(people: People, owner, spec=None, *, overlap=None, framework=None, recompute_modules=None,
                    **pins):
    """``spec`` (tiny-llama by default) uploaded to the people's team by ``owner`` and a hybrid job of it on the local
    CPU cluster ``cpu-1x8`` (8 ranks; its own sequence length, a global batch of 16, no recomputation) with ``pins``
    (e.g. ``tp=2, pp=2, dp=2``), ``overlap``, ``framework`` and ``recompute_modules`` (the planner's defaults when not
    given), stored as the job form stores it and planned in-process (no worker): its v2 plan."""
    from adaptis_web.studio.catalog.specs import spec_create
    from adaptis_web.studio.models import PlanningJob
    from adaptis_web.studio.planning.jobs import job_request_check, job_run
    from planner.spec.presets import load_model_preset

    spec = spec or load_model_preset("tiny-llama")
    record = spec_create(team=people.team, owner=owner, spec=spec, source_filename=f"{spec.name}.json")
    request = job_request_check(spec=spec, mode="hybrid", cluster_preset="cpu-1x8", gpus=8, seq_len=spec.seq_len,
                                global_batch=16, pins={"recompute": "none", **pins},
                                software={"overlap": overlap, "framework": framework,
                                          "recompute_modules": recompute_modules}, time_budget_s=5)
    job = PlanningJob.objects.create(spec=record, created_by=owner, cluster_preset=request.cluster_preset,
                                     cluster_doc=request.cluster.to_dict(), num_devices=request.num_devices,
                                     num_microbatches=0, schedule=request.schedule, time_budget_s=5,
                                     mode=request.mode, **vars(request.hybrid))
    return job_run(job_id=job.pk)


@pytest.fixture
def spec_text():
    """``spec_text(preset="tiny-llama")``: a model preset in our JSON format, as a user would upload it."""
    from planner.spec.presets import load_model_preset

    def text(preset: str = "tiny-llama") -> str:
        return json.dumps(load_model_preset(preset).to_dict(), indent=2)

    return text


@pytest.fixture
def spawn_private_worker(django_db_setup, tmp_path):
    """``spawn_private_worker(queue, service="planner", **env)``: a worker of this test's own (it may kill it);
    stopped after."""
    started: list[WorkerProcess] = []

    def spawn(queue: str, service: str = "planner", **extra_env: str) -> WorkerProcess:
        worker = spawn_worker(tmp_path / f"{queue}-{service}-{len(started)}.log", queue=queue, service=service,
                              **extra_env)
        started.append(worker)
        return worker

    yield spawn
    for worker in started:
        stop_worker(worker.process)


HYBRID_SEQ_LEN = 2048


@pytest.fixture
def hybrid_plan(people):
    """A Llama 3 8B adaptis.plan/v2 plan (TP2 PP2 DP2 on one H100 node, sequences of ``HYBRID_SEQ_LEN``, a global
    batch of 32), stored as a job's plan (the plan editor's tests, in the API and in the browser)."""
    from adaptis_web.studio.models import Plan, PlanningJob
    from adaptis_web.studio.catalog.specs import spec_create
    from planner.cluster import load_cluster_preset
    from planner.layout import layer_codes_from_spec, plan_layout_string, schedule_description
    from planner.parallel import planning as hybrid
    from planner.parallel.evaluate import Job, shard_profile
    from planner.plan import load_plan
    from planner.spec.presets import load_model_preset

    spec, cluster = load_model_preset("llama-3-8b"), load_cluster_preset("h100-sxm-1x8")
    best = hybrid.search(spec, cluster, 8, HYBRID_SEQ_LEN, 32, pins={"tp": 2, "pp": 2}).to_dict()["best"]
    plan = load_plan(best["plan"])
    record = spec_create(team=people.team, owner=people.owner, spec=spec, source_filename="llama-3-8b.json")
    job = PlanningJob.objects.create(spec=record, created_by=people.owner, cluster_preset="h100-sxm-1x8",
                                     cluster_doc=cluster.to_dict(), num_devices=2,
                                     num_microbatches=plan.num_microbatches, schedule=plan.strategy, status="succeeded")
    job_shape = Job(model=spec, cluster=cluster, gpus=8, seq_len=HYBRID_SEQ_LEN, global_batch=32)
    profile, _ = shard_profile(job_shape, plan.parallel)
    return Plan.objects.create(job=job, strategy=plan.strategy, plan_doc=plan.to_dict(), profile_doc=profile.to_dict(),
                               layout=plan_layout_string(plan, layer_codes_from_spec(spec)),
                               schedule_summary=schedule_description(plan),
                               simulation={"iteration_ms": best["predicted"]["iteration_ms"], "bubble_ratio": 0.0},
                               iteration_ms=best["predicted"]["iteration_ms"], bubble_ratio=0.0)
