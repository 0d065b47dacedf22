"""The product's long-running processes, defined once: the planning worker, the runs worker, the warden and the web
server, with their command lines, pools, concurrency and queues.

Everything that starts one goes through ``command(name)``: ``make run`` (``scripts/run.sh`` hands them to
supervisord through ``supervisord.conf``, whose programs run ``python -m adaptis_web.processes exec NAME``),
docker-compose (one container per process, the same ``exec NAME``) and the test session's workers
(``tests/conftest.py``). A test therefore runs the very pool a user's worker runs.

- ``planner``: planning jobs (profiles of the analytic model, searches, hybrid plans) from ``CELERY_QUEUE``.
  Celery's prefork pool with ``PLANNER_CONCURRENCY`` processes (1 by default: a search uses a core fully, and
  ``make run``'s host is a laptop or a 2-core VM); a pool process that dies (the OOM killer on a huge plan) fails
  its task and is replaced, the worker goes on.
- ``runner``: runs and measured profiles (torch ranks on this host's cores) from the runs queue, one at a time:
  the ranks of two runs at once would share the cores and time each other's slowdown.
- ``warden``: ``manage.py watch_work``, apart from the workers it watches.
- ``web``: gunicorn on ``ADAPTIS_HOST``:``ADAPTIS_PORT`` (127.0.0.1:8000), its workers and sockets as
  ``gunicorn.conf.py`` says.

The workers start without gossip, mingle and Celery's event heartbeats: they serve monitoring tools (Flower) and
the sharing of revoked task ids between workers, neither of which the product uses (its own heartbeats on the rows
and the warden tell a live worker from a dead one; cancelling is a flag on the row), and mingle alone waits a
second at every start. ``celery inspect ping`` still answers.

    python -m adaptis_web.processes exec NAME     # become process NAME (exec: same pid, for a supervisor)
    python -m adaptis_web.processes show [NAME]   # print the command lines
    python -m adaptis_web.processes watch         # supervisord's event listener (supervisord.conf)
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from django.core.exceptions import ImproperlyConfigured

from adaptis_web.env import env_int, env_str

ROOT = Path(__file__).resolve().parent.parent

NAMES = ("planner", "runner", "warden", "web")
DEFAULT_QUEUE = "adaptis"


def planning_queue(environ: Mapping[str, str] = os.environ) -> str:
    """The planning jobs' queue: ``CELERY_QUEUE``, ``adaptis`` by default (settings.CELERY_TASK_DEFAULT_QUEUE)."""
    return env_str("CELERY_QUEUE", DEFAULT_QUEUE, environ=environ)


def runs_queue(environ: Mapping[str, str] = os.environ) -> str:
    """The runs' and measured profiles' queue: ``CELERY_RUNS_QUEUE``, else the planning queue's name + ``-runs``."""
    return env_str("CELERY_RUNS_QUEUE", f"{planning_queue(environ)}-runs", environ=environ)


# Where make run keeps each one's output, relative to the checkout (supervisord.conf's stdout_logfile).
LOGS = {name: f"var/{name}.log" for name in NAMES}


@dataclass(frozen=True)
class Process:
    name: str
    argv: list[str]

    @property
    def log(self) -> str:
        return LOGS[self.name]


def _worker(name: str, queue: str, concurrency: int, environ: Mapping[str, str]) -> list[str]:
    # ADAPTIS_NODE_PREFIX tells apart the workers of several sessions on one host (the tests' parallel sessions).
    node = f"{environ.get('ADAPTIS_NODE_PREFIX', '')}{name}@%h"
    return [sys.executable, "-m", "celery", "-A", "adaptis_web", "worker", "-Q", queue, "-n", node,
            "--pool=prefork", f"--concurrency={concurrency}", "--without-gossip", "--without-mingle",
            "--without-heartbeat", "--loglevel=INFO"]


