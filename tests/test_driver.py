"""The driver's rules (pure `decide`) and its loop against the real directory KV."""

from __future__ import annotations

import re
import threading
from dataclasses import replace
from pathlib import Path

from conftest import real_memory_kill_message

from tfyarn.core.jobspec import JobSpec, Resources, Role
from tfyarn.core.policy import decide
from tfyarn.core.records import Cluster, Outcome, TaskEnd, Wanted
from tfyarn.core.tfconfig import Task
from tfyarn.protocol import kv as kvmod
from tfyarn.protocol.kv import KILL
from tfyarn.runtime.driver import run

R = Resources(1024, 1)


def job(app_type="tensorflow-ps", x=True, **kw) -> JobSpec:
    roles = {"tensorflow-ps": (Role("ps", 1, R), Role("chief", 1, R), Role("worker", 1, R)),
             "tensorflow-worker": (Role("worker", 2, R),)}[app_type]
    return JobSpec("t", app_type, roles, "true", stop_ps_when_done=x, **kw)


def ex(code, t=1.0, stopped=False, tail=()):
    return TaskEnd(code, time=t, stopped=stopped, tail=tuple(tail))


def test_chief_success_ends_ps_job_with_x_true():
    out = decide(job(), {Task("chief", 0): ex(0)})
    assert out.state == "SUCCEEDED"


def test_without_x_every_task_must_exit():
    spec = job(x=False)
    assert decide(spec, {Task("chief", 0): ex(0), Task("worker", 0): ex(0)}) is None
    done = {t: ex(0) for t in spec.tasks()}
    assert decide(spec, done).state == "SUCCEEDED"


def test_earliest_failure_is_named():
    out = decide(job(), {Task("worker", 0): ex(3, t=5, tail=["boom"]), Task("ps", 0): ex(-9, t=2)})
    assert (out.state, out.task, out.code) == ("FAILED", "ps:0", -9)
    assert "killed by SIGKILL" in out.message
    out = decide(job(), {Task("worker", 0): ex(3, t=5, tail=["boom"])})
    assert out.tail == ("boom",) and "worker:0 exited with code 3" in out.message


def test_failure_after_chief_success_does_not_fail_the_job():
    out = decide(job(), {Task("chief", 0): ex(0, t=1), Task("worker", 0): ex(1, t=2)})
    assert out.state == "SUCCEEDED"


def test_stopped_by_someone_else_is_a_failure():
    out = decide(job("tensorflow-worker"), {Task("worker", 1): ex(-15, stopped=True)})
    assert out.state == "FAILED" and out.task == "worker:1"


def test_registration_deadline_lists_missing_tasks(tmp_path):
    store = kvmod.DirKV(str(tmp_path))
    gang = kvmod.Scoped(store, 0)
    gang.put(kvmod.addr_key(Task("ps", 0)), "127.0.0.1:1")
    gang.put(kvmod.exit_key(Task("ps", 0)), ex(0).to_json())  # a ps that ended early
    out = run(job(register_timeout_s=0.3, max_restarts=2), store)
    assert out.state == "FAILED" and "never registered" in out.message
    assert out.message.split("min: ")[1].startswith("chief:0, worker:0 (")
    assert Outcome.from_json(store.get(kvmod.STATUS)) == out
    assert gang.get(kvmod.STOP) and gang.get(kvmod.CLUSTER) is None
    assert kvmod.wanted(store).attempt == 0  # a deadline is never restarted


def test_publishes_cluster_then_honours_kill(tmp_path):
    store = kvmod.DirKV(str(tmp_path))
    gang = kvmod.Scoped(store, 0)
    spec = job("tensorflow-worker", max_restarts=3, restart_on="any")
    for t in spec.tasks():
        gang.put(kvmod.addr_key(t), f"127.0.0.1:{1000 + t.index}")
    result = {}
    thread = threading.Thread(target=lambda: result.update(out=run(spec, store)))
    thread.start()
    assert Cluster.from_json(gang.wait(kvmod.CLUSTER, timeout=5)).roles == {
        "worker": ("127.0.0.1:1000", "127.0.0.1:1001")}
    store.put(KILL, "test")
    for t in spec.tasks():  # launchers answer the stop request
        gang.wait(kvmod.STOP, timeout=5)
        gang.put(kvmod.exit_key(t), ex(-15, stopped=True).to_json())
    thread.join(timeout=10)
    assert result["out"].state == "KILLED" and "test" in result["out"].message
    assert set(result["out"].tasks) == {"worker:0", "worker:1"}
    assert kvmod.wanted(store).attempt == 0  # a kill is never restarted


