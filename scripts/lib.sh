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
    # The installer is uv (requirements/installer.txt, itself installed by pip with its hashes): the same wheels
    # as pip would install, with their bytecode compiled on every core, in a third of pip's time (the test lock:
    # 27 s against 94 s on the 2-core machine, its cache warm; the runtime lock 16 s against 49 s).
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
        ensure_uv
        uv_install --require-hashes --compile-bytecode -r "$lock" || die "uv could not install $1 (see above)"
        (cd "$ROOT" && uv_install --no-deps --no-build-isolation -e .) \
            || die "uv could not install the project itself (see above)"
        "$PY" -c "import django, celery, kombu.transport.redis, redis, torch, rest_framework" \
            || die "dependency installation failed (see uv's output above)"
        rm -f "$VENV/.installed-$(basename "$lock" .txt)-"*
        touch "$stamp"
    fi
    compile_project
}

ensure_uv() {
    # The installer's pinned version in the virtual environment, installed by pip checking its hashes.
    local pinned
    pinned="$(sed -n 's/^uv==\([^ ]*\) .*/\1/p' "$ROOT/requirements/installer.txt")"
    [ -n "$pinned" ] || die "requirements/installer.txt pins no uv (run scripts/lock.sh)"
    if [ "$("$VENV/bin/uv" --version 2>/dev/null)" != "uv $pinned" ]; then
        quiet_pip install -q --require-hashes -r "$ROOT/requirements/installer.txt" \
            || die "pip could not install the installer, uv $pinned (see above)"
    fi
}

pip_setting() {
    # $1: one of pip's settings (find-links, index-url, extra-index-url); $2: pip's configuration as `pip config
    # list` prints it (global.find-links='/opt/wheels'), from its files and PIP_* variables. Each value, once.
    printf '%s\n' "$2" | sed -n "s/^[^=]*\.$1='\(.*\)'\$/\1/p" | tr ' ' '\n' | awk 'NF && !seen[$0]++'
}

uv_install() {
    # `uv pip install ARGS` into the virtual environment, from where pip would take packages here: uv reads none of
    # pip's configuration, and a machine may keep wheels (this project's CPU build of torch) where only pip's
    # configuration says. Every source is weighed alike, as pip weighs them (the lock's hashes decide what may be
    # installed).
    local config value sources=(UV_INDEX_STRATEGY=unsafe-best-match)
    config="$("$PY" -m pip config list 2>/dev/null || true)"
    value="$(pip_setting find-links "$config" | paste -sd , -)"
    [ -z "$value" ] || sources+=("UV_FIND_LINKS=$value")
    value="$(pip_setting index-url "$config" | head -n 1)"
    [ -z "$value" ] || sources+=("UV_INDEX_URL=$value")
    value="$(pip_setting extra-index-url "$config" | paste -sd ' ' -)"
    [ -z "$value" ] || sources+=("UV_EXTRA_INDEX_URL=$value")
    env "${sources[@]}" "$VENV/bin/uv" pip install -q --python "$PY" "$@"
}

