"""-m docker: the `docker run` a launcher builds, and local jobs on a real Docker Engine.

The engine and the test image come from `scripts/docker-sandbox start` (Debian's
docker.io; an image of Debian 13 made from Debian's packages, while this machine runs
Debian 12, so a task's /etc/os-release says where it ran). Without an engine these skip,
saying so; CI sets TFYARN_REQUIRE_DOCKER=1, and then they fail instead.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import dockerbox
import pytest
from conftest import job_processes
from test_faults import launcher_pid, running, start, wait_for

from tfyarn.core import policy
from tfyarn.core.policy import decide
from tfyarn.core.tfconfig import Task
from tfyarn.runtime import docker
from tfyarn.system import tree


@pytest.fixture(scope="session")
def image() -> str:
    return dockerbox.test_image()


def os_release(image: str | None = None) -> str:
    """PRETTY_NAME of the host, or of `image`."""
    if image is None:
        text = Path("/etc/os-release").read_text()
    else:
        text = subprocess.run(["docker", "run", "--rm", "--network", "host", image, "cat",
                               "/etc/os-release"], capture_output=True, text=True,
                              check=True).stdout
    return next(x for x in text.splitlines() if x.startswith("PRETTY_NAME="))


def containers(job_id: str) -> list[str]:
    """The job's docker containers, running or not."""
    return subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}", "--filter",
                           f"label={docker.LABEL_JOB}={job_id}"], capture_output=True,
                          text=True, check=True).stdout.split()


# ---------------------------------------------------------------- the argv (pure)


def test_run_argv_carries_the_site_the_task_and_its_limits():
    run = docker.DockerRun("tf:2.21", "host", ("/etc/hadoop/conf:/etc/hadoop/conf:ro",))
    argv = docker.run_argv(run, "python train.py", name="tfyarn-app-g0-worker-1",
                           labels={docker.LABEL_JOB: "app", docker.LABEL_LAUNCHER: "app.0.w"},
                           env_keys=["TF_CONFIG", "TFYARN_ATTEMPT"], mounts=["/w:/w:rw"],
                           cwd="/w", user="1000:1000", memory_mb=2048, gpus=["2", "3"])
    joined = " ".join(argv)
    assert argv[:3] == ["docker", "run", "--init"] and "--rm" not in argv
    assert "--network host" in joined and "--user 1000:1000" in joined and "-w /w" in joined
    assert "--memory 2048m --memory-swap 2048m" in joined
    assert '--gpus "device=2,3"' in joined
    assert "-v /w:/w:rw -v /etc/hadoop/conf:/etc/hadoop/conf:ro" in joined
    assert "-e TF_CONFIG -e TFYARN_ATTEMPT" in joined  # by name: no value in the argv
    assert "--label tfyarn.job=app --label tfyarn.launcher=app.0.w" in joined
    assert argv[-6:] == ["tf:2.21", "/bin/sh", "-c", docker.BASH_IF_THERE, "tfyarn-task",
                         "python train.py"]


def test_gpus_are_renumbered_inside_the_container():
    assert docker.gpu_options([]) == ([], {"CUDA_VISIBLE_DEVICES": ""})
    argv, env = docker.gpu_options(["2", "3"])
    assert argv == ["--gpus", '"device=2,3"']
    assert env == {"NVIDIA_VISIBLE_DEVICES": "2,3", "CUDA_VISIBLE_DEVICES": "0,1"}


def test_workdir_mounts_follow_links_out_of_the_working_dir(tmp_path):
    cache, work, ckpt = tmp_path / "filecache" / "10", tmp_path / "work", tmp_path / "ckpt"
    (cache / "code").mkdir(parents=True)
    work.mkdir()
    (cache / "job.json").write_text("{}")
    (work / "code").symlink_to(cache / "code")
    (work / "job.json").symlink_to(cache / "job.json")
    (work / "inside").mkdir()
    (work / "here").symlink_to(work / "inside")
    (work / "dangling").symlink_to(tmp_path / "gone")
    mounts = docker.workdir_mounts(str(work), [str(ckpt), "hdfs:///x"])
    assert sorted(mounts) == sorted([f"{work}:{work}:rw", f"{ckpt}:{ckpt}:rw",
                                     f"{cache / 'code'}:{cache / 'code'}:ro",
                                     f"{cache / 'job.json'}:{cache / 'job.json'}:ro"])


