"""The Python API against the real sandbox: submit, follow, wait, kill, attach, run(fn)."""

from __future__ import annotations

import getpass
import os
import sys

import interrupting
import pytest
from conftest import final_state, node_processes, wait_until

import tfyarn
from tfyarn.protocol.taskstate import State

pytestmark = pytest.mark.concurrent  # may share the cluster (integration/conftest.py)


@pytest.fixture
def submitted(apps):
    """tfyarn.submit on YARN with the nodes' python = this interpreter; ids are killed at
    teardown if still alive."""
    def submit(**options):
        job = tfyarn.submit(python=sys.executable, **options)
        apps.append(job.id)
        return job

    return submit


def test_run_returns_the_chiefs_value_from_a_ps_job():
    def place(scale):
        import json

        config = json.loads(os.environ["TF_CONFIG"])
        return config["task"], scale * 2, sorted(config["cluster"])

    assert tfyarn.run(place, 21, kind="tensorflow-ps", ps=1, workers=3,
                      python=sys.executable) == ({"type": "chief", "index": 0}, 42,
                                                 ["chief", "ps", "worker"])


def test_logs_follow_yields_every_line_once_and_wait_gives_the_outcome(submitted):
    job = submitted(kind="tensorflow-worker", workers=2,
                    command="for i in $(seq 1 40); do echo n-$TFYARN_TASK_INDEX-$i; "
                            "sleep 0.1; done")
    seen = [x.split("] ", 1)[-1] for x in job.logs(follow=True) if "n-" in x]
    assert sorted(seen) == sorted(f"n-{t}-{i}" for t in (0, 1) for i in range(1, 41))
    outcome = job.wait()
    assert outcome.state == "SUCCEEDED"
    assert [(str(s.task), s.state) for s in job.tasks()] == [
        ("worker:0", State.SUCCEEDED), ("worker:1", State.SUCCEEDED)]
    assert job.model_dir == f"hdfs:///user/{getpass.getuser()}/.tfyarn/models/{job.id}"
    job.close()


def test_a_failing_task_raises_job_failed_naming_it(submitted):
    job = submitted(kind="tensorflow-worker", workers=2,
                    command='[ "$TFYARN_TASK_INDEX" = 1 ] && { echo bad-1 >&2; exit 4; }; '
                            "sleep 1")
    with pytest.raises(tfyarn.JobFailed) as failed:
        job.wait()
    text = str(failed.value)
    assert text.splitlines()[0] == f"{job.id} FAILED: worker:1 exited with code 4"
    assert "  bad-1" in text and f"tfyarn logs {job.id} --task worker:1" in text


@pytest.fixture
def python_sigint():
    with interrupting.python_sigint():
        yield


def test_ctrl_c_in_wait_kills_the_application_and_leaves_no_container(submitted, python_sigint):
    job = submitted(kind="tensorflow-worker", workers=2, command="sleep 600")

    failed = interrupting.interrupt_once_running(job, 2, 300, 0.5)
    with pytest.raises(KeyboardInterrupt):
        job.wait()
    assert not failed, f"job.tasks() from another thread failed: {failed[0]!r}"
    wait_until(lambda: final_state(job.id).split("/")[0] in ("KILLED", "FINISHED"), 120,
               "the application's end")
    assert final_state(job.id).endswith("/KILLED")
    wait_until(lambda: node_processes(job.id) == [], 60, "no process of the application")


def test_attach_follows_a_job_el_submit_submitted(el_submit):
    out, app_id = el_submit("-t", "tensorflow-worker", "-wn", "2", "--detach", "-c",
                            "echo attached-$TFYARN_TASK_INDEX; sleep 5")
    assert out.returncode == 0, out.stderr
    job = tfyarn.attach(app_id)
    outcome = job.wait()
    assert outcome.state == "SUCCEEDED" and len(outcome.tasks) == 2
    assert job.status().final_status == "SUCCEEDED"
    assert sorted(x for x in job.logs() if x.startswith("attached-")) == [
        "attached-0", "attached-1"]
    assert job.model_dir.endswith(f"/.tfyarn/models/{app_id}")


def test_run_ships_the_callers_own_env_on_yarn(tmp_path):
    """environment='current' on YARN: the caller's venv goes as -m virtual-env (through
    the HDFS cache) and the tasks run in it."""
    import subprocess

    from venvs import small_venv

    venv = small_venv(tmp_path)
    (tmp_path / "caller.py").write_text(
        "import os, sys, tfyarn\n"
        "def where():\n    return sys.prefix\n"
        "print('RESULT', tfyarn.run(where, kind='tensorflow-worker', workers=2, "
        "environment='current'))\n")
    out = subprocess.run([str(venv / "bin" / "python"), "caller.py"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TFYARN_CACHE": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr[-3000:]
    prefix = out.stdout.split("RESULT ", 1)[1].strip()
    assert prefix.endswith("/env") and "appcache" in prefix, prefix


def test_wait_with_progress_and_metrics_after_the_application_ended(submitted, capfd, tmp_path):
    """`job.wait(progress=True)` on YARN prints the live line's plain lines (stderr is
    not a terminal here: TFYARN_PROGRESS_S=1), and `job.metrics()` reads the series from
    the job's kept page in HDFS once its store has gone with the application."""
    train = tmp_path / "train.py"
    train.write_text("import time, tfyarn\nfor s in range(1, 81):\n"
                     "    tfyarn.progress(s, total=80, loss=1.0 / s)\n    time.sleep(0.1)\n")
    job = submitted(kind="tensorflow-worker", workers=2, heartbeat_timeout="5",
                    files=[str(train)], command="python train.py")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TFYARN_PROGRESS_S", "1")
        assert job.wait(progress=True).state == "SUCCEEDED"
    err = capfd.readouterr().err
    assert any(x.startswith("tfyarn: training: step ") and "/80 · " in x
               for x in err.splitlines()), err[-3000:]
    wait_until(lambda: job.metrics(), 60, "the kept page's training")  # kept after the end
    rows = job.metrics()
    assert {r["task"] for r in rows} == {"worker:0", "worker:1"}
    assert max(r["step"] for r in rows) == 80 and all("loss" in r for r in rows), rows
    job.close()
