"""The YARN client's error paths and output helpers, without a cluster."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time

import pytest
from conftest import REPO

from tfyarn.client import cluster, watch, yarnlogs, yarnsubmit
from tfyarn.client.common import live_tasks
from tfyarn.client.skeinclient import NO_HADOOP, Yarn
from tfyarn.core.errors import EXIT_TFYARN
from tfyarn.core.policy import format_tasks
from tfyarn.core.records import Attempt, JobTasks, Outcome, Started, TaskEnd, Wanted
from tfyarn.core.settings import Settings
from tfyarn.core.tfconfig import Task
from tfyarn.protocol import kv as kvmod
from tfyarn.protocol import taskstate
from tfyarn.protocol.skeinlink import App


@pytest.fixture
def no_hadoop_env(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    return {"HOME": str(home), "PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin",
            "PYTHONWARNINGS": "ignore"}


def test_submit_without_hadoop_is_one_line_and_submits_nothing(el_submit, no_hadoop_env):
    out = el_submit("-t", "tensorflow-ps", "-x", "True", "-c", "python", "train.py",
                    env=no_hadoop_env)
    assert out.returncode == EXIT_TFYARN and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        "Error: " + NO_HADOOP + " (missing: yarn)"]
    assert not os.path.exists(os.path.join(no_hadoop_env["HOME"], ".skein"))


def test_broken_hadoop_client_is_explained(el_submit, no_hadoop_env, tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "yarn").write_text("#!/bin/sh\nexit 1\n")
    (fake / "yarn").chmod(0o755)
    env = {**no_hadoop_env, "PATH": f"{fake}:{no_hadoop_env['PATH']}"}
    out = el_submit("-t", "standalone", "-c", "true", env=env)
    assert out.returncode == EXIT_TFYARN and "Traceback" not in out.stderr
    # tfyarn's own `yarn classpath` for skein's JVM (a configuration dir given), or skein's
    assert re.search(r"Error: `yarn classpath( --glob)?` failed with exit code 1", out.stderr)


@pytest.mark.parametrize("cmd", [["status", "application_1_1"], ["kill", "application_1_1"],
                                 ["logs", "application_1_1"], ["ls"]])
def test_lifecycle_commands_without_hadoop(cmd, no_hadoop_env):
    import subprocess

    out = subprocess.run([sys.executable, "-m", "tfyarn", *cmd], env=no_hadoop_env,
                         capture_output=True, text=True)
    assert out.returncode == EXIT_TFYARN and out.stderr.startswith("Error: no Hadoop client here")


def test_bad_keytab_is_bad_input(el_submit, no_hadoop_env):
    out = el_submit("-t", "standalone", "--principal", "me@R", "--keytab", "nope.keytab",
                    "-c", "true", env=no_hadoop_env)
    assert out.returncode == 2 and "--keytab" in out.stderr


YARN_LOGS = """Container: container_1_0001_01_000002 on node1_45454
LogAggregationType: AGGREGATED
==========================================================
LogType:stderr
LogLength:60
Log Contents:
tfyarn: worker:1: registered at node1:1234
boom
End of LogType:stderr
Container: container_1_0001_01_000003 on node1_45454
LogAggregationType: AGGREGATED
==========================================================
LogType:stderr
Log Contents:
tfyarn: chief:0: registered at node1:1235
End of LogType:stderr
"""


def test_select_task_logs():
    picked = yarnlogs.select_task_logs(YARN_LOGS, "worker:1")
    assert "boom" in picked and "chief:0" not in picked
    assert picked.startswith("Container: container_1_0001_01_000002")
    assert yarnlogs.select_task_logs(YARN_LOGS, "worker:7") == ""


def test_failure_text_names_task_tail_and_next_command():
    from tfyarn.core.errors import JobFailed

    outcome = Outcome("FAILED", "worker:1 exited with code 3", "worker:1", 3, ("a", "boom"))
    w = watch.Watcher(client=None, app_id="application_7_0001", spec=_spec(), poll_s=0.01)
    w.view.outcome = outcome
    with pytest.raises(JobFailed) as failed:
        w._final("FAILED", "")
    text = str(failed.value)
    assert text.splitlines()[0] == "application_7_0001 FAILED: worker:1 exited with code 3"
    assert "  boom" in text and "tfyarn logs application_7_0001 --task worker:1" in text
    w.view.outcome = None
    with pytest.raises(JobFailed) as killed:
        w._final("KILLED", "Killed by user\n")
    bare = str(killed.value)
    assert "KILLED: Killed by user" in bare and "yarn logs -applicationId" in bare
    assert killed.value.exit_code == 3


def test_a_finished_jobs_table_is_in_natural_order_after_its_json(tmp_path):
    """The outcome is stored as JSON with sorted keys (worker:10 before worker:2); the
    table read back from it (`tfyarn status` of a finished local job, el_submit's last
    lines) lists ps, chief, then workers by number, as the running job's does."""
    names = ["ps:0", "chief:0", *[f"worker:{i}" for i in range(12)]]
    outcome = Outcome("SUCCEEDED", "done", tasks={n: TaskEnd(0, host="h") for n in names})
    back = Outcome.from_json(outcome.to_json())
    assert list(back.tasks)[:3] == ["chief:0", "ps:0", "worker:0"]  # as stored: text order
    assert [x.split()[0] for x in format_tasks(back.tasks)] == [
        "ps:0", "chief:0", *[f"worker:{i}" for i in range(12)]]


