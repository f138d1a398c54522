"""One launcher on its own, as in a YARN container: the test plays the driver through the
directory store and kills the launcher the ways a NodeManager does. No local client is
around to sweep, so whatever survives here would survive on YARN.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

from conftest import job_processes

from tfyarn.core.jobspec import JobSpec, Resources, Role
from tfyarn.core.records import Cluster, PreemptionNotice, TaskEnd
from tfyarn.core.tfconfig import Task
from tfyarn.protocol import kv as kvmod

TASK = Task("worker", 0)


class Container:
    """A launcher in its own session (as YARN starts a container), with its own store."""

    def __init__(self, tmp_path, command: str, processes: int = 1,
                 heartbeat_timeout_s: float = 30.0, env: tuple = ()) -> None:
        self.job_id = f"test_{uuid.uuid4().hex[:8]}"
        app = "standalone" if processes == 1 else "tensorflow-worker"
        spec = JobSpec("t", app, (Role("worker", processes, Resources(1024, 1)),), command,
                       tasks_per_container=processes, heartbeat_timeout_s=heartbeat_timeout_s,
                       env=env)
        self.tasks = spec.tasks()
        (tmp_path / "job.json").write_text(spec.to_json())
        self.store = kvmod.Scoped(kvmod.DirKV(str(tmp_path / "kv")), 0)
        env = {**os.environ, "TFYARN_JOB_ID": self.job_id, "TFYARN_ADVERTISE_HOST": "127.0.0.1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tfyarn.runtime.launcher", "--job", str(tmp_path / "job.json"),
             "--tasks", ",".join(map(str, self.tasks)), "--kv", f"dir:{tmp_path / 'kv'}",
             "--gpus", "none"],
            cwd=tmp_path, env=env, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        addrs = [self.store.wait(kvmod.addr_key(t), timeout=30) for t in self.tasks]
        assert all(addrs), "the launcher never registered"
        self.store.put(kvmod.CLUSTER, Cluster({"worker": tuple(addrs)}).to_json())

    def user_processes(self) -> list[str]:
        return [p for p in job_processes(self.job_id) if "tfyarn" not in p]

    def wait_user(self, n: int) -> None:
        deadline = time.monotonic() + 30
        while len(self.user_processes()) < n:
            assert time.monotonic() < deadline, self.user_processes()
            time.sleep(0.05)

    def exit_record(self, task: Task = TASK) -> TaskEnd:
        raw = self.store.wait(kvmod.exit_key(task), timeout=30)
        assert raw, "no exit record"
        return TaskEnd.from_json(raw)


def gone(job_id: str, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while job_processes(job_id):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


DAEMON_AND_STUBBORN = "trap '' TERM; setsid sleep 300 & sleep 300"


def test_sigkill_of_the_launcher_leaves_nothing(tmp_path):
    c = Container(tmp_path, DAEMON_AND_STUBBORN)
    c.wait_user(3)  # bash, the setsid'ed daemon, the sleep
    c.proc.kill()
    c.proc.wait()
    assert gone(c.job_id), job_processes(c.job_id)  # the watchdog ended them


def test_nodemanager_kill_leaves_nothing(tmp_path):
    """YARN's kill: SIGTERM to the container's process group, SIGKILL 250 ms later."""
    c = Container(tmp_path, DAEMON_AND_STUBBORN)
    c.wait_user(3)
    os.killpg(c.proc.pid, signal.SIGTERM)
    time.sleep(0.25)
    os.killpg(c.proc.pid, signal.SIGKILL)
    c.proc.wait()
    assert gone(c.job_id), job_processes(c.job_id)


def test_daemons_left_by_a_finished_command_are_ended(tmp_path):
    c = Container(tmp_path, "setsid sleep 300 & echo done")
    record = c.exit_record()
    assert record.code == 0 and not record.stopped
    assert c.proc.wait(timeout=30) == 0
    assert gone(c.job_id), job_processes(c.job_id)  # the subreaper found the daemon


def test_stop_request_stops_the_tree_with_sigkill_after_the_grace(tmp_path):
    """SIGTERM first (the task notes it, and lives on), then SIGKILL: told by order."""
    marker = tmp_path / "signals"
    c = Container(tmp_path, f"trap 'echo TERM >> {marker}' TERM; setsid sleep 300 & "
                            "while :; do sleep 1; done")
    c.wait_user(3)
    c.store.put(kvmod.STOP, "test")
    record = c.exit_record()
    assert record.stopped and "stopped by the driver: test" in record.reason
    assert "TERM" in marker.read_text()  # it had SIGTERM, survived it, and is gone:
    assert c.proc.wait(timeout=30) == 0
    assert gone(c.job_id), job_processes(c.job_id)


def test_the_user_command_is_the_launchers_direct_child(tmp_path):
    c = Container(tmp_path, "sleep 300")
    c.wait_user(1)
    (line,) = c.user_processes()
    pid = int(line.split(":", 1)[0])
    with open(f"/proc/{pid}/stat") as f:
        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    assert ppid == c.proc.pid and "sleep 300" in line  # bash exec'ed it: no shell in between
    c.store.put(kvmod.STOP, "done")
    c.exit_record()


def test_heartbeats_move_while_the_launcher_lives(tmp_path):
    """The beat moves every heartbeat_s (here 0.5 s: a 3 s timeout): three new tokens in
    a row, each later, within four beats (plus slack); then it stops with the launcher."""
    from tfyarn.core.timing import heartbeat_s

    every = heartbeat_s(3.0)
    c = Container(tmp_path, "sleep 300", heartbeat_timeout_s=3.0)
    c.wait_user(1)
    values: list[int] = []
    deadline = time.monotonic() + 4 * every + 5
    while len(values) < 4 and time.monotonic() < deadline:
        raw = c.store.beats("beat/").get(kvmod.beat_key(TASK))
        if raw is not None and (not values or int(raw) != values[-1]):
            values.append(int(raw))
        time.sleep(every / 10)  # sampling a counter, not waiting for an order
    assert len(values) == 4 and values == sorted(set(values)), values
    c.store.put(kvmod.STOP, "done")
    c.exit_record()
    assert c.proc.wait(timeout=30) == 0 and gone(c.job_id)
    last = c.store.beats("beat/")
    assert c.store.wait("never", timeout=2 * every) is None  # two beats' time passes
    assert c.store.beats("beat/") == last  # nobody beats for a dead launcher


def test_orphaned_daemons_are_reparented_to_the_launcher(tmp_path):
    # The subshell starts a daemon and exits: the daemon's parent becomes the launcher
    # (child subreaper), not init, so the launcher can still stop it with a grace.
    c = Container(tmp_path, "(setsid sleep 301 &); sleep 300")
    c.wait_user(2)
    daemon = next(int(p.split(":", 1)[0]) for p in c.user_processes() if "sleep 301" in p)
    with open(f"/proc/{daemon}/stat") as f:
        assert int(f.read().rsplit(")", 1)[1].split()[1]) == c.proc.pid
    c.store.put(kvmod.STOP, "done")
    c.exit_record()
    assert gone(c.job_id), job_processes(c.job_id)



def test_one_of_two_processes_ends_and_only_its_daemon_goes(tmp_path):
    c = Container(tmp_path, 'if [ "$TFYARN_TASK_INDEX" = 0 ]; then setsid sleep 301 & exit 0; '
                  'fi; sleep 300', processes=2)
    assert c.exit_record(Task("worker", 0)).code == 0  # reported while worker:1 runs
    deadline = time.monotonic() + 10
    while any("sleep 301" in p for p in c.user_processes()):
        assert time.monotonic() < deadline, c.user_processes()
        time.sleep(0.05)
    assert any("sleep 300" in p for p in c.user_processes())  # the other one is untouched
    c.store.put(kvmod.STOP, "done")
    assert c.exit_record(Task("worker", 1)).stopped
    assert c.proc.wait(timeout=30) == 0
    assert gone(c.job_id), job_processes(c.job_id)


def test_sigkill_of_a_launcher_with_two_processes_leaves_nothing(tmp_path):
    c = Container(tmp_path, DAEMON_AND_STUBBORN, processes=2)
    c.wait_user(6)  # two tasks: bash, daemon and sleep each
    c.proc.kill()
    c.proc.wait()
    assert gone(c.job_id), job_processes(c.job_id)


def test_a_signal_while_the_main_thread_holds_the_wake_lock_does_not_deadlock():
    """A signal handler runs on the main thread between bytecodes, possibly inside
    Event.wait/clear with the event's lock held: the handler must not take that lock (it
    once did, and a launcher whose client was SIGKILLed hung forever, tasks and all)."""
    code = (
        "import os, signal\n"
        "from tfyarn.runtime.launcher import StopFlag, install_signal_handlers\n"
        "flag = StopFlag()\n"
        "install_signal_handlers(flag)\n"
        "with flag.wake._cond:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    for _ in range(1000):\n"
        "        pass\n"
        "assert flag.wake.wait(10), 'never woken'\n"
        "print(flag.check())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0 and out.stdout.strip() == "launcher received SIGTERM", out.stderr


PREEMPTED_TASK = """import os, pathlib, signal, time, tfyarn
got = []
signal.signal(signal.SIGUSR1, lambda *a: got.append(1))
pathlib.Path("ready").write_text("1")
while not tfyarn.preempting():
    time.sleep(0.02)
