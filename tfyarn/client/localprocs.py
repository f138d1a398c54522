"""Local mode's processes: starting the driver, the launchers and TensorBoard, watching
them end, and ending them (an orderly stop, then kills until nothing of the job is left).

Owns the client's process bookkeeping (`Procs`), the fork server the launchers come
from, the wake-ups of the event loop (`Wake`: a process ended, the store changed), and
the sweep of everything carrying the job's id. Must not decide the job's outcome (the
driver does) nor print the job's progress (`local`).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO

from tfyarn.client.interrupts import Interrupts
from tfyarn.client.jobdir import JobDir
from tfyarn.client.terminal import TerminalView
from tfyarn.core.errors import EnvironmentMissing
from tfyarn.core.jobspec import Container, JobSpec
from tfyarn.core.policy import signal_of
from tfyarn.core.records import TaskEnd
from tfyarn.core.settings import LAUNCHER_TASKS, Settings
from tfyarn.core.timing import (
    REAP_WAIT_S,
    TERMINAL_TAIL_S,
)
from tfyarn.protocol import kv as kvmod
from tfyarn.runtime import docker as dockerrun
from tfyarn.system import forks, inotify, spawn, tree

Process = subprocess.Popen | forks.Child | forks.Forked  # forked: the driver, the launchers


# ---------------------------------------------------------------- processes


@dataclass
class Procs:
    """What this client started: the driver, the fork server and the launchers it forked
    (by container), the log view."""

    jd: JobDir
    follower: TerminalView | None = None  # started once nothing more is forked from here
    driver: forks.Child | None = None
    launchers: dict[Container, Process] = field(default_factory=dict)
    forks: forks.ForkServer | None = None  # every gang's launchers
    ended: set[int] = field(default_factory=set)  # launchers whose end was handled
    gang: int = 0  # the gang `launchers` belong to
    attempt: int = 0  # ... and its attempt (locally always the same number)
    tensorboard: subprocess.Popen | None = None  # the side task, with -enable_tensorboard
    docker: list[str] = field(default_factory=list)  # -m docker: the launchers' options
    per_launcher: int = LAUNCHER_TASKS  # the most tasks one launcher serves

    def all(self) -> list[Process]:
        return unique(p for p in (self.driver, self.tensorboard, *self.launchers.values(),
                                  self.forks.proc if self.forks else None) if p is not None)

    def show(self, path: str, prefix: str) -> None:
        if self.follower is not None:
            self.follower.add(path, prefix)

    def spawn(self, label: str, prefix: str | None, argv: list[str], cwd: str,
              env: dict[str, str]) -> subprocess.Popen:
        """One process in its own session (the terminal's Ctrl-C and hang-up reach only
        the client), logging to its own file, told by SIGTERM if the client dies; its
        lines are shown on the terminal after `prefix` (None: only in its file)."""
        path = self.jd.log_path(label)
        with open(path, "ab") as log:
            p = spawn.start(argv, env, cwd=cwd, stdout=log, stderr=log, new_session=True,
                           parent_death=signal.SIGTERM)
        if prefix is not None:
            self.show(path, prefix)
        return p


def base_env(settings: Settings, job_id: str, path_prefix: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(TFYARN_JOB_ID=job_id, TFYARN_ADVERTISE_HOST="127.0.0.1",
               PATH=path_prefix + os.pathsep + settings.path)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def start_all(spec: JobSpec, procs: Procs, env: dict[str, str], interrupts: Interrupts,
              gpus: dict[str, str], terminal: IO[bytes] | None) -> None:
    """The driver and the launchers' fork server, forked while this process has no other
    thread (each a millisecond: no interpreter start, nothing imported twice); then the
    log view's thread, TensorBoard, and attempt 0's launchers."""
    jd, py = procs.jd, sys.executable
    argv = ["--job", jd.job_json, "--kv", jd.kv_url, "--logs", os.path.join(jd.root, "logs")]
    try:
        procs.driver = forks.fork_call(lambda: _driver(argv), jd.root, env,
                                      log=jd.log_path("driver"), name="tfyarn-driver")
        procs.forks = forks.ForkServer(_launcher, env, jd.root)
    except OSError as exc:
        raise EnvironmentMissing(f"could not start tfyarn's driver: {exc}; raise the limits "
                                 "(ulimit -n, ulimit -u)") from None
    procs.follower = TerminalView(terminal, TERMINAL_TAIL_S).start()
    procs.show(jd.log_path("driver"), "")
    try:
        if spec.tensorboard_dir:
            procs.tensorboard = procs.spawn(  # its chatter stays in logs/tensorboard.log
                "tensorboard", None,
                [py, "-m", "tfyarn.runtime.tensorboard", "--job", jd.job_json, "--kv", jd.kv_url,
                 "--python", job_python(env)], jd.root, env)
    except OSError as exc:
        raise EnvironmentMissing(f"could not start tfyarn's driver: {exc}; raise the limits "
                                 "(ulimit -n, ulimit -u)") from None
    start_launchers(spec, procs, env, interrupts, gpus)


def _driver(argv: list[str]) -> int:
    """The forked driver's life (its import happens in it, not in the client)."""
    from tfyarn.runtime import driver

    return driver.main(argv)


