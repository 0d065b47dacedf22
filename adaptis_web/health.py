"""Liveness for load balancers and the compose healthcheck: the database and Redis both answer."""

import redis
from django.conf import settings
from django.db import connection
from django.http import JsonResponse


def healthz(request):
    checks = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as error:  # noqa: BLE001 — any failure means unhealthy; report it
        checks["database"] = f"error: {error}"
    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2).ping()
        checks["redis"] = "ok"
    except redis.RedisError as error:
        checks["redis"] = f"error: {error}"
    healthy = all(value == "ok" for value in checks.values())
    return JsonResponse({"status": "ok" if healthy else "unhealthy", "checks": checks}, status=200 if healthy else 503)
