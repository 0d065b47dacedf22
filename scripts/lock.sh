#!/usr/bin/env bash
# Re-resolves the lock files from pyproject.toml: requirements/run.txt (what `make run` and the Docker image
# install) and requirements/test.txt (run.txt's exact versions plus the test extras), every package pinned with
# its hashes; and requirements/installer.txt, the installer those two are installed with (uv, pinned in
# requirements/installer.in). Run it after changing a dependency in pyproject.toml (`make lock`), then commit the
# three files.
# Pass --upgrade to move every unpinned transitive dependency to its newest release.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

PIP_TOOLS_VERSION="7.6.2"
TOOLS="$ROOT/var/lock-tools"
if [ ! -x "$TOOLS/bin/pip-compile" ] || ! "$TOOLS/bin/pip-compile" --version | grep -q "$PIP_TOOLS_VERSION"; then
    say "installing pip-tools $PIP_TOOLS_VERSION into var/lock-tools"
    python3 -m venv "$TOOLS"
    "$TOOLS/bin/pip" install -q "pip-tools==$PIP_TOOLS_VERSION" 2>&1 | { grep -v '^WARNING: Location' || true; }
fi
compile() {
    # $1: the input (pyproject.toml, or a requirements/*.in file); the rest: pip-compile's options.
    local input="$1"
    shift
    "$TOOLS/bin/pip-compile" -q --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url \
        --no-emit-find-links "$@" "$input" 2>&1 | { grep -v '^WARNING: Location' || true; }
    return "${PIPESTATUS[0]}"
}
mkdir -p requirements
say "resolving requirements/run.txt"
compile pyproject.toml "$@" -o requirements/run.txt || die "pip-compile could not resolve the runtime dependencies"
say "resolving requirements/test.txt (the runtime versions, plus the test extras)"
compile pyproject.toml "$@" --extra test -c requirements/run.txt -o requirements/test.txt \
    || die "pip-compile could not resolve the test dependencies"
say "resolving requirements/installer.txt"
compile requirements/installer.in "$@" -o requirements/installer.txt || die "pip-compile could not resolve the installer"
say "locked: $(grep -c '==' requirements/run.txt) runtime and $(grep -c '==' requirements/test.txt) test packages"