def test_task_tables(tmp_path):
    lines = format_tasks({"ps:0": TaskEnd(-15, "done", stopped=True, host="n1"),
                          "chief:0": TaskEnd(0, host="n2")})
    assert lines[0].split()[:4] == ["ps:0", "n1", "exit", "-15"] and "stopped: done" in lines[0]
    top = kvmod.DirKV(str(tmp_path))
    store = kvmod.Scoped(top, 0)
    store.put(kvmod.addr_key(Task("ps", 0)), "n1:1")
    store.put(kvmod.addr_key(Task("chief", 0)), "n2:2")
    store.put(kvmod.start_key(Task("chief", 0)), Started(7, 1.0).to_json())
    store.put(kvmod.exit_key(Task("ps", 0)), TaskEnd(0).to_json())
    live = live_tasks(top)
    assert [x.split() for x in live] == [["ps:0", "n1:1", "exited", "0"],
                                         ["chief:0", "n2:2", "running"]]
    # after a restart: how attempt 1 ended, then attempt 2's tasks only
    top.put(kvmod.ATTEMPT, Wanted(1, 1, (Attempt(0, "FAILED", "ps:0 was killed by SIGKILL"),
                                         )).to_json())
    kvmod.Scoped(top, 1).put(kvmod.addr_key(Task("ps", 0)), "n3:3")
    assert live_tasks(top) == ["attempt 1: FAILED: ps:0 was killed by SIGKILL",
                                    "attempt 2: running", f"  {'ps:0':<12} {'n3:3':<30} registered"]


def test_status_tasks_of_a_12_worker_job_natural_order_a_state_each(tmp_path):
    """What `tfyarn status --tasks` prints while a job runs: every task of the job (the
    driver publishes the list), ps, chief, worker:0 .. worker:11 in natural order, each
    with a state, a lost launcher with why, and never `None`."""
    from tfyarn.core.jobspec import JobSpec, Resources, Role
    from tfyarn.runtime.driver import Referee
    from tfyarn.runtime.gang import Gang

    spec = JobSpec("t", "tensorflow-ps", (Role("ps", 1, Resources(1024, 1)),
                                          Role("chief", 1, Resources(1024, 1)),
                                          Role("worker", 12, Resources(1024, 1))), "true",
                   heartbeat_timeout_s=3.0)
    top = kvmod.DirKV(str(tmp_path))
    top.put(kvmod.TASKS, JobTasks(tuple(str(t) for t in spec.tasks())).to_json())
    store = kvmod.Scoped(top, 0)
    for t in spec.tasks()[:-1]:  # worker:11 never registers
        store.put(kvmod.addr_key(t), f"n:{1000 + t.index}")
    for t in spec.tasks()[:10]:
        store.put(kvmod.start_key(t), Started(7, 1.0).to_json())
    store.put(kvmod.exit_key(Task("worker", 2)), TaskEnd(3).to_json())
    referee = Referee(spec, store, top, Gang(top))
    referee.liveness.observe(Task("worker", 10), None, time.monotonic() - 60)  # silent
    referee.step(taskstate.read(store))  # the driver finds worker:10 lost, writes it
    lines = live_tasks(top)
    names = [line.split()[0] for line in lines]
    assert names == ["ps:0", "chief:0", *(f"worker:{i}" for i in range(12))]
    states = {line.split()[0]: line.split(maxsplit=2)[2] for line in lines}
    assert states["worker:2"] == "failed (exit 3)" and states["worker:11"] == "waiting"
    assert states["worker:9"] == "registered" and states["worker:0"] == "running"
    assert states["worker:10"].startswith("lost (exit -: no heartbeat for 60 s")
    assert all("None" not in line for line in lines)


def test_watcher_progress_and_final_status(tmp_path, capsys):

    from tfyarn.core.errors import JobFailed
    from tfyarn.core.jobspec import JobSpec, Resources, Role

    spec = JobSpec("t", "tensorflow-ps", (Role("ps", 1, Resources(1024, 1)),
                                          Role("chief", 1, Resources(1024, 1))), "true")
    top = kvmod.DirKV(str(tmp_path))
    store = kvmod.Scoped(top, 0)
    w = watch.Watcher(client=None, app_id="application_1_0002", spec=spec, poll_s=0.01)
    store.put(kvmod.addr_key(Task("ps", 0)), "n1:1")
    w.view.read(top)
    store.put(kvmod.addr_key(Task("chief", 0)), "n1:2")
    top.put(kvmod.PHASE, "running")
    w.view.read(top)
    w.view.read(top)  # nothing new: nothing printed twice
    err = capsys.readouterr().err
    assert err.count("tasks registered") == 2 and "tasks registered 2/2" in err
    assert err.count("training") == 1
    outcome = Outcome("FAILED", "chief:0 exited with code 2", "chief:0", 2, ("oops",),
                      {"chief:0": TaskEnd(2, host="n1")})
    top.put(kvmod.ATTEMPT, Wanted(1, 1, (Attempt(0, "FAILED", "chief:0 was killed by SIGKILL"),
                                         )).to_json())
    w.view.read(top)
    assert "attempt 2/1: restarting after chief:0 was killed by SIGKILL" in \
        capsys.readouterr().err
    top.put(kvmod.STATUS, outcome.to_json())
    w.view.read(top)
    assert w.view.outcome == outcome and top.get(kvmod.ACK) == "1"
    with pytest.raises(JobFailed) as failed:
        w._final("FAILED", "")
    assert failed.value.exit_code == 1 and "--task chief:0" in str(failed.value)
    assert "chief:0      n1" in capsys.readouterr().err
    w.view.outcome = None
    with pytest.raises(JobFailed) as killed:
        w._final("KILLED", "Killed by user")
    assert killed.value.exit_code == 3


