"""The command line as users meet it: real subprocesses, real exit codes and messages."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from tfyarn.api.options import OPTIONS
from tfyarn.cli.main import split_command
from tfyarn.core.jobspec import JobSpec

HEAVY = ("skein", "grpc", "hdfs", "tensorflow", "torch")


def test_importing_cli_loads_nothing_heavy():
    code = f"import sys, tfyarn.cli.main; print([m for m in {HEAVY!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_help_lists_every_option(el_submit):
    out = el_submit("--help")
    assert out.returncode == 0
    for o in OPTIONS:
        assert f"{o.flag} " in out.stdout or o.is_flag and o.flag in out.stdout, o.flag
    for flag in ("-c COMMAND...", "--local", "--dry-run", "--env", "--detach", "--force"):
        assert flag in out.stdout
    group = subprocess.run([sys.executable, "-m", "tfyarn", "--help"], capture_output=True,
                           text=True)
    assert group.returncode == 0
    for cmd in ("submit", "status", "logs", "kill", "ls"):
        assert cmd in group.stdout


BAD = [
    (["-pn", "-1"], "-pn"), (["-wn", "0"], "-wn"), (["-wm", "abc"], "-wm"),
    (["-t", "tensorflow"], "-t"), (["-t", "standalone", "-wn", "2"], "-wn"),
    (["-x", "maybe"], "-x"), (["-f", "missing_dir"], "-f"), (["-m", "docker"], "-m_arg"),
    (["-m", "virtual-env", "-m_arg", "nope.tar.gz"], "-m_arg"), (["--env", "NOEQUALS"], "--env"),
    (["-wait_time", "0"], "-wait_time"), (["-t", "tensorflow-ps", "-ppn", "2"], "-ppn"),
    (["-log_tensorboard", "/tmp/tb"], "-log_tensorboard"), (["--bogus", "1"], "--bogus"),
    (["--memory-growth", "1.5"], "--memory-growth"),  # without --max-restarts
    (["--max-restarts", "1", "--memory-growth", "1"], "--memory-growth"),
    (["--max-restarts", "1", "--memory-growth", "x2"], "--memory-growth"),
    (["--stall-timeout", "0"], "--stall-timeout"),
]


@pytest.mark.parametrize(("args", "flag"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_exit_2_and_starts_nothing(el_submit, args, flag):
    out = el_submit(*args, "--local", "-c", "true")
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and flag in lines[0], out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
    assert list(el_submit.tmpdir.iterdir()) == []  # no job dir: nothing was started


def test_missing_command(el_submit):
    out = el_submit("-t", "standalone", "--local")
    assert out.returncode == 2 and out.stderr.startswith("Error: -c is missing")


def test_dry_run_prints_the_resolved_job(el_submit, tmp_path):
    (tmp_path / "train.py").write_text("print(1)\n")
    out = el_submit("-t", "tensorflow-ps", "-pn", "2", "-wn", "3", "-wm", "2g", "-f", "train.py",
                    "--dry-run", "-c", "python", "train.py", "--epochs", "3")
    assert out.returncode == 0, out.stderr
    spec = JobSpec.from_dict(yaml.safe_load(out.stdout))
    assert spec.command == "python train.py --epochs 3"
    assert [(r.name, r.instances) for r in spec.roles] == [("ps", 2), ("chief", 1), ("worker", 2)]
    assert spec.role("worker").resources.memory_mb == 2048
    assert list(el_submit.tmpdir.iterdir()) == []


def test_split_command_skips_option_values():
    assert split_command(["-a", "-c", "-wn", "2", "-c", "python", "x.py", "-c", "1"]) == (
        ["-a", "-c", "-wn", "2"], ("python", "x.py", "-c", "1"))
    assert split_command(["-t", "standalone"]) == (["-t", "standalone"], None)


def test_interact_flag(el_submit):
    out = el_submit("-t", "standalone", "-interact", "True", "--detach", "-c", "true")
    assert out.returncode == 2 and "drop one" in out.stderr and "logs APP --follow" in out.stderr
    out = el_submit("-t", "standalone", "-interact", "maybe", "--local", "-c", "true")
    assert out.returncode == 2 and "-interact: expected True or False" in out.stderr
    out = el_submit("-t", "standalone", "-interact", "True", "--local", "-c", "echo hi")
    assert out.returncode == 0 and "-interact has no effect with --local" in out.stderr
    assert "[worker:0] hi" in out.stderr


@pytest.mark.parametrize(("args", "flag"), [(["--port", "70000"], "--port"),
                                            (["--port", "BUSY"], "--host/--port")])
def test_history_on_a_port_it_cannot_have_is_one_line_exit_2(args, flag, tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        env = {**os.environ, "TFYARN_HISTORY_DIR": str(tmp_path)}
        env.pop("HADOOP_CONF_DIR", None)
        out = subprocess.run([sys.executable, "-m", "tfyarn", "history",
                              *[port if a == "BUSY" else a for a in args]],
                             capture_output=True, text=True, timeout=60, env=env)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert lines[0].startswith("Error: ") and flag in lines[0] and "Traceback" not in out.stderr


def test_history_lists_running_local_jobs_while_the_resourcemanager_does_not_answer(tmp_path):
    """A ResourceManager that does not answer (restarting, unreachable) leaves out only its
    applications: a local job running beside is still listed, and the listing says what it
    could not read. (CI saw the local job vanish while another test restarted the RM.)"""
    import socket
    import urllib.request

    with socket.socket() as closed:  # a port nothing listens on once this block ends
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "core-site.xml").write_text("<configuration></configuration>\n")
    (conf / "yarn-site.xml").write_text(
        "<configuration><property><name>yarn.resourcemanager.webapp.address</name>"
        f"<value>127.0.0.1:{port}</value></property></configuration>\n")
    gate = tmp_path / "go"
    env = {**os.environ, "TMPDIR": str(tmp_path), "HOME": str(tmp_path),
           "TFYARN_HISTORY_DIR": str(tmp_path / "kept")}
    env.pop("HADOOP_CONF_DIR", None)
    job = subprocess.Popen([sys.executable, "-m", "tfyarn.cli", "-t", "standalone", "--local",
                            "-c", f"for i in $(seq 1200); do [ -e {gate} ] && break; "
                            "sleep 0.1; done"],  # ends by itself should the test stop early
                           cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    history = None
    try:
        job_id = job.stdout.readline().strip()
        assert next((x for x in job.stderr if x.startswith("tfyarn: job page: ")), None)
        history = subprocess.Popen([sys.executable, "-m", "tfyarn", "history", "--port", "0"],
                                   env={**env, "HADOOP_CONF_DIR": str(conf)},
                                   stderr=subprocess.PIPE, text=True)
        assert history.stderr is not None
        listing = history.stderr.readline().split(": ", 2)[2].strip()
        with urllib.request.urlopen(listing, timeout=60) as response:
            body = response.read().decode()
        assert job_id and job_id in body
        assert "running jobs: ResourceManager REST API did not answer" in body, body[-2000:]
    finally:
        gate.touch()
        if history is not None:
            history.terminate()
            history.communicate(timeout=60)
        job.communicate(timeout=120)
    assert job.returncode == 0
