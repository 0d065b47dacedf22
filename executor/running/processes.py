"""The life of a process the executor starts on this host: it is forked by a zygote that has imported torch once,
it dies with its launcher, and a finished rank exits without interpreter finalization.

The launcher (``executor.running.launch``) and the measuring processes (``executor.measuring.alongside``) have
their ``python -m`` processes forked by the calling thread's zygote (``zygote``, below);
``executor.measuring.linkprobe`` starts fresh subprocesses. Each names its parent in ``LAUNCHER_PID_ENV`` and
calls ``die_with_launcher`` first thing (the zygote does it for every child it forks).
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

LAUNCHER_PID_ENV = "ADAPTIS_LAUNCHER_PID"
REPO_ROOT = Path(__file__).resolve().parents[2]
_PR_SET_PDEATHSIG = 1


def die_with_launcher() -> None:
    """Have the kernel SIGKILL this rank when the local launcher that started it exits, however it exits.

    The launcher stops and reaps its ranks on failure, timeout and interruption, but a launcher that is itself
    killed (SIGKILL, or a SIGTERM Python does not turn into an exception) runs no cleanup, and its ranks
    would go on computing, or wait forever on a peer, holding the cores. ``prctl(PR_SET_PDEATHSIG)`` is how
    the kernel ties a child's life to its parent's on Linux. A process not started by ``run_plan`` or
    ``executor.measuring.alongside.run_alongside`` (they set ``ADAPTIS_LAUNCHER_PID``; torchrun's agent watches its own
    ranks) is left alone, as is a host without prctl.
    """
    launcher = os.environ.get(LAUNCHER_PID_ENV)
    if launcher is None or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != int(launcher):
        os._exit(1)   # the launcher died before the request took effect: nothing would signal this rank


def exit_rank(code: int) -> None:
    """End a rank process that has finished (results written, process group destroyed) without interpreter
    finalization: flush stdio, then ``os._exit``.

    gloo's worker threads can still hold tensors with Python references when the interpreter tears down;
    releasing them then needs a GIL that is gone, and the process aborts ("terminate called without an
    active exception", SIGABRT; pytorch/pytorch#179291). Seen here in about 1 run in 30, after every rank had
    done its work: under torchrun, whose agent then fails the whole run. Nothing a finished rank still has to
    do needs finalization.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def child_env(env: dict) -> dict:
    """``env`` with the repository first on ``PYTHONPATH``: what every ``python -m executor...`` process started here
    runs with, whatever directory it runs in."""
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))}


# ---- the zygote: ranks forked from a process that has imported torch already ---------------------------------
#
# Importing torch and the executor costs a rank about 1.4 s of CPU on the 2-core host (``python -X importtime``:
# 0.9 s of it torch's own modules), before it does any work: on a workstation rehearsing a plan on 8 ranks that is
# 8 such imports, and it was 40 % of what the test suite's CPU went on (2026-11-28). A zygote imports them once,
# then forks each rank on request: the fork shares those pages and starts at once. It is what multiprocessing's
# forkserver does, but a forkserver cannot be started from a daemonic process (a Celery prefork pool's, where the
# runs worker launches), and its children are not ``python -m`` processes in sessions of their own with their
# stderr in a file, as the launcher's ranks are. Importing torch starts no CUDA, so a fork is safe for NCCL ranks
# too (CUDA is initialised in the rank, after the fork; pytorch's own DataLoader forks after importing torch).
#
# A zygote belongs to the thread that started it (``PR_SET_PDEATHSIG`` follows the parent thread) and lives as long
# as it; it dies with it, and its ranks with the zygote. The launcher talks to it over its stdin and stdout, one JSON
# document a line: a request to start a module, answered with the pid, and the exit status of every child it
# reaps. A child's command line and environment, as ``ps`` and ``/proc/PID/cmdline`` and ``environ`` show them, are
# rewritten to the ``python -m MODULE ARGS`` it runs and the request's environment (``_show_as``), so that it is
# named and found as before.

# torch._dynamo: torch.optim imports it at an optimizer's first step (0.9 s of CPU more)
ZYGOTE_PRELOAD = ("torch", "torch.distributed", "torch._dynamo", "executor.running.worker",
                  "executor.measuring.alongside", "executor.measuring.profiler", "executor.measuring.stage_timing")
ZYGOTE_START_TIMEOUT_S = 300   # the zygote imports torch: seconds on a loaded host
_ROOM = 4096                   # bytes of command line and of environment the zygote keeps for its children's
_ROOM_ENV = "ADAPTIS_ZYGOTE_ROOM"


class ZygoteChild:
    """A process the zygote forked: what the launcher uses of ``subprocess.Popen`` (pid, poll, wait, returncode).
    ``pid`` is also its process group's and session's id."""

    def __init__(self, zygote: "Zygote", pid: int, args: list[str]):
        self.pid, self.args, self.returncode = pid, args, None
        self._zygote = zygote

    def poll(self) -> int | None:
        if self.returncode is None:
            self._zygote.collect()
        return self.returncode

    def kill(self) -> None:
        """SIGKILL it, unless it has ended."""
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.01)
        return self.returncode