def test_a_watched_job_that_fails_at_once_waits_for_its_clients_first_look(tmp_path):
    """el_submit said at submission that it follows the job (the driver's --watched),
    but a job failing within seconds can reach its verdict before the client's first
    look at the store (CI's loaded 2 cores): the final status waits for its ACK then
    too, so the client shows the task's traceback, not YARN's diagnostics."""
    store = kvmod.DirKV(str(tmp_path))
    gang = kvmod.Scoped(store, 0)
    spec = job("tensorflow-worker")
    for t in spec.tasks():
        gang.put(kvmod.addr_key(t), f"127.0.0.1:{1000 + t.index}")
    result = {}
    thread = threading.Thread(target=lambda: result.update(out=run(spec, store, watched=True)))
    thread.start()
    gang.wait(kvmod.CLUSTER, timeout=5)
    gang.put(kvmod.exit_key(Task("worker", 0)), ex(1, tail=("KeyError: 'k'",)).to_json())
    for t in spec.tasks()[1:]:  # the others answer the stop request
        gang.wait(kvmod.STOP, timeout=5)
        gang.put(kvmod.exit_key(t), ex(-15, stopped=True).to_json())
    status = store.wait(kvmod.STATUS, timeout=10)  # the client's first look: no CLIENT put
    assert store.get(kvmod.CLIENT) is None and status is not None
    assert thread.is_alive() and "out" not in result  # still there for the client
    store.put(kvmod.ACK, "1")
    thread.join(timeout=10)
    assert result["out"].state == "FAILED" and result["out"].tail == ("KeyError: 'k'",)


def test_timeout_fails_the_job(tmp_path):
    store = kvmod.DirKV(str(tmp_path))
    out = run(job(timeout_s=0.2), store)
    assert out.state == "FAILED" and "--timeout" in out.message


# ---------------------------------------------------------------- YARN gangs
# For speed, a stand-in for skein's ApplicationClient (its container list and
# add_container); the driver, its rules and the store are the real ones.


# what skein says of a container its ApplicationMaster killed (YARN's -105), captured
AM_KILL = re.search(r"exit_message='([^']*)'", (Path(__file__).parent / "fixtures" /
                    "hadoop-3.3.6-nodes" / "skein-container-killed-by-am.txt").read_text())[1]


class FakeApp:
    """skein's view of the app's containers: attempt 0's from the spec, then added ones."""

    def __init__(self, spec):
        self.containers = {f"{c.name}_0": ["RUNNING", ""] for c in spec.containers()}
        self.added, self.killed = [], []

    def get_containers(self, states=None):
        from types import SimpleNamespace

        # as skein's Container: the node's web address is there in every state
        return [SimpleNamespace(id=i, state=s, exit_message=m,
                                yarn_node_http_address="127.0.0.2:8042")
                for i, (s, m) in self.containers.items() if states is None or s in states]

    def add_container(self, service, env=None):
        from types import SimpleNamespace

        cid = f"{service}_{sum(k.startswith(service + '_') for k in self.containers)}"
        self.containers[cid] = ["RUNNING", ""]
        self.added.append((cid, env))
        return SimpleNamespace(id=cid)

    def kill_container(self, cid):
        self.containers[cid] = ["KILLED", AM_KILL]
        self.killed.append(cid)


def _yarn_job(tmp_path, **kw):
    from tfyarn.protocol.skeinlink import App
    from tfyarn.runtime.gang import SkeinGang

    spec = job("tensorflow-worker", max_restarts=2, heartbeat_timeout_s=60, **kw)
    store = kvmod.DirKV(str(tmp_path))
    app = FakeApp(spec)
    result = {}
    thread = threading.Thread(target=lambda: result.update(
        out=run(spec, store, gang=SkeinGang(store, App(app), spec))))
    thread.start()
    assert _register(kvmod.Scoped(store, 0), spec, 1000, timeout=5)
    return spec, store, app, thread, result


