"""Web latency: API p95 under 50 concurrent clients (target ≤ 100 ms) and live event → chart latency (≤ 1 s).

Sets up its own world and tears it down: a throwaway PostgreSQL database ``adaptis_bench_<pid>`` (a temp SQLite
file when PostgreSQL does not answer), Redis db 12 with a queue and stream prefix of its own, DEBUG=false.
Seeds through the services: a team, a user with an API token, two specs per model preset, ~50 planning jobs
(baselines planned in-process with ``job_run``, a few AdaPtis searches with a 1 s budget), a few finished runs
of 1000 RunEvents each. Then starts gunicorn as ``make run`` does (``adaptis_web/processes.py``) and measures:

1. API: each endpoint's time with one client (service time, no queueing) and its database queries, then 50
   keep-alive clients (in a process of their own, so their GIL does not slow the server or the relay) sending a
   fixed number of requests each over the list and detail endpoints, warm-up requests excluded. By default the
   clients send back to back (the heaviest load 50 clients can make); ``--think-ms`` gives them a random pause
   after each answer, as people and pages have. A request on a keep-alive connection the server has just closed
   is retried once on a new one, as browsers do, and counted.
2. Live timings: a Run as ``runs.local_runs`` executes one — ``RunEventRelay`` started for the row, one
   ``EventEmitter`` per rank writing to ``run_event_sink`` — and a poller that follows ``static/studio/run.js``
   (``?after=<last seq>``, 100 ms after a page with events, 400 ms after an empty one). An event's latency is
   from ``emit`` (the rank recording it) to the poll response that carries it. Measured on an idle server and
   again while the 50 API clients run.

Each phase waits for the 1-minute load to fall below 0.8 (other benchmarks share this host). Prints two
markdown tables and a line with the setting. Run: ``.venv/bin/python benchmarks/web_latency.py``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from adaptis_web.processes import command  # noqa: E402
from planner.actions import ActionKind  # noqa: E402

API_P95_TARGET_MS = 100.0
LIVE_TARGET_MS = 1000.0
QUIET_LOAD = 0.8
QUIET_WAIT_S = 240
REDIS_URL = "redis://127.0.0.1:6379/12"
POSTGRES_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
RUN_JS_POLL_MS = 400  # static/studio/run.js: POLL_MS; POLL_MS / 4 after a page that had events
EVENTS_PER_RUN = 1000
LIVE_RANKS = 4
TAG = f"adaptis-bench-{os.getpid()}"
SEARCHED_PRESETS = ("llama-3-8b", "gemma-2-9b", "nemotron-h-8b", "deepseek-v2-lite")  # fit 8 x 80 GB

ENDPOINTS = ["specs list", "jobs list", "job detail", "plan detail", "runs list", "run detail",
             "events poll (after=last-20)", "events page (random after)"]


@dataclass
class World:
    """What the benchmark started, for the teardown."""

    database: str = ""
    engine: str = ""
    sqlite_dir: str = ""
    gunicorn: subprocess.Popen | None = None
    gunicorn_log: str = ""
    clients: object = None  # the multiprocessing pool of the API clients


@dataclass
class Seeded:
    token: str
    spec_ids: list[int]
    job_ids: list[int]
    plan_ids: list[int]
    finished_run_ids: list[int]
    live_plan_id: int
    user_id: int


# --- the environment ---------------------------------------------------------------------------------------

def postgres_database() -> str | None:
    """Create the throwaway database and return its URL, or None when PostgreSQL does not answer."""
    try:
        import psycopg

        with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{database_name()}"')
    except Exception as error:  # noqa: BLE001 - any failure means: use SQLite instead
        print(f"PostgreSQL unavailable ({type(error).__name__}: {error}); using SQLite", file=sys.stderr)
        return None
    return f"postgres://postgres@127.0.0.1:5432/{database_name()}"


def database_name() -> str:
    return f"adaptis_bench_{os.getpid()}"


def configure(world: World) -> None:
    url = postgres_database()
    if url:
        world.database, world.engine = database_name(), "PostgreSQL"
    else:
        world.sqlite_dir = tempfile.mkdtemp(prefix="adaptis-bench-")
        url = f"sqlite:///{world.sqlite_dir}/bench.sqlite3"
        world.engine = "SQLite"
    os.environ.update({
        "DJANGO_SETTINGS_MODULE": "adaptis_web.settings", "DATABASE_URL": url, "REDIS_URL": REDIS_URL,
        "DEBUG": "false", "SECRET_KEY": secrets.token_urlsafe(40), "ALLOWED_HOSTS": "127.0.0.1,localhost,testserver",
        "SECURE_SSL_REDIRECT": "false", "SECURE_COOKIES": "false",  # the load generator speaks plain HTTP
        "CELERY_QUEUE": TAG, "LIVE_EVENTS_PREFIX": TAG, "LOG_LEVEL": "WARNING"})
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    if world.engine == "PostgreSQL":
        from django.db import connection

        world.engine = f"PostgreSQL {connection.cursor().connection.info.server_version // 10000}"


def teardown(world: World) -> None:
    if world.clients is not None:
        world.clients.terminate()
        world.clients.join()
    if world.gunicorn is not None and world.gunicorn.poll() is None:
        world.gunicorn.terminate()
        try:
            world.gunicorn.wait(timeout=15)
        except subprocess.TimeoutExpired:
            world.gunicorn.kill()
            world.gunicorn.wait()
    if "django" in sys.modules:
        from django.db import connections

        connections.close_all()
    if world.database:
        import psycopg

        with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{world.database}" WITH (FORCE)')
    if world.sqlite_dir:
        shutil.rmtree(world.sqlite_dir, ignore_errors=True)
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(match=f"*{TAG}*"))  # the Celery queues, their bindings, the event streams
    if keys:
        client.delete(*keys)
    client.close()
    if world.gunicorn_log:
        Path(world.gunicorn_log).unlink(missing_ok=True)


def wait_for_quiet() -> tuple[float, float, float]:
    """Wait (bounded) until the 1-minute load is below QUIET_LOAD; the load averages measured under."""
    deadline = time.monotonic() + QUIET_WAIT_S
    while os.getloadavg()[0] >= QUIET_LOAD and time.monotonic() < deadline:
        print(f"  waiting for the load to settle: {os.getloadavg()[0]:.2f}", file=sys.stderr)
        time.sleep(10)
    return os.getloadavg()


# --- seeding through the services ----------------------------------------------------------------------------

def baseline_jobs(count: int) -> list[tuple[int, str, int, int]]:
    """(spec index, schedule, devices, micro-batches) for ``count`` baseline jobs: every schedule on every
    preset over time, at 4 and 8 devices with 16 to 64 micro-batches."""
    from planner.baselines import BASELINE_SCHEDULES

    shapes = [(4, 16), (8, 32), (4, 32), (8, 64), (4, 64)]
    return [(index, BASELINE_SCHEDULES[index % len(BASELINE_SCHEDULES)], *shapes[index % len(shapes)])
            for index in range(count)]


def plan_job(spec_record, user, *, schedule: str, devices: int, microbatches: int, time_budget_s: float = 60.0):
    from adaptis_web.studio.planning.jobs import job_create, job_request_check, job_run
    from planner.errors import SpecError
    from planner.spec.model import load_model_spec

    spec = load_model_spec(spec_record.doc)
    for tried_devices in (devices, 4, 2):  # a preset with few layers cannot fill 8 devices x 2 chunks
        try:
            request = job_request_check(spec=spec, num_devices=tried_devices, num_microbatches=microbatches,
                                        cluster_preset="h100-sxm-1x8", schedule=schedule,
                                        partition="time-balanced", time_budget_s=time_budget_s)
            break
        except SpecError as error:
            if error.field != "num_devices":
                raise
    job = job_create(spec_record=spec_record, user=user, request=request)
    if job_run(job_id=job.pk) is None:
        job.refresh_from_db()
        raise RuntimeError(f"planning job {job.pk} failed: {job.error}")
    return job


def run_events(world_size: int, count: int) -> list[dict]:
    """``count`` action events of a ``world_size``-rank run, shaped as the executor sends them."""
    events, clock = [], [0.0] * world_size
    for index in range(count):
        rank, position = index % world_size, index // world_size
        step, within = divmod(position, 64)
        kind, microbatch = (ActionKind.F if within < 32 else ActionKind.B), within % 32
        duration = 2.0 if kind is ActionKind.F else 4.0
        events.append({"type": "action", "rank": rank, "device": rank, "action": f"{rank}{kind}{microbatch}",
                       "stage": rank, "kind": kind, "microbatch": microbatch, "step": step,
                       "start_ms": clock[rank], "end_ms": clock[rank] + duration})
        clock[rank] += duration + 0.3
    return events


def finished_run(plan, user, steps: int):
    from django.utils import timezone

    from adaptis_web.studio.runs.live_events import event_row
    from adaptis_web.studio.models import JobStatus, Run, RunEvent
    from adaptis_web.studio.runs.local_runs import run_create

    run = run_create(plan=plan, user=user, steps=steps, scale_down=True)
    events = run_events(run.world_size, EVENTS_PER_RUN)
    RunEvent.objects.bulk_create(event_row(run.pk, seq, event) for seq, event in enumerate(events, start=1))
    iteration_ms = max(event["end_ms"] for event in events) / steps
    summary = {"iteration_ms": iteration_ms, "steps": steps, "world_size": run.world_size,
               "per_rank": [{"rank": rank, "busy_ms": iteration_ms * 0.8, "threads": 1}
                            for rank in range(run.world_size)]}
    Run.objects.filter(pk=run.pk).update(status=JobStatus.SUCCEEDED, started_at=timezone.now(),
                                         finished_at=timezone.now(), executed_spec=plan.job.spec.doc,
                                         summary=summary, loss=5.4)
    return run


def seed(*, baseline_count: int, search_count: int, run_count: int) -> Seeded:
    from django.contrib.auth import get_user_model

    from adaptis_web.studio.models import Plan
    from adaptis_web.studio.accounts.tokens import token_create
    from adaptis_web.studio.catalog.specs import spec_create
    from adaptis_web.studio.accounts.teams import team_create
    from planner.spec.presets import load_model_preset, model_preset_names

    user = get_user_model().objects.create_user(username=TAG, password=secrets.token_urlsafe(16))
    team = team_create(name=TAG, owner=user)
    _, token = token_create(user=user, name="web latency benchmark", expires_in_days=1)
    specs = [spec_create(team=team, owner=user, spec=load_model_preset(name), source_filename=f"preset:{name}",
                         name=f"{name} (copy {copy})")
             for copy in (1, 2) for name in model_preset_names()]
    jobs = [plan_job(specs[index % len(specs)], user, schedule=schedule, devices=devices, microbatches=microbatches)
            for index, schedule, devices, microbatches in baseline_jobs(baseline_count)]
    searchable = [spec for spec in specs if spec.source_filename.removeprefix("preset:") in SEARCHED_PRESETS]
    jobs += [plan_job(searchable[index % len(searchable)], user, schedule="adaptis", devices=8, microbatches=32,
                      time_budget_s=1.0) for index in range(search_count)]
    plans = list(Plan.objects.filter(job__in=jobs).select_related("job", "job__spec").order_by("id"))
    runnable = [plan for plan in plans if plan.plan_doc["num_devices"] <= 4]
    runs = [finished_run(runnable[index], user, steps=4) for index in range(run_count)]
    return Seeded(token=token, spec_ids=[spec.pk for spec in specs], job_ids=[job.pk for job in jobs],
                  plan_ids=[plan.pk for plan in plans], finished_run_ids=[run.pk for run in runs],
                  live_plan_id=runnable[-1].pk, user_id=user.pk)


# --- the web server ------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_gunicorn(world: World, flags: list[str]) -> int:
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="adaptis-bench-gunicorn-", suffix=".log", delete=False)
    world.gunicorn_log = log.name
    env = dict(os.environ, ADAPTIS_HOST="127.0.0.1", ADAPTIS_PORT=str(port))
    # The web server as make run, the image and docker-compose start it (adaptis_web/processes.py); extra flags
    # after it override gunicorn.conf.py's settings.
    world.gunicorn = subprocess.Popen([*command("web", env).argv, *flags], cwd=REPO_ROOT, env=env, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if world.gunicorn.poll() is not None:
            raise RuntimeError(f"gunicorn exited:\n{Path(log.name).read_text()[-3000:]}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/healthz")
            if connection.getresponse().status == 200:
                connection.close()
                return port
            connection.close()
        except OSError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"gunicorn did not answer /healthz within 60 s:\n{Path(log.name).read_text()[-3000:]}")


def connections_per_worker(master_pid: int, port: int) -> list[int]:
    """Established client connections each gunicorn worker holds (Linux /proc): a keep-alive connection stays
    with the worker that accepted it, so this is how the load is shared between the workers."""
    established = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "01" and int(fields[1].split(":")[1], 16) == port:
            established.add(f"socket:[{fields[9]}]")
    workers = [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit() and
               _parent_pid(entry) == master_pid]
    counts = []
    for worker in sorted(workers):
        try:
            counts.append(sum(os.readlink(fd) in established for fd in Path(f"/proc/{worker}/fd").iterdir()))
        except OSError:  # the worker exited meanwhile
            continue
    return counts


def sample_sharing(master_pid: int, port: int, done, samples: list[list[int]]) -> None:
    """Append ``connections_per_worker`` to ``samples`` once a second until ``done()``."""
    while not done():
        samples.append(connections_per_worker(master_pid, port))
        time.sleep(1)


def worker_cpu_s(master_pid: int) -> float:
    """CPU seconds (user + system) the gunicorn master and its workers have used so far (Linux /proc)."""
    pids = [master_pid] + [int(entry.name) for entry in Path("/proc").iterdir()
                           if entry.name.isdigit() and _parent_pid(entry) == master_pid]
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited meanwhile
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    return total


def _parent_pid(process: Path) -> int | None:
    try:
        return int((process / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def get(connection: http.client.HTTPConnection, path: str, token: str) -> tuple[int, bytes]:
    connection.request("GET", path, headers={"Authorization": f"Token {token}", "Accept": "application/json"})
    response = connection.getresponse()
    return response.status, response.read()


# --- the API load (runs in a process of its own) -------------------------------------------------------------

def endpoint_path(endpoint: str, seeded: Seeded, pick: random.Random) -> str:
    run_id = pick.choice(seeded.finished_run_ids)
    return {
        "specs list": "/api/specs/",
        "jobs list": "/api/jobs/",
        "job detail": f"/api/jobs/{pick.choice(seeded.job_ids)}/",
        "plan detail": f"/api/plans/{pick.choice(seeded.plan_ids)}/",
        "runs list": "/api/runs/",
        "run detail": f"/api/runs/{run_id}/",
        "events poll (after=last-20)": f"/api/runs/{run_id}/events/?after={EVENTS_PER_RUN - pick.randint(0, 20)}",
        "events page (random after)": f"/api/runs/{run_id}/events/?after={pick.randrange(EVENTS_PER_RUN)}",
    }[endpoint]


def client_requests(seeded: Seeded, client: int, count: int) -> list[tuple[str, str]]:
    """Client ``client``'s (endpoint, path) sequence: the endpoints in turn from its own offset, random ids."""
    pick = random.Random(client)
    names = [ENDPOINTS[(client + index) % len(ENDPOINTS)] for index in range(count)]
    return [(name, endpoint_path(name, seeded, pick)) for name in names]