# ---------------------------------------------------------------- YARN stand-ins
# CI has no cluster: these stand in for YARN (a skein client object, the RM's REST API
# on 127.0.0.1); the real ones are exercised by integration/ on a real Hadoop.


def _spec():
    from tfyarn.core.jobspec import JobSpec, Resources, Role

    return JobSpec("t", "tensorflow-worker", (Role("worker", 2, Resources(1024, 1)),), "true")


class GoneApp:
    """An application client whose AM has just died: every call fails like skein's."""

    def __init__(self):
        import skein

        def boom(*_a, **_k):
            raise skein.exceptions.ConnectionError("Unable to connect to application")

        self.kv = type("KV", (), {"__setitem__": boom, "get": boom, "get_prefix": boom})()
        self.get_containers = boom


class StandInClient:
    """skein.Client as the watcher uses it, answering from a list of reports."""

    def __init__(self, reports, connect_fails=False):
        self.reports = list(reports)
        self.killed = []
        self.connect_fails = connect_fails

    def application_report(self, app_id):
        item = self.reports.pop(0) if len(self.reports) > 1 else self.reports[0]
        if isinstance(item, Exception):
            raise item
        return item

    def connect(self, app_id, wait=False):
        return GoneApp()

    def kill_application(self, app_id):
        self.killed.append(app_id)

    def close(self):
        pass


def _rep(state, final="UNDEFINED", diagnostics="", host="127.0.0.2"):
    """skein's ApplicationReport: `host` is the ApplicationMaster's ("N/A" before it runs)."""
    from types import SimpleNamespace

    return SimpleNamespace(state=state, final_status=final, diagnostics=diagnostics,
                           tracking_url="http://rm/proxy/app",
                           host=host if state == "RUNNING" else "N/A")


NODES = REPO / "tests" / "fixtures" / "hadoop-3.3.6-nodes"  # captured on the 3-node sandbox


def test_an_application_master_lost_with_its_node_is_named(monkeypatch):
    """The RM's diagnostics after the AM's node was SIGKILLed (rm-app-am-node-lost.json)."""
    from tfyarn.core.errors import JobFailed

    diagnostics = json.loads((NODES / "rm-app-am-node-lost.json").read_text())["app"]["diagnostics"]
    client = StandInClient([_rep("RUNNING", host="127.0.0.2"),
                            _rep("FAILED", "FAILED", diagnostics)])
    with pytest.raises(JobFailed) as failed:
        watch.Watcher(Yarn(client), "application_1_0006", _spec(), poll_s=0.01).run()
    text = str(failed.value)
    assert "FAILED: the ApplicationMaster was lost with its node 127.0.0.2, and every task " \
           "ended with it, with no ApplicationMaster attempt left (--am-attempts" in text
    assert "resubmit the job [YARN: Application application_1795585834313_0001 failed 1 times" \
        in text and "Container released on a *lost* node]" in text
    assert "tfyarn logs application_1_0006" in text


def test_a_client_that_never_read_the_final_status_shows_the_drivers_words(tmp_path):
    """The AM went before the client's first look at its store (a detached client that
    attached late; or one starved past the driver's bounded wait): what the driver gave
    YARN as diagnostics (`YarnSite.finish`) reads as the final status would have, the
    traceback indented under its heading."""
    from types import SimpleNamespace

    from tfyarn.core.errors import JobFailed
    from tfyarn.runtime.site import YarnSite

    given = []
    am = SimpleNamespace(shutdown=lambda state, diagnostics: given.append((state, diagnostics)))
    tail = ("Traceback (most recent call last):", '  File "<string>", line 3, in <module>',
            "KeyError: 'k'")
    outcome = Outcome("FAILED", "worker:0 exited with code 1", "worker:0", 1, tail,
                      {"worker:0": TaskEnd(1, host="n1", tail=tail)})
    YarnSite(kvmod.DirKV(str(tmp_path)), App(am)).finish(_spec(), outcome)
    state, diagnostics = given[0]
    client = StandInClient([_rep("RUNNING"), _rep("FINISHED", state, diagnostics)])
    with pytest.raises(JobFailed) as failed:
        watch.Watcher(Yarn(client), "application_1_0007", _spec(), poll_s=0.01).run()
    text = str(failed.value)
    assert "\n".join(outcome.describe("application_1_0007")) in text
    assert "last stderr lines of worker:0:\n  Traceback (most recent call last):" in text
    assert "\ntasks:\n  worker:0" in text and failed.value.exit_code == 1


def _aggregation_rm(app_id: str, page: str, lost: str):
    """A stand-in RM serving captured answers: the application's log aggregation page and
    the LOST nodes' list."""
    import http.server

    from conftest import reply, serve_locally

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            if self.path.startswith(f"/cluster/logaggregationstatus/{app_id}?"):
                reply(self, 200, (NODES / page).read_bytes(), "text/html; charset=utf-8")
            elif self.path.startswith("/ws/v1/cluster/nodes?") and "states=LOST" in self.path:
                reply(self, 200, (NODES / lost).read_bytes())
            else:
                self.send_error(404)

    return serve_locally(Handler)


