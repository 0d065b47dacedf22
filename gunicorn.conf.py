"""The web server's settings, one place for every way it starts: ``scripts/run.sh``, the Docker image (its CMD and
docker-compose's ``web``) and ``benchmarks/web_latency.py`` all pass ``--config gunicorn.conf.py``.

- Two single-threaded worker processes per core (``WEB_CONCURRENCY`` sets the count, ``WEB_THREADS`` the threads):
  a process runs Python on one core at a time, and the second one per core runs while the first waits on
  PostgreSQL or Redis. Threads in one process share its interpreter lock and cost CPU in handing it over: on the
  2-core benchmark host, 50 clients back to back got 118 requests/s from 2 workers x 4 threads (11.0 ms of server
  CPU per request), 145 from 4 x 2 (9.9 ms), 154 from 4 x 1 (9.4 ms) and 134 from 6 x 1 (README, "Web latency").
  At most 16 by default: on a large host set ``WEB_CONCURRENCY`` to what its memory and database allow.
- ``reuse_port``: each worker listens on a socket of its own (SO_REUSEPORT) and the kernel spreads new connections
  over them. With the one shared socket, whichever worker woke first accepted; a keep-alive connection stays with
  the worker that accepted it, and one of two workers ended up holding 47 of 50 clients' connections. The price:
  connections still waiting in the accept queue of a worker that exits (a reload, a crash) are reset rather
  than taken by another worker.
"""

import os

DEFAULT_MAX_WORKERS = 16


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _workers() -> int:
    configured = os.environ.get("WEB_CONCURRENCY", "").strip()
    return int(configured) if configured else min(2 * _cores(), DEFAULT_MAX_WORKERS)


workers = _workers()
worker_class = "gthread"  # keep-alive connections wait in the worker's poller, not in a thread
threads = int(os.environ.get("WEB_THREADS", "1"))
reuse_port = True
graceful_timeout = 5
# gunicorn's default, named here because the API's schema documents it: a request line (method, path and query)
# longer than this is answered 414 before Django sees it (api.schema.document_errors)
limit_request_line = 4094


def post_worker_init(worker):
    """Import every view and what it imports (the planner, the serializers) as a worker starts, not on its first
    request: a user's first page after a start or a restart of the web server would otherwise wait seconds for it
    on a busy host."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 (the URLconf imports the views)