def test_yarns_runtime_is_told_by_the_nodemanager_among_the_ancestors():
    nm = (7, f"java -Dproc_nodemanager {docker.NODEMANAGER_CLASS}")
    assert not docker.started_in_image([(9, "bash launch_container.sh"), nm])
    assert docker.started_in_image([(9, "bash launch_container.sh"), (1, "/sbin/docker-init")])
    assert docker.started_in_image(tree.ancestors())  # no NodeManager above this test


def test_a_docker_memory_kill_is_told_and_permanent():
    from tfyarn.api.options import ElSubmitArgs, from_el_submit
    from tfyarn.core.policy import memory_end
    from tfyarn.core.records import TaskEnd

    spec = from_el_submit(ElSubmitArgs(command=("true",), kind="standalone"), ".")
    rec = memory_end(TaskEnd(137, time=1.0), "-wm", 1024, 1024)
    out = decide(spec, {Task("worker", 0): rec})
    assert out is not None and out.cause == "permanent"
    assert out.message == ("worker:0: container killed for exceeding its memory: raise -wm "
                           "(now 1024 MB) [docker: OOMKilled at 1024 MB]")


# ---------------------------------------------------------------- local jobs, real engine


def test_local_docker_job_runs_in_its_image_as_in_local_mode(el_submit, image, tmp_path):
    assert os_release(image) != os_release()  # else this test could not tell them apart
    (tmp_path / "data.txt").write_text("shipped with -f\n")
    cmd = ('grep PRETTY_NAME /etc/os-release; cat data.txt; '
           'python3 -c "import json,os; c = json.loads(os.environ[\'TF_CONFIG\']); '
           'print(\'TASK\', c[\'task\'][\'type\'], sorted(c[\'cluster\']))"; '
           'echo "to stderr" >&2')
    out = el_submit("-t", "tensorflow-ps", "-pn", "1", "-wn", "2", "-x", "True", "--local",
                    "-m", "docker", "-m_arg", image, "-f", "./", "-c", cmd, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for task in ("chief:0", "worker:0"):
        lines = [x.split("] ", 1)[1] for x in out.stderr.splitlines()
                 if x.startswith(f"[{task}] ")]
        assert os_release(image) in lines and "shipped with -f" in lines, out.stderr
        assert f"TASK {task.split(':')[0]} ['chief', 'ps', 'worker']" in lines
    assert containers(out.stdout.strip()) == []


def test_the_sites_docker_mounts_reach_the_task(el_submit, image, tmp_path):
    """tfyarn.yaml's `docker: mounts:` (YARN's src:dst:mode syntax), as on YARN."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "core-site.xml").write_text("<configuration/>\n")
    conf = tmp_path / "tfyarn.yaml"
    conf.write_text(f"docker:\n  network: host\n  mounts: [{tmp_path}/site:/etc/hadoop/conf:ro]\n")
    out = el_submit("-t", "standalone", "--local", "-m", "docker", "-m_arg", image, "-c",
                    "cat /etc/hadoop/conf/core-site.xml; touch /etc/hadoop/conf/x || echo RO",
                    env={"TFYARN_CONF": str(conf)})
    assert out.returncode == 0, out.stderr
    assert "<configuration/>" in out.stderr and "RO" in out.stderr.split()
    assert not (tmp_path / "site" / "x").exists()


def test_local_docker_job_failure_names_the_code_and_its_stderr(el_submit, image):
    out = el_submit("-t", "standalone", "--local", "-m", "docker", "-m_arg", image, "-c",
                    "echo 'ValueError: bad input' >&2; exit 3")
    assert out.returncode == 1
    assert "worker:0 exited with code 3" in out.stderr
    assert "  ValueError: bad input" in out.stderr
    assert containers(out.stdout.strip()) == []


def test_local_docker_memory_kill_is_not_retried(el_submit, image):
    out = el_submit("-t", "standalone", "-wm", "300", "--max-restarts", "1", "--local",
                    "-m", "docker", "-m_arg", image, "-c",
                    "python3 -c 'x = bytearray(800 * 2**20); print(len(x))'")
    assert out.returncode == 1, out.stderr
    assert ("worker:0: container killed for exceeding its memory: raise -wm (now 300 MB) "
            "[docker: OOMKilled at 300 MB]") in out.stderr
    assert "restarting" not in out.stderr.lower()
    assert containers(out.stdout.strip()) == []


def test_local_docker_launcher_kill_restarts_the_gang_and_leaves_no_container(tmp_path, image):
    proc_, job = start(tmp_path, "-t", "tensorflow-worker", "-wn", "2", "--max-restarts", "1",
                       "--local", "-m", "docker", "-m_arg", image, "-c",
                       'if [ "$TFYARN_ATTEMPT" = 0 ]; then sleep 300; else echo again; fi')
    wait_for(lambda: len(containers(job)) == 2, 60, "both tasks' containers")
    first = set(containers(job))
    os.kill(launcher_pid(job, "worker:1"), signal.SIGKILL)
    _, err = proc_.communicate(timeout=120)
    assert proc_.returncode == 0, err
    assert "attempt 2" in err or "restart" in err.lower(), err
    assert containers(job) == [] and first  # the dead launcher's container went too
    wait_for(lambda: not job_processes(job), 20, f"no process of {job}")


def test_sigkill_of_el_submit_leaves_no_container(tmp_path, image):
    proc_, job = start(tmp_path, "-t", "tensorflow-worker", "-wn", "2", "--local", "-m",
                       "docker", "-m_arg", image, "-c", "sleep 300")
    wait_for(lambda: len(running(job, "sleep 300")) >= 2 and len(containers(job)) == 2, 60,
             "tasks in their containers")
    proc_.kill()
    proc_.wait()
    wait_for(lambda: not containers(job), 30, "the job's containers removed")
    wait_for(lambda: not job_processes(job), 20, f"no process of {job}")


def test_a_node_whose_docker_does_not_answer_says_so_at_once(el_submit, image):
    """Locally before anything starts; the launcher's own check (a YARN node) is the
    integration suite's."""
    out = el_submit("-t", "standalone", "--local", "-m", "docker", "-m_arg", image, "-c", "true",
                    env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert out.returncode == 4 and out.stderr.startswith("Error: -m docker needs a reachable")



# ---------------------------------------------------------------- GPUs (#43), real engine


def test_the_engine_takes_the_gpus_argv_and_the_task_counts_its_cards_from_0(image, tmp_path):
    """The `docker run` a launcher builds for host cards 2 and 3: this engine (no NVIDIA
    toolkit) parses `--gpus` and refuses it in its daemon, not as a bad flag; run without
    that pair, the task inside sees the cards as docker numbers them, 0 and 1."""
    def argv(gpus: list[str]) -> list[str]:
        return docker.run_argv(
            docker.DockerRun(image, "host", ()), 'echo "CUDA=$CUDA_VISIBLE_DEVICES '
            'NVIDIA=$NVIDIA_VISIBLE_DEVICES"', name=f"tfyarn-test-gpus-{os.getpid()}",
            labels={docker.LABEL_JOB: "test-gpus"}, env_keys=sorted(env), mounts=[],
            cwd="/", user=f"{os.getuid()}:{os.getgid()}", memory_mb=256, gpus=gpus)
    gpu_argv, env = docker.gpu_options(["2", "3"])
    full = argv(["2", "3"])
    assert full[full.index("--gpus"):full.index("--gpus") + 2] == gpu_argv
    try:
        refused = subprocess.run(full, capture_output=True, text=True,
                                 env={**os.environ, **env}, timeout=120)
        assert refused.returncode == 125, refused.stderr
        assert "Error response from daemon: " + policy.DOCKER_NO_GPU in refused.stderr
        subprocess.run(["docker", "rm", "-f", full[full.index("--name") + 1]],
                       capture_output=True, check=False)
        inside = subprocess.run(argv([]), capture_output=True, text=True,
                                env={**os.environ, **env}, timeout=120)
        assert inside.stdout.strip() == "CUDA=0,1 NVIDIA=2,3", inside.stderr
    finally:
        subprocess.run(["docker", "rm", "-f", full[full.index("--name") + 1]],
                       capture_output=True, check=False)


def test_gpus_asked_of_an_engine_without_nvidias_toolkit_fail_once_saying_so(el_submit, image):
    out = el_submit("-t", "standalone", "-wg", "1", "--max-restarts", "1", "--local",
                    "-m", "docker", "-m_arg", image, "-c", "true",
                    env={"TFYARN_GPU_COUNT": "2"})
    assert out.returncode == 1, out.stderr
    assert ("worker:0: -wg 1: node 127.0.0.1's Docker Engine cannot give a container GPUs "
            "(docker: could not select device driver for [[gpu]]: no NVIDIA Container "
            "Toolkit there); ask the cluster's admins to install it, or run with -wg 0"
            ) in out.stderr
    assert "restarting" not in out.stderr.lower()
    assert containers(out.stdout.strip()) == []