def test_logs_stop_waiting_for_a_lost_nodes_upload_and_only_for_that():
    """After a node was lost mid-job, the RM's page lists it as still to upload, and
    its LOST list names it (both captured on the 3-node sandbox): that upload never
    comes. Pending on a node not lost, or none pending: nothing is given up."""
    from tfyarn.client import rm

    lost_app = (NODES / "killed-node-app").read_text().split()[0]
    server = _aggregation_rm(lost_app, "rm-logaggregationstatus-node-lost.html",
                             "rm-nodes-lost.json")
    try:
        client = rm.RestClient((f"http://127.0.0.1:{server.server_address[1]}",), "root")
        by_node = client.aggregation_by_node(lost_app)
        lost = client.lost_nodes()
    finally:
        server.shutdown()
    killed = (NODES / "killed-node-app").read_text().split()[1]
    pending = sorted(n for n, s in by_node.items() if s not in rm.AGGREGATED)
    assert [n.rsplit(":", 1)[0] for n in pending] == [killed], by_node
    assert rm.in_vain(by_node, lost) == pending
    assert rm.in_vain(by_node, set()) == []  # the same node not (yet) lost: wait on
    ended = rm.aggregation_by_node(
        (NODES / "rm-logaggregationstatus-just-ended.html").read_text())
    assert len(ended) == 3 and rm.in_vain(ended, lost) == []  # live nodes still to upload
    uploaded = rm.aggregation_by_node(
        (NODES / "rm-logaggregationstatus-all-uploaded.html").read_text())
    none_lost = json.loads((NODES / "rm-nodes-lost-none.json").read_text())
    assert uploaded == {} and rm.listed(none_lost, "nodes", "node") == []
    assert rm.in_vain(uploaded, lost) == []


class AwayClient(StandInClient):
    """A ResourceManager that restarts: the second report call hangs (as Hadoop's client
    retries) until el_submit has said that it is away."""

    def __init__(self, reports, said_away):
        super().__init__(reports)
        self.calls = 0
        self.said_away = said_away

    def application_report(self, app_id):
        self.calls += 1
        if self.calls == 2:
            assert self.said_away.wait(30)
        return super().application_report(app_id)


@pytest.fixture
def told(monkeypatch):
    """What the watcher says, kept; and an event set once it says the RM is away."""
    import threading

    said, away = [], threading.Event()

    def record(text, *_a, **_k):
        said.append(text)
        if "does not answer" in text:
            away.set()

    monkeypatch.setattr(watch, "say", record)
    return said, away


def test_watcher_says_once_that_the_rm_is_away_and_once_that_it_is_back(told):
    said, away = told
    client = AwayClient([_rep("RUNNING"), _rep("RUNNING"), _rep("RUNNING"),
                         _rep("FINISHED", "SUCCEEDED")], away)
    assert watch.Watcher(Yarn(client), "application_1_0007", _spec(), poll_s=0.01,
                         away_s=0.05).run() == 0
    assert len([s for s in said if "the ResourceManager does not answer" in s]) == 1, said
    assert len([s for s in said if "the ResourceManager answers again" in s]) == 1, said


def test_status_and_logs_wait_out_an_absent_resourcemanager(told):
    """`tfyarn status` / `logs` read their report through `ride_through`: the RM away is
    said once, its return once, and the report comes back."""
    said, away = told
    reports = watch.Reports(Yarn(AwayClient([_rep("RUNNING"), _rep("RUNNING")], away)),
                            "application_1_0008", poll_s=0.01, away_s=0.05)
    assert str(watch.ride_through(reports).state) == "RUNNING"  # the first call answers
    assert str(watch.ride_through(reports).state) == "RUNNING"  # the second hangs a while
    assert len([s for s in said if "the ResourceManager does not answer" in s]) == 1, said
    assert len([s for s in said if "the ResourceManager answers again" in s]) == 1, said


def test_watcher_survives_an_am_that_dies_right_after_running(monkeypatch, capsys):
    from tfyarn.core.errors import JobFailed

    client = StandInClient([_rep("RUNNING"), _rep("RUNNING"),
                            _rep("FAILED", "FAILED", "AM container exited with code 1")])
    with pytest.raises(JobFailed) as failed:
        watch.Watcher(Yarn(client), "application_1_0003", _spec(), poll_s=0.01).run()
    assert failed.value.exit_code == 1
    assert "application_1_0003 FAILED: AM container exited with code 1" in str(failed.value)


def test_watcher_gives_up_cleanly_when_yarn_stays_unreachable(monkeypatch):
    import skein

    from tfyarn.core.errors import TfYarnError

    client = StandInClient([skein.exceptions.ConnectionError("RM down")])
    with pytest.raises(TfYarnError) as lost:
        watch.Watcher(Yarn(client), "application_1_0004", _spec(), poll_s=0.01).run()
    assert "cannot reach YARN for application_1_0004" in str(lost.value)
    assert "tfyarn status application_1_0004" in str(lost.value)


def test_watcher_on_sigterm_kills_the_app_and_exits_143(monkeypatch):
    import signal

    from tfyarn.client.interrupts import Interrupts
    from tfyarn.core.errors import JobFailed

    client = StandInClient([_rep("RUNNING")])
    interrupts = Interrupts(received=[signal.SIGTERM], armed=False)
    with pytest.raises(JobFailed) as ended:
        watch.Watcher(Yarn(client), "application_1_0005", _spec(), interrupts,
                      poll_s=0.01).run()
    assert ended.value.exit_code == 143 and "terminated (SIGTERM)" in str(ended.value)
    assert client.killed == ["application_1_0005"]  # the AM was unreachable: forced


