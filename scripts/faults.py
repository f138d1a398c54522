#!/usr/bin/env python3
"""Injects each local-mode fault and prints the docs/faults.md table, measured.

For every fault: el_submit's exit code, the seconds from the fault to el_submit's end
(or, when el_submit itself is killed, to the last process of the job gone), and what
survived (read from /proc: every process carrying the job's TFYARN_JOB_ID).
Each job's tasks start a setsid'ed daemon, which is what escapes group kills.
Run: python scripts/faults.py  (about two minutes on 2 cores)
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import proctable  # noqa: E402  (the one process-table reader of the checks)

PY = sys.executable
DAEMON = "setsid sleep 300 & sleep 300"
STUBBORN = "trap '' TERM; setsid sleep 300 & sleep 300"


def job_pids(job: str, needle: str = "") -> list[int]:
    """The job's processes (not launchers' watchdogs) whose command line or name has
    `needle`: those carrying its id, and what local mode forks (the driver, fork server
    and launchers, named `tfyarn-*`), whose working dir is in the job's dir."""
    tag = f"TFYARN_JOB_ID={job}".encode()
    return [p.pid for p in proctable.live() if (tag in p.env or job in p.cwd)
            and (needle in p.cmdline or needle == p.comm) and p.comm != "tfyarn-watchdog"]


def wait_for(pred: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError
        time.sleep(0.05)


def scenario(args: list[str], inject: Callable[[subprocess.Popen, str], None] | None,
             ready: int, tmp: str, shell: str | None = None) -> tuple[str, float, str]:
    """(exit code, seconds from the fault to the end, survivors)."""
    env = {**os.environ, "TMPDIR": tmp}
    begun = time.monotonic()
    argv = ["bash", "-c", shell] if shell else [PY, "-m", "tfyarn.cli", *args]
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True, start_new_session=True)
    job = (p.stdout.readline() or "").strip()
    if ready:
        wait_for(lambda: len(job_pids(job, "sleep 300")) >= ready)
    t0 = time.monotonic() if inject else begun
    if inject:
        inject(p, job)
    try:
        rc = str(p.wait(timeout=120))
    except subprocess.TimeoutExpired:
        rc = "hung"
    if rc.startswith("-"):
        rc = f"({signal.Signals(-int(rc)).name})"
    with contextlib.suppress(TimeoutError):
        wait_for(lambda: not job_pids(job), 30)
    took = time.monotonic() - t0
    left = job_pids(job)
    return rc, took, "nothing" if not left else f"{len(left)} processes"


def kill_task_proc(kind: str, sig: int) -> Callable[[subprocess.Popen, str], None]:
    def inject(_p: subprocess.Popen, job: str) -> None:
        pids = sorted(job_pids(job, kind))
        os.kill(pids[-1], sig)

    return inject


def signal_client(sig: int, times: int = 1) -> Callable[[subprocess.Popen, str], None]:
    def inject(p: subprocess.Popen, _job: str) -> None:
        for _ in range(times):
            p.send_signal(sig)
            time.sleep(0.05)

    return inject