def _launcher() -> Callable[[list[str]], int]:
    """The launchers' entry point, imported and warmed in the fork server."""
    from tfyarn.runtime import launcher

    launcher.warm()
    return launcher.main


def job_python(env: Mapping[str, str]) -> str:
    """The `python` the tasks' command lines get: first on the job's PATH."""
    return shutil.which("python", path=env.get("PATH")) or \
        shutil.which("python3", path=env.get("PATH")) or sys.executable


def check_tensorboard(spec: JobSpec, env: Mapping[str, str]) -> None:
    """-enable_tensorboard: the job's python must have tensorboard, said before anything
    starts (an image, -m docker, is not looked into)."""
    if not spec.tensorboard_dir or spec.runtime.mode == "docker":
        return
    python = job_python(env)
    found = subprocess.run([python, "-c", "import importlib.util as u, sys; "
                            "sys.exit(u.find_spec('tensorboard') is None)"],
                           env=dict(env), capture_output=True).returncode == 0
    if not found:
        from tfyarn.runtime import tensorboard

        raise EnvironmentMissing(f"-enable_tensorboard: {python} has no tensorboard; "
                                 f"{tensorboard.MISSING_HINT}, or drop -enable_tensorboard")


def start_launchers(spec: JobSpec, procs: Procs, env: dict[str, str], interrupts: Interrupts,
                    gpus: dict[str, str]) -> None:
    """The launchers of the gang in `procs.gang`, forked by the job's fork server (all
    asked for at once; none waits for another's start); stops asking as soon as a signal
    came. Each serves up to `procs.per_launcher` tasks' containers (#46: a process per
    container cost 14 ms of CPU a task), each container with its own dir and log file; with -m
    docker one container each (its watchdog removes its docker containers). A one-task
    container's lines are prefixed `[task] ` here; a container of several has each
    process's lines prefixed by its launcher. A restarted container appends to the same
    log file."""
    jd, forks = procs.jd, procs.forks
    assert forks is not None
    each = ["--job", jd.job_json, "--kv", jd.kv_url, "--attempt", str(procs.attempt),
            "--gang", str(procs.gang)]
    procs.launchers = {}
    for group in hosting(spec.containers(), 1 if procs.docker else procs.per_launcher,
                         open_files_limit()):
        if interrupts.count:
            break
        if procs.docker:
            # -m docker: a task's container is the docker daemon's child, which only a
            # watchdog outliving a SIGKILLed el_submit and launcher can remove
            c = group[0]
            argv = [*each, "--tasks", ",".join(str(t) for t in c.tasks),
                    "--gpus", gpus[c.name], *procs.docker]
        else:
            argv = [*each, "--no-watchdog"]
            for c in group:
                argv += ["--container", ",".join(str(t) for t in c.tasks), jd.task_dir(c),
                         jd.log_path(c.name), gpus[c.name]]
        child = forks.spawn(argv, jd.task_dir(group[0]), jd.log_path(group[0].name),
                            name="tfyarn-launcher")
        for c in group:
            procs.launchers[c] = child
            procs.show(jd.log_path(c.name), f"[{c.tasks[0]}] " if len(c.tasks) == 1 else "")
    for child in unique(procs.launchers.values()):
        child.started()