def test_gpu_request_on_a_cluster_without_gpus_is_one_line():
    from tfyarn.core.errors import SpecError
    from tfyarn.core.jobspec import JobSpec, Resources, Role

    spec = JobSpec("t", "standalone", (Role("worker", 1, Resources(1024, 1, 1)),), "true")

    class NoGpuClient:
        def submit(self, _spec):
            raise ValueError("Resource type 'yarn.io/gpu' not found")

    with pytest.raises(SpecError) as refused:
        Yarn(NoGpuClient()).submit(object(), max(r.resources.gpus for r in spec.roles))
    assert str(refused.value).startswith("-wg 1: this cluster has no GPU resource (yarn.io/gpu)")


def _rm_site(conf_dir, ports, ha=False):
    props = {}
    if ha:
        props["yarn.resourcemanager.ha.enabled"] = "true"
        props["yarn.resourcemanager.ha.rm-ids"] = ",".join(f"rm{i}" for i in range(len(ports)))
        for i, port in enumerate(ports):
            props[f"yarn.resourcemanager.webapp.address.rm{i}"] = f"127.0.0.1:{port}"
    else:
        props["yarn.resourcemanager.hostname"] = "127.0.0.1"
        props["yarn.resourcemanager.webapp.address"] = "${yarn.resourcemanager.hostname}:" \
            f"{ports[0]}"
    body = "".join(f"<property><name>{k}</name><value>{v}</value></property>"
                   for k, v in props.items())
    (conf_dir / "yarn-site.xml").write_text(f"<configuration>{body}</configuration>")


@pytest.fixture
def rest_rm():
    """A stand-in for the RM's REST API on 127.0.0.1 (apps, one app, 404 for others)."""
    import http.server

    from conftest import reply, serve_locally

    app = {"id": "application_1_0009", "name": "census", "state": "FINISHED",
           "finalStatus": "SUCCEEDED", "trackingUrl": "http://rm/app", "diagnostics": "done",
           "startedTime": 1_700_000_000_000, "applicationTags": "tfyarn"}
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            seen.append(self.path)
            if self.path.startswith("/ws/v1/cluster/apps/application_1_0009?"):
                body = {"app": app}
            elif self.path.startswith("/ws/v1/cluster/apps?"):
                body = {"apps": {"app": [app]}}
            else:
                self.send_error(404)
                return
            reply(self, 200, json.dumps(body).encode())

    server = serve_locally(Handler)
    yield server.server_address[1], seen
    server.shutdown()


def _tfyarn(*args, env):
    import subprocess

    return subprocess.run([sys.executable, "-m", "tfyarn", *args], env=env, capture_output=True,
                          text=True, timeout=60)


def test_status_and_ls_read_the_rm_rest_api_without_a_jvm(rest_rm, tmp_path, no_hadoop_env):
    port, seen = rest_rm
    _rm_site(tmp_path, [port])
    status = _tfyarn("status", "application_1_0009", "-conf", str(tmp_path), env=no_hadoop_env)
    assert status.returncode == 0, status.stderr  # no `yarn` on PATH: REST alone answered
    assert "state: FINISHED\nfinal status: SUCCEEDED" in status.stdout
    ls = _tfyarn("ls", "--all", "--conf", str(tmp_path), env=no_hadoop_env)
    assert ls.returncode == 0 and "application_1_0009" in ls.stdout and "census" in ls.stdout
    assert any("applicationTags=tfyarn" in p for p in seen)
    missing = _tfyarn("status", "application_1_0404", "-conf", str(tmp_path), env=no_hadoop_env)
    assert missing.returncode == 1 and "no application application_1_0404" in missing.stderr


def test_status_is_read_in_one_place_for_the_cli_and_the_api(tmp_path, no_hadoop_env):
    """`tfyarn status` prints what the API's Job.status() returns: one reader of YARN's
    report (here the RM's captured answer for an application whose AM node was lost)."""
    import http.server

    from conftest import reply, serve_locally

    import tfyarn

    answer = (NODES / "rm-app-am-node-lost.json").read_bytes()
    app = json.loads(answer)["app"]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            if self.path.startswith(f"/ws/v1/cluster/apps/{app['id']}?"):
                reply(self, 200, answer)
            else:
                self.send_error(404)

    server = serve_locally(Handler)
    try:
        _rm_site(tmp_path, [server.server_address[1]])
        api = tfyarn.attach(app["id"], conf_dir=str(tmp_path)).status()
        cli = _tfyarn("status", app["id"], "-conf", str(tmp_path), env=no_hadoop_env)
    finally:
        server.shutdown()
    assert (api.state, api.final_status, api.name) == ("FAILED", "FAILED", app["name"])
    assert api.diagnostics == app["diagnostics"] and api.tracking_url == app["trackingUrl"]
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.startswith(
        f"application: {app['id']}\nname: {api.name}\nstate: {api.state}\nfinal status: "
        f"{api.final_status}\ntracking URL: {api.tracking_url}\ndiagnostics:"), cli.stdout
    assert api.diagnostics.strip() in cli.stdout


def test_rest_ha_tries_every_rm(rest_rm, tmp_path, no_hadoop_env):
    import socket

    port, _ = rest_rm
    with socket.socket() as s:  # a port where nothing listens: the standby that is down
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    _rm_site(tmp_path, [dead, port], ha=True)
    out = _tfyarn("status", "application_1_0009", "-conf", str(tmp_path), env=no_hadoop_env)
    assert out.returncode == 0 and "final status: SUCCEEDED" in out.stdout, out.stderr