def drive_clients(port: int, token: str, warmups: list[list[tuple[str, str]]], measured: list[list[tuple[str, str]]],
                  think_s: float) -> tuple[list[tuple[str, float, str, int]], float, int, float]:
    """One thread per client with a keep-alive connection, pausing a random 0.5 to 1.5 x ``think_s`` after each
    answer (clients start staggered over one ``think_s``, so they do not arrive in lockstep). Returns (endpoint,
    ms, error or "", bytes) per measured request, the wall time of the measured part (from the moment every client
    finished its warm-up) and how many requests were retried on a new connection, as a browser does when the
    server has just closed an idle keep-alive connection (the retry's time counts in the request's), and the CPU
    seconds this process (the load generator) used in the measured part."""
    samples: list[tuple[str, float, str, int]] = []
    retried = [0]
    lock = threading.Lock()
    warmed = threading.Barrier(len(measured) + 1)

    def client(number: int, warmup: list[tuple[str, str]], requests: list[tuple[str, str]]) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for _, path in warmup:
            get(connection, path, token)
        pause = random.Random(number)
        warmed.wait()
        time.sleep(pause.uniform(0, think_s))
        mine, retries = [], 0
        for name, path in requests:
            start = time.perf_counter()
            try:
                try:
                    status, body = get(connection, path, token)
                except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                    retries += 1
                    connection.close()
                    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                    status, body = get(connection, path, token)
                mine.append((name, (time.perf_counter() - start) * 1e3, "" if status == 200 else f"HTTP {status}",
                             len(body)))
            except (OSError, http.client.HTTPException) as error:
                mine.append((name, (time.perf_counter() - start) * 1e3, type(error).__name__, 0))
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            time.sleep(pause.uniform(0.5 * think_s, 1.5 * think_s))
        connection.close()
        with lock:
            samples.extend(mine)
            retried[0] += retries

    threads = [threading.Thread(target=client, args=(number, *pair))
               for number, pair in enumerate(zip(warmups, measured))]
    for thread in threads:
        thread.start()
    warmed.wait()
    start, cpu_start = time.perf_counter(), time.process_time()
    for thread in threads:
        thread.join()
    return samples, time.perf_counter() - start, retried[0], time.process_time() - cpu_start


