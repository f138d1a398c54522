"""-m docker on the sandbox's YARN with a real Docker Engine (pytest integration --yarn).

The NodeManagers run no LinuxContainerExecutor, so YARN's own Docker runtime is not
there: tfyarn's launcher runs each task with `docker run` on its node (`docker: runtime:
auto` resolves to that from the sandbox's yarn-site.xml). The image is
`scripts/docker-sandbox`'s: Debian 13 with python3, built from Debian's packages, while
the nodes run Debian 12, so a task's /etc/os-release tells where it ran.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import conftest
import dockerbox
import pytest
from conftest import aggregated_logs, final_state, node_processes, wait_until

from tfyarn.runtime import docker

# may share the cluster (integration/conftest.py): its checks are of its own applications'
# containers (by label); one worker of -n 2 builds the image
pytestmark = [pytest.mark.yarn, pytest.mark.concurrent, pytest.mark.xdist_group("docker")]
SMALL = ["-pm", "512", "-wm", "512"]


@pytest.fixture(scope="module")
def image() -> str:
    return dockerbox.test_image()


@pytest.fixture
def submit(el_submit, apps, tmp_path):
    """el_submit on YARN (conftest's), or in the background: (Popen, application id)."""

    def run(*args: str, env: dict | None = None, background: bool = False):
        if not background:
            return el_submit(*args, env=env, timeout=600)
        cmd = [sys.executable, "-m", "tfyarn.cli", *args[:args.index("-c")],
               "--python", sys.executable, *args[args.index("-c"):]]
        proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        app_id = proc.stdout.readline().strip()
        apps.append(app_id)
        return proc, app_id

    return run


def containers(app_id: str) -> list[str]:
    """The application's docker containers, running or not (`docker ps -a`)."""
    return subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}", "--filter",
                           f"label={docker.LABEL_JOB}={app_id}"], capture_output=True,
                          text=True, check=True).stdout.split()


def pretty_name(text: str) -> str:
    return next(x for x in text.splitlines() if x.startswith("PRETTY_NAME="))


def test_docker_job_on_yarn_runs_in_its_image(submit, image, tmp_path):
    inside = pretty_name(subprocess.run(["docker", "run", "--rm", "--network", "host", image,
                                         "cat", "/etc/os-release"], capture_output=True,
                                        text=True, check=True).stdout)
    assert inside != pretty_name(Path("/etc/os-release").read_text())
    (tmp_path / "data.txt").write_text("shipped with -f\n")
    cmd = ('grep PRETTY_NAME /etc/os-release; cat data.txt; '
           'python3 -c "import json,os; c = json.loads(os.environ[\'TF_CONFIG\']); '
           'print(\'TASK\', c[\'task\'][\'type\'], c[\'cluster\'][\'ps\'][0])"')
    out, app_id = submit("-t", "tensorflow-ps", "-pn", "1", "-wn", "2", "-x", "True", *SMALL,
                         "-m", "docker", "-m_arg", image, "-f", "./", "-c", cmd)
    assert out.returncode == 0, out.stderr
    assert final_state(app_id).endswith("/SUCCEEDED")
    logs = aggregated_logs(app_id)
    assert logs.count(inside) >= 2 and logs.count("shipped with -f") >= 2, logs[-4000:]
    assert re.search(r"TASK chief 127\.0\.0\.\d+:\d+", logs), logs[-4000:]  # a node's address
    assert containers(app_id) == []


def test_docker_task_failure_on_yarn_names_its_code_and_stderr(submit, image):
    out, app_id = submit("-t", "standalone", *SMALL, "-m", "docker", "-m_arg", image, "-c",
                         "echo 'ValueError: bad input' >&2; exit 3")
    assert out.returncode == 1
    assert "worker:0 exited with code 3" in out.stderr and "  ValueError: bad input" in out.stderr
    assert containers(app_id) == []