def _register(gang, spec, port, timeout=30):
    """Every task of `spec` registers in `gang` (ports from `port` on); the cluster spec
    the driver then publishes (None if it did not in `timeout` seconds)."""
    for t in spec.tasks():
        gang.put(kvmod.addr_key(t), f"127.0.0.1:{port + t.index}")
    return gang.wait(kvmod.CLUSTER, timeout=timeout)


def test_yarn_memory_kill_is_told_and_never_retried(tmp_path):
    spec, store, app, thread, result = _yarn_job(tmp_path)
    gang = kvmod.Scoped(store, 0)
    # what a NodeManager memory kill looks like: SIGTERM (the launcher reports "stopped"),
    # then YARN's exit status -104, which skein turns into this message
    gang.put(kvmod.exit_key(Task("worker", 1)),
        replace(ex(-15, stopped=True), reason="launcher received SIGTERM").to_json())
    app.containers["worker-1_0"] = ["FAILED", real_memory_kill_message()]
    gang.wait(kvmod.STOP, timeout=5)
    gang.put(kvmod.exit_key(Task("worker", 0)), ex(-15, stopped=True).to_json())
    thread.join(timeout=30)
    out = result["out"]
    assert out.state == "FAILED" and out.task == "worker:1"
    assert "container killed for exceeding its memory: raise -wm (now 1024 MB)" in out.message
    assert "physical memory used" in out.message  # YARN's own words follow
    assert "exceeding its memory" in out.tasks["worker:1"].reason  # the table says it too
    assert app.added == [] and kvmod.wanted(store).attempt == 0


def _memory_kill(store, app, gang_no, service):
    """A NodeManager's memory kill of worker:1 in gang `gang_no` (its skein container
    `service`), as the launchers and skein report it; worker:0 stops when asked."""
    gang = kvmod.Scoped(store, gang_no)
    gang.put(kvmod.exit_key(Task("worker", 1)),
             replace(ex(-15, stopped=True), reason="launcher received SIGTERM").to_json())
    app.containers[service] = ["FAILED", real_memory_kill_message()]
    gang.wait(kvmod.STOP, timeout=5)
    gang.put(kvmod.exit_key(Task("worker", 0)), ex(-15, stopped=True).to_json())


def test_memory_growth_restarts_the_role_larger_until_it_fits(tmp_path, capsys):
    """--memory-growth 2 with a 4096 MB queue limit: killed at 1024 MB, the workers come
    back in the 2048 MB services (skein sizes containers by service), told their size."""
    from tfyarn.core.jobspec import YarnOptions

    spec, store, app, thread, result = _yarn_job(
        tmp_path, memory_growth=2.0, yarn=YarnOptions(max_memory_mb=4096))
    _memory_kill(store, app, 0, "worker-1_0")
    new = kvmod.Scoped(store, 1)
    assert _register(new, spec, 2000)
    told = {"TFYARN_ATTEMPT": "1", "TFYARN_GANG": "1", "TFYARN_MEMORY_MB": "2048"}
    assert app.added == [("worker-0-mem2048_0", told), ("worker-1-mem2048_0", told)]
    for t in spec.tasks():
        new.put(kvmod.exit_key(t), ex(0).to_json())
    thread.join(timeout=30)
    out = result["out"]
    assert out.state == "SUCCEEDED" and out.attempt == 1, out.message
    assert out.attempts[0].grown.startswith("worker memory 1024 \u2192 2048 MB after worker:1 "
                                            "was killed for memory")
    assert "attempt 2/3: worker memory 1024 \u2192 2048 MB after worker:1 was killed for " \
        "memory (-wm x --memory-growth 2)" in capsys.readouterr().err


def test_memory_growth_stops_at_the_queue_limit_naming_the_largest_size(tmp_path):
    """Killed at 1024 MB, then at the queue's 1536 MB limit: FAILED, permanent, saying
    the largest size tried and why no larger one."""
    from tfyarn.core.jobspec import YarnOptions

    spec, store, app, thread, result = _yarn_job(
        tmp_path, memory_growth=2.0, yarn=YarnOptions(max_memory_mb=1536))
    _memory_kill(store, app, 0, "worker-1_0")
    new = kvmod.Scoped(store, 1)
    assert _register(new, spec, 2000)
    _memory_kill(store, app, 1, "worker-1-mem1536_0")
    thread.join(timeout=30)
    out = result["out"]
    assert out.state == "FAILED" and out.attempt == 1 and out.cause == "permanent"
    assert "container killed for exceeding its memory: raise -wm (now 1536 MB)" in out.message
    assert "--memory-growth 2 grew it as far as it could: 1536 MB; the queue's largest " \
        "container is 1536 MB" in out.message
    assert len(app.added) == 2  # no third gang: memory kills at the limit are permanent