# --- per-endpoint evidence: queries and single-client time ---------------------------------------------------

def query_counts(seeded: Seeded) -> dict[str, int]:
    """Database queries of one request per endpoint, served in-process by Django's test client."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client, pick = Client(HTTP_AUTHORIZATION=f"Token {seeded.token}"), random.Random(0)
    counts = {}
    for name in ENDPOINTS:
        with CaptureQueriesContext(connection) as queries:
            response = client.get(endpoint_path(name, seeded, pick))
        assert response.status_code == 200, (name, response.status_code)
        counts[name] = len(queries)
    return counts


def single_client_ms(port: int, seeded: Seeded, repeats: int) -> dict[str, float]:
    """Median time of each endpoint with one client and nothing else running: the service time."""
    connection, pick = http.client.HTTPConnection("127.0.0.1", port, timeout=60), random.Random(1)
    medians = {}
    for name in ENDPOINTS:
        times = []
        for index in range(repeats + 2):
            path = endpoint_path(name, seeded, pick)
            start = time.perf_counter()
            status, _ = get(connection, path, seeded.token)
            if status != 200:
                raise RuntimeError(f"{path}: HTTP {status}")
            if index >= 2:  # two warm-ups
                times.append((time.perf_counter() - start) * 1e3)
        medians[name] = statistics.median(times)
    connection.close()
    return medians


# --- live timings --------------------------------------------------------------------------------------------

def live_run(seeded: Seeded) -> int:
    """A Run row claimed as ``runs.local_runs.run_execute`` claims one."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from adaptis_web.studio.models import JobStatus, Plan, Run
    from adaptis_web.studio.runs.local_runs import run_create

    run = run_create(plan=Plan.objects.select_related("job__spec__team").get(pk=seeded.live_plan_id),
                     user=get_user_model().objects.get(pk=seeded.user_id), steps=50, scale_down=True)
    Run.objects.filter(pk=run.pk).update(status=JobStatus.RUNNING, started_at=timezone.now())
    return run.pk


