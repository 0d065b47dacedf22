# Shared helpers for the project scripts. Sourced, not executed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/0}"

say() { printf '\033[1m[adaptis]\033[0m %s\n' "$*"; }
die() { printf '\033[31m[adaptis] error:\033[0m %s\n' "$*" >&2; exit 1; }
is_root() { [ "$(id -u)" -eq 0 ]; }

apt_install() {
    # Installs Debian/Ubuntu packages when we are root; otherwise explains what is missing.
    if ! is_root; then
        die "missing system package(s): $* — install them (sudo apt-get install -y $*) and re-run"
    fi
    command -v apt-get >/dev/null || die "missing system package(s): $* and no apt-get here to install them"
    say "installing system package(s): $*"
    if [ ! -f /tmp/.adaptis-apt-updated ]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq && touch /tmp/.adaptis-apt-updated
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

quiet_pip() {
    # pip with its exit status kept; drops the notices about local package indexes some machines lack.
    "$PY" -m pip "$@" 2>&1 | { grep -v '^WARNING: Location' || true; }
    return "${PIPESTATUS[0]}"
}

ensure_venv() {
    # $1: a lock file (requirements/run.txt or requirements/test.txt). Installs exactly what it pins, checking
    # every hash, then this project itself without resolving anything more; again only when the lock changed.
    local lock="$ROOT/$1"
    [ -f "$lock" ] || die "no lock file $1 (run scripts/lock.sh)"
    if ! command -v python3 >/dev/null; then apt_install python3 python3-venv; fi
    # The lock is resolved for CPython 3.11 (its torch is the 3.11 CPU wheel): another minor version would
    # resolve other wheels than the ones CI tested.
    python3 - <<'PY' || die "Python 3.11 is required: the lock files pin its wheels (found $(python3 --version 2>&1))"
import sys
sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)
PY
    if [ ! -x "$PY" ]; then
        say "creating virtual environment in .venv"
        python3 -m venv "$VENV" 2>/dev/null || { apt_install python3-venv; python3 -m venv "$VENV"; }
    fi
    local stamp="$VENV/.installed-$(basename "$lock" .txt)-$(sha256sum "$lock" | cut -c1-16)"
    if [ ! -f "$stamp" ]; then
        say "installing Python dependencies from $1"
        quiet_pip install -q --require-hashes -r "$lock" || die "pip could not install $1 (see above)"
        (cd "$ROOT" && quiet_pip install -q --no-deps --no-build-isolation -e .) \
            || die "pip could not install the project itself (see above)"
        "$PY" -c "import django, celery, kombu.transport.redis, redis, torch, rest_framework" \
            || die "dependency installation failed (see pip output above)"
        rm -f "$VENV/.installed-$(basename "$lock" .txt)-"*
        touch "$stamp"
    fi
}

redis_ping() {
    "$PY" - "$REDIS_URL" <<'PY' >/dev/null 2>&1
import sys, redis
redis.Redis.from_url(sys.argv[1], socket_connect_timeout=1).ping()
PY
}

ensure_redis() {
    # Uses a reachable Redis at REDIS_URL; otherwise starts a local redis-server (installing it when root).
    # Prints the PID of a server we started (empty when an existing one is used).
    if redis_ping; then return 0; fi
    case "$REDIS_URL" in
        redis://127.0.0.1*|redis://localhost*) ;;
        *) die "Redis at $REDIS_URL is not reachable; start it or set REDIS_URL" ;;
    esac
    command -v redis-server >/dev/null || apt_install redis-server
    local port
    port="$(echo "$REDIS_URL" | sed -E 's#redis://[^:/]+:?([0-9]*).*#\1#')"
    port="${port:-6379}"
    say "starting a local redis-server on 127.0.0.1:$port"
    mkdir -p "$ROOT/var"
    redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no --dir "$ROOT/var" \
        --logfile "$ROOT/var/redis.log" --daemonize no &
    STARTED_REDIS_PID=$!
    for _ in $(seq 50); do redis_ping && return 0; sleep 0.1; done
    die "redis-server did not come up (see var/redis.log)"
}

ensure_chromium() {
    [ -x /usr/bin/chromium ] || apt_install chromium
}
