"""The life of a process the executor starts on this host: it dies with its launcher, and a finished rank exits
without interpreter finalization.

The launcher (``executor.running.launch``) and the measuring processes (``executor.measuring.alongside``,
``executor.measuring.linkprobe``) start fresh ``python -m`` subprocesses and name themselves in
``LAUNCHER_PID_ENV``; each child calls ``die_with_launcher`` first thing.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

LAUNCHER_PID_ENV = "ADAPTIS_LAUNCHER_PID"
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