def measure_live(port: int, seeded: Seeded, keep_emitting, events_per_s: float,
                 max_events: int) -> tuple[list[float], int]:
    """Emit actions from LIVE_RANKS ranks while ``keep_emitting()``; poll as run.js does. Returns each visible
    event's latency in ms and how many were sent."""
    from adaptis_web.studio.runs.live_events import RunEventRelay, event_identity, run_event_sink
    from executor.running.events import EventEmitter, open_sink

    run_id = live_run(seeded)
    sent: dict[tuple, float] = {}
    latencies: list[float] = []
    emitting_done, stop = threading.Event(), threading.Event()
    per_rank = max_events // LIVE_RANKS

    def rank(number: int) -> None:
        emitter = EventEmitter(open_sink(run_event_sink(run_id)))
        events = [event for event in run_events(LIVE_RANKS, per_rank * LIVE_RANKS) if event["rank"] == number]
        period, start = LIVE_RANKS / events_per_s, time.perf_counter()
        for index, event in enumerate(events):
            if stop.is_set() or not keep_emitting():
                break
            time.sleep(max(0.0, start + index * period - time.perf_counter()))
            sent[event_identity(number, event["step"], event["action"])] = time.perf_counter()
            emitter.emit(event)
        emitter.close()

    def poll() -> None:
        connection, last_seq = http.client.HTTPConnection("127.0.0.1", port, timeout=30), 0
        while not stop.is_set():
            if emitting_done.is_set() and len(latencies) >= len(sent):
                break
            try:
                status, body = get(connection, f"/api/runs/{run_id}/events/?after={last_seq}", seeded.token)
            except (OSError, http.client.HTTPException):
                status, body = 0, b""
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            if status != 200:
                time.sleep(RUN_JS_POLL_MS * 4 / 1e3)
                continue
            arrived, page = time.perf_counter(), json.loads(body)
            for event in page["events"]:
                latencies.append((arrived - sent[event_identity(event["rank"], event["step"], event["action"])]) * 1e3)
            last_seq = page["last_seq"]
            time.sleep((RUN_JS_POLL_MS / 4 if page["events"] else RUN_JS_POLL_MS) / 1e3)
        connection.close()

    relay = RunEventRelay(run_id).start()
    poller = threading.Thread(target=poll)
    ranks = [threading.Thread(target=rank, args=(number,)) for number in range(LIVE_RANKS)]
    for thread in [poller, *ranks]:
        thread.start()
    try:
        for thread in ranks:
            thread.join()
        emitting_done.set()
        poller.join(timeout=10)  # longer means events were lost: the table shows fewer visible than sent
    finally:  # also on Ctrl-C: the ranks and the poller stop before the teardown drops what they write to
        stop.set()
        for thread in [poller, *ranks]:
            thread.join()
        relay.stop()
    return latencies, len(sent)


