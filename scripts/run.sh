#!/usr/bin/env bash
# Installs everything, then starts Redis (if needed), the Celery workers, the warden and the web server on
# http://127.0.0.1:8000 with the embedded defaults (SQLite, local Redis). Ctrl-C stops all of it.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

HOST="${ADAPTIS_HOST:-127.0.0.1}"
PORT="${ADAPTIS_PORT:-8000}"
STARTED_REDIS_PID=""
children=()
watchdog=""

descendants() {
    # Every process below $1, deepest first (a Celery worker's pool process, the torch ranks of a run).
    local child
    for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
        descendants "$child"
        echo "$child"
    done
}

any_alive() {
    local pid
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && return 0; done
    return 1
}

stop_all() {
    trap - INT TERM EXIT
    set +e  # stop everything we can: a process that is already gone is no reason to leave the rest running
    say "stopping"
    [ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null
    local pid tree=() deadline=$((SECONDS + ${ADAPTIS_STOP_GRACE_S:-10}))
    for pid in "${children[@]}"; do tree+=($(descendants "$pid") "$pid"); done
    for pid in "${children[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    # A warm shutdown lets a worker finish its task; past the grace period whatever is left, the torch ranks
    # of a run included (they live in sessions of their own), is killed.
    while any_alive "${children[@]}" && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
    for pid in "${children[@]}"; do tree+=($(descendants "$pid")); done
    for pid in "${tree[@]}"; do kill -KILL "$pid" 2>/dev/null; done
    wait 2>/dev/null
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# GNU make passes a SIGTERM on to us, but a make killed outright (SIGKILL, the OOM killer) cannot: stop with
# the process that started us, whatever ended it.
parent=$PPID
( while kill -0 "$parent" 2>/dev/null; do sleep 1; done; kill -TERM $$ 2>/dev/null ) &
watchdog=$!

ensure_venv requirements/run.txt
ensure_redis
[ -n "$STARTED_REDIS_PID" ] && children+=("$STARTED_REDIS_PID")
mkdir -p var
"$PY" manage.py migrate --noinput
"$PY" manage.py collectstatic --noinput >/dev/null
seeded="$("$PY" manage.py seed_demo)" && echo "$seeded"

# Planning jobs and runs have their own queues (settings.CELERY_RUNS_QUEUE), so a run never delays a plan.
queue="${CELERY_QUEUE:-adaptis}"
"$VENV/bin/celery" -A adaptis_web worker -Q "$queue" -n "planner@%h" \
    --loglevel=INFO --concurrency=1 >var/worker.log 2>&1 &
children+=($!)
"$VENV/bin/celery" -A adaptis_web worker -Q "${CELERY_RUNS_QUEUE:-$queue-runs}" -n "runner@%h" \
    --loglevel=INFO --concurrency=1 >var/runner.log 2>&1 &
children+=($!)
# The warden, apart from the workers it watches: fails work whose worker died, re-sends lost messages.
"$PY" manage.py watch_work >var/warden.log 2>&1 &
children+=($!)
# Workers, threads and how connections are spread over the workers: gunicorn.conf.py (WEB_CONCURRENCY overrides the
# worker count, two per core by default).
"$VENV/bin/gunicorn" adaptis_web.wsgi:application --bind "$HOST:$PORT" --config gunicorn.conf.py \
    --access-logfile var/web-access.log --error-logfile var/web.log &
children+=($!)

say "AdaPtis Studio is up: http://$HOST:$PORT/"
case "$seeded" in *password*) say "demo login: user 'demo', password 'demo-pass-2026'" ;; esac
say "logs in var/; Ctrl-C (or a SIGTERM to make) stops everything"
wait -n "${children[@]}" || true
say "a process exited (see var/*.log): stopping the others"
exit 1
