"""Forked Python: a process started as a fork of this one, and the fork server.

Owns: `fork_call` (one child running a function, a millisecond instead of a new
interpreter), `ForkServer` (a process that forks many children of one entry point, for
local mode's launchers) and the children's bookkeeping (`Child`, `Forked`). Only from a
process with no other thread and no gRPC channel. Must not know about jobs or stores.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import NoReturn

from tfyarn.system.spawn import PR_SET_PDEATHSIG, prctl, set_name, warm
from tfyarn.system.tree import proc_state


class Child:
    """A process `fork_call` forked from this one, with the parts of Popen callers use."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(ChildProcessError):
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.poll() is None and timeout is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        elif self.returncode is None:
            _ended_within(self.pid, timeout or 0.0)
            if self.poll() is None:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
        assert self.returncode is not None
        return self.returncode


def _ended_within(pid: int, timeout: float) -> None:
    """Block until `pid` ended or `timeout` passed (a pidfd; short naps where the kernel
    has none)."""
    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        deadline = time.monotonic() + timeout
        while proc_state(pid) not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(min(0.01, max(0.0, deadline - time.monotonic())))
        return
    try:
        select.select([fd], [], [], timeout)
    finally:
        os.close(fd)


def fork_call(entry: Callable[[], int], cwd: str, env: Mapping[str, str] | None, *,
              log: str | None = None, stdin: int | None = None, stdout: int | None = None,
              close: Collection[int] = (), name: str = "") -> Child:
    """Run `entry()` in a fork of this process: no interpreter start and no import of
    what is already imported (a millisecond instead of ~60 ms of CPU on the job's
    critical path). The child leads a new session, gets SIGTERM if we die, runs in `cwd`
    with `env`, reads `stdin` (default /dev/null), writes `stdout` (default `log`) and
    stderr to `log` (default ours), closes `close` (our ends of its pipes), is named
    `name` in ps, and exits with entry's code. Only from a process with no other thread
    and no gRPC channel (locally, before the client's threads start)."""
    _flush()
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644) \
        if log else None
    parent = os.getpid()
    try:
        pid = os.fork()
    except OSError:
        if out is not None:
            os.close(out)
        raise
    if pid:
        if out is not None:
            os.close(out)
        return Child(pid)
    for fd in close:
        os.close(fd)
    _child(entry, parent, {"cwd": cwd, "env": env, "name": name, "stdin": stdin,
                           "stdout": stdout if stdout is not None else out, "stderr": out})


def _child(entry: Callable[[], int], parent: int, how: Mapping) -> NoReturn:
    """The forked child's whole life: a fresh process's signal dispositions, its own
    session, death signal, descriptors and dir, then `entry`; never returns into the
    parent's code (os._exit, no atexit of the parent's)."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.setsid()
        set_name(how["name"])
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os._exit(128 + signal.SIGTERM)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(how["stdin"] if how["stdin"] is not None else null, 0)
        for fd, to in ((1, how["stdout"]), (2, how["stderr"])):
            if to is not None:
                os.dup2(to, fd)
        for fd in {null, how["stdin"], how["stdout"], how["stderr"]} - {None, 0, 1, 2}:
            os.close(fd)
        os.chdir(how["cwd"])
        if how["env"] is not None:
            os.environ.clear()
            os.environ.update(how["env"])
        code = entry()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - the child's last resort: its log says why
        import traceback

        traceback.print_exc()
    finally:
        _flush()
        os._exit(code)


def _flush() -> None:
    """Python's buffers out before a fork or os._exit (a stream may be closed: None)."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.flush()


# ---------------------------------------------------------------- a fork server


