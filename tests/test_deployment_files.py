"""The Docker stack cannot run on our machines (no engine), so its structure is checked by reading it."""

import re
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


def test_the_warden_runs_apart_from_the_workers_from_the_app_image():
    warden = SERVICES["warden"]
    assert warden["image"] == SERVICES["worker"]["image"]
    assert warden["command"] == ["python", "manage.py", "watch_work"]
    assert "beat" not in SERVICES  # nothing is scheduled through a worker any more
    for worker in ("worker", "runner"):
        assert "-B" not in SERVICES[worker]["command"] and "beat" not in SERVICES[worker]["command"]


def test_planning_and_runs_have_their_own_workers_on_the_queues_the_settings_route_to():
    from django.conf import settings

    from adaptis_web.celery import app

    def queues(service):
        command = SERVICES[service]["command"]
        return command[command.index("-Q") + 1].split(",")

    assert queues("worker") == ["adaptis"] and queues("runner") == ["adaptis-runs"]  # the stack sets no queue
    assert settings.CELERY_RUNS_QUEUE == f"{settings.CELERY_TASK_DEFAULT_QUEUE}-runs"
    assert settings.CELERY_TASK_ROUTES["studio.run_execute"]["queue"] == settings.CELERY_RUNS_QUEUE
    assert app.amqp.router.route({}, "studio.run_execute")["queue"].name == app.conf.task_routes[
        "studio.run_execute"]["queue"]
    assert SERVICES["runner"]["image"] == SERVICES["worker"]["image"] and "shm_size" in SERVICES["runner"]


def test_production_stack_seeds_no_demo_account_unless_asked():
    for app in ("web", "worker", "migrate", "warden"):
        env = SERVICES[app]["environment"]
        assert env["DEBUG"] == "false", app
        assert env["ADAPTIS_SEED_DEMO"] == "${ADAPTIS_SEED_DEMO:-0}", app


def test_image_installs_exactly_the_runtime_lock():
    """The Dockerfile installs requirements/run.txt with its hashes, then the project without resolving more."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "pip install --require-hashes -r requirements/run.txt" in dockerfile
    assert "pip install --no-deps --no-build-isolation -e ." in dockerfile
    assert not re.search(r"pip install (-e )?\.\s*$", dockerfile, re.MULTILINE)


def test_every_way_the_web_server_starts_uses_the_one_gunicorn_config():
    """make run, the image, the compose stack and the load benchmark start gunicorn the same way (gunicorn.conf.py:
    a worker per core, threads, a listening socket per worker), so the benchmark measures what is deployed."""
    import json
    import runpy

    config = ["--config", "gunicorn.conf.py"]
    dockerfile_cmd = next(line for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("CMD"))
    assert json.loads(dockerfile_cmd.removeprefix("CMD").strip())[-2:] == config
    assert SERVICES["web"]["command"][-2:] == config
    assert "--config gunicorn.conf.py" in (ROOT / "scripts" / "run.sh").read_text()
    assert runpy.run_path(str(ROOT / "benchmarks" / "web_latency.py"))["GUNICORN_FLAGS"] == config
    settings = runpy.run_path(str(ROOT / "gunicorn.conf.py"))
    assert settings["worker_class"] == "gthread" and settings["reuse_port"] is True
    assert settings["workers"] >= 1 and settings["threads"] >= 1