compile_project() {
    # The project's own bytecode (pip wrote its packages'): every service, rank and CLI process imports the
    # project, and where PYTHONDONTWRITEBYTECODE is set (CI's machines set it) none of them writes the bytecode it
    # compiles, so each would compile the project from source again: about 1 s of CPU more for each Django process
    # (a web worker, a Celery worker, a manage.py command). Only files changed since are compiled again: well
    # under a second. Python checks each file's bytecode against its source, so an edit made later is never
    # missed.
    "$PY" -m compileall -q -j 0 "$ROOT/adaptis_web" "$ROOT/planner" "$ROOT/executor" "$ROOT/manage.py" \
        || die "Python could not compile the project (see above)"
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

SLURM_DIR="$ROOT/var/slurm"

slurm_answers() {
    # This checkout's Slurm (SLURM_CONF, as ensure_slurm sets it) answers and its one node takes jobs.
    [ -f "$SLURM_CONF" ] && scontrol ping 2>/dev/null | grep -q 'is UP' \
        && sinfo -h -N -o '%t' 2>/dev/null | grep -Eq '^(idle|mix|alloc)'
}

ensure_slurm() {
    # A one-node Slurm cluster of this host's CPUs for the tests that sbatch a run (Debian's slurm-wlm and munge,
    # installed when root): munged, slurmctld and slurmd run in the foreground in the background, as redis-server,
    # with their configuration, state, spool, logs and a munge key of their own under var/slurm (SLURM_CONF points
    # every client at it, whatever SLURM_CONF said before: never a site's Slurm), on ports free when started, so
    # checkouts on one host each have their own. Reuses this checkout's Slurm when it answers. Appends the PIDs it
    # started to STARTED_SLURM_PIDS.
    export SLURM_CONF="$SLURM_DIR/slurm.conf"
    if command -v scontrol >/dev/null && slurm_answers; then return 0; fi
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
        && command -v munged >/dev/null || apt_install slurm-wlm munge
    local node
    node="$(hostname -s)"
    getent hosts "$node" >/dev/null \
        || die "this host's name $node does not resolve (Slurm's node, the ranks' rendezvous): add it to /etc/hosts"
    mkdir -p "$SLURM_DIR"/{state,spool,log,run} "$SLURM_DIR/munge"
    chmod 700 "$SLURM_DIR/munge"
    chmod 755 "$SLURM_DIR" "$SLURM_DIR/run"  # munged wants its socket's directory open to every user
    local key="$SLURM_DIR/munge/munge.key" socket="$SLURM_DIR/run/munge.socket"
    if [ ! -s "$key" ]; then
        head -c 1024 /dev/urandom >"$key"
        chmod 400 "$key"
    fi
    if ! munge -S "$socket" -n 2>/dev/null | unmunge -S "$socket" >/dev/null 2>&1; then
        say "starting munged (socket var/slurm/run/munge.socket)"
        # --force: we are root in a container, and var/ is not the system directory munged expects.
        munged --foreground --force --socket="$socket" --key-file="$key" --pid-file="$SLURM_DIR/run/munged.pid" \
            --seed-file="$SLURM_DIR/munge/munged.seed" --log-file="$SLURM_DIR/log/munged.log" \
            >>"$SLURM_DIR/log/munged.out" 2>&1 &
        STARTED_SLURM_PIDS="${STARTED_SLURM_PIDS:-} $!"
        for _ in $(seq 50); do
            munge -S "$socket" -n 2>/dev/null | unmunge -S "$socket" >/dev/null 2>&1 && break; sleep 0.1
        done
        munge -S "$socket" -n 2>/dev/null | unmunge -S "$socket" >/dev/null 2>&1 \
            || die "munged did not come up (see var/slurm/log/munged.log)"
    fi
    local ports
    ports="$(python3 -c '
import socket
probes = [socket.socket() for _ in range(2)]
for probe in probes:
    probe.bind(("127.0.0.1", 0))
print(*(probe.getsockname()[1] for probe in probes))')"
    # No cgroups (a container has none to give), no accounting database: processes tracked by /proc, tasks not
    # bound; the node's CPUs allocated one by one.
    cat >"$SLURM_CONF" <<CONF
# Written by scripts/lib.sh (ensure_slurm): a one-node Slurm cluster of this host's CPUs for the tests.
ClusterName=adaptis
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=${ports% *}
SlurmdPort=${ports#* }
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$SLURM_DIR/state
SlurmdSpoolDir=$SLURM_DIR/spool
SlurmctldPidFile=$SLURM_DIR/run/slurmctld.pid
SlurmdPidFile=$SLURM_DIR/run/slurmd.pid
SlurmctldLogFile=$SLURM_DIR/log/slurmctld.log
SlurmdLogFile=$SLURM_DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=1024 State=UNKNOWN
PartitionName=adaptis Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
    say "starting slurmctld and slurmd (one node, $node, $(nproc) CPUs; var/slurm/slurm.conf)"
    # -c: a fresh start, no jobs left from an earlier one.
    slurmctld -D -c -i -f "$SLURM_CONF" >>"$SLURM_DIR/log/slurmctld.out" 2>&1 &
    STARTED_SLURM_PIDS="$STARTED_SLURM_PIDS $!"
    slurmd -D -c -N "$node" -f "$SLURM_CONF" >>"$SLURM_DIR/log/slurmd.out" 2>&1 &
    STARTED_SLURM_PIDS="$STARTED_SLURM_PIDS $!"
    for _ in $(seq 300); do slurm_answers && return 0; sleep 0.1; done
    die "Slurm did not come up: its node is not idle (see var/slurm/log/slurmctld.log and slurmd.log)"
}
