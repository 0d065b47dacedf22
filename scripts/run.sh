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

ensure_venv "."
ensure_redis
[ -n "$STARTED_REDIS_PID" ] && children+=("$STARTED_REDIS_PID")
mkdir -p var
"$PY" manage.py migrate --noinput
"$PY" manage.py collectstatic --noinput >/dev/null
"$PY" manage.py seed_demo

"$VENV/bin/celery" -A adaptis_web worker --loglevel=INFO --concurrency=2 >var/worker.log 2>&1 &
children+=($!)
"$VENV/bin/gunicorn" adaptis_web.wsgi:application --bind "$HOST:$PORT" --workers 2 --threads 4 --graceful-timeout 5 \
    --access-logfile var/web-access.log --error-logfile var/web.log &
children+=($!)

say "AdaPtis Studio is up: http://$HOST:$PORT/"
say "demo login: user 'demo', password 'demo-pass-2026'   (logs in var/, Ctrl-C stops everything)"
wait -n "${children[@]}" || true
say "a process exited (see var/*.log)"
