"""A process's tree: finding, signalling and ending every descendant.

Owns: descendants through /proc (the children files, or one scan of the table), stop
rounds (SIGTERM, grace, SIGKILL until nothing is left), processes tagged by an
environment variable (how a tree is found once its supervisor is gone), the watchdog
that ends a SIGKILLed supervisor's tree, the docker containers a tree started, and when a
process started.
Stdlib only, on purpose: the launcher that uses it runs inside users' images and on
nodes' own interpreters, which need nothing installed beyond tfyarn. Must not know about
jobs, tasks or stores. Linux only (/proc).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable, Collection, Iterable

from tfyarn.core.timing import KILL_ROUND_S, KILL_ROUNDS
from tfyarn.system.spawn import PR_SET_NAME, WATCHDOG_NAME

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


def proc_state(pid: int) -> str | None:
    """The state letter of `pid` (Z: a zombie), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return None


def started_at(pid: int | None = None) -> float | None:
    """When `pid` (default: this process) started, in epoch seconds to the kernel's tick
    (10 ms): its interpreter's start and imports count, which a time taken in its
    main() would miss. None where /proc does not say."""
    try:
        with open(f"/proc/{pid or 'self'}/stat", "rb") as f:
            ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
        # since boot, as the kernel counts it (/proc/stat's btime is whole seconds)
        ago = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - ago
    except (OSError, IndexError, ValueError):
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
            if pid in exclude:
                continue
            state = proc_state(pid)
            if state is None:
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
        if pid not in keep and proc_state(pid) == "Z":
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

    found = find()
    if not found:  # the usual end: one look, not three (none tagged is left to fork more)
        return
    signal_all(found, signal.SIGTERM)
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