def test_yarn_preemption_restarts_the_gang_with_new_containers(tmp_path, capsys):
    """A preempted gang restarts, asking for its new containers after a backoff (the
    queue owed them gets them first), never early."""
    from tfyarn.core.jobspec import YarnOptions

    spec, store, app, thread, result = _yarn_job(tmp_path, yarn=YarnOptions(gang_patience_s=2))
    app.containers["worker-0_0"] = ["FAILED", "Container preempted by scheduler"]
    gang = kvmod.Scoped(store, 0)
    gang.wait(kvmod.STOP, timeout=5)
    gang.put(kvmod.exit_key(Task("worker", 1)), ex(-15, stopped=True).to_json())
    # the driver asks skein for a new container per tfyarn container, told its attempt
    new = kvmod.Scoped(store, 1)
    assert Cluster.from_json(_register(new, spec, 2000)).roles == {
        "worker": ("127.0.0.1:2000", "127.0.0.1:2001")}
    told = {"TFYARN_ATTEMPT": "1", "TFYARN_GANG": "1", "TFYARN_MEMORY_MB": "1024"}
    assert [(c, e) for c, e in app.added] == [("worker-0_1", told), ("worker-1_1", told)]
    for t in spec.tasks():
        new.put(kvmod.exit_key(t), ex(0).to_json())
    thread.join(timeout=30)
    out = result["out"]
    assert out.state == "SUCCEEDED" and out.attempt == 1
    assert out.attempts[0].message.startswith("worker:0 was preempted by YARN")
    assert out.attempts[0].tasks["worker:0"].lost
    assert "YARN preempted the gang: asking for attempt 2's containers in" in \
        capsys.readouterr().err


def _partial_gang(tmp_path, waiting, register=True, **kw):
    """A YARN job whose worker-1 container is in skein state `waiting` (REQUESTED: YARN
    has not given it) while worker-0 runs (and registered); gang patience 1 s."""
    from tfyarn.core.jobspec import YarnOptions
    from tfyarn.protocol.skeinlink import App
    from tfyarn.runtime.gang import SkeinGang

    spec = job("tensorflow-worker", heartbeat_timeout_s=60,
               yarn=YarnOptions(gang_patience_s=1.0), **kw)
    store = kvmod.DirKV(str(tmp_path))
    app = FakeApp(spec)
    app.containers["worker-1_0"] = waiting
    result = {}
    thread = threading.Thread(target=lambda: result.update(
        out=run(spec, store, gang=SkeinGang(store, App(app), spec))))
    thread.start()
    if register:
        kvmod.Scoped(store, 0).put(kvmod.addr_key(Task("worker", 0)), "127.0.0.1:1000")
    return spec, store, app, thread, result


def _run_gang(store, spec, gang_no, thread):
    gang = kvmod.Scoped(store, gang_no)
    for t in spec.tasks():
        gang.put(kvmod.addr_key(t), f"127.0.0.1:{2000 + t.index}")
    assert gang.wait(kvmod.CLUSTER, timeout=30)
    for t in spec.tasks():
        gang.put(kvmod.exit_key(t), ex(0).to_json())
    thread.join(timeout=30)


