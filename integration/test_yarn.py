"""tfyarn on a real YARN cluster (pytest integration --yarn). Containers stay <= 1 GB."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time

import pytest
from conftest import DATA, REPO, aggregated_logs, final_state, py, yarn_cli

pytestmark = pytest.mark.yarn
SMALL = ["-pm", "1024", "-wm", "1024"]
DUMP = ("import json, os; print('DUMP ' + json.dumps({'tf': json.loads(os.environ['TF_CONFIG']),"
        " 'type': os.environ['TFYARN_TASK_TYPE'], 'index': os.environ['TFYARN_TASK_INDEX']}))")


def test_seed_census_command(el_submit, tmp_path):
    work = tmp_path / "census"
    work.mkdir()
    shutil.copy(REPO / "examples" / "census" / "census_single.py", work)
    for name in ("adult.data", "adult.test"):
        shutil.copy(DATA / name, work)
    out, app_id = el_submit("-t", "tensorflow-ps", "-a", "wide_and_deep", "-m", "local", "-x",
                            "True", "-f", "./", "-pn", "1", "-pc", "1", "-pm", "1024", "-wn", "1",
                            "-wc", "1", "-wm", "1024", "-c", "python", "census_single.py",
                            cwd=work)
    assert out.returncode == 0, out.stderr
    assert final_state(app_id) == "FINISHED/SUCCEEDED"
    chief = aggregated_logs(app_id, "chief:0")
    acc = [float(x) for x in re.findall(r"eval_accuracy=(\d\.\d+)", chief)]
    assert acc and acc[-1] >= 0.83, chief[-3000:]


def test_tf_config_consistent_across_containers(el_submit):
    out, app_id = el_submit("-t", "tensorflow-ps", "-pn", "2", "-wn", "3", "-x", "False", *SMALL,
                            "-c", py(DUMP))
    assert out.returncode == 0, out.stderr
    text = aggregated_logs(app_id)
    dumps = [json.loads(line.split("DUMP ", 1)[1]) for line in text.splitlines() if "DUMP " in line]
    assert len(dumps) == 6
    cluster = dumps[0]["tf"]["cluster"]
    assert {k: len(v) for k, v in cluster.items()} == {"ps": 2, "chief": 1, "worker": 2}
    assert all(d["tf"]["cluster"] == cluster for d in dumps)
    assert len({(d["type"], d["index"]) for d in dumps}) == 6


def test_failing_worker(el_submit):
    cmd = ('if [ "$TFYARN_TASK_TYPE:$TFYARN_TASK_INDEX" = worker:1 ]; then '
           'echo "worker one is broken" >&2; exit 3; fi; sleep 600')
    out, app_id = el_submit("-t", "tensorflow-ps", "-pn", "1", "-wn", "3", "-x", "True", *SMALL,
                            "-c", cmd, timeout=600)
    assert out.returncode == 1, out.stderr
    assert "worker:1 exited with code 3" in out.stderr and "worker one is broken" in out.stderr
    assert f"tfyarn logs {app_id} --task worker:1" in out.stderr
    assert final_state(app_id).endswith("/FAILED")
    assert app_id not in yarn_cli("application", "-list", "-appStates", "RUNNING")


def test_ctrl_c_kills_the_application(tmp_path, apps):
    proc = subprocess.Popen([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker", "-wn",
                             "2", *SMALL, "--python", sys.executable, "-c", "sleep 600"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    app_id = proc.stdout.readline().strip()
    apps.append(app_id)
    deadline = time.monotonic() + 300
    for line in proc.stderr:
        if "training" in line or time.monotonic() > deadline:
            break
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)
    assert proc.returncode == 130
    assert final_state(app_id).endswith("/KILLED")


def test_detach_status_logs_kill(el_submit):
    out, app_id = el_submit("-t", "standalone", "--detach", *SMALL, "-c", "sleep 600",
                            timeout=300)
    assert out.returncode == 0 and app_id
    tfyarn = [sys.executable, "-m", "tfyarn"]
    deadline = time.monotonic() + 300
    while "RUNNING" not in subprocess.run([*tfyarn, "status", app_id], capture_output=True,
                                          text=True).stdout:
        assert time.monotonic() < deadline
        time.sleep(3)
    logs = subprocess.run([*tfyarn, "logs", app_id], capture_output=True, text=True)
    assert logs.returncode == 0 and "containerlogs" in logs.stdout
    assert app_id in subprocess.run([*tfyarn, "ls"], capture_output=True, text=True).stdout
    assert subprocess.run([*tfyarn, "kill", app_id], capture_output=True).returncode == 0
    assert final_state(app_id).endswith("/KILLED")


def test_virtual_env_archive(el_submit, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    with tarfile.open(tmp_path / "env.tar.gz", "w:gz") as tar:
        for item in venv.iterdir():
            tar.add(item, arcname=item.name)
    out, app_id = el_submit("-t", "standalone", "-m", "virtual-env", "-m_arg", "env.tar.gz",
                            *SMALL, "-c", py("import sys; print('PREFIX', sys.prefix)"),
                            cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert re.search(r"PREFIX \S+/env\b", aggregated_logs(app_id, "worker:0"))


def test_impossible_request_fails_with_a_reason(el_submit):
    start = time.monotonic()
    out, app_id = el_submit("-t", "standalone", "-wait_time", "1", "-wm", "1000g", "-c", "true",
                            timeout=600)
    assert out.returncode == 1, out.stderr
    assert time.monotonic() - start < 300
    assert re.search(r"never registered|maximum|Invalid resource|exceeds", out.stderr, re.I), \
        out.stderr