while not got:  # the signal follows the file
    time.sleep(0.02)
pathlib.Path("seen").write_text(open(os.environ["TFYARN_PREEMPTION_FILE"]).read())
"""


def test_a_preemption_notice_reaches_the_task_as_its_file_and_the_jobs_signal(tmp_path):
    """The driver's `preempting/1` (YARN's notice for the gang): the launcher touches the
    file `tfyarn.preempting()` looks at, and sends the signal the job named."""
    (tmp_path / "t.py").write_text(PREEMPTED_TASK)
    c = Container(tmp_path, f"{sys.executable} t.py",
                  env=(("TFYARN_PREEMPTION_SIGNAL", "USR1"),))
    deadline = time.monotonic() + 60
    while not (tmp_path / "ready").exists():
        assert time.monotonic() < deadline and c.proc.poll() is None, "the task never started"
        time.sleep(0.05)
    c.store.put(kvmod.preempting_key(1), PreemptionNotice(time.time(), ("worker-0",)).to_json())
    assert c.exit_record().code == 0
    assert (tmp_path / "seen").read_text() == "YARN's preemption notice for worker-0 (strict)\n"
    assert gone(c.job_id)


def test_tfyarn_preempting_is_false_outside_a_task_and_after_the_hold(tmp_path, monkeypatch):
    import os as _os

    from tfyarn.core.timing import PREEMPTION_HOLD_S
    from tfyarn.runtime import preemption

    monkeypatch.delenv(preemption.ENV, raising=False)
    monkeypatch.setattr(preemption, "_looked", False)
    assert not preemption.preempting()
    told = tmp_path / preemption.FILE
    monkeypatch.setenv(preemption.ENV, str(told))
    monkeypatch.setattr(preemption, "_looked", False)
    assert not preemption.preempting()  # no notice yet
    preemption.tell(str(told), "notice", [], None)
    assert preemption.preempting()
    past = time.time() - PREEMPTION_HOLD_S - 1
    _os.utime(told, (past, past))  # a notice older than the hold: the RM changed its mind
    assert not preemption.preempting()
