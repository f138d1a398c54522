"""Starting a process: the one place tfyarn execs a child.

Owns: `start` (Popen with no Python between fork and exec: the death signal is set by
setpriv or a fresh interpreter, never a preexec_fn), the child-subreaper flag, and the
process name `ps` shows. Must not know about jobs, tasks or stores. Linux only (prctl).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import IO

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36
WATCHDOG_NAME = b"tfyarn-watchdog"  # what ps -o comm / top show for it


def prctl(option: int, arg: int) -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def set_name(name: str) -> None:
    """What `ps -o comm` and `top` show for this process (its command line stays the fork
    server's)."""
    if name:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)


def set_subreaper() -> bool:
    """Become the child subreaper: descendants orphaned below us (a daemon that setsid'ed
    and double-forked) are re-parented to us instead of init, so we can find and end them."""
    return prctl(PR_SET_CHILD_SUBREAPER, 1)


# Run by a fresh interpreter (exec'd, never forked Python) where setpriv lacks --pdeathsig:
# set the death signal, give up if the parent already died, exec the command.
_DEATH_WRAPPER = (
    "import ctypes, os, sys\n"
    "sig, parent = int(sys.argv[1]), int(sys.argv[2])\n"
    "ctypes.CDLL(None).prctl(1, sig, 0, 0, 0)\n"
    "os.getppid() == parent or os._exit(128 + sig)\n"
    "os.execvp(sys.argv[3], sys.argv[3:])\n")


@functools.lru_cache(maxsize=1)
def _setpriv() -> str | None:
    """util-linux's setpriv if it has --pdeathsig (2.33 and later), else None."""
    path = shutil.which("setpriv")
    if path is None:
        return None
    helped = subprocess.run([path, "--help"], capture_output=True, text=True, check=False)
    return path if "--pdeathsig" in helped.stdout else None


def warm() -> None:
    """Work out once, in a fork server, what its children would each look up."""
    _setpriv()


def with_death_signal(argv: Sequence[str], sig: int) -> list[str]:
    """`argv` started so that it gets `sig` when its parent (the thread that spawns it)
    dies. Not with a preexec_fn: that runs Python, and the fork handlers of gRPC (skein's
    channels in the launcher and driver), in the forked child, which aborted ~3.5% of
    containers on YARN (gRPC's epoll thread restarted in the child, then its descriptors
    closed). setpriv, or a fresh interpreter, sets the signal after exec instead."""
    setpriv = _setpriv()
    if setpriv:
        return [setpriv, "--pdeathsig", signal.Signals(sig).name.removeprefix("SIG"), "--",
                *argv]
    return [sys.executable, "-S", "-c", _DEATH_WRAPPER, str(int(sig)), str(os.getpid()), *argv]


def start(argv: Sequence[str], env: Mapping[str, str], *, cwd: str | None = None,
          stdout: IO | int | None = None, stderr: IO | int | None = None,
          stdin: IO | int | None = subprocess.DEVNULL,
          new_session: bool = False, parent_death: int | None = None) -> subprocess.Popen:
    """Start one child (no Python runs between fork and exec). `new_session` keeps the
    terminal's Ctrl-C and hang-up away from it; `parent_death` is the signal it gets if we
    die (call from the main thread)."""
    if parent_death is not None:
        argv = with_death_signal(argv, parent_death)
    return subprocess.Popen(list(argv), env=dict(env), cwd=cwd, stdin=stdin,
                            stdout=stdout, stderr=stderr, start_new_session=new_session)
