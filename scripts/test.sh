#!/usr/bin/env bash
# Installs what the tests need (Python packages, Debian's Chromium, a Redis, a one-node Slurm cluster) and runs the
# whole suite.
#
# With no arguments (as `make test` and CI run it) and PostgreSQL answering at 127.0.0.1:5432: the whole suite on
# PostgreSQL (production's database), then every test that uses the database, but the browser tests and those
# marked any_database (tests/conftest.py), again on SQLite (`make run`'s embedded default, which the smoke test also
# runs the whole product on); both must pass. One after the other, not at once: the SQLite pass alone keeps both
# cores busy. Without PostgreSQL: the whole suite on SQLite, and it says so.
# The whole suite runs on both cores (pytest-xdist: TEST_WORKERS processes, 2 by default, each with its own test
# database, queues and workers as tests/conftest.py isolates a session; the tests that start a whole product with
# `make run` share one process, xdist_group "product", so at most one such product runs at a time).
# With arguments (paths, -k ...): one pytest run with them (add -n 2 for both cores), on DATABASE_URL when set,
# else PostgreSQL when it answers, else SQLite; TEST_DATABASE=sqlite or TEST_DATABASE=postgres picks one.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
STARTED_REDIS_PID=""
STARTED_SLURM_PIDS=""
stop_started() {
    # What this script started, and wait (up to 10 s, then SIGKILL) until it is gone: slurmctld saves its state.
    local pid
    for pid in $STARTED_SLURM_PIDS $STARTED_REDIS_PID; do kill "$pid" 2>/dev/null || true; done
    for pid in $STARTED_SLURM_PIDS $STARTED_REDIS_PID; do
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    done
}
trap stop_started EXIT

ensure_venv requirements/test.txt
ensure_chromium
ensure_redis
export REDIS_URL
ensure_slurm  # exports SLURM_CONF: tests/web/test_cluster_runs.py sbatches a run on it

POSTGRES_URL="postgres://postgres@127.0.0.1:5432/adaptis"
PARALLEL=(-n "${TEST_WORKERS:-2}" --dist loadgroup)
SQLITE_URL="sqlite:///$ROOT/var/db.sqlite3"  # the tests' own database file is var/test-<pid>.sqlite3 (tests/conftest.py)
postgres_answers() {
    "$PY" -c "import psycopg; psycopg.connect('postgresql://postgres@127.0.0.1:5432/postgres', connect_timeout=2).close()" \
        2>/dev/null
}

if [ $# -gt 0 ] || [ -n "${DATABASE_URL:-}" ] || [ -n "${TEST_DATABASE:-}" ]; then
    case "${TEST_DATABASE:-}" in
        sqlite) export DATABASE_URL="$SQLITE_URL" ;;
        postgres) export DATABASE_URL="$POSTGRES_URL" ;;
        "") if [ -z "${DATABASE_URL:-}" ] && postgres_answers; then export DATABASE_URL="$POSTGRES_URL"; fi ;;
        *) die "TEST_DATABASE must be sqlite or postgres, not '$TEST_DATABASE'" ;;
    esac
    say "tests use ${DATABASE_URL:-$SQLITE_URL}"
    "$PY" -m pytest "$@"
    exit 0  # (a failure has already exited with pytest's status: set -e)
fi

if ! postgres_answers; then
    say "PostgreSQL does not answer at 127.0.0.1:5432: the whole suite runs on SQLite only"
    DATABASE_URL="$SQLITE_URL" "$PY" -m pytest "${PARALLEL[@]}"
    exit 0
fi

say "the whole suite on PostgreSQL"
postgres_status=0
DATABASE_URL="$POSTGRES_URL" "$PY" -m pytest "${PARALLEL[@]}" || postgres_status=$?
say "the tests that use the database, but the browser tests, on SQLite"
sqlite_status=0
DATABASE_URL="$SQLITE_URL" ADAPTIS_TESTS_OF_THE_DATABASE=1 "$PY" -m pytest "${PARALLEL[@]}" -p no:cacheprovider -m "not browser" \
    || sqlite_status=$?
say "PostgreSQL: $([ "$postgres_status" -eq 0 ] && echo passed || echo "FAILED ($postgres_status)");" \
    "SQLite: $([ "$sqlite_status" -eq 0 ] && echo passed || echo "FAILED ($sqlite_status)")"
[ "$postgres_status" -eq 0 ] && [ "$sqlite_status" -eq 0 ]
