"""Gateways on each Python tfyarn supports besides the suite's own (#42): a fresh venv
with tfyarn's own dependencies only (tfyarn's build of skein, `pip install -e .`, no
extras, no setuptools: Python 3.12 dropped distutils, which PyPI's skein imported), as
Debian 13 and Ubuntu 24.04 gateways have. On 3.10, 3.12 and 3.13: installs, imports
skein, runs a local job. On 3.13 also YARN: the census submitted to the sandbox
succeeds; `tfyarn status`, `logs` and `kill` of a running job work. The containers run
the nodes' Python (here this suite's, which has TensorFlow), as on a cluster whose
gateway and nodes differ.

The Pythons come from pyenv here (`TFYARN_PYTHON3XX` names another); a missing one
skips saying so, and fails under TFYARN_REQUIRE_PYTHONS=1 (CI)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import APP_ID, REPO, final_state
from venvs import one_build

from tfyarn.protocol.skeinlink import TFYARNS_SKEIN

# may share the cluster (integration/conftest.py); one worker of -n 2 builds the venvs
pytestmark = [pytest.mark.concurrent, pytest.mark.xdist_group("pythons")]
VERSIONS = ("3.10", "3.12", "3.13")


def python(version: str) -> str:
    on_path = shutil.which(f"python{version}")
    if on_path and "/shims/" in on_path:
        on_path = None  # pyenv's shim runs only the versions pyenv is set to
    found = (os.environ.get(f"TFYARN_PYTHON{version.replace('.', '')}")
             or next(iter(sorted(glob.glob(os.path.expanduser(
                 f"~/.pyenv/versions/{version}*/bin/python{version}")))), None)
             or on_path)
    if not found:
        say = f"no Python {version} here (pyenv install {version})"
        if os.environ.get("TFYARN_REQUIRE_PYTHONS") == "1":
            pytest.fail(say)
        pytest.skip(say)
    return found


@pytest.fixture(scope="module")
def venvs(tmp_path_factory):
    """Python version -> a fresh venv of it with tfyarn's build of skein and tfyarn
    (editable), nothing else; made once per module."""
    made: dict[str, Path] = {}
    wheel = subprocess.run([str(REPO / "scripts" / "build-skein")], capture_output=True,
                           text=True, check=True).stdout.strip()

    def venv(version: str) -> Path:
        if version not in made:
            path = tmp_path_factory.mktemp(f"py{version}") / "venv"
            subprocess.run([python(version), "-m", "venv", str(path)], check=True)
            with one_build():  # -e builds metadata in the tree, as small_venv builds
                out = subprocess.run([str(path / "bin" / "pip"), "install", "-q", wheel, "-e",
                                      str(REPO)], capture_output=True, text=True, timeout=900)
            assert out.returncode == 0, out.stdout + out.stderr
            made[version] = path
        return made[version]

    return venv


@pytest.fixture
def venv313(venvs) -> Path:
    return venvs("3.13")


def run(venv: Path, *args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
    return subprocess.run([str(venv / "bin" / args[0]), *args[1:]], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_gateway_on_python(version, venvs, tmp_path):
    venv = venvs(version)
    out = run(venv, "python", "-c", "import sys, skein; print('.'.join(map(str, "
              "sys.version_info[:2])), skein.__version__)", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"{version} ") and TFYARNS_SKEIN in out.stdout, out.stdout
    if version >= "3.12":  # venv gives older Pythons setuptools (and distutils) anyway
        assert run(venv, "python", "-c", "import setuptools", cwd=tmp_path).returncode != 0
    local = run(venv, "el_submit", "-t", "tensorflow-worker", "-wn", "2", "--local", "-c",
                "true", cwd=tmp_path)
    assert local.returncode == 0, local.stderr


def test_census_on_yarn_from_a_313_gateway(venv313, tmp_path, apps):
    work = tmp_path / "census"  # the example as a user has it: the script and its data
    shutil.copytree(REPO / "examples" / "census", work)
    out = run(venv313, "el_submit", "-t", "tensorflow-ps", "-a", "wide_and_deep", "-m", "local",
              "-x", "True", "-f", "./", "-pn", "1", "-pc", "1", "-pm", "1024", "-wn", "1",
              "-wc", "1", "-wm", "1024", "--python", sys.executable, "-c", "python",
              "census_single.py", cwd=work)
    app_id = out.stdout.strip().splitlines()[0] if out.stdout.strip() else ""
    if APP_ID.match(app_id):
        apps.append(app_id)
    assert out.returncode == 0, out.stderr
    assert final_state(app_id) == "FINISHED/SUCCEEDED"


def test_status_logs_and_kill_from_a_313_gateway(venv313, tmp_path, apps):
    out = run(venv313, "el_submit", "-t", "standalone", "--detach", "-wm", "1024", "--python",
              sys.executable, "-c", "sleep 600", cwd=tmp_path)
    app_id = out.stdout.strip().splitlines()[0] if out.stdout.strip() else ""
    assert out.returncode == 0 and APP_ID.match(app_id), out.stderr
    apps.append(app_id)
    deadline = time.monotonic() + 300
    while "state: RUNNING" not in run(venv313, "tfyarn", "status", app_id, cwd=tmp_path).stdout:
        assert time.monotonic() < deadline, f"{app_id} never ran"
        time.sleep(3)
    logs = run(venv313, "tfyarn", "logs", app_id, cwd=tmp_path)
    assert logs.returncode == 0 and "containerlogs" in logs.stdout, logs.stdout + logs.stderr
    kill = run(venv313, "tfyarn", "kill", app_id, cwd=tmp_path)
    assert kill.returncode == 0, kill.stderr
    assert final_state(app_id).endswith("/KILLED")