def test_yarn_a_partial_gang_gives_its_containers_back_and_asks_again(tmp_path, capsys):
    """Given one of two containers and nothing more for the patience, the gang gives
    back what it holds (killed, the open ask too), waits and asks again: a new gang of
    the same attempt, so no restart is spent (--max-restarts 0)."""
    spec, store, app, thread, result = _partial_gang(tmp_path, ["REQUESTED", ""])
    stop = kvmod.Scoped(store, 0).wait(kvmod.STOP, timeout=10)  # its launcher is told why
    assert stop is not None and stop.endswith("giving them back"), stop
    kvmod.Scoped(store, 0).put(kvmod.exit_key(Task("worker", 0)), ex(-15, stopped=True).to_json())
    while not app.added:  # the driver's own clock: patience 1 s, backoff 0.25-0.5 s
        assert thread.is_alive()
        thread.join(timeout=0.1)
    assert sorted(app.killed) == ["worker-0_0", "worker-1_0"]
    told = {"TFYARN_ATTEMPT": "0", "TFYARN_GANG": "1", "TFYARN_MEMORY_MB": "1024"}
    assert [(c, e) for c, e in app.added] == [("worker-0_1", told), ("worker-1_1", told)]
    assert kvmod.wanted(store) == Wanted(0, 1)
    _run_gang(store, spec, 1, thread)
    out = result["out"]
    assert out.state == "SUCCEEDED" and out.attempt == 0 and out.attempts == ()
    err = capsys.readouterr().err
    assert re.search(r"the gang was given 1 of 2 containers and nothing more for \d s \(another "
                     r"job or queue holds the rest\): giving them back; asking again in 0 s "
                     r"\(no restart spent\)", err), err


def test_yarn_a_container_preempted_before_the_gang_ran_costs_no_restart(tmp_path):
    """YARN took worker-1's container back before the cluster spec was out: no user code
    ran, so the gang is asked for again without spending a restart."""
    spec, store, app, thread, result = _partial_gang(
        tmp_path, ["FAILED", "Container preempted by scheduler"])
    while not app.added:
        assert thread.is_alive()
        thread.join(timeout=0.1)
    assert kvmod.wanted(store) == Wanted(0, 1)
    _run_gang(store, spec, 1, thread)
    out = result["out"]
    assert out.state == "SUCCEEDED" and out.attempt == 0 and out.attempts == ()


def test_yarn_a_container_its_node_did_not_start_is_asked_for_again_at_once(tmp_path, capsys):
    """skein's AM could not start worker-1's container (its words, ApplicationMaster.java:
    "Failed to start, exception raised: ..."): a node failure before the gang ran, so the
    gang is asked for again at once (no backoff: no other queue is owed the room), with
    no restart spent."""
    spec, store, app, thread, result = _partial_gang(
        tmp_path, ["FAILED", "Failed to start, exception raised: "])
    while not app.added:
        assert thread.is_alive()
        thread.join(timeout=0.1)
    assert kvmod.wanted(store) == Wanted(0, 1)
    _run_gang(store, spec, 1, thread)
    out = result["out"]
    assert out.state == "SUCCEEDED" and out.attempt == 0 and out.attempts == ()
    err = capsys.readouterr().err
    assert "worker:1 was never started: its node 127.0.0.2's NodeManager did not answer " \
           "[YARN: Failed to start, exception raised:]; asking again at once, on other " \
           "nodes (no restart spent)" in err, err


def test_yarn_wait_time_counts_across_gangs_given_back(tmp_path):
    """A gang that never gets all its containers gives back again and again; -wait_time
    still ends it, counted from the attempt's start, and says what happened."""
    spec, store, app, thread, result = _partial_gang(tmp_path, ["REQUESTED", ""], False,
                                                     register_timeout_s=4.0)
    for _ in range(100):
        for cid, state in app.containers.items():  # every new gang is given worker-0 only
            if cid.startswith("worker-1_") and state[0] == "RUNNING":
                state[0] = "REQUESTED"
        thread.join(timeout=0.1)
    assert not thread.is_alive()
    out = result["out"]
    assert out.state == "FAILED" and out.attempt == 0
    assert out.message.startswith("tasks never registered within -wait_time")
    assert "the gang was given only part of its containers and gave them back" in out.message
    assert len(app.added) >= 2  # gang 1 at least; gang 0 given back, killed:
    assert app.containers["worker-0_0"][0] == app.containers["worker-1_0"][0] == "KILLED"


