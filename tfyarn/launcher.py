"""One launcher per task (`python -m tfyarn.launcher`), in a YARN container or a local process.

Owns one task's life: reserve a port and register host:port, send heartbeats, wait for
the driver's cluster spec, run the user command as its own direct child with TF_CONFIG,
stop it when the driver, a signal or its parent's death says so, contain everything the
command started (it is the child subreaper, and a watchdog ends the tree if the launcher
itself is SIGKILLed), and publish the exit record. It exits 0 once the record is out:
the driver decides the job's outcome (and skein would end the application at once on a
failed service). Must not decide anything about the job.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from tfyarn import kv as kvmod
from tfyarn import proc
from tfyarn.jobspec import JobSpec
from tfyarn.policy import stderr_excerpt
from tfyarn.settings import Settings
from tfyarn.tfconfig import Task, task_env
from tfyarn.timing import CLUSTER_WAIT_SLACK_S, HEARTBEAT_S, STOP_POLL_S, STOP_WAIT_S, WAKE_S

TAG_VAR = "TFYARN_TASK_TAG"  # marks every process of one launcher's tree, for the watchdog


def log(task: Task, msg: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(f"tfyarn: {task}: {msg}", file=sys.stderr, flush=True)


def reserve_port() -> socket.socket:
    """Bind port 0 and keep the socket open until just before the user process starts,
    so no other task on the host can be handed the same port in between."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("", 0))
    return sock


def shell_argv(command: str, path: str | None = None) -> list[str]:
    """`-c` is one shell command line, run by bash where there is one (bash execs a lone
    simple command, so the user's process is the launcher's direct child)."""
    dirs = (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep)
    bash = next((os.path.join(d, "bash") for d in dirs
                 if d and os.access(os.path.join(d, "bash"), os.X_OK)), None)
    return [bash or "/bin/sh", "-c", command]


def docker_argv(image: str, command: str, cwd: str, env_keys: Sequence[str], name: str,
                job_id: str) -> list[str]:
    """`docker run` for local `-m docker`: host network (TF ports), the task dir mounted
    at the same path, the task's env passed by name, labelled for clean-up."""
    argv = ["docker", "run", "--rm", "--init", "--network", "host", "--name", name,
            "--label", f"tfyarn.job={job_id}"]
    argv += ["-v", f"{cwd}:{cwd}", "-w", cwd]
    for key in env_keys:
        argv += ["-e", key]
    return [*argv, image, "/bin/sh", "-c", command]


@dataclass
class StopFlag:
    """Why the task must stop (None while it may run); set from signals and threads,
    `wake` cuts every wait short when it is set."""

    reason: str | None = None
    parent: int = field(default_factory=os.getppid)
    wake: threading.Event = field(default_factory=threading.Event)

    def set(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self.wake.set()

    def check(self) -> str | None:
        if self.reason is None and os.getppid() != self.parent:
            self.set("the launcher's parent died")
        return self.reason


def install_signal_handlers(flag: StopFlag) -> None:
    def handler(signum: int, _frame: object) -> None:
        flag.set(f"launcher received {signal.Signals(signum).name}")

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, handler)


def _daemon(target: object) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def heartbeat(store: kvmod.KV, task: Task, flag: StopFlag, done: threading.Event) -> None:
    """Bump the task's beat counter every HEARTBEAT_S until `done`; the driver counts a
    task whose counter stops moving as lost."""
    n = 0
    while not done.is_set():
        n += 1
        try:
            store.put(kvmod.beat_key(task), str(n))
        except (kvmod.StoreGone, OSError) as exc:
            flag.set(f"the job's store is gone ({exc}); on YARN the ApplicationMaster ended")
            return
        done.wait(HEARTBEAT_S)


def watch_stop(store: kvmod.KV, flag: StopFlag, done: threading.Event) -> None:
    """Wait for the driver's stop request (skein: a blocking event wait)."""
    while not done.is_set():
        try:
            reason = store.wait(kvmod.STOP, timeout=STOP_WAIT_S, poll_s=STOP_POLL_S)
        except (kvmod.StoreGone, OSError) as exc:
            flag.set(f"the job's store is gone ({exc}); on YARN the ApplicationMaster ended")
            return
        if reason is not None:
            flag.set(f"stopped by the driver: {reason}")
            return


def wait_for_cluster(store: kvmod.KV, flag: StopFlag, deadline: float) -> dict | None:
    """The cluster spec, or None if the job is stopped or the deadline passes first."""
    while time.monotonic() < deadline:
        raw = store.wait(kvmod.CLUSTER, timeout=WAKE_S)
        if raw is not None:
            return json.loads(raw)
        if flag.check():
            return None
    flag.set("the driver never published the cluster spec")
    return None


