"""One launcher per task (`python -m tfyarn.launcher`), in a YARN container or a local process.

It reserves a port, publishes host:port, waits for the driver's cluster spec, runs the
user command with TF_CONFIG in its own process group, stops that group on request
(SIGTERM, then SIGKILL: MWMS workers ignore SIGTERM), and publishes the exit code with
the stderr tail. It exits 0 once the result is published: the driver, not YARN's view
of a container's exit code, decides what the job's outcome is.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tfyarn import kv as kvmod
from tfyarn.jobspec import JobSpec
from tfyarn.settings import Settings
from tfyarn.tfconfig import Task, task_env

STDERR_TAIL_LINES = 20
LINGER_S = 60.0  # at most this long, wait to be released by the driver before exiting
PR_SET_PDEATHSIG = 1


def log(task: Task, msg: str) -> None:
    print(f"tfyarn: {task}: {msg}", file=sys.stderr, flush=True)


def reserve_port() -> socket.socket:
    """Bind port 0 and keep the socket open until just before the user process starts,
    so no other task on the host can be handed the same port in between."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("", 0))
    return sock


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
    """Why the user process must stop (None while it may run); set from signals too."""

    reason: str | None = None
    parent: int = field(default_factory=os.getppid)

    def check(self, store: kvmod.KV) -> str | None:
        if self.reason is None and os.getppid() != self.parent:
            self.reason = "the launcher's parent died"
        if self.reason is None:
            stop = store.get(kvmod.STOP)
            self.reason = None if stop is None else f"stopped by the driver: {stop}"
        return self.reason


def install_signal_handlers(flag: StopFlag) -> None:
    def handler(signum: int, _frame: object) -> None:
        flag.reason = f"launcher received {signal.Signals(signum).name}"

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, handler)


def wait_for_cluster(store: kvmod.KV, flag: StopFlag, deadline: float) -> dict | None:
    """The cluster spec, or None if the job is stopped or the deadline passes first."""
    while time.monotonic() < deadline:
        raw = store.get(kvmod.CLUSTER)
        if raw is not None:
            return json.loads(raw)
        if flag.check(store):
            return None
        time.sleep(store.poll_s)
    flag.reason = "the driver never published the cluster spec"
    return None


def _die_with_parent() -> None:
    """In the child: get SIGKILL if the launcher itself is SIGKILLed (Linux only)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def start_user_process(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        list(argv),
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )


def pump_stderr(proc: subprocess.Popen, tail: collections.deque) -> threading.Thread:
    """Copy the child's stderr through (container log / terminal) and keep its last lines."""

    def run() -> None:
        assert proc.stderr is not None
        for raw in iter(proc.stderr.readline, b""):
            sys.stderr.buffer.write(raw)
            sys.stderr.flush()
            tail.append(raw.decode("utf-8", "replace").rstrip("\n"))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop_group(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM the whole group, give it `grace` seconds, then SIGKILL what is left."""
    pgid = proc.pid
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            proc.poll()
            if not group_alive(pgid):
                return
            time.sleep(0.05)


def supervise(proc: subprocess.Popen, store: kvmod.KV, flag: StopFlag, grace: float) -> int:
    """Wait for the user process; stop it when the job or a signal says so."""
    while proc.poll() is None:
        if flag.check(store):
            stop_group(proc, grace)
            break
        time.sleep(min(store.poll_s, 0.1))
    rc = proc.wait()
    with contextlib.suppress(ProcessLookupError):  # what the command left in its group dies
        os.killpg(proc.pid, signal.SIGKILL)
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
    return ["/bin/sh", "-c", a.job.command]


def run_task(a: LaunchArgs, settings: Settings, flag: StopFlag, store: kvmod.KV) -> dict:
    """Register, wait for the cluster, run the command; returns the exit record."""
    sock = reserve_port()
    host = settings.advertise_host or socket.getfqdn()
    addr = f"{host}:{sock.getsockname()[1]}"
    store.put(kvmod.addr_key(a.task), addr)
    log(a.task, f"registered at {addr}")
    record: dict = {"host": host, "addr": addr, "code": None, "stopped": False, "tail": []}
    cluster = wait_for_cluster(store, flag, time.monotonic() + a.job.register_timeout_s + 60)
    sock.close()
    if cluster is None:
        return {**record, "stopped": True, "reason": flag.reason}
    job_id = settings.job_id or "unknown"
    extra = task_env(cluster, a.task, job_id)
    env = {**os.environ, **dict(a.job.env), **extra}
    tail: collections.deque = collections.deque(maxlen=STDERR_TAIL_LINES)
    proc = start_user_process(user_argv(a, [*dict(a.job.env), *extra], job_id), env)
    store.put(kvmod.start_key(a.task), json.dumps({"pid": proc.pid, "time": time.time()}))
    pump = pump_stderr(proc, tail)
    rc = supervise(proc, store, flag, a.job.stop_grace_s)
    pump.join(timeout=2.0)
    return {**record, "code": rc, "stopped": flag.reason is not None, "reason": flag.reason,
            "tail": list(tail)}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    flag = StopFlag()
    install_signal_handlers(flag)
    settings = Settings.from_environ()
    store = kvmod.open_kv(args.store_url)
    try:
        record = run_task(args, settings, flag, store)
    except Exception as exc:  # a broken launcher must still tell the driver why
        record = {"code": 1, "stopped": False, "tail": [f"tfyarn launcher error: {exc!r}"]}
        log(args.task, f"launcher error: {exc!r}")
    record["time"] = time.time()
    store.put(kvmod.exit_key(args.task), json.dumps(record))
    log(args.task, f"exit code {record['code']}" + (" (stopped)" if record["stopped"] else ""))
    # skein ends an application as "succeeded" once every service container has exited;
    # staying until the driver has set the final status (its shutdown ends this container)
    # keeps the driver's verdict, and its diagnostics, the application's final status.
    store.wait(kvmod.RELEASE, timeout=LINGER_S)
    return 0


if __name__ == "__main__":
    sys.exit(main())
