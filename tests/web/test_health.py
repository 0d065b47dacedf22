"""/healthz reports the database and Redis, and says 503 when one of them does not answer."""

import pytest
from django.test import override_settings


@pytest.mark.django_db
def test_healthz_is_ok_when_database_and_redis_answer(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "redis": "ok"}}


@pytest.mark.django_db
def test_healthz_is_unavailable_when_redis_does_not_answer(client):
    # Port 1 on loopback refuses connections: a Redis that is down.
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):
        response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unhealthy" and body["checks"]["database"] == "ok"
    assert body["checks"]["redis"].startswith("error:")
