#!/usr/bin/env bash
# Installs what the tests need (Python packages, Debian's Chromium, a Redis) and runs the whole suite.
# Uses PostgreSQL at 127.0.0.1:5432 when it answers (as in production), SQLite otherwise.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
STARTED_REDIS_PID=""
trap '[ -n "$STARTED_REDIS_PID" ] && kill "$STARTED_REDIS_PID" 2>/dev/null; true' EXIT

ensure_venv requirements/test.txt
ensure_chromium
ensure_redis
if [ -z "${DATABASE_URL:-}" ]; then
    if "$PY" -c "import psycopg; psycopg.connect('postgresql://postgres@127.0.0.1:5432/postgres', connect_timeout=2).close()" 2>/dev/null; then
        export DATABASE_URL="postgres://postgres@127.0.0.1:5432/adaptis"
        say "tests use PostgreSQL at 127.0.0.1:5432"
    else
        say "PostgreSQL not reachable at 127.0.0.1:5432: tests use SQLite"
    fi
fi
export REDIS_URL
"$PY" -m pytest "$@"
