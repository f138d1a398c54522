"""Injected faults in local mode: every way a job can end, and nothing of it survives.

Real el_submit, driver, launchers and user processes; the checks read /proc. Each
test first proves the processes it will look for were really there.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import job_processes
from streamlines import LinesRead

# A task that leaves a setsid'ed daemon behind and then waits: the daemon is what
# escapes process-group kills, so it is what the containment must still find.
DAEMON = 'setsid sleep 300 & sleep 300'
ONE_PER_CONTAINER = {"TFYARN_LOCAL_LAUNCHER_TASKS": "1"}  # a launcher's death loses one


def start(tmp_path: Path, *args: str, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """el_submit in the background; returns it and the job id it printed."""
    full = {**os.environ, "TMPDIR": str(tmp_path), **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "tfyarn.cli", *args], env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    return proc, proc.stdout.readline().strip()


def wait_for(predicate, timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def running(job_id: str, needle: str) -> list[str]:
    """The job's processes with `needle` in their command line, or named `needle`: the
    processes local mode forks (named tfyarn-*) show el_submit's command line, so they
    count by name only."""
    out = []
    for p in job_processes(job_id):
        comm = p.split(": ")[1]
        if (needle == comm) if comm.startswith("tfyarn-") else (needle in p):
            out.append(p)
    return out


def launcher_pid(job_id: str, task: str) -> int:
    """The launcher of `task`: the parent of its user process (the process tagged as the
    first of `task`'s container), a forked `tfyarn-launcher` (locally no watchdog)."""
    import proctable

    tag = f"TFYARN_TASK_TAG={job_id}.0.{task}.0".encode()
    table = list(proctable.live())
    # The user's shell forks short-lived children (a `sleep 0.05` loop) that carry the tag
    # too: their parents come from the same scan, never from a later read of /proc.
    users = [p.pid for p in table if tag in p.env]
    parents = {p.ppid for p in table if tag in p.env}
    launchers = [p.pid for p in table if p.pid in parents and p.comm == "tfyarn-launcher"]
    assert len(launchers) == 1, (users, parents)
    return launchers[0]


def nothing_left(job_id: str, timeout: float = 20) -> None:
    wait_for(lambda: not job_processes(job_id), timeout, f"no process of {job_id}")


def test_sigkill_of_a_launcher_fails_the_job_and_leaves_nothing(tmp_path):
    proc, job = start(tmp_path, "-t", "tensorflow-worker", "-wn", "2", "--local", "-c", DAEMON)
    wait_for(lambda: len(running(job, "sleep 300")) >= 4, what="2 tasks with their daemons")
    launcher = launcher_pid(job, "worker:1")
    assert launcher == launcher_pid(job, "worker:0")  # locally one launcher serves both
    os.kill(launcher, signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "worker:0: launcher lost (its launcher process died (killed by SIGKILL)" in err
    nothing_left(job)  # the setsid'ed daemons included: the client ended them


def test_a_killed_launchers_daemons_are_gone_before_the_new_gang_runs(tmp_path):
    """Locally no watchdog forks per launcher: when a launcher is SIGKILLed and the gang
    restarts, el_submit ends what the dead launcher's tree left (setsid'ed daemons) while
    the job goes on, not only at its end."""
    import proctable

    gate = tmp_path / "gate"
    cmd = (f'if [ "$TFYARN_ATTEMPT" = 0 ]; then {DAEMON}; fi; '
           f'until [ -e {gate} ]; do sleep 0.05; done')
    proc, job = start(tmp_path, "-t", "tensorflow-worker", "-wn", "2", "--max-restarts", "1",
                      "--local", "-c", cmd)

    def of_attempt(k: int) -> list[int]:
        return [p.pid for p in proctable.carrying(f"TFYARN_JOB_ID={job}")
                if f"TFYARN_ATTEMPT={k}".encode() in p.env]

    wait_for(lambda: len(running(job, "sleep 300")) >= 4, what="2 tasks with their daemons")
    os.kill(launcher_pid(job, "worker:1"), signal.SIGKILL)
    wait_for(lambda: len(of_attempt(1)) >= 2, what="the new gang running")
    assert of_attempt(0) == []  # the old gang's daemons, both launchers' included
    gate.touch()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    nothing_left(job)


def test_frozen_launcher_is_lost_after_the_heartbeat_timeout(tmp_path):
    proc, job = start(tmp_path, "-t", "tensorflow-worker", "-wn", "2", "--heartbeat-timeout",
                      "5", "--local", "-c", "sleep 300", env=ONE_PER_CONTAINER)
    wait_for(lambda: len(running(job, "sleep 300")) >= 2, what="2 tasks")
    os.kill(launcher_pid(job, "worker:0"), signal.SIGSTOP)
    _, err = proc.communicate(timeout=60)  # a frozen launcher never reports: not waited for
    assert proc.returncode == 1, err
    assert "worker:0: launcher lost (no heartbeat for" in err
    nothing_left(job)


def test_task_exiting_1_after_its_launcher_died_is_never_a_success(tmp_path):
    """worker:0's launcher dies; then its task exits 1 (never observed); then the chief
    finishes fine. Each step waits for the one before (files, the store's lost key):
    the job fails on worker:0, never succeeds on the chief."""
    go = tmp_path / "go"
    go.mkdir()
    wait = f'until [ -e {go}/"$TFYARN_TASK_TYPE" ]; do sleep 0.05; done; '
    cmd = (f'if [ "$TFYARN_TASK_TYPE" = chief ]; then {wait}exit 0; fi; '
           f'if [ "$TFYARN_TASK_TYPE" = worker ]; then {wait}exit 1; fi; sleep 300')
    proc, job = start(tmp_path, "-t", "tensorflow-ps", "-wn", "2", "-x", "True", "--local",
                      "-c", cmd, env=ONE_PER_CONTAINER)
    wait_for(lambda: len(running(job, "until [ -e")) >= 2, what="chief and worker waiting")
    os.kill(launcher_pid(job, "worker:0"), signal.SIGKILL)
    (go / "worker").touch()
    lost = "gang/0/lost/worker%3A0"
    kv = tmp_path / f"tfyarn-{os.geteuid()}" / job / "kv"  # the job's dir: its id names it
    wait_for(lambda: (kv / lost).exists(), what="worker:0 lost")
    (go / "chief").touch()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "worker:0: launcher lost" in err
    nothing_left(job)


def test_sigkill_of_el_submit_leaves_nothing(tmp_path):
    proc, job = start(tmp_path, "-t", "tensorflow-worker", "-wn", "2", "--local", "-c", DAEMON)
    wait_for(lambda: len(running(job, "sleep 300")) >= 4, what="tasks and daemons")
    proc.kill()
    proc.wait()
    nothing_left(job)  # the driver sees its client die and ends the job


@pytest.mark.parametrize(("sig", "code", "words"), [
    (signal.SIGHUP, 129, "hung up (SIGHUP"),
    (signal.SIGTERM, 143, "terminated (SIGTERM)"),
    (signal.SIGINT, 130, "interrupted (Ctrl-C)"),
])
def test_signals_to_el_submit(tmp_path, sig, code, words):
    proc, job = start(tmp_path, "-t", "tensorflow-worker", "-wn", "2", "--local", "-c", DAEMON)
    wait_for(lambda: len(running(job, "sleep 300")) >= 4, what="tasks and daemons")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert words in err and "Traceback" not in err
    assert job_processes(job) == []


def test_second_ctrl_c_kills_at_once_and_a_third_cannot_skip_cleanup(tmp_path):
    # Tasks ignore SIGTERM: an orderly stop would take the whole 3 s grace, after which
    # each launcher says how its task ended. Killed at once, no launcher gets to say it.
    proc, job = start(tmp_path, "-t", "tensorflow-worker", "-wn", "3", "--local",
                      "-c", "trap '' TERM; setsid sleep 300 & sleep 300")
    wait_for(lambda: len(running(job, "sleep 300")) >= 6, what="tasks and daemons")
    said = LinesRead(proc.stderr)
    proc.send_signal(signal.SIGINT)
    said.next_line("stopping every task (send it again")  # the first one arrived
    proc.send_signal(signal.SIGINT)
    said.next_line("killing every task now")  # the second one arrived
    proc.send_signal(signal.SIGINT)  # a third, during the clean-up
    proc.wait(timeout=60)
    err = said.text()
    assert proc.returncode == 130 and "killing every task now" in err, err
    assert not re.search(r"\] tfyarn: worker:\d: (exit code|stopped)", err), err
    assert job_processes(job) == []


def test_sigint_while_32_tasks_spawn(tmp_path):
    proc, job = start(tmp_path, "-t", "tensorflow-worker", "-wn", "32", "--local",
                      "-c", "sleep 300")
    wait_for(lambda: running(job, "tfyarn-forks") and running(job, "tfyarn-launcher"),
             what="the fork server and its first launchers")
    proc.send_signal(signal.SIGINT)  # somewhere in the middle of starting the launchers
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err
    assert job_processes(job) == []


def test_few_file_descriptors_with_32_tasks(tmp_path):
    cmd = (f"ulimit -n 64; exec {sys.executable} -m tfyarn.cli -t tensorflow-worker -wn 32 "
           "--local -c true")
    out = subprocess.run(["bash", "-c", cmd], env={**os.environ, "TMPDIR": str(tmp_path)},
                         capture_output=True, text=True, timeout=180)
    job = out.stdout.strip()
    assert "Traceback" not in out.stderr
    assert out.returncode == 0 or (out.returncode == 4 and "ulimit -n" in out.stderr), out.stderr
    assert job and job_processes(job) == []


def test_kill_int_from_a_script_reaches_a_background_el_submit(tmp_path):
    # A background job of a script inherits SIGINT as ignored; cron and Oozie do this.
    script = (f'{sys.executable} -m tfyarn.cli -t standalone --local -c "sleep 300" > job_id & '
              'pid=$!; while ! grep -q . job_id 2>/dev/null; do sleep 0.1; done; sleep 1.5; '
              'kill -INT $pid; wait $pid; echo "rc=$?"')
    out = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "TMPDIR": str(tmp_path)}, timeout=60)
    assert "rc=130" in out.stdout, out.stderr
    job = (tmp_path / "job_id").read_text().strip()
    assert job_processes(job) == []