# --- reporting -----------------------------------------------------------------------------------------------

def percentiles(samples: list[float]) -> tuple[float, float, float]:
    """p50, p95, p99 (inclusive method: interpolated between the samples, never beyond them)."""
    if len(samples) < 2:
        value = samples[0] if samples else float("nan")
        return value, value, value
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return cuts[49], cuts[94], cuts[98]


def api_table(samples, counts: dict[str, int], single: dict[str, float], wall_s: float) -> list[str]:
    lines = ["| endpoint | requests | errors | queries | KB/resp | 1 client p50 ms | p50 ms | p95 ms | p99 ms "
             "| p95 ≤ 100 ms |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|:---:|"]
    for name in [*ENDPOINTS, "overall"]:
        rows = [sample for sample in samples if name in ("overall", sample[0])]
        p50, p95, p99 = percentiles([sample[1] for sample in rows])
        errors = sum(bool(sample[2]) for sample in rows)
        size = statistics.mean(sample[3] for sample in rows) / 1024
        extra = (f"{counts[name]} | {size:.1f} | {single[name]:.1f}" if name in counts
                 else f"— | {size:.1f} | —")
        label = f"**overall** ({len(rows) / wall_s:.0f} req/s)" if name == "overall" else name
        lines.append(f"| {label} | {len(rows)} | {errors} | {extra} | {p50:.1f} | {p95:.1f} | {p99:.1f} | "
                     f"{'yes' if p95 <= API_P95_TARGET_MS and not errors else 'no'} |")
    return lines