class Zygote:
    """The launcher's side of a zygote process (``python -m executor.running.processes``)."""

    def __init__(self, cwd: str, env: dict):
        env = dict(env, **{LAUNCHER_PID_ENV: str(os.getpid()), _ROOM_ENV: " " * _ROOM})
        self.process = subprocess.Popen(
            [sys.executable, "-m", "executor.running.processes", "zygote", " " * _ROOM], cwd=cwd, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True, bufsize=0)
        self.owner = os.getpid()
        self._buffer = b""
        self._children: dict[int, ZygoteChild] = {}
        self._exited: dict[int, int] = {}
        self._expect({"ready"}, ZYGOTE_START_TIMEOUT_S)

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.process.poll() is None

    def start(self, module: str, args: list[str], *, cwd: str, env: dict, stderr_path: str) -> ZygoteChild:
        """Fork ``python -m module args`` with ``env`` in ``cwd``, in a session of its own, its stdin and stdout
        /dev/null and its stderr ``stderr_path`` (created or truncated)."""
        request = {"module": module, "args": args, "cwd": cwd, "env": env, "stderr": stderr_path}
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        reply = self._expect({"started", "refused"}, 60)
        if "refused" in reply:
            raise OSError(f"the zygote could not start {module}: {reply['refused']}")
        child = ZygoteChild(self, reply["started"], [sys.executable, "-m", module, *args])
        self._children[child.pid] = child
        if child.pid in self._exited:
            child.returncode = self._exited.pop(child.pid)
        return child

    def collect(self) -> None:
        """Take the exit statuses the zygote has reported so far (without waiting)."""
        while select.select([self.process.stdout], [], [], 0)[0]:
            if not self._read():
                break
        self._messages(None)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait()

    def _read(self) -> bool:
        data = os.read(self.process.stdout.fileno(), 1 << 16)
        if not data:
            return False
        self._buffer += data
        return True

    def _messages(self, wanted: set[str] | None) -> dict | None:
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            message = json.loads(line)
            if "exited" in message:
                pid, code = message["exited"], message["code"]
                if pid in self._children:
                    self._children.pop(pid).returncode = code
                else:
                    self._exited[pid] = code   # (its "started" is being read)
            elif wanted is not None and wanted & message.keys():
                return message
        return None

    def _expect(self, wanted: set[str], timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        while (message := self._messages(wanted)) is None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.process.stdout], [], [], left)[0] or not self._read():
                code = self.process.poll()
                raise OSError(f"the zygote (pid {self.process.pid}) did not answer"
                              + (f": it exited with status {code}" if code is not None else f" within {timeout_s:g} s"))
        return message


_zygotes = threading.local()


def zygote(cwd: str, env: dict) -> Zygote:
    """This thread's zygote, started on first use (and again if it died, or this process is a fork)."""
    current = getattr(_zygotes, "zygote", None)
    if current is None or not current.alive():
        current = _zygotes.zygote = Zygote(cwd, env)
    return current


def _show_as(argv: list[str], env: dict) -> None:
    """Rewrite what ``/proc/self/cmdline`` and ``/proc/self/environ`` show (``ps``, and whoever looks for a rank by
    its RANK) within the room ``exec`` gave this process for them: the bytes from ``arg_start`` to ``arg_end`` and
    from ``env_start`` to ``env_end`` (``/proc/self/stat``), each entry NUL-ended; what does not fit is left out."""
    with open("/proc/self/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    # fields 48 to 51 of proc(5), counted after pid and comm
    areas = ((int(fields[45]), int(fields[46]), argv), (int(fields[47]), int(fields[48]),
                                                        [f"{key}={value}" for key, value in env.items()]))
    with open("/proc/self/mem", "r+b", buffering=0) as memory:
        for start, end, entries in areas:
            shown = b""
            for entry in entries:
                encoded = entry.encode(errors="replace") + b"\0"
                if len(shown) + len(encoded) > end - start:
                    break
                shown += encoded
            memory.seek(start)
            memory.write(shown + b"\0" * (end - start - len(shown)))


def _child(request: dict, zygote_pid: int) -> None:
    """In the forked child: become ``python -m MODULE ARGS`` as the request says, run it, and exit."""
    import runpy
    code = 1
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
        os.closerange(3, 1 << 16)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(request["env"], **{LAUNCHER_PID_ENV: str(zygote_pid)})
        die_with_launcher()   # with the zygote, whatever the module does
        os.chdir(request["cwd"])
        try:
            _show_as([sys.executable, "-m", request["module"], *request["args"]], os.environ)
        except OSError:
            pass   # for ps and /proc only: the process has its arguments and environment either way
        sys.argv = [request["module"], *request["args"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported on the child's stderr, as python -m would
        import traceback
        traceback.print_exc()
    finally:
        exit_rank(code)


def _zygote_main() -> None:
    """The zygote: import what ranks import, say ``ready``, then fork a child per request and report each child's
    exit status; end when the launcher closes stdin (its children then die with it: ``die_with_launcher``)."""
    import importlib
    die_with_launcher()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    protocol = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)   # what an import prints goes to stderr, not into the protocol
    for module in ZYGOTE_PRELOAD:
        importlib.import_module(module)

    def say(message: dict) -> None:
        protocol.write((json.dumps(message) + "\n").encode())

    me = os.getpid()
    say({"ready": me})
    requests, buffer, live = sys.stdin.buffer.raw, b"", set()
    while True:
        # while children live, look for their exits every 20 ms; idle, wait for the next request alone
        readable = select.select([requests], [], [], 0.02 if live else None)[0]
        while live:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            live.discard(pid)
            say({"exited": pid, "code": os.waitstatus_to_exitcode(status)})
        if not readable:
            continue
        data = os.read(requests.fileno(), 1 << 16)
        if not data:
            return
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            request = json.loads(line)
            try:
                pid = os.fork()
            except OSError as error:
                say({"refused": str(error)})
                continue
            if pid == 0:
                _child(request, me)
            live.add(pid)
            say({"started": pid})


if __name__ == "__main__":
    _zygote_main()
