#!/usr/bin/env bash
# Installs everything, then starts Redis (if needed), a Celery worker and the web server on
# http://127.0.0.1:8000 with the embedded defaults (SQLite, local Redis). Ctrl-C stops all of it.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

HOST="${ADAPTIS_HOST:-127.0.0.1}"
PORT="${ADAPTIS_PORT:-8000}"
STARTED_REDIS_PID=""
children=()

stop_all() {
    trap - INT TERM EXIT
    say "stopping"
    for pid in "${children[@]}" $STARTED_REDIS_PID; do kill -TERM "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap stop_all INT TERM EXIT

ensure_venv requirements/run.txt
ensure_redis
[ -n "$STARTED_REDIS_PID" ] && children+=("$STARTED_REDIS_PID")
mkdir -p var
"$PY" manage.py migrate --noinput
"$PY" manage.py collectstatic --noinput >/dev/null
"$PY" manage.py seed_demo

# Planning jobs and runs have their own queues (settings.CELERY_RUNS_QUEUE), so a run never delays a plan.
# -B: the planning worker also runs beat, which schedules the reaper of work whose worker died.
queue="${CELERY_QUEUE:-adaptis}"
"$VENV/bin/celery" -A adaptis_web worker -B --schedule var/celerybeat-schedule -Q "$queue" -n "planner@%h" \
    --loglevel=INFO --concurrency=1 >var/worker.log 2>&1 &
children+=($!)
"$VENV/bin/celery" -A adaptis_web worker -Q "${CELERY_RUNS_QUEUE:-$queue-runs}" -n "runner@%h" \
    --loglevel=INFO --concurrency=1 >var/runner.log 2>&1 &
children+=($!)
"$VENV/bin/gunicorn" adaptis_web.wsgi:application --bind "$HOST:$PORT" --workers 2 --threads 4 --graceful-timeout 5 \
    --access-logfile var/web-access.log --error-logfile var/web.log &
children+=($!)

say "AdaPtis Studio is up: http://$HOST:$PORT/"
say "demo login: user 'demo', password 'demo-pass-2026'   (logs in var/, Ctrl-C stops everything)"
wait -n "${children[@]}" || true
say "a process exited (see var/*.log)"