def test_kerberos_checks_the_ticket_before_asking_rest(rest_rm, tmp_path, no_hadoop_env):
    """With Kerberos, REST is asked as the login (SPNEGO when challenged), after the
    ticket check: no ticket is one `Error:` line and the RM stand-in sees no request. An
    RM whose web UI does not ask for SPNEGO (Kerberos RPC, simple HTTP auth) answers
    as it is (here MIT's klist is off PATH, so the ticket cannot be checked first). The
    ticket check needs MIT's klist (Debian's krb5-user: CI sets TFYARN_REQUIRE_KERBEROS=1,
    so there it never skips)."""
    port, seen = rest_rm
    _rm_site(tmp_path, [port])
    (tmp_path / "core-site.xml").write_text(
        "<configuration><property><name>hadoop.security.authentication</name>"
        "<value>kerberos</value></property></configuration>")
    env = {**no_hadoop_env, "KRB5CCNAME": f"FILE:{tmp_path / 'empty-ccache'}"}
    without_klist = tmp_path / "bin"
    without_klist.mkdir()
    (without_klist / "python").symlink_to(sys.executable)
    out = _tfyarn("status", "application_1_0009", "-conf", str(tmp_path),
                  env={**env, "PATH": str(without_klist)})
    assert out.returncode == 0 and "final status: SUCCEEDED" in out.stdout and seen, out.stderr
    if shutil.which("klist", path=env.get("PATH")) is None:
        if os.environ.get("TFYARN_REQUIRE_KERBEROS"):
            pytest.fail("MIT's klist is missing (apt-get install krb5-user)")
        pytest.skip("no MIT klist here (apt-get install krb5-user): the ticket check needs it")
    seen.clear()
    out = _tfyarn("status", "application_1_0009", "-conf", str(tmp_path), env=env)
    assert out.returncode == 2 and out.stderr.startswith(
        f"Error: no Kerberos ticket in FILE:{tmp_path / 'empty-ccache'}: run kinit"), out.stderr
    assert seen == []


def test_kill_of_a_finished_app_needs_no_jvm(rest_rm, tmp_path, no_hadoop_env):
    """No `yarn` on PATH (no JVM can start): the RM's REST answer alone settles it."""
    port, seen = rest_rm
    _rm_site(tmp_path, [port])
    kill = _tfyarn("kill", "application_1_0009", "-conf", str(tmp_path), env=no_hadoop_env)
    assert kill.returncode == 0 and "already ended: FINISHED / SUCCEEDED" in kill.stderr
    assert [p.split("?")[0] for p in seen] == ["/ws/v1/cluster/apps/application_1_0009"]


def test_skein_failure_inside_a_lifecycle_command_is_one_line(monkeypatch):
    import contextlib

    import skein

    from tfyarn.core.errors import TfYarnError

    class Failing:
        def __enter__(self):
            return self

        def __exit__(self, *_a):
            return False

        def get_applications(self, states=None):
            raise skein.exceptions.ConnectionError("lost the skein driver")

        def close(self):
            pass

    from tfyarn.api import yarnjob

    monkeypatch.setattr(cluster, "require_client", lambda _opts: None)
    monkeypatch.setattr(cluster, "_start_client", lambda *_a: Yarn(Failing()))
    with pytest.raises(TfYarnError) as failed, contextlib.suppress(SystemExit):
        yarnjob.applications(True, cluster.ClientOptions(settings=Settings()))
    assert str(failed.value).startswith("cannot list applications: lost the skein driver")
    assert "skein's driver log: " in str(failed.value)  # where the JVM's own words are


def test_a_signal_during_submission_still_kills_the_submitted_app(monkeypatch):
    """The app id YARN returned must never be lost: signals are deferred from before the
    submit call, and the watcher's first step kills the application."""
    import signal

    from tfyarn.client.interrupts import Interrupts
    from tfyarn.core.errors import JobFailed

    interrupts = Interrupts().install()
    client = StandInClient([_rep("ACCEPTED")])

    def submit_then_ctrl_c(_spec):
        signal.raise_signal(signal.SIGINT)  # arrives while YARN accepts the application
        return "application_1_0042"

    client.submit = submit_then_ctrl_c
    for module in (cluster, yarnsubmit):
        monkeypatch.setattr(module, "require_client", lambda _o: None)
    monkeypatch.setattr(cluster, "_start_client", lambda *_a: Yarn(client))
    monkeypatch.setattr(yarnsubmit.appspec, "application_spec", lambda *_a: object())
    try:
        with pytest.raises(JobFailed) as ended:
            yarnsubmit.submit_and_watch(
                _spec(), cluster.ClientOptions(detach=True, settings=Settings()), interrupts)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT
                          else signal.SIG_DFL)
    assert ended.value.exit_code == 130 and client.killed == ["application_1_0042"]



def nm_containerlogs(cid: str, node: str, file: str, data: bytes, asked: int | None,
                     running: bool, modified: str = "Mon Nov 23 12:49:24 +0000 2026") -> bytes:
    """A Hadoop 3.3.6 NodeManager's answer to /ws/v1/node/containerlogs/CID/FILE[?size=N]:
    the bytes (all, the first N, or the last -N) framed by a header and a footer glued to
    them. Checked byte for byte against captured answers (FIXTURES/nm-containerlogs-*)."""
    shown = data if asked is None else (
        data[:asked] if asked >= 0 else data[max(0, len(data) + asked):])
    head = f"Container: {cid} on {node}"
    end = f"End of LogType:{file}"
    note = (f".This log file belongs to a running container ({cid}) and so may not be complete."
            if running else ".")
    return (f"{head}\nLogAggregationType: LOCAL\n{'=' * len(head)}\nLogType:{file}\n"
            f"LogLastModifiedTime:{modified}\nLogLength:{len(data)}\nLogContents:\n").encode() \
        + shown + f"{end}{note}\n{'*' * (len(end) + 50)}\n\n".encode()