def test_yarn_a_settled_failure_asks_for_the_next_gang_before_stopping_the_old(tmp_path):
    """A task SIGKILLed while its launcher heard nothing (so not YARN's kill): nothing YARN
    says can change the verdict, so the new gang's containers are asked for at once,
    before the old gang's stop (skein's ApplicationMaster then talks to the RM every 1 s,
    not 5 s)."""
    spec, store, app, thread, result = _yarn_job(tmp_path)
    gang = kvmod.Scoped(store, 0)
    gang.put(kvmod.exit_key(Task("worker", 1)), ex(-9).to_json())
    assert gang.wait(kvmod.STOP, timeout=5)
    assert [c for c, _ in app.added] == ["worker-0_1", "worker-1_1"]  # worker:0 still runs
    assert kvmod.wanted(store).attempt == 0  # not announced until the old gang stopped
    gang.put(kvmod.exit_key(Task("worker", 0)), ex(-15, stopped=True).to_json())
    new = kvmod.Scoped(store, 1)
    assert _register(new, spec, 2000)
    assert len(app.added) == 2  # asked for once
    for t in spec.tasks():
        new.put(kvmod.exit_key(t), ex(0).to_json())
    thread.join(timeout=30)
    assert result["out"].state == "SUCCEEDED" and result["out"].attempt == 1