def test_sigterm_to_the_driver_is_a_killed_job_exit_3(tmp_path):
    proc, job = start(tmp_path, "-t", "tensorflow-worker", "-wn", "2", "--local", "-c", DAEMON)
    wait_for(lambda: len(running(job, "sleep 300")) >= 4, what="tasks")
    driver = next(p for p in job_processes(job) if ": tfyarn-driver: " in p)
    os.kill(int(driver.split(":", 1)[0]), signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    assert "KILLED: killed: the driver received SIGTERM" in err
    assert job_processes(job) == []


def test_output_through_head_never_deadlocks(tmp_path):
    cmd = (f"{sys.executable} -m tfyarn.cli -t tensorflow-worker -wn 2 --local -c "
           "'for i in $(seq 1 20000); do echo line $i >&2; done' 2>&1 | head -3; "
           "echo \"rc=${PIPESTATUS[0]}\"")
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TMPDIR": str(tmp_path)})
    assert out.stdout.splitlines()[-1] == "rc=0", out.stdout[-2000:]
    assert len(out.stdout.splitlines()) == 4


def test_closed_stdout_is_said_and_the_job_still_runs(tmp_path):
    cmd = f"exec >&-; {sys.executable} -m tfyarn.cli -t standalone --local -c true"
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "TMPDIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert "warning: stdout is closed, so the job id is not printed there: local_" in out.stderr


def test_sigkill_of_the_driver_stops_every_task_and_exits_4(tmp_path):
    proc, job = start(tmp_path, "-t", "tensorflow-worker", "-wn", "2", "--local", "-c", DAEMON)
    wait_for(lambda: len(running(job, "sleep 300")) >= 4, what="tasks")
    driver = next(p for p in job_processes(job) if ": tfyarn-driver: " in p)
    os.kill(int(driver.split(":", 1)[0]), signal.SIGKILL)
    _, err = proc.communicate(timeout=60)  # the tasks sleep 300 s: they were stopped
    assert proc.returncode == 4, err
    assert "tfyarn's driver ended without a final status" in err
    assert job_processes(job) == []