def command(name: str, environ: Mapping[str, str] = os.environ) -> Process:
    """Process ``name`` (one of NAMES) as the environment ``environ`` configures it."""
    if name == "planner":
        concurrency = env_int("PLANNER_CONCURRENCY", 1, minimum=1, environ=environ)
        return Process(name, _worker("planner", planning_queue(environ), concurrency, environ))
    if name == "runner":
        return Process(name, _worker("runner", runs_queue(environ), 1, environ))
    if name == "warden":
        return Process(name, [sys.executable, str(ROOT / "manage.py"), "watch_work"])
    if name == "web":
        host = env_str("ADAPTIS_HOST", "127.0.0.1", environ=environ)
        port = env_int("ADAPTIS_PORT", 8000, minimum=1, environ=environ)
        return Process(name, [sys.executable, "-m", "gunicorn", "adaptis_web.wsgi:application",
                              "--bind", f"{host}:{port}", "--config", str(ROOT / "gunicorn.conf.py"),
                              "--access-logfile", "-"])
    raise SystemExit(f"no process named {name!r}: the processes are {', '.join(NAMES)}")


def _say(line: str) -> None:
    print(f"\033[1m[adaptis]\033[0m {line}", file=sys.stderr, flush=True)   # scripts/lib.sh's say()


def watch(stdin=sys.stdin, stdout=sys.stdout) -> None:
    """supervisord's event listener (supervisord.conf): a line on make run's terminal for each program that dies,
    fails to start, is given up or is back, naming its log; supervisord stopped when the web server is given up.

    The protocol (supervisor.childutils): wait for an event on stdin, answer OK on stdout; what we say goes to
    stderr, which supervisord.conf sends to its own."""
    import signal
    import time

    from supervisor import childutils

    restarted: set[str] = set()
    tries: dict[str, str] = {}
    while True:
        headers, payload = childutils.listener.wait(stdin, stdout)
        try:
            fields = childutils.get_headers(payload)
            name = fields.get("processname", "?")
            line = _event_line(headers["eventname"], name, fields, restarted, tries)
            if line:
                _say(line)
            if headers["eventname"] == "PROCESS_STATE_FATAL" and name == "web":
                _say("nothing is served without the web server: stopping")
                time.sleep(1)   # supervisord's loop passes on what we said before it takes the signal
                os.kill(os.getppid(), signal.SIGTERM)
        except Exception as error:  # a listener that dies loses events: say it and go on
            _say(f"the supervisor's listener could not read an event ({type(error).__name__}: {error})")
        childutils.listener.ok(stdout)


def _event_line(event: str, name: str, fields: dict, restarted: set[str], tries: dict[str, str]) -> str:
    log = LOGS.get(name, "var/")
    if event == "PROCESS_STATE_EXITED" and fields.get("expected") == "0":
        restarted.add(name)
        return f"{name} (pid {fields.get('pid')}) died unexpectedly; starting it again (its log: {log})"
    if event == "PROCESS_STATE_BACKOFF":
        restarted.add(name)
        tries[name] = fields.get("tries", "?")
        return f"{name} failed to start (try {tries[name]}); retrying after a pause (its log: {log})"
    if event == "PROCESS_STATE_FATAL":
        return (f"{name} keeps crashing: given up after {tries.pop(name, 'several')} failed starts; see {log}, then "
                f"restart make run")
    if event == "PROCESS_STATE_RUNNING" and name in restarted:
        restarted.discard(name)
        return f"{name} is running again (pid {fields.get('pid')})"
    return ""


def main(argv: list[str]) -> None:
    try:
        _main(argv)
    except ImproperlyConfigured as error:   # a misspelt setting: its name and value, not a traceback
        raise SystemExit(str(error)) from None


def _main(argv: list[str]) -> None:
    if len(argv) == 2 and argv[0] == "exec":
        process = command(argv[1])
        sys.stdout.flush()
        os.execv(process.argv[0], process.argv)
    if argv == ["watch"]:
        watch()
        return
    if argv[:1] == ["show"] and len(argv) <= 2:
        for name in argv[1:] or NAMES:
            print(f"{name}: {shlex.join(command(name).argv)}")
        return
    raise SystemExit(__doc__.rsplit("\n\n", 1)[1])


if __name__ == "__main__":
    main(sys.argv[1:])
