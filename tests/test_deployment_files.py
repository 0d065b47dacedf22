"""The Docker stack cannot run on our machines (no engine), so its structure is checked by reading it."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def test_compose_defines_the_four_runtime_services():
    assert {"web", "worker", "redis", "postgres"} <= set(SERVICES)


def test_web_and_worker_are_built_from_the_one_dockerfile():
    assert SERVICES["web"]["build"] == SERVICES["worker"]["build"] == "."
    assert SERVICES["web"]["image"] == SERVICES["worker"]["image"]
    assert (ROOT / "Dockerfile").is_file()


def test_datastores_have_healthchecks_and_app_services_wait_for_them():
    for store in ("postgres", "redis"):
        assert SERVICES[store]["healthcheck"]["test"], store
    for app in ("web", "worker", "migrate"):
        depends = SERVICES[app]["depends_on"]
        assert depends["postgres"]["condition"] == "service_healthy", app
        assert depends["redis"]["condition"] == "service_healthy", app


def test_migrations_run_before_web_and_worker_start():
    assert "migrate" in " ".join(SERVICES["migrate"]["command"])
    for app in ("web", "worker"):
        assert SERVICES[app]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_app_services_point_at_the_compose_datastores():
    for app in ("web", "worker", "migrate"):
        env = SERVICES[app]["environment"]
        assert env["DATABASE_URL"].startswith("postgres://") and "@postgres:5432/" in env["DATABASE_URL"]
        assert env["REDIS_URL"] == "redis://redis:6379/0"


def test_worker_runs_the_celery_app_and_web_serves_the_wsgi_app():
    assert SERVICES["worker"]["command"][:3] == ["celery", "-A", "adaptis_web"]
    assert "adaptis_web.wsgi:application" in SERVICES["web"]["command"]
    assert "/healthz" in " ".join(SERVICES["web"]["healthcheck"]["test"])
