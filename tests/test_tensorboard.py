"""-enable_tensorboard: a real TensorBoard beside a local job, answering while the job runs
and gone after it; --tensorboard-linger; a job environment without tensorboard."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request

import pytest
from conftest import job_processes

pytestmark = pytest.mark.tf
URL = re.compile(r"^tfyarn: TensorBoard: (http://\S+)$")


def status_of(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status
    except (urllib.error.URLError, OSError):
        return None


def start(tmp_path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    return subprocess.Popen([sys.executable, "-m", "tfyarn.cli", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def read_until(proc: subprocess.Popen, pattern: re.Pattern, seen: list[str],
               timeout: float = 180) -> re.Match:
    deadline = time.monotonic() + timeout
    for line in proc.stderr:
        seen.append(line)
        found = pattern.match(line.rstrip("\n"))
        if found:
            return found
        assert time.monotonic() < deadline, "".join(seen[-30:])
    raise AssertionError("el_submit ended first:\n" + "".join(seen[-30:]))


def test_tensorboard_answers_while_the_job_runs_and_is_gone_after(tmp_path):
    stop = tmp_path / "stop"
    proc = start(tmp_path, "-t", "tensorflow-worker", "-wn", "2", "--local",
                 "-enable_tensorboard", "True", "-log_tensorboard", "tb", "-c",
                 f'echo "dir=$TFYARN_TENSORBOARD_DIR"; while [ ! -e {stop} ]; do sleep 0.2; done')
    job = proc.stdout.readline().strip()
    seen: list[str] = []
    url = read_until(proc, URL, seen).group(1)
    assert status_of(url) == 200
    stop.touch()
    _, rest = proc.communicate(timeout=120)
    assert proc.returncode == 0, "".join(seen) + rest
    assert status_of(url) is None  # stopped with the job
    assert ("".join(seen) + rest).count(f"dir={tmp_path / 'tb'}") == 2  # every task got it
    assert job_processes(job) == []


def test_linger_keeps_it_until_ctrl_c(tmp_path):
    proc = start(tmp_path, "-t", "standalone", "--local", "-enable_tensorboard", "True",
                 "-log_tensorboard", str(tmp_path / "tb"), "--tensorboard-linger", "5",
                 "-c", "sleep 1")
    job = proc.stdout.readline().strip()
    seen: list[str] = []
    url = read_until(proc, URL, seen).group(1)
    read_until(proc, re.compile(r".*stays up 5 min at http\S+ \(--tensorboard-linger; "
                                r"Ctrl-C ends it\)"), seen)
    assert status_of(url) == 200  # the job is over, TensorBoard is not
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=60)
    assert proc.returncode == 0, "".join(seen) + rest  # the job's own verdict
    assert "SUCCEEDED in" in rest, rest
    assert status_of(url) is None
    assert job_processes(job) == []


def test_an_environment_without_tensorboard_is_refused_before_anything_starts(el_submit,
                                                                               tmp_path):
    """A packed env whose python cannot import tensorboard (its site-packages off)."""
    archive = tmp_path / "env.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        script = f'#!/bin/sh\nexec {sys.executable} -S "$@"\n'.encode()
        info = tarfile.TarInfo("bin/python")
        info.size, info.mode = len(script), 0o755
        tar.addfile(info, io.BytesIO(script))
    out = el_submit("-t", "standalone", "--local", "-m", "virtual-env", "-m_arg", str(archive),
                    "-enable_tensorboard", "True", "-log_tensorboard", "tb", "-c", "true")
    assert out.returncode == 4, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: -enable_tensorboard: ")
    assert "has no tensorboard" in lines[0] and "pip install tensorboard" in lines[0]
    assert out.stdout == "" and not list(el_submit.tmpdir.iterdir())  # nothing started or left


def test_flags_go_together(el_submit):
    for args, words in ((("-enable_tensorboard", "True"), "needs -log_tensorboard DIR"),
                        (("-log_tensorboard", "tb"), "add -enable_tensorboard True"),
                        (("--tensorboard-linger", "3"), "TensorBoard is off")):
        out = el_submit("-t", "standalone", "--local", *args, "-c", "true")
        assert out.returncode == 2 and words in out.stderr, out.stderr


def test_the_side_task_says_why_tensorboard_did_not_start(tmp_path):
    """What a YARN job whose env lacks tensorboard gets (no client check runs there): the
    side task publishes the reason, el_submit prints it, the job goes on."""

    from tfyarn.core.jobspec import JobSpec, Resources, Role
    from tfyarn.core.records import TensorBoard
    from tfyarn.protocol import kv as kvmod

    spec = JobSpec("t", "standalone", (Role("worker", 1, Resources(1024, 1)),), "true",
                   tensorboard_dir=str(tmp_path / "tb"))
    (tmp_path / "job.json").write_text(spec.to_json())
    python = tmp_path / "python-no-site"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    out = subprocess.run([sys.executable, "-m", "tfyarn.runtime.tensorboard", "--job",
                          str(tmp_path / "job.json"), "--kv", f"dir:{tmp_path / 'kv'}",
                          "--python", str(python)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "TFYARN_ADVERTISE_HOST": "127.0.0.1"})
    assert out.returncode == 0, out.stderr
    store = kvmod.DirKV(str(tmp_path / "kv"))
    info = TensorBoard.from_json(store.get(kvmod.TENSORBOARD))
    assert "No module named 'tensorboard'" in info.error, info
    line = info.announce()
    assert line.startswith("TensorBoard did not start (the job goes on): exit code 1")
    assert "pip install tensorboard" in line and store.get(kvmod.TENSORBOARD_DONE) == "1"