class NodeManagerLogs:
    """A stand-in NodeManager serving containerlogs as Hadoop 3.3.6 does (nm_containerlogs;
    404 "Unknown container" once it has forgotten one), and a stand-in skein app listing
    the containers on it. The test grows `files` and sets `forgotten`."""

    def __init__(self):
        import http.server
        import urllib.parse

        from conftest import reply, serve_locally

        self.files: dict[str, bytes] = {}
        self.forgotten: set[str] = set()
        self.asked: list[str] = []  # the query strings received
        nm = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                url = urllib.parse.urlparse(self.path)
                nm.asked.append(url.query)
                data = nm.files.get(url.path)
                cid, file = url.path.split("/")[-2:]
                if data is None or cid in nm.forgotten:
                    return reply(self, 404, b"Unknown container. Container either has not "
                                 b"started or has already completed or doesn't belong to this "
                                 b"node at all.", "text/plain")
                size = urllib.parse.parse_qs(url.query).get("size")
                running = any(c.yarn_container_id == cid and c.state == "RUNNING"
                              for c in nm.containers)
                reply(self, 200, nm.render(cid, file, data, int(size[0]) if size else None,
                                           running), "text/plain;charset=utf-8")

        self.server = serve_locally(Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.containers: list = []

    @staticmethod
    def render(cid: str, file: str, data: bytes, asked: int | None, running: bool) -> bytes:
        return nm_containerlogs(cid, "127.0.0.1:8041", file, data, asked, running)

    def add(self, service: str, instance: int, state: str = "RUNNING"):
        from types import SimpleNamespace

        c = SimpleNamespace(id=f"{service}_{instance}", service_name=service, state=state,
                            yarn_container_id=f"container_1_0001_01_{len(self.containers):06d}",
                            yarn_node_http_address=self.address)
        self.containers.append(c)
        return f"/ws/v1/node/containerlogs/{c.yarn_container_id}/{service}.log", c

    def get_containers(self, states=None):
        return [c for c in self.containers if states is None or c.state in states]


def test_the_stand_in_nodemanager_answers_as_hadoop_3_3_6():
    from conftest import FIXTURES

    from tfyarn.client.livelogs import frames

    cases = [  # fixture, asked, running, its time
        ("nm-containerlogs-chief-servicelog-size-minus200-midrun.body", -200, True,
         "Mon Nov 23 12:49:24 +0000 2026"),
        ("nm-containerlogs-skein-envdump-servicelog-size-minus64-one-container-done-app-"
         "running.body", -64, False, "Mon Nov 23 12:51:02 +0000 2026"),
        ("nm-containerlogs-chief-servicelog-midrun.body", None, True, None),
    ]
    for name, asked, running, modified in cases:
        real = (FIXTURES / name).read_bytes()
        framed = next(frames(real, -asked if asked else None))
        whole = b"x" * (framed.length - len(framed.data)) + framed.data  # what the file was
        modified = modified or re.search(rb"LogLastModifiedTime:(.*)\n", real)[1].decode()
        node = re.search(rb"^Container: \S+ on (\S+)", real)[1].decode()
        assert nm_containerlogs(framed.container, node, framed.file, whole, asked, running,
                                modified) == real, name


def test_live_logs_follow_every_container_as_it_grows():
    import io

    from tfyarn.client.livelogs import LiveLogs

    nm = NodeManagerLogs()
    w1, _ = nm.add("worker-1", 0)
    group, c_group = nm.add("workers-0", 0)
    tb, _ = nm.add("tensorboard", 0)
    nm.files[w1] = b"tfyarn: worker:1: registered\nstep 1\nste"
    nm.files[group] = b"[worker:2] a\n[worker:3] b\n"
    nm.files[tb] = b"TensorBoard chatter\n"
    out = io.BytesIO()
    live = LiveLogs(App(nm), out)
    live.poll()
    live.poll()  # nothing new: nothing twice
    assert out.getvalue() == (b"[worker:1] tfyarn: worker:1: registered\n[worker:1] step 1\n"
                              b"[worker:2] a\n[worker:3] b\n")
    nm.files[w1] += b"p 2\nlast words without newline"
    c_group.state = "SUCCEEDED"
    live.poll()
    assert out.getvalue().endswith(b"[worker:1] step 2\n")  # the partial line waits
    nm.containers[0].state = "FAILED"  # ended: its last line is shown
    w1_restarted, _ = nm.add("worker-1", 1)  # a restarted gang: a new container, followed too
    nm.files[w1_restarted] = b"attempt 1\n"
    live.poll()
    assert out.getvalue().endswith(b"[worker:1] last words without newline\n"
                                   b"[worker:1] attempt 1\n")
    nm.server.shutdown()


def test_live_logs_of_one_task():
    import io

    from tfyarn.client.livelogs import LiveLogs

    nm = NodeManagerLogs()
    w0, _ = nm.add("worker-0", 0)
    group, _ = nm.add("workers-0", 0)
    nm.files[w0] = b"zero\n"
    nm.files[group] = b"[worker:2] mine\n[worker:3] not mine\n"
    out = io.BytesIO()
    LiveLogs(App(nm), out, task="worker:2").poll()
    assert out.getvalue() == b"[worker:2] mine\n"
    nm.server.shutdown()


def test_live_logs_show_every_line_once_in_order_however_the_log_grows():
    """2,000 numbered lines written in uneven bursts (some far over what one poll asks
    for), lines that look like Hadoop's frame, a partial line across polls; then the
    application ends, the NodeManager forgets the container, and the rest comes from the
    aggregated logs. Every line exactly once, in order, whole, prefixed."""
    import io

    from tfyarn.client.livelogs import TAIL_ASK, LiveLogs

    nm = NodeManagerLogs()
    path, c = nm.add("worker-0", 0)
    lines = [f"line {i:04d} of worker:0 " + "x" * (i % 97) for i in range(2000)]
    lines[7] = "End of LogType:worker-0.log. (a task printing Hadoop's own words)"
    lines[8] = "Container: container_9_0009_01_000009 on 127.0.0.1:8041"
    text = "".join(x + "\n" for x in lines).encode()
    out = io.BytesIO()
    live = LiveLogs(App(nm), out)
    cuts = [0, 10, 333, 334 + TAIL_ASK // 40, 1500 * 60, len(text) - 25]
    for cut in cuts[1:]:
        nm.files[path] = text[:cut]  # mid-line cuts: a partial line waits for its end
        live.poll()
    assert live.pending() == [c.yarn_container_id]
    c.state = "SUCCEEDED"
    nm.forgotten.add(c.yarn_container_id)  # the NodeManager forgot it: 404
    live.poll()
    aggregated = (f"Container: {c.yarn_container_id} on 127.0.0.1_8041\n"
                  "LogAggregationType: AGGREGATED\n====\nLogType:worker-0.log\n"
                  f"LogLastModifiedTime:Mon Nov 23 12:49:48 +0000 2026\nLogLength:{len(text)}\n"
                  "LogContents:\n").encode() + text + b"\nEnd of LogType:worker-0.log\n***\n\n"
    live.finish(aggregated)
    assert live.pending() == []
    assert out.getvalue().decode().splitlines() == [f"[worker:0] {x}" for x in lines]
    assert all(q.startswith("size=-") for q in nm.asked)  # only ever the tail
    nm.server.shutdown()


def test_frames_of_real_yarn_logs_output():
    from conftest import FIXTURES

    from tfyarn.client.livelogs import frames

    text = (FIXTURES / "yarn-logs-app-after.stdout").read_bytes()
    found = {(f.container[-6:], f.file): f for f in frames(text)}
    chief = found[("000003", "chief-0.log")]
    assert len(chief.data) == chief.length
    assert b"line 24 from chief:0\n" in chief.data and b"End of LogType" not in chief.data
    assert ("000001", "application.master.log") in found


def test_an_application_the_rm_forgot_after_a_restart_is_said_as_such(monkeypatch):
    """An RM restarted without recovery answers as for any unknown id (skein's error as
    captured from the sandbox's RM): after reports of the app, el_submit says it was lost."""
    from tfyarn.core.errors import JobFailed

    captured = (NODES / "skein-application_report-unknown-app.txt").read_text()
    unknown = ValueError(captured.split(": ", 1)[1].strip())
    client = StandInClient([_rep("RUNNING"), _rep("RUNNING"), unknown])
    with pytest.raises(JobFailed) as lost:
        watch.Watcher(Yarn(client), "application_1795585834313_0999", _spec(), poll_s=0.01).run()
    text = str(lost.value)
    assert text.startswith("application_1795585834313_0999 is gone: the ResourceManager "
                           "restarted and lost the application (no application "
                           "application_1795585834313_0999: Unknown ApplicationId"), text
    assert "yarn.resourcemanager.recovery.enabled" in text and "Resubmit the job" in text
    # an id never seen is still plain bad input, not a lost application
    client = StandInClient([unknown])
    with pytest.raises(Exception) as never:
        watch.Watcher(Yarn(client), "application_1795585834313_0999", _spec(), poll_s=0.01).run()
    assert "is gone" not in str(never.value) and "Unknown ApplicationId" in str(never.value)


def test_the_queues_largest_container_is_read_from_the_schedulers_answer():
    """Captured on the sandbox (Capacity Scheduler, queues default and urgent)."""
    import json

    from tfyarn.client.rm import max_allocation_mb

    answer = json.loads((REPO / "tests" / "fixtures" / "hadoop-3.3.6" /
                         "rm-scheduler-two-queues.body").read_text())
    assert max_allocation_mb(answer, "default") == 4096
    assert max_allocation_mb(answer, "root.urgent") == 4096
    assert max_allocation_mb(answer, "nosuchqueue") is None
    assert max_allocation_mb({}, "default") is None


def test_the_rm_report_says_when_the_application_ended():
    """AppReport.finished_ms (how long `status --tasks` may wait for a kept page on its
    way, #46): Hadoop 3.3.6's answers mid-run (finishedTime 0) and after the end."""
    import json

    from conftest import FIXTURES

    from tfyarn.core.appreport import AppReport

    mid, after = (AppReport.from_rest(json.loads((FIXTURES / f"rm-app-{n}.body")
                                                 .read_text())["app"])
                  for n in ("midrun", "after"))
    assert (mid.finished_ms, mid.ended) == (0, False)
    assert after.ended and after.finished_ms > after.started_ms > 0