def supervise(child: subprocess.Popen, flag: StopFlag, grace: float, keep: set[int]) -> int:
    """Wait for the user's process; stop the whole tree when told to. Whatever way it
    ends, nothing the command started outlives this call."""
    _daemon(lambda: (child.wait(), flag.wake.set()))
    while True:
        flag.wake.clear()
        if child.returncode is not None:
            break
        if flag.check():
            proc.stop_tree(grace, keep, tracked={child.pid})
            break
        flag.wake.wait(WAKE_S)
    rc = child.wait()
    proc.stop_tree(min(grace, 1.0), keep)  # what the command left behind (daemons)
    proc.reap(keep)
    return rc


@dataclass(frozen=True)
class LaunchArgs:
    job: JobSpec
    task: Task
    store_url: str
    docker_image: str | None


def parse_args(argv: Sequence[str] | None) -> LaunchArgs:
    p = argparse.ArgumentParser(prog="python -m tfyarn.launcher")
    p.add_argument("--job", required=True, help="path of the job JSON")
    p.add_argument("--task", required=True, help="task name, e.g. worker:1 (never derived)")
    p.add_argument("--kv", required=True, help="dir:/path or skein:")
    p.add_argument("--docker-image", help="local -m docker: run the command in this image")
    ns = p.parse_args(argv)
    with open(ns.job, encoding="utf-8") as f:
        job = JobSpec.from_json(f.read())
    return LaunchArgs(job, Task.parse(ns.task), ns.kv, ns.docker_image)


def user_argv(a: LaunchArgs, env_keys: Sequence[str], job_id: str) -> list[str]:
    if a.docker_image:
        name = f"tfyarn-{job_id}-{a.task.type}-{a.task.index}"
        return docker_argv(a.docker_image, a.job.command, os.getcwd(), env_keys, name, job_id)
    return shell_argv(a.job.command)


@dataclass
class Launcher:
    """One task's launcher: its arguments, store, stop flag and containment tag."""

    args: LaunchArgs
    settings: Settings
    store: kvmod.KV
    flag: StopFlag
    tag: str
    watchdog: int

    def run(self) -> dict:
        """Register, wait for the cluster, run the command; returns the exit record."""
        a = self.args
        sock = reserve_port()
        host = self.settings.advertise_host or socket.getfqdn()
        addr = f"{host}:{sock.getsockname()[1]}"
        self.store.put(kvmod.addr_key(a.task), addr)
        log(a.task, f"registered at {addr}")
        record: dict = {"host": host, "addr": addr, "code": None, "stopped": False, "tail": []}
        deadline = time.monotonic() + a.job.register_timeout_s + CLUSTER_WAIT_SLACK_S
        cluster = wait_for_cluster(self.store, self.flag, deadline)
        sock.close()
        if cluster is None:
            return {**record, "stopped": True, "reason": self.flag.reason}
        return {**record, **self._run_command(cluster)}

    def _run_command(self, cluster: dict) -> dict:
        a = self.args
        job_id = self.settings.job_id or "unknown"
        extra = task_env(cluster, a.task, job_id)
        env = {**os.environ, **dict(a.job.env), **extra, TAG_VAR: self.tag}
        child = proc.start(user_argv(a, [*dict(a.job.env), *extra], job_id), env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           parent_death=signal.SIGKILL)
        self.store.put(kvmod.start_key(a.task), json.dumps({"pid": child.pid,
                                                            "time": time.time()}))
        assert child.stdout is not None and child.stderr is not None
        out = proc.LinePump(child.stdout, getattr(sys.stdout, "buffer", None))  # None: closed
        err = proc.LinePump(child.stderr, getattr(sys.stderr, "buffer", None))
        rc = supervise(child, self.flag, a.job.stop_grace_s, {self.watchdog})
        out.join(timeout=2.0)
        err.join(timeout=2.0)
        return {"code": rc, "stopped": self.flag.reason is not None, "reason": self.flag.reason,
                "tail": list(stderr_excerpt(list(err.tail)))}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    tag = os.urandom(12).hex()
    watchdog = proc.start_watchdog(TAG_VAR, tag)  # before any thread exists
    proc.set_subreaper()
    flag = StopFlag()
    install_signal_handlers(flag)
    settings = Settings.from_environ()
    store = kvmod.open_kv(args.store_url)
    done = threading.Event()
    launcher = Launcher(args, settings, store, flag, tag, watchdog)
    try:
        _daemon(lambda: heartbeat(store, args.task, flag, done))
        _daemon(lambda: watch_stop(store, flag, done))
        record = launcher.run()
    except Exception as exc:  # a broken launcher must still tell the driver why
        proc.stop_tree(0.0, {watchdog})
        record = {"code": 1, "stopped": False, "tail": [f"tfyarn launcher error: {exc!r}"]}
        log(args.task, f"launcher error: {exc!r}")
    done.set()
    record["time"] = time.time()
    try:
        store.put(kvmod.exit_key(args.task), json.dumps(record))
    except (kvmod.StoreGone, OSError) as exc:
        log(args.task, f"could not report the exit ({exc}); the driver will see it as lost")
    log(args.task, f"exit code {record['code']}" + (" (stopped)" if record["stopped"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
