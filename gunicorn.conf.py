"""The web server's settings, one place for every way it starts: ``scripts/run.sh``, the Docker image (its CMD and
docker-compose's ``web``) and ``benchmarks/web_latency.py`` all pass ``--config gunicorn.conf.py``.

- One worker process per core (``WEB_CONCURRENCY`` overrides it): a process runs Python on one core at a time.
- Threads in each (gthread), so a worker keeps serving while a request waits on PostgreSQL or Redis.
- ``reuse_port``: each worker listens on a socket of its own (SO_REUSEPORT) and the kernel spreads new connections
  over them evenly. With the one shared socket, whichever worker woke first accepted; a keep-alive connection
  stays with the worker that accepted it, and one of two workers ended up holding 47 of 50 clients' connections
  (README, "Web latency"). The price: connections still waiting in the accept queue of a worker that exits (a
  reload, a crash) are reset rather than taken by another worker.
"""

import os


def _workers() -> int:
    configured = os.environ.get("WEB_CONCURRENCY", "").strip()
    if configured:
        return int(configured)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


workers = _workers()
worker_class = "gthread"
threads = int(os.environ.get("WEB_THREADS", "4"))
reuse_port = True
graceful_timeout = 5