W2 = ["-t", "tensorflow-worker", "-wn", "2", "--local", "-c"]
ROWS: list[tuple[str, list[str], Callable | None, int, str | None]] = [
    ("a task exits 3", [*W2, 'if [ "$TFYARN_TASK_INDEX" = 1 ]; then exit 3; fi; ' + DAEMON],
     None, 0, None),
    ("a task is SIGKILLed", [*W2, DAEMON], kill_task_proc("sleep 300", signal.SIGKILL), 4, None),
    ("a launcher is SIGKILLed", [*W2, DAEMON],
     kill_task_proc("tfyarn-launcher", signal.SIGKILL), 4, None),
    ("a task is SIGKILLed, --max-restarts 1 (the new gang leaves daemons, exits 0)",
     ["--max-restarts", "1", *W2, 'if [ "$TFYARN_ATTEMPT" = 1 ]; then setsid sleep 300 & '
      'exit 0; fi; ' + DAEMON], kill_task_proc("sleep 300", signal.SIGKILL), 4, None),
    ("a task exits 3, --max-restarts 1 (permanent: not restarted)",
     ["--max-restarts", "1", *W2, 'if [ "$TFYARN_TASK_INDEX" = 1 ]; then exit 3; fi; ' + DAEMON],
     None, 0, None),
    ("a launcher is SIGSTOPped (--heartbeat-timeout 5)",
     ["--heartbeat-timeout", "5", *W2, DAEMON],
     kill_task_proc("tfyarn-launcher", signal.SIGSTOP), 4, None),
    ("the driver is SIGKILLed", [*W2, DAEMON],
     kill_task_proc("tfyarn-driver", signal.SIGKILL), 4, None),
    ("the driver gets SIGTERM", [*W2, DAEMON],
     kill_task_proc("tfyarn-driver", signal.SIGTERM), 4, None),
    ("Ctrl-C (SIGINT) to el_submit", [*W2, DAEMON], signal_client(signal.SIGINT), 4, None),
    ("Ctrl-C twice, tasks ignore SIGTERM", [*W2, STUBBORN], signal_client(signal.SIGINT, 2), 4,
     None),
    ("Ctrl-C three times, tasks ignore SIGTERM", [*W2, STUBBORN],
     signal_client(signal.SIGINT, 3), 4, None),
    ("SIGTERM to el_submit", [*W2, DAEMON], signal_client(signal.SIGTERM), 4, None),
    ("SIGHUP to el_submit (terminal closed)", [*W2, DAEMON], signal_client(signal.SIGHUP), 4,
     None),
    ("SIGKILL to el_submit", [*W2, DAEMON], signal_client(signal.SIGKILL), 4, None),
    ("a rank exits 7 (-t tensorflow-mpi -wn 2 -ppn 2)",
     ["-t", "tensorflow-mpi", "-wn", "2", "-ppn", "2", "--local", "-c",
      'if [ "$RANK" = 3 ]; then exit 7; fi; ' + DAEMON], None, 0, None),
    ("a launcher hosting 2 ranks is SIGKILLed",
     ["-t", "pytorch", "-wn", "2", "-ppn", "2", "--local", "-c", DAEMON],
     kill_task_proc("tfyarn-launcher", signal.SIGKILL), 8, None),
    ("--timeout 2 on a job that hangs", ["--timeout", "2", *W2, DAEMON], None, 0, None),
    ("a task leaves a daemon and exits 0", [*W2, "setsid sleep 300 & true"], None, 0, None),
    ("bad input (-wn 0)", ["-t", "tensorflow-worker", "-wn", "0", "--local", "-c", "true"],
     None, 0, None),
    ("-m docker without a docker daemon", [], None, 0,
     f"DOCKER_HOST=unix:///nonexistent.sock exec {PY} -m tfyarn.cli -m docker -m_arg img "
     "-t standalone --local -c true"),
    ("TMPDIR is a file", [], None, 0,
     f"TMPDIR=/etc/hostname exec {PY} -m tfyarn.cli -t standalone --local -c true"),
    ("ulimit -n 64, 32 tasks", [], None, 0,
     f"ulimit -n 64; exec {PY} -m tfyarn.cli -t tensorflow-worker -wn 32 --local -c true"),
    ("stderr piped into head -3", [], None, 0,
     f"{PY} -m tfyarn.cli -t tensorflow-worker -wn 2 --local -c 'seq 1 20000 >&2' 2>&1 "
     "| head -3 >/dev/null; exit ${PIPESTATUS[0]}"),
    ("stdout closed", [], None, 0, f"exec >&-; exec {PY} -m tfyarn.cli -t standalone --local "
     "-c true"),
]


def main() -> None:
    print("| fault | command (after `el_submit`) | exit | seconds to end | survivors |")
    print("| --- | --- | --- | --- | --- |")
    for name, args, inject, ready, shell in ROWS:
        with tempfile.TemporaryDirectory() as tmp:
            rc, took, left = scenario(args, inject, ready, tmp, shell)
        shown = shell.replace(PY, "python") if shell else " ".join(
            a if a.replace("-", "").replace("_", "").isalnum() else f"'{a}'" for a in args)
        shown = shown.replace("|", "\\|")
        print(f"| {name} | `{shown}` | {rc} | {took:.1f} | {left} |", flush=True)


if __name__ == "__main__":
    main()