def hosting(containers: Sequence[Container], most: int,
            files: int) -> list[list[Container]]:
    """The containers in launcher-sized groups, in order: at most `most` tasks a group
    (one container at least), and within half the open-files limit each launcher has
    (a container's log twice, four descriptors a task: its port, then its output
    pipes and the pidfd of its end)."""
    groups: list[list[Container]] = []
    tasks = fds = 0
    for c in containers:
        need = 2 + 4 * len(c.tasks)
        if not groups or tasks + len(c.tasks) > most or fds + need > files // 2:
            groups.append([])
            tasks = fds = 0
        groups[-1].append(c)
        tasks, fds = tasks + len(c.tasks), fds + need
    return groups


def open_files_limit() -> int:
    """The open-files limit the launchers inherit (this process's soft limit)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def unique(procs: Iterable[Process]) -> list[Process]:
    """Each process once (a launcher serves several containers)."""
    return list({id(p): p for p in procs}.values())


def end_launchers(launchers: Mapping[Container, Process], job_id: str, gang: int,
                  timeout: float, docker: bool) -> None:
    """An earlier gang's launchers: they exit by themselves once they reported; one that
    did not in time is killed with its group, and what its tree left with it."""
    wait_procs(unique(launchers.values()), timeout)
    left = {c: p for c, p in launchers.items() if p.poll() is None}
    kill_groups(unique(left.values()))
    for container, p in left.items():
        p.wait()
        end_leftovers(job_id, container, gang, docker)


def end_leftovers(job_id: str, container: Container, gang: int, docker: bool) -> None:
    """What the launcher of `container` started and left running when it died or was
    killed (a daemon that left its group; -m docker: its tasks' containers, the docker
    daemon's children): locally no watchdog forks to do it."""
    from tfyarn.runtime.launcher import TAG_VAR, container_tag  # rarely needed: its import

    tag = container_tag(job_id, container.tasks[0], gang)
    tree.kill_rounds(lambda: tree.tagged(TAG_VAR, f"{tag}.", prefix=True))
    if docker:
        tree.remove_containers(f"label={dockerrun.LABEL_LAUNCHER}={tag}")


class Wake:
    """What the client's loop blocks on instead of polling: a top-level key of the store
    put (inotify), a signal (Python's wakeup fd), a process of the job ending (pidfds).
    Where one is missing, `wait` says "look at everything" (None) at each tick."""

    def __init__(self, store_root: str) -> None:
        self.sel = selectors.DefaultSelector()
        self.watch = inotify.DirWatch.open()
        if self.watch is not None and self.watch.add(store_root, inotify.MOVED_TO):
            self.sel.register(self.watch.fd, selectors.EVENT_READ, "store")
        self.sig_r, self.sig_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.old_wakeup = signal.set_wakeup_fd(self.sig_w, warn_on_full_buffer=False)
        self.sel.register(self.sig_r, selectors.EVENT_READ, "signal")
        self.old_chld = signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select
        self.pidfds: dict[int, Process] = {}
        self.blind = False  # no pidfds here: every wake looks at every process

    def close(self) -> None:
        signal.set_wakeup_fd(self.old_wakeup)
        signal.signal(signal.SIGCHLD, self.old_chld)
        for fd in [*self.pidfds, self.sig_r, self.sig_w]:
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.watch is not None:
            self.watch.close()
        self.sel.close()

    def release(self) -> None:
        if self.watch is not None:
            self.watch.release()

    def add(self, procs: Iterable[Process]) -> None:
        for p in unique(procs):
            try:
                fd = os.pidfd_open(p.pid)
            except (OSError, AttributeError):  # too old a kernel, or out of descriptors
                self.blind = True
                continue
            self.pidfds[fd] = p
            self.sel.register(fd, selectors.EVENT_READ, "pid")

    def wait(self, timeout: float) -> list[Process] | None:
        """Block until something happened or `timeout`; the processes that ended (None:
        unknown, look at all)."""
        ended = []
        for key, _ in self.sel.select(timeout):
            if key.data == "pid":
                self.sel.unregister(key.fd)
                os.close(key.fd)
                p = self.pidfds.pop(key.fd)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=REAP_WAIT_S)  # a forked one's code comes from its server
                ended.append(p)
            elif key.data == "signal":
                with contextlib.suppress(OSError):
                    os.read(self.sig_r, 4096)
            elif self.watch is not None:
                self.watch.drain()
        return None if self.blind else ended