def test_the_driver_process_ends_with_its_verdict_whatever_hangs():
    """A shutdown step that never returns (a non-daemon thread blocked for good, as a stuck
    gRPC stream or page handler would be) cannot keep the driver, so the application,
    alive past the deadline: it exits with the verdict's code."""
    import subprocess
    import sys

    code = ("import threading; from tfyarn.runtime.driver import exit_within; exit_within(1.0, 3); "
            "threading.Thread(target=threading.Event().wait).start()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, r.stderr
    assert "still shutting down after 1 s: exiting with the verdict" in r.stderr


class FakeClock:
    """Time that moves only when the test moves it."""

    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> float:
        return self.t

    def wall(self) -> float:
        return 1.8e9 + self.t


def test_the_referees_deadlines_read_the_clock_it_is_given(tmp_path):
    """-wait_time and --timeout on a clock of the test's own: no sleep, no wall time."""
    from tfyarn.core.timing import Clock
    from tfyarn.runtime.driver import JobLife, Referee
    from tfyarn.runtime.gang import Gang

    fake = FakeClock()
    spec = replace(job("tensorflow-worker"), register_timeout_s=60.0, timeout_s=300.0)
    top = kvmod.DirKV(str(tmp_path))
    referee = Referee(spec, kvmod.Scoped(top, 0), top, Gang(top), life=JobLife(start=fake.t),
                      start=fake.t, clock=Clock(fake.now, fake.wall))
    one = {Task("worker", 0): "h:1"}
    assert referee.deadline_passed(one) is None
    fake.t += 61
    late = referee.deadline_passed(one)
    assert late is not None and late.state == "FAILED"
    assert late.message.startswith("tasks never registered within -wait_time 1 min: worker:1")
    referee.published = True  # every task registered: only --timeout is left
    fake.t += 200
    assert referee.deadline_passed(one) is None
    fake.t += 40
    over = referee.deadline_passed(one)
    assert over is not None and over.message == "the job ran past --timeout 300 s"


def _second_am(tmp_path, kept, max_restarts, memory_mb=1024, keep=None):
    """The driver of ApplicationMaster attempt 2 of 2 (skein's gang 0 from the spec is
    running), given what attempt 1 kept (or None: HDFS did not answer)."""
    from tfyarn.protocol.skeinlink import App
    from tfyarn.runtime.driver import AmAttempt
    from tfyarn.runtime.gang import SkeinGang

    spec = job("tensorflow-worker", max_restarts=max_restarts, heartbeat_timeout_s=60)
    store = kvmod.DirKV(str(tmp_path))
    app = FakeApp(spec)
    kept_by = []
    result = {}
    am = AmAttempt(2, 2, "127.0.0.3", keep or kept_by.append, kept)
    thread = threading.Thread(target=lambda: result.update(
        out=run(spec, store, gang=SkeinGang(store, App(app), spec), am=am)))
    thread.start()
    return spec, store, app, thread, result


def _kept(attempt=0, memory=None):
    from tfyarn.core.records import CourseSoFar, StepSamples

    return CourseSoFar(1, "127.0.0.2", 1000.0, attempt, 1010.0, spans=(), logs=(),
                       running=StepSamples((1020.0, 1030.0), (5, 50), {"worker:0": 5},
                                           {"worker:0": 1020.0}, {"worker:0": 4.5}),
                       memory=memory or {"worker": 1024})


def test_a_second_application_master_resumes_the_job_as_a_restart(tmp_path, capsys):
    """Attempt 1's AM was lost while its attempt 1 of the tasks ran: the driver of AM
    attempt 2 counts that as a retryable failure and runs skein's gang 0 as attempt 2
    (the cluster spec tells the launchers: their env cannot), with the lost attempt in
    the record and its steps in goodput."""
    spec, store, app, thread, result = _second_am(tmp_path, _kept(), max_restarts=1)
    gang = kvmod.Scoped(store, 0)
    cluster = Cluster.from_json(_register(gang, spec, 1000))
    assert cluster.attempt == 1
    assert store.get(kvmod.AM) == "2"
    wanted = Wanted.from_json(store.get(kvmod.ATTEMPT))
    assert wanted.attempt == 1 and wanted.gang == 0
    assert "the ApplicationMaster was lost (application attempt 1 on 127.0.0.2" in \
        wanted.earlier[0].message
    for t in spec.tasks():
        gang.put(kvmod.exit_key(t), ex(0).to_json())
    thread.join(timeout=30)
    out = result["out"]
    assert out.state == "SUCCEEDED" and out.attempt == 1, out
    assert app.added == []  # skein's own gang 0 ran the resumed attempt
    assert out.goodput.attempts[0].last_step == 50  # the lost attempt's steps, as kept
    assert "attempt 2/2: restarting after the ApplicationMaster was lost" in \
        capsys.readouterr().err


def test_a_resumed_attempts_tasks_start_only_once_its_course_is_kept(tmp_path):
    """The keeping goes on beside the gang's start, but its cluster spec (which starts the
    user's code) waits for it: an AM lost after the resumed attempt's tasks started,
    with only the lost attempt's course in HDFS, would make the next AM count that one
    again, one restart more than --max-restarts (a CI run of the sandbox's node-loss
    test, HDFS slow under load)."""
    from tfyarn.core.timing import DRIVER_TICK_S

    hdfs = threading.Event()
    kept_by = []

    def slow_keep(so_far):
        assert hdfs.wait(timeout=60)
        kept_by.append(so_far)

    spec, store, app, thread, result = _second_am(tmp_path, _kept(), max_restarts=2,
                                                  keep=slow_keep)
    gang = kvmod.Scoped(store, 0)
    assert _register(gang, spec, 1000, timeout=3 * DRIVER_TICK_S) is None  # several looks
    assert kept_by == [] and store.get(kvmod.KEPT) is None
    hdfs.set()
    assert Cluster.from_json(gang.wait(kvmod.CLUSTER, timeout=30)).attempt == 1
    assert kept_by[0].attempt == 1 and store.get(kvmod.KEPT) == "1"
    store.put(KILL, "test")
    thread.join(timeout=30)
    assert result["out"].state == "KILLED"


def test_a_second_application_master_without_restarts_left_fails_naming_the_loss(tmp_path):
    spec, store, app, thread, result = _second_am(tmp_path, None, max_restarts=0)
    thread.join(timeout=30)
    out = result["out"]
    assert out.state == "FAILED"
    assert out.message.startswith("the ApplicationMaster was lost (application attempt 1; ")
    assert "(--max-restarts 0: no restart left to resume it)" in out.message
    assert set(app.killed) == {"worker-0_0", "worker-1_0"}  # the spec's gang: not wanted


def test_a_second_application_master_asks_for_grown_containers_not_the_specs(tmp_path):
    """Attempt 1 grew worker memory after a memory kill: the spec's gang 0 is the wrong
    size, so the resumed attempt runs in a new gang of the grown size."""
    spec, store, app, thread, result = _second_am(
        tmp_path, _kept(memory={"worker": 2048}), max_restarts=2)
    gang = kvmod.Scoped(store, 1)
    assert Cluster.from_json(_register(gang, spec, 1000)).attempt == 1
    assert set(app.killed) == {"worker-0_0", "worker-1_0"}
    assert [e["TFYARN_MEMORY_MB"] for _, e in app.added] == ["2048", "2048"]
    store.put(KILL, "test")
    thread.join(timeout=30)


def test_the_course_so_far_round_trips_with_its_step_logs():
    from tfyarn.core.policy import StepLog
    from tfyarn.core.records import CourseSoFar

    kept = _kept(attempt=2)
    again = CourseSoFar.from_json(kept.to_json())
    assert again == kept
    log = StepLog.of(again.running)
    assert log.samples == [(1020.0, 5), (1030.0, 50)] and log.reached(40) == 1030.0
    assert log.kept() == kept.running
