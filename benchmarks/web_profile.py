"""Where an API request's time goes: each endpoint of ``web_latency.py`` served in-process, many times.

Seeds the same world as ``benchmarks/web_latency.py`` (its own PostgreSQL database, Redis db 12, DEBUG=false),
then serves each endpoint with Django's test client and the benchmark's token, ``--repeats`` times, under
cProfile. Prints per endpoint the mean wall time in the process (without and with the profiler), the Python
function calls per request (which, unlike the times, do not depend on what else the host is doing), the
database queries and their time, the response size, and the functions with the most cumulative time. Relative
numbers for finding the cost; the latency under load is ``web_latency.py``'s.
Run: ``.venv/bin/python benchmarks/web_profile.py``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import random
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import web_latency as bench  # noqa: E402  (the same world, seeded the same way)


def profile_endpoint(client, name: str, seeded, repeats: int, top: int, sort: str = "cumulative") -> str:
    from django.db import connection

    pick = random.Random(0)
    paths = [bench.endpoint_path(name, seeded, pick) for _ in range(repeats)]
    for path in paths[:3]:  # warm-up: imports, caches, the first connection
        client.get(path, HTTP_ACCEPT="application/json")
    queries: list[tuple[str, float]] = []

    def record(execute, sql, params, many, context):  # the test client resets connection.queries per request
        start = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            queries.append((sql, time.perf_counter() - start))

    with connection.execute_wrapper(record):
        response = client.get(paths[0], HTTP_ACCEPT="application/json")
    size = len(response.content)
    start = time.perf_counter()
    for path in paths:
        client.get(path, HTTP_ACCEPT="application/json")
    plain_ms = (time.perf_counter() - start) * 1e3 / repeats
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    for path in paths:
        response = client.get(path, HTTP_ACCEPT="application/json")
        assert response.status_code == 200, (path, response.status_code)
    profiler.disable()
    mean_ms = (time.perf_counter() - start) * 1e3 / repeats
    query_ms = sum(seconds for _, seconds in queries) * 1e3
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats(sort).print_stats(top)
    body = "\n".join(line for line in out.getvalue().splitlines() if line.strip())
    return (f"## {name}: {plain_ms:.2f} ms per request ({mean_ms:.2f} profiled), "
            f"{stats.total_calls / repeats:.0f} Python function calls, {len(queries)} queries "
            f"({query_ms:.1f} ms in the driver, one request), {size / 1024:.1f} KB\n"
            + "\n".join(f"   SQL {seconds * 1e3:.2f} ms: {sql[:200]}" for sql, seconds in queries) + "\n" + body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--top", type=int, default=35, help="functions shown per endpoint")
    parser.add_argument("--jobs", type=int, default=47)
    parser.add_argument("--searches", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sort", default="cumulative", help="pstats order: cumulative, tottime, ncalls...")
    parser.add_argument("--endpoint", action="append", help="only these (names as in web_latency.ENDPOINTS)")
    args = parser.parse_args()

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    world = bench.World()
    try:
        bench.configure(world)
        seeded = bench.seed(baseline_count=args.jobs, search_count=args.searches, run_count=args.runs)
        from django.test import Client

        client = Client(HTTP_AUTHORIZATION=f"Token {seeded.token}")
        for name in args.endpoint or bench.ENDPOINTS:
            print(profile_endpoint(client, name, seeded, args.repeats, args.top, args.sort), flush=True)
    finally:
        bench.teardown(world)


if __name__ == "__main__":
    main()