def test_docker_memory_on_yarn_is_the_containers_and_a_kill_is_told(submit, image):
    out, app_id = submit("-t", "standalone", "-wm", "300", "--max-restarts", "1", "-m", "docker",
                         "-m_arg", image, "-c",
                         "python3 -c 'x = bytearray(800 * 2**20); print(len(x))'")
    assert out.returncode == 1, out.stderr
    assert ("worker:0: container killed for exceeding its memory: raise -wm (now 300 MB) "
            "[docker: OOMKilled at 300 MB]") in out.stderr
    assert "attempt 2" not in out.stderr
    assert containers(app_id) == []


def _running(app_id: str, n: int) -> None:
    wait_until(lambda: len(containers(app_id)) >= n
               and len([p for p in node_processes(app_id) if "sleep 300" in p]) >= n, 300,
               f"{n} tasks sleeping in their containers")


def test_yarn_kill_of_a_docker_job_leaves_no_container(submit, image):
    out, app_id = submit("-t", "tensorflow-worker", "-wn", "2", "--detach", *SMALL, "-m", "docker",
                         "-m_arg", image, "-c", "sleep 300")
    assert out.returncode == 0, out.stderr
    _running(app_id, 2)
    conftest.yarn_cli("application", "-kill", app_id)
    wait_until(lambda: final_state(app_id).endswith("/KILLED"), 60, "KILLED")
    wait_until(lambda: not containers(app_id), 60, "the app's docker containers removed")
    wait_until(lambda: not node_processes(app_id), 60, "no process of the app")


def test_kill_9_of_a_docker_launcher_restarts_the_gang_and_leaves_no_container(submit, image):
    from conftest import launcher_pid

    proc, app_id = submit("-t", "tensorflow-worker", "-wn", "2", "--max-restarts", "1", *SMALL,
                          "-m", "docker", "-m_arg", image, "-c",
                          'if [ "$TFYARN_ATTEMPT" = 0 ]; then sleep 300; else echo again; fi',
                          background=True)
    _running(app_id, 2)
    first = set(containers(app_id))
    os.kill(launcher_pid(app_id, "worker:0"), signal.SIGKILL)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert "attempt 2/2: restarting after worker:0 was " in err, err
    assert len(first) == 2 and containers(app_id) == []
    assert aggregated_logs(app_id).count("again") >= 2
    wait_until(lambda: not node_processes(app_id), 60, "no process of the app")


def test_a_node_that_cannot_run_docker_fails_the_job_at_once(submit, image, tmp_path):
    conf = tmp_path / "tfyarn.yaml"  # the nodes' docker daemon is elsewhere (as a node
    conf.write_text("env:\n  DOCKER_HOST: unix:///nonexistent/docker.sock\n")  # without one)
    out, app_id = submit("-t", "tensorflow-worker", "-wn", "2", *SMALL, "-m", "docker",
                         "-m_arg", image, "-c", "true", env={"TFYARN_CONF": str(conf)})
    assert out.returncode == 1
    error = [x for x in out.stderr.splitlines() if x.startswith("Error: ")]
    assert len(error) == 1, out.stderr
    assert re.search(r"FAILED: worker:\d: -m docker: node 127\.0\.0\.\d cannot run docker as "
                     r"user \w+ \(.*nonexistent/docker\.sock.*\): ask the cluster's admins to "
                     r"install Docker on every NodeManager", error[0]), error[0]
    assert containers(app_id) == []


def test_yarns_runtime_where_the_nodemanagers_ignore_it_fails_at_once(submit, image, tmp_path):
    """What the issue saw: a job asking for YARN's Docker runtime on NodeManagers without
    it ran on the node's own OS and SUCCEEDED. Now it fails, saying so."""
    conf = tmp_path / "tfyarn.yaml"
    conf.write_text("docker:\n  runtime: yarn\n")
    out, _ = submit("-t", "standalone", *SMALL, "-m", "docker", "-m_arg", image, "-c",
                    "grep PRETTY_NAME /etc/os-release", env={"TFYARN_CONF": str(conf)})
    assert out.returncode == 1
    assert re.search(r"worker:0: -m docker: this container runs on node 127\.0\.0\.\d's own OS, "
                     rf"not in the image {re.escape(image)}: the NodeManager ignored YARN's Docker "
                     "runtime", out.stderr), out.stderr
