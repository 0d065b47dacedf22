#!/usr/bin/env bash
# Installs everything, then starts Redis (if needed) and, under supervisord, the Celery workers, the warden and the
# web server on http://127.0.0.1:8000 with the embedded defaults (SQLite, local Redis). Ctrl-C stops all of it.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

# Output sent to a file has several writers: this script, supervisord and its event listener, whose lines (a
# service that died, failed to start, was given up) supervisord.conf sends to /dev/stderr, which opens the file
# anew. A writer that does not append writes at its own offset, over what the others added meanwhile: supervisord's
# next log line erases the listener's. GNU make already puts a file it is given in append mode (its output.c,
# set_append_mode), so `make run > log` keeps every line; `scripts/run.sh > log` run directly needs the same: the
# output is taken again in append mode, and what starts from here inherits that.
if [ -f /proc/self/fd/1 ]; then exec >>/proc/self/fd/1; fi
if [ -f /proc/self/fd/2 ]; then exec 2>>/proc/self/fd/2; fi

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

# The planning and runs workers, the warden and the web server (adaptis_web/processes.py defines each) under
# supervisord (supervisord.conf): a service that dies is started again, and the others go on serving meanwhile.
PATH="$VENV/bin:$PATH" "$VENV/bin/supervisord" -c "$ROOT/supervisord.conf" &
children+=($!)
web_up() {
    "$PY" - "http://$HOST:$PORT/healthz" <<'PY' >/dev/null 2>&1
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=2)
PY
}
until web_up; do
    kill -0 "${children[-1]}" 2>/dev/null || die "the services did not start (see the lines above and var/*.log)"
    sleep 0.5
done

say "AdaPtis Studio is up: http://$HOST:$PORT/"
case "$seeded" in *password*) say "demo login: user 'demo', password 'demo-pass-2026'" ;; esac
say "logs in var/ (planner.log, runner.log, warden.log, web.log); Ctrl-C (or a SIGTERM to make) stops everything"
wait -n "${children[@]}" || true
say "$([ -n "$STARTED_REDIS_PID" ] && ! kill -0 "$STARTED_REDIS_PID" 2>/dev/null && echo "redis-server" \
    || echo "the supervisor") exited (see var/*.log): stopping the others"
exit 1