def live_table(rows: list[tuple[str, list[float], int]]) -> list[str]:
    lines = ["| condition | events sent | visible | p50 ms | p95 ms | max ms | all ≤ 1 s |",
             "|---|---:|---:|---:|---:|---:|:---:|"]
    for condition, latencies, sent in rows:
        p50, p95, _ = percentiles(latencies)
        worst = max(latencies, default=float("nan"))
        met = len(latencies) == sent and worst <= LIVE_TARGET_MS
        lines.append(f"| {condition} | {sent} | {len(latencies)} | {p50:.0f} | {p95:.0f} | {worst:.0f} | "
                     f"{'yes' if met else 'no'} |")
    return lines


def load_text(load: tuple[float, float, float]) -> str:
    return "/".join(f"{value:.2f}" for value in load)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--requests", type=int, default=40, help="measured requests per client")
    parser.add_argument("--warmup", type=int, default=4, help="unmeasured requests per client first")
    parser.add_argument("--api-alone", action="store_true",
                        help="no live run emitting and polled during the API load: the list and detail endpoints "
                             "alone (the live timings are still measured on the idle server)")
    parser.add_argument("--think-ms", type=float, default=0.0,
                        help="mean pause of each client after each answer (0: back to back, the heaviest load)")
    parser.add_argument("--jobs", type=int, default=47, help="baseline planning jobs to seed")
    parser.add_argument("--searches", type=int, default=3, help="AdaPtis search jobs to seed (1 s budget)")
    parser.add_argument("--runs", type=int, default=3, help=f"finished runs of {EVENTS_PER_RUN} events to seed")
    parser.add_argument("--gunicorn-flags", default="",
                        help="gunicorn flags added to the product's web command, to try another configuration")
    parser.add_argument("--live-seconds", type=float, default=10.0)
    parser.add_argument("--live-rate", type=float, default=100.0, help="events per second, all ranks together")
    args = parser.parse_args()

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the teardown below runs on kill too
    world = World()
    try:
        print("setting up the database and seeding (planning jobs in-process)...", file=sys.stderr)
        configure(world)
        seed_start = time.perf_counter()
        seeded = seed(baseline_count=args.jobs, search_count=args.searches, run_count=args.runs)
        print(f"  seeded {len(seeded.spec_ids)} specs, {len(seeded.job_ids)} jobs, {len(seeded.plan_ids)} plans, "
              f"{len(seeded.finished_run_ids)} runs in {time.perf_counter() - seed_start:.0f} s", file=sys.stderr)
        port = start_gunicorn(world, args.gunicorn_flags.split())
        counts = query_counts(seeded)

        print("single-client pass...", file=sys.stderr)
        single_load = wait_for_quiet()
        single = single_client_ms(port, seeded, repeats=10)

        print("live timings, idle server...", file=sys.stderr)
        live_idle_load = wait_for_quiet()
        idle_deadline = time.monotonic() + args.live_seconds
        idle = measure_live(port, seeded, lambda: time.monotonic() < idle_deadline, args.live_rate,
                            max_events=int(args.live_rate * args.live_seconds) + LIVE_RANKS)

        print(f"{args.clients} clients x {args.requests} requests"
          f"{'' if args.api_alone else ', with a live run being watched'}...", file=sys.stderr)
        api_load = wait_for_quiet()
        warmups = [client_requests(seeded, client + 1000, args.warmup) for client in range(args.clients)]
        measured = [client_requests(seeded, client, args.requests) for client in range(args.clients)]
        world.clients = get_context("spawn").Pool(1)
        server_cpu_start, load_start = worker_cpu_s(world.gunicorn.pid), time.perf_counter()
        load = world.clients.apply_async(drive_clients, (port, seeded.token, warmups, measured, args.think_ms / 1e3))
        sharing: list[list[int]] = []
        threading.Thread(target=sample_sharing, args=(world.gunicorn.pid, port, load.ready, sharing),
                         daemon=True).start()
        if args.api_alone:
            load.wait()
            busy = None
        else:
            busy = measure_live(port, seeded, lambda: not load.ready(), args.live_rate,
                                max_events=int(args.live_rate * 60))
        samples, wall_s, retried, client_cpu_s = load.get()
        server_cores = (worker_cpu_s(world.gunicorn.pid) - server_cpu_start) / (time.perf_counter() - load_start)
        after_load = os.getloadavg()
    finally:
        teardown(world)

    run_sh = " (make run's)" if not args.gunicorn_flags.split() else " (NOT make run's)"
    print(f"\n### API latency: {args.clients} clients x {args.requests} requests, {args.think_ms:g} ms mean think time "
          f"(+{args.warmup} warm-up each, not counted)\n")
    print("\n".join(api_table(samples, counts, single, wall_s)))
    kinds = Counter(sample[2] for sample in samples if sample[2])
    print(f"\nerrors: {', '.join(f'{kind} x{count}' for kind, count in kinds.most_common()) or 'none'}; "
          f"retried on a new connection after the server closed an idle keep-alive one: {retried}")
    middle = sharing[len(sharing) // 2] if sharing else []
    print(f"client connections held by each gunicorn worker half-way through: {' / '.join(map(str, middle))}")
    print(f"CPU during the API load: gunicorn {server_cores:.2f} cores on average (warm-up included), "
          f"{server_cores * 1e3 / (len(samples) / wall_s):.1f} ms per measured request; the load generator "
          f"{client_cpu_s / wall_s:.2f} cores, {client_cpu_s * 1e3 / len(samples):.2f} ms per request")
    print(f"\n### Live timings: {LIVE_RANKS} ranks emitting {args.live_rate:g} events/s, one viewer polling as run.js "
          f"({RUN_JS_POLL_MS // 4} ms after events, {RUN_JS_POLL_MS} ms after none)\n")
    rows = [("idle server", *idle)] + ([(f"during the {args.clients}-client API load", *busy)] if busy else [])
    print("\n".join(live_table(rows)))
    if busy is None:
        print("\n(--api-alone: no live run during the API load)")
    print(f"\ncores: {os.cpu_count()}; load 1/5/15 min before: single-client {load_text(single_load)}, "
          f"live idle {load_text(live_idle_load)}, API load {load_text(api_load)} (after it {load_text(after_load)}); "
          f"DB: {world.engine}; gunicorn {args.gunicorn_flags}{run_sh}, DEBUG=false; "
          f"clients in a separate process on the same host")


if __name__ == "__main__":
    main()
