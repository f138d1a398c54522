"""The YARN client's error paths and output helpers, without a cluster."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tfyarn import kv as kvmod
from tfyarn import yarn
from tfyarn.policy import EXIT_TFYARN, Outcome, format_tasks
from tfyarn.tfconfig import Task


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
        "Error: " + yarn.NO_HADOOP + " (missing: yarn)"]
    assert not os.path.exists(os.path.join(no_hadoop_env["HOME"], ".skein"))


def test_broken_hadoop_client_is_explained(el_submit, no_hadoop_env, tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "yarn").write_text("#!/bin/sh\nexit 1\n")
    (fake / "yarn").chmod(0o755)
    env = {**no_hadoop_env, "PATH": f"{fake}:{no_hadoop_env['PATH']}"}
    out = el_submit("-t", "standalone", "-c", "true", env=env)
    assert out.returncode == EXIT_TFYARN and "Traceback" not in out.stderr
    assert "Error: `yarn classpath --glob` failed with exit code 1" in out.stderr


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
    picked = yarn.select_task_logs(YARN_LOGS, "worker:1")
    assert "boom" in picked and "chief:0" not in picked
    assert picked.startswith("Container: container_1_0001_01_000002")
    assert yarn.select_task_logs(YARN_LOGS, "worker:7") == ""


def test_failure_text_names_task_tail_and_next_command():
    outcome = Outcome("FAILED", "worker:1 exited with code 3", "worker:1", 3, ("a", "boom"))
    text = yarn.failure_text("application_7_0001", "FAILED", outcome, "")
    assert text.splitlines()[0] == "application_7_0001 FAILED: worker:1 exited with code 3"
    assert "  boom" in text and "tfyarn logs application_7_0001 --task worker:1" in text
    bare = yarn.failure_text("application_7_0001", "KILLED", None, "Killed by user\n")
    assert "KILLED: Killed by user" in bare and "yarn logs -applicationId" in bare


def test_task_tables(tmp_path):
    lines = format_tasks({"ps:0": {"host": "n1", "code": -15, "stopped": True, "reason": "done"},
                          "chief:0": {"host": "n2", "code": 0, "stopped": False}})
    assert lines[0].split()[:4] == ["ps:0", "n1", "exit", "-15"] and "stopped: done" in lines[0]
    store = kvmod.DirKV(str(tmp_path))
    store.put(kvmod.addr_key(Task("ps", 0)), "n1:1")
    store.put(kvmod.addr_key(Task("chief", 0)), "n2:2")
    store.put(kvmod.start_key(Task("chief", 0)), "{}")
    store.put(kvmod.exit_key(Task("ps", 0)), json.dumps({"code": 0}))
    live = yarn.live_tasks(store)
    assert [x.split() for x in live] == [["chief:0", "n2:2", "running"],
                                         ["ps:0", "n1:1", "exit", "0"]]


def test_watcher_progress_and_final_status(tmp_path, capsys):
    from types import SimpleNamespace

    from tfyarn.errors import JobFailed
    from tfyarn.jobspec import JobSpec, Resources, Role

    spec = JobSpec("t", "tensorflow-ps", (Role("ps", 1, Resources(1024, 1)),
                                          Role("chief", 1, Resources(1024, 1))), "true")
    store = kvmod.DirKV(str(tmp_path))
    w = yarn.Watcher(client=None, app_id="application_1_0002", spec=spec)
    store.put(kvmod.addr_key(Task("ps", 0)), "n1:1")
    w._read_store(store)
    store.put(kvmod.addr_key(Task("chief", 0)), "n1:2")
    store.put(kvmod.PHASE, "running")
    w._read_store(store)
    w._read_store(store)  # nothing new: nothing printed twice
    err = capsys.readouterr().err
    assert err.count("tasks registered") == 2 and "tasks registered 2/2" in err
    assert err.count("training") == 1
    outcome = Outcome("FAILED", "chief:0 exited with code 2", "chief:0", 2, ("oops",),
                      {"chief:0": {"host": "n1", "code": 2}})
    store.put(kvmod.STATUS, outcome.to_json())
    w._read_store(store)
    assert w.outcome == outcome and store.get(kvmod.ACK) == "1"
    with pytest.raises(JobFailed) as failed:
        w._final(SimpleNamespace(final_status="FAILED", diagnostics=""))
    assert failed.value.exit_code == 1 and "--task chief:0" in str(failed.value)
    assert "chief:0      n1" in capsys.readouterr().err
    w.outcome = None
    with pytest.raises(JobFailed) as killed:
        w._final(SimpleNamespace(final_status="KILLED", diagnostics="Killed by user"))
    assert killed.value.exit_code == 3