# ---------------------------------------------------------------- teardown


def job_pids(job_id: str) -> list[int]:
    """Every process whose environment carries this job's id: the whole tree, however deep."""
    return tree.tagged("TFYARN_JOB_ID", job_id)


def kill_groups(procs: Iterable[Process]) -> None:
    """SIGKILL the process group of each process we started (each leads its own)."""
    for p in procs:
        if p.pid <= 1:  # a fork that never happened
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)


def kill_all(procs: Iterable[Process], job_id: str, docker: bool) -> None:
    """SIGKILL every process group we started, then anything else that carries the job id."""
    procs = list(procs)
    kill_groups(procs)
    tree.kill_rounds(lambda: job_pids(job_id))
    for p in procs:
        p.wait()
    if docker:
        tree.remove_containers(f"label={dockerrun.LABEL_JOB}={job_id}")




def wait_procs(procs: Iterable[Process], timeout: float,
               cut: Callable[[], bool] = lambda: False) -> bool:
    """Wait (bounded) for processes to end by themselves; `cut` ends the wait early."""
    deadline = time.monotonic() + timeout
    for p in procs:
        while p.poll() is None:
            if cut() or time.monotonic() > deadline:
                return False
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=TERMINAL_TAIL_S)
    return True


def reported(procs: Procs) -> list[Process]:
    """Launchers that published their exit record, so are about to exit by themselves;
    the others (frozen, or never told) are killed without waiting."""
    store = kvmod.Scoped(kvmod.open_kv(procs.jd.kv_url), procs.gang)
    silent = {id(p) for c, p in procs.launchers.items()
              if any(store.get(kvmod.exit_key(t)) is None for t in c.tasks)}
    return [p for p in unique(procs.launchers.values()) if id(p) not in silent]


def describe_rc(p: Process) -> str:
    sig = signal_of(p.poll())
    return f"killed by {sig.name}" if sig is not None else f"exit code {p.returncode}"


def report_dead_launchers(procs: Procs, store: kvmod.KV, job_id: str,
                          ended: Iterable[Process] | None) -> None:
    """A launcher process that ended without an exit record died (SIGKILL, OOM killer):
    tell the driver now rather than after the heartbeat timeout, and end what it left
    running (launchers fork no watchdog locally). `ended`: the processes that ended
    (None: not known, look at every launcher). Each ending is handled once."""
    ended = None if ended is None else {p.pid for p in ended}
    handled = set()  # a launcher serving several containers: each of them, then it
    for container, p in procs.launchers.items():
        if (ended is not None and p.pid not in ended) or p.pid in procs.ended \
                or p.poll() is None:
            continue
        handled.add(p.pid)
        if p.returncode != 0:
            end_leftovers(job_id, container, procs.gang, bool(procs.docker))
        for task in container.tasks:
            if store.get(kvmod.exit_key(task)) is None and store.get(kvmod.lost_key(task)) is None:
                store.put(kvmod.lost_key(task), TaskEnd(
                    None, f"its launcher process died ({describe_rc(p)}) before reporting",
                    lost=True, time=time.time()).to_json())
    procs.ended |= handled
