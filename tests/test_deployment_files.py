"""The Docker stack cannot run on our machines (no engine), so its structure is checked by reading it."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def test_compose_defines_the_four_runtime_services():
    assert {"web", "planner", "redis", "postgres"} <= set(SERVICES)


def test_web_and_worker_are_built_from_the_one_dockerfile():
    assert SERVICES["web"]["build"] == SERVICES["planner"]["build"] == "."
    assert SERVICES["web"]["image"] == SERVICES["planner"]["image"]
    assert (ROOT / "Dockerfile").is_file()


def test_datastores_have_healthchecks_and_app_services_wait_for_them():
    for store in ("postgres", "redis"):
        assert SERVICES[store]["healthcheck"]["test"], store
    for app in ("web", "planner", "migrate"):
        depends = SERVICES[app]["depends_on"]
        assert depends["postgres"]["condition"] == "service_healthy", app
        assert depends["redis"]["condition"] == "service_healthy", app


def test_migrations_run_before_web_and_worker_start():
    assert "migrate" in " ".join(SERVICES["migrate"]["command"])
    for app in ("web", "planner"):
        assert SERVICES[app]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_app_services_point_at_the_compose_datastores():
    for app in ("web", "planner", "migrate"):
        env = SERVICES[app]["environment"]
        assert env["DATABASE_URL"].startswith("postgres://") and "@postgres:5432/" in env["DATABASE_URL"]
        assert env["REDIS_URL"] == "redis://redis:6379/0"


PROCESSES = ("planner", "runner", "warden", "web")


def test_every_process_of_the_stack_runs_its_one_definition():
    """compose's services, make run's supervisord programs and the image's default command all run
    ``python -m adaptis_web.processes exec NAME``: the definitions the tests' workers start too."""
    import configparser
    import json

    for name in PROCESSES:
        assert SERVICES[name]["command"] == ["python", "-m", "adaptis_web.processes", "exec", name], name
        assert SERVICES[name]["restart"] == "unless-stopped", name
    supervisord = configparser.RawConfigParser()
    supervisord.read(ROOT / "supervisord.conf")
    programs = {section.removeprefix("program:") for section in supervisord.sections() if section.startswith("program:")}
    assert programs == set(PROCESSES)
    for name in PROCESSES:
        assert supervisord[f"program:{name}"]["command"] == f"python -m adaptis_web.processes exec {name}"
        assert supervisord[f"program:{name}"]["autorestart"] == "true"
    dockerfile_cmd = next(line for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("CMD"))
    assert json.loads(dockerfile_cmd.removeprefix("CMD").strip()) == ["python", "-m", "adaptis_web.processes", "exec",
                                                                       "web"]
    run_sh = (ROOT / "scripts" / "run.sh").read_text()
    assert 'supervisord" -c "$ROOT/supervisord.conf"' in run_sh and "celery" not in run_sh and "gunicorn " not in run_sh
    assert "/healthz" in " ".join(SERVICES["web"]["healthcheck"]["test"])


def test_the_definitions_run_the_celery_app_in_the_prefork_pool_and_the_wsgi_app_in_gunicorn():
    from adaptis_web.processes import command

    for name in ("planner", "runner"):
        argv = command(name, {}).argv
        assert argv[1:6] == ["-m", "celery", "-A", "adaptis_web", "worker"] and "--pool=prefork" in argv
    assert "--concurrency=1" in command("runner", {"PLANNER_CONCURRENCY": "4"}).argv  # one run at a time
    assert "--concurrency=4" in command("planner", {"PLANNER_CONCURRENCY": "4"}).argv
    web = command("web", {"ADAPTIS_HOST": "0.0.0.0", "ADAPTIS_PORT": "8000"}).argv
    assert "adaptis_web.wsgi:application" in web and web[web.index("--bind") + 1] == "0.0.0.0:8000"
    assert command("warden", {}).argv[-1] == "watch_work"


def test_the_warden_runs_apart_from_the_workers_from_the_app_image():
    from adaptis_web.processes import command

    assert SERVICES["warden"]["image"] == SERVICES["planner"]["image"]
    assert "beat" not in SERVICES  # nothing is scheduled through a worker any more
    for worker in ("planner", "runner"):
        argv = command(worker, {}).argv
        assert "-B" not in argv and "beat" not in argv


def test_planning_and_runs_have_their_own_workers_on_the_queues_the_settings_route_to():
    from django.conf import settings

    from adaptis_web.celery import app

    from adaptis_web.processes import command

    def queues(service):
        argv = command(service, {"PLANNER_CONCURRENCY": "2"}).argv  # compose sets no queue
        return argv[argv.index("-Q") + 1].split(",")

    assert queues("planner") == ["adaptis"] and queues("runner") == ["adaptis-runs"]  # the stack sets no queue
    assert settings.CELERY_RUNS_QUEUE == f"{settings.CELERY_TASK_DEFAULT_QUEUE}-runs"
    assert settings.CELERY_TASK_ROUTES["studio.run_execute"]["queue"] == settings.CELERY_RUNS_QUEUE
    assert app.amqp.router.route({}, "studio.run_execute")["queue"].name == app.conf.task_routes[
        "studio.run_execute"]["queue"]
    assert SERVICES["runner"]["image"] == SERVICES["planner"]["image"] and "shm_size" in SERVICES["runner"]


def test_production_stack_seeds_no_demo_account_unless_asked():
    for app in ("web", "planner", "migrate", "warden"):
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
    """make run, the image, the compose stack and the load benchmark start gunicorn the same way (its definition in
    adaptis_web/processes.py, gunicorn.conf.py: a worker per core, threads, a listening socket per worker), so the
    benchmark measures what is deployed."""
    import runpy

    from adaptis_web.processes import command

    web = command("web", {}).argv
    assert web[web.index("--config") + 1] == str(ROOT / "gunicorn.conf.py")
    assert "command(\"web\"" in (ROOT / "benchmarks" / "web_latency.py").read_text()
    settings = runpy.run_path(str(ROOT / "gunicorn.conf.py"))
    assert settings["worker_class"] == "gthread" and settings["reuse_port"] is True
    assert settings["workers"] >= 1 and settings["threads"] >= 1
