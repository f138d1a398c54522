"""Process containment, the one place tfyarn spawns, signals, kills and pumps processes.

Owns: starting a child (own session or not, death signal), the child-subreaper flag,
finding every descendant through /proc, stopping a tree (SIGTERM, grace, SIGKILL until
nothing is left), the watchdog that cleans up after a SIGKILLed supervisor, and the
stream pumps that keep draining a child's output when the terminal is gone.
Used by the launcher (in a YARN container or a local process) and by local mode.
Must not know about jobs, tasks or stores. Linux only (prctl, /proc).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import functools
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import IO, NoReturn

from tfyarn.core.policy import cut_line
from tfyarn.core.timing import KILL_ROUND_S, KILL_ROUNDS
from tfyarn.protocol import inotify

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36
WATCHDOG_NAME = b"tfyarn-watchdog"  # what ps -o comm / top show for it
CHUNK = 64 * 1024  # longest piece of one line a pump reads at once
TAIL_KEEP = 200  # lines of a stream kept for the failure message


def _prctl(option: int, arg: int) -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _name(name: str) -> None:
    """What `ps -o comm` and `top` show for this process (its command line stays the fork
    server's)."""
    if name:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)


def set_subreaper() -> bool:
    """Become the child subreaper: descendants orphaned below us (a daemon that setsid'ed
    and double-forked) are re-parented to us instead of init, so we can find and end them."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


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


# ---------------------------------------------------------------- forked Python


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
        while _state(pid) not in (None, "Z") and time.monotonic() < deadline:
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
        _name(how["name"])
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
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
    serve_forks(entry())  # the import behind `entry` runs here, not in the forking process
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


# ---------------------------------------------------------------- the process table


def _children(pid: int) -> list[int] | None:
    """Direct children of `pid` from /proc/<pid>/task/*/children; None where the kernel
    has no such file (CONFIG_PROC_CHILDREN)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out.extend(int(x) for x in f.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended
            return None
        except OSError:
            continue
    return out


def _state(pid: int) -> str | None:
    """The state letter of `pid` (Z: a zombie), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return None


def process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state letter) for every process we can see: only where the
    kernel cannot list a process's children."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        table[int(name)] = (int(fields[1]), fields[0].decode())
    return table


def ancestors(pid: int | None = None) -> list[tuple[int, str]]:
    """(pid, command line) of each process above `pid` (default: this one), parent first,
    as far as this pid namespace shows them."""
    out, pid = [], os.getpid() if pid is None else pid
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                out.append((pid, f.read().replace(b"\0", b" ").decode(errors="replace")))
        except (OSError, IndexError, ValueError):
            break
    return out


def descendants(root: int, exclude: Collection[int] = ()) -> list[int]:
    """Live (non-zombie) descendants of `root`, parents before children, found by walking
    its children: the cost is the tree's, not the machine's process count (hundreds of
    launchers each scanning every process at a task's end was quadratic). An excluded
    process is not descended into."""
    out, todo = [], [root]
    while todo:
        kids = _children(todo.pop(0))
        if kids is None:
            return _descendants_by_table(root, exclude)
        for pid in kids:
            state = _state(pid)
            if pid in exclude or state is None:
                continue
            if state != "Z":
                out.append(pid)
            todo.append(pid)
    return out


def _descendants_by_table(root: int, exclude: Collection[int]) -> list[int]:
    """The same from one scan of the whole table (kernels without children files)."""
    table = process_table()
    children: dict[int, list[int]] = collections.defaultdict(list)
    for pid, (ppid, _) in table.items():
        children[ppid].append(pid)
    out, todo = [], list(children[root])
    while todo:
        pid = todo.pop(0)
        if pid in exclude:
            continue
        if table[pid][1] != "Z":
            out.append(pid)
        todo.extend(children[pid])
    return out


def reap(keep: Collection[int] = ()) -> None:
    """Collect our zombie children except `keep` (Popen objects reap their own: reaping
    them here would lose their exit status)."""
    me = os.getpid()
    kids = _children(me)
    pids = kids if kids is not None else [p for p, (pp, _) in process_table().items() if pp == me]
    for pid in pids:
        if pid not in keep and _state(pid) == "Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def signal_all(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def stop_tree(grace: float, keep: Collection[int] = (), tracked: Collection[int] = ()) -> int:
    """End every descendant of this process but `keep`: SIGTERM, up to `grace` seconds
    for them to go, then SIGKILL until none is left. Returns how many were signalled."""
    me = os.getpid()
    first = descendants(me, keep)
    signal_all(first, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while descendants(me, keep) and time.monotonic() < deadline:
        reap(set(keep) | set(tracked))
        time.sleep(0.05)
    kill_rounds(lambda: descendants(me, keep), lambda: reap(set(keep) | set(tracked)))
    return len(first)


def kill_rounds(find: Callable[[], list[int]], between: Callable[[], None] = lambda: None) -> int:
    """SIGKILL what `find` returns until it returns nothing (a fork may race a sweep)."""
    killed = 0
    for _ in range(KILL_ROUNDS):
        pids = find()
        if not pids:
            break
        signal_all(pids, signal.SIGKILL)
        killed += len(pids)
        between()
        time.sleep(KILL_ROUND_S)
    return killed


# ---------------------------------------------------------------- tagged processes


def tagged(var: str, value: str, prefix: bool = False) -> list[int]:
    """Every live process whose environment has `var=value` (or, with `prefix`, a value
    starting with it): how a tree is found once its supervisor is gone and its members
    were re-parented to init."""
    needle = f"{var}={value}".encode()
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                entries = f.read().split(b"\0")
        except OSError:
            continue
        if needle in entries or (prefix and any(e.startswith(needle) for e in entries)):
            pids.append(int(name))
    return pids


def has_tag(pid: int, var: str, value: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{var}={value}".encode() in f.read().split(b"\0")
    except OSError:
        return False


def stop_tagged(var: str, value: str, grace: float, keep: Collection[int] = ()) -> None:
    """SIGTERM our descendants tagged `var=value`, then SIGKILL what is left after
    `grace` (what one of several processes of a container left behind when it ended; an
    orphan of it is ours too: we are the subreaper)."""
    def find() -> list[int]:
        return [p for p in descendants(os.getpid(), keep) if has_tag(p, var, value)]

    signal_all(find(), signal.SIGTERM)
    deadline = time.monotonic() + grace
    while find() and time.monotonic() < deadline:
        time.sleep(0.05)
    kill_rounds(find)


def start_watchdog(var: str, value: str, containers: str | None = None) -> int:
    """Fork a watchdog in its own session that, once this process is gone however it went
    (SIGKILL included: the kernel closes our end of a pipe), kills every process whose
    `var` starts with `value`, and removes the docker containers that the filter
    `containers` matches (children of the docker daemon, not ours). Call first thing,
    before any thread exists. Returns the watchdog's pid."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the watchdog: outside our process group, so a group kill misses it
        try:
            os.close(w)
            os.setsid()
            with contextlib.suppress(OSError, AttributeError):
                ctypes.CDLL(None).prctl(PR_SET_NAME, ctypes.c_char_p(WATCHDOG_NAME), 0, 0, 0)
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_IGN)
            while os.read(r, 64):
                pass
            n = kill_rounds(lambda: tagged(var, value, prefix=True))
            n += remove_containers(containers) if containers else 0
            if n:
                os.write(2, f"tfyarn: watchdog: killed {n} processes left behind\n".encode())
        finally:
            os._exit(0)
    os.close(r)
    _held.append(w)  # never closed by us: it closes when we die
    return pid


_held: list[int] = []


def remove_containers(match: str, timeout: float = 60.0) -> int:
    """Remove (killing first) every docker container, running or not, that the `docker ps`
    filter `match` selects (`label=K=V`, `name=^N$`); returns how many. A task's container
    is the docker daemon's child, so ending the launcher's tree never ends it: whoever
    ends a tree calls this too."""
    try:
        ids = subprocess.run(["docker", "ps", "-aq", "--filter", match],
                             capture_output=True, text=True, timeout=timeout,
                             check=False).stdout.split()
        if ids:
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, timeout=timeout,
                           check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        os.write(2, f"tfyarn: could not remove docker containers {match}: {exc}\n".encode())
        return 0
    return len(ids)


# ---------------------------------------------------------------- output


class Sink:
    """A stream written to until it fails (a closed terminal, `| head`): then dropped,
    so the writer goes on (draining a child, following files) instead of dying."""

    def __init__(self, out: IO[bytes] | None) -> None:
        self.out = out

    def write(self, data: bytes) -> None:
        if self.out is None or not data:
            return
        try:
            self.out.write(data)
            self.out.flush()
        except (OSError, ValueError):
            self.out = None


class LinePump:
    """Copies a child's output stream line by line into `sink`, keeping its last lines.

    The stream is always drained to its end, so the child never blocks on a full pipe:
    a sink that fails (a closed terminal, `| head`) is dropped, not the stream. A last
    line without a newline gets one, so the next writer starts a line of its own.
    """

    def __init__(self, stream: IO[bytes], sink: IO[bytes] | None, keep: int = TAIL_KEEP,
                 prefix: bytes = b"", notice: Callable[[str], bool] | None = None) -> None:
        self.stream = stream
        self.sink = Sink(sink)
        self.prefix = prefix  # each line's, when several processes share one log
        self.tail: collections.deque[str] = collections.deque(maxlen=keep)
        self.notice = notice  # a line worth knowing of, however far from the tail
        self.noticed = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        partial = False
        for chunk in iter(lambda: self.stream.readline(CHUNK), b""):
            self.sink.write(chunk if partial else self.prefix + chunk)
            if not partial:
                line = chunk.decode("utf-8", "replace")
                self.tail.append(cut_line(line))
                if self.notice is not None and not self.noticed:
                    self.noticed = self.notice(line)
            partial = not chunk.endswith(b"\n")
        if partial:
            self.sink.write(b"\n")
        self.stream.close()

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)


class Follower:
    """Follows growing log files and copies their complete lines, prefixed, to `out`.

    Local mode's terminal view: every process writes its own log file (a file never
    blocks a writer, and it outlives the client), and this thread shows them. It reads a
    file when inotify says it grew (at most every `interval`), so hundreds of quiet logs
    cost nothing; without inotify it looks at every file every `interval`. If `out`
    fails, showing stops; the files are untouched.
    """

    def __init__(self, out: IO[bytes] | None, interval: float) -> None:
        self.out = Sink(out)
        self.interval = interval
        self.files: dict[str, tuple[str, bytes]] = {}  # path -> (prefix, partial line)
        self.offsets: dict[str, int] = {}
        self.lock = threading.Lock()
        self.watch = inotify.Watcher.open()
        self.watched: set[str] = set()
        self.stop_r, self.stop_w = os.pipe()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def add(self, path: str, prefix: str) -> None:
        """Follow `path` (again: a no-op, so a restarted process can append to its log)."""
        with self.lock:
            if path in self.files:
                return
            self.files[path] = (prefix, b"")
            self.offsets.setdefault(path, 0)
            folder = os.path.dirname(path)
            if self.watch is not None and folder not in self.watched:
                if not self.watch.add(folder, inotify.MODIFY | inotify.CLOSE_WRITE):
                    self.watch.close()
                    self.watch = None
                self.watched.add(folder)
        self._read({path})  # what it has already

    def start(self) -> Follower:
        self.thread.start()
        return self

    def poll(self, final: bool = False) -> None:
        """Show what every file has new (at the end: its last partial line too)."""
        with self.lock:
            paths = set(self.files)
        self._read(paths, final)

    def _read(self, paths: set[str], final: bool = False) -> None:
        with self.lock:
            for path in paths & set(self.files):
                prefix, partial = self.files[path]
                data = partial + self._read_new(path)
                *lines, rest = data.split(b"\n")
                if final and rest:
                    lines, rest = [*lines, rest], b""
                self.out.write(b"".join(prefix.encode() + line + b"\n" for line in lines))
                self.files[path] = (prefix, rest)

    def _read_new(self, path: str) -> bytes:
        try:
            if os.path.getsize(path) <= self.offsets[path]:
                return b""
            with open(path, "rb") as f:
                f.seek(self.offsets[path])
                data = f.read()
        except OSError:
            return b""
        self.offsets[path] += len(data)
        return data

    def _stopped(self, timeout: float | None) -> bool:
        ready, _, _ = select.select([self.stop_r], [], [], timeout)
        return bool(ready)

    def _run(self) -> None:
        while True:
            watch = self.watch
            if watch is None:
                if self._stopped(self.interval):
                    return
                self.poll()
                continue
            ready, _, _ = select.select([self.stop_r, watch.fd], [], [])
            if self.stop_r in ready:
                return
            changed = watch.drain()
            self._read(set(self.files) if changed is None else
                       {os.path.join(d, n) for d, n in changed})
            if self._stopped(self.interval):  # at most every `interval`
                return

    def release(self) -> None:
        """No more events wanted (the job is over): see inotify.Watcher.release."""
        if self.watch is not None:
            self.watch.release()

    def stop(self) -> None:
        os.write(self.stop_w, b"!")
        if self.thread.is_alive():
            self.thread.join(timeout=2.0)
        self.poll(final=True)
        if self.watch is not None:
            self.watch.close()