class ForkServer:
    """Starts many Python processes of one entry point cheaply: a server process, forked
    from this one, that imported it once forks a child per request (a millisecond, its
    modules' memory shared copy-on-write) instead of a new interpreter importing
    everything again (~50 ms of CPU each, 11 MiB each; at 256 local launchers, most of a
    job's start-up). Requests are pipelined: `spawn` only writes one line. The children
    are the server's (it reaps them and reports each exit); `Forked` stands for one like
    a Popen does. The server exits once told no more requests come (`close`) and its
    last child has.

    Only for processes with no thread and no gRPC channel at fork time: local mode's
    client before its threads start (on YARN each container starts its own launcher)."""

    def __init__(self, entry: Callable[[], Callable[[list[str]], int]],
                 env: Mapping[str, str], cwd: str) -> None:
        """`entry()` imports and gives the children's entry point (called in the server)."""
        req_r, req_w = os.pipe2(os.O_CLOEXEC)
        rep_r, rep_w = os.pipe2(os.O_CLOEXEC)
        try:
            self.proc = fork_call(lambda: _serve(entry), cwd, env, stdin=req_r,
                                  stdout=rep_w, close=(req_w, rep_r), name="tfyarn-forks")
        except OSError:
            os.close(req_w)
            os.close(rep_r)
            raise
        finally:
            os.close(req_r)
            os.close(rep_w)
        self.pid = self.proc.pid
        self.requests = os.fdopen(req_w, "wb")
        self.fd = rep_r
        os.set_blocking(self.fd, False)
        self.buf = b""
        self.children: dict[int, Forked] = {}
        self.waiting: list[Forked] = []  # spawned, pid not read yet (in request order)
        self.lock = threading.Lock()

    def spawn(self, argv: Sequence[str], cwd: str, log: str, name: str = "") -> Forked:
        """Ask for a child running the entry point with `argv`, in `cwd`, its stdout and
        stderr appended to `log`, in a session of its own, SIGTERMed if the server dies,
        shown by `ps` as `name`."""
        child = Forked(self)
        request = json.dumps({"argv": list(argv), "cwd": cwd, "log": log,
                              "name": name}) + "\n"
        with self.lock:
            try:
                self.requests.write(request.encode())
                self.requests.flush()
            except (OSError, ValueError):  # the server is gone: so is this child
                child.pid, child.returncode = -1, 1
                return child
            self.waiting.append(child)
        return child

    def read(self, until: Callable[[], bool], timeout: float | None = None) -> bool:
        """Read the server's reports (`started PID`, `exited PID CODE`) until `until()`
        holds, or `timeout`, or the server ended (its children are then gone too)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while True:
                *lines, self.buf = self.buf.split(b"\n")
                for line in lines:
                    self._report(line.decode().split())
                if until():
                    return True
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                ready, _, _ = select.select([self.fd], [], [], left)
                if not ready:
                    return False
                try:
                    data = os.read(self.fd, 65536)
                except BlockingIOError:
                    continue
                if not data:  # the server died: its children got SIGTERM
                    self._lost()
                    return until()
                self.buf += data

    def _report(self, words: list[str]) -> None:
        if words[0] == "started":
            child = self.waiting.pop(0)
            child.pid = int(words[1])
            self.children[child.pid] = child
        elif words[0] == "exited" and int(words[1]) in self.children:
            self.children[int(words[1])].returncode = int(words[2])
        elif words[0] == "failed":  # the fork itself failed (no memory, process limit)
            child = self.waiting.pop(0)
            child.pid, child.returncode = -1, 1

    def _lost(self) -> None:
        for child in [*self.children.values(), *self.waiting]:
            if child.returncode is None:
                child.returncode = -signal.SIGTERM
        self.waiting.clear()

    def close(self) -> None:
        """No more requests: the server exits once its last child has (a restarted gang
        gets a new server)."""
        with contextlib.suppress(OSError, ValueError):
            self.requests.close()


class Forked:
    """A child of a ForkServer, with the parts of Popen the client uses."""

    def __init__(self, server: ForkServer) -> None:
        self.server = server
        self.pid = 0  # known once the server said it started
        self.returncode: int | None = None

    def started(self) -> Forked:
        self.server.read(lambda: self.pid != 0)
        return self

    def poll(self) -> int | None:
        if self.returncode is None:
            self.server.read(lambda: self.returncode is not None, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self.server.read(lambda: self.returncode is not None, timeout):
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
        assert self.returncode is not None
        return self.returncode


def _serve(entry: Callable[[], Callable[[list[str]], int]]) -> int:
    warm()
    main = entry()  # the import (and warming) behind `entry` runs here, not in the client
    # Every object so far is shared with the children copy-on-write: kept out of the
    # collector's sweeps, which write to each tracked object's header, so a child's first
    # full collection does not copy every page of what the server imported (#46).
    gc.collect()
    gc.freeze()
    serve_forks(main)
    return 0


def serve_forks(entry: Callable[[list[str]], int]) -> None:
    """The fork server's loop (see ForkServer): requests on stdin, reports on stdout."""
    sig_r, sig_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(sig_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    requests = os.fdopen(0, "rb", buffering=0)
    pending, open_ = b"", True
    live: set[int] = set()
    while open_ or live:
        ready, _, _ = select.select([sig_r, 0] if open_ else [sig_r], [], [])
        if sig_r in ready:
            with contextlib.suppress(OSError):
                os.read(sig_r, 4096)
        _reap(live)
        if 0 in ready:
            data = requests.read(65536)
            open_ = bool(data)
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                _fork_one(json.loads(line), entry, live, (sig_r, sig_w))


def _reap(live: set[int]) -> None:
    while live:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        live.discard(pid)
        os.write(1, f"exited {pid} {os.waitstatus_to_exitcode(status)}\n".encode())


def _fork_one(req: Mapping, entry: Callable[[list[str]], int], live: set[int],
              own: tuple[int, int]) -> None:
    server = os.getpid()
    try:
        log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        pid = os.fork()
    except OSError as exc:
        os.write(1, f"failed {exc.errno}\n".encode())
        return
    if pid:
        os.close(log)
        live.add(pid)
        os.write(1, f"started {pid}\n".encode())
        return
    for fd in own:
        os.close(fd)
    argv = list(req["argv"])
    _child(lambda: entry(argv), server, {"cwd": req["cwd"], "env": None,
                                         "name": req.get("name", ""), "stdin": None,
                                         "stdout": log, "stderr": log})
