"""Shared helpers: run the real CLI as a subprocess, inspect the real process table."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "adult"
CENSUS = REPO / "examples" / "census" / "census_single.py"


def job_processes(job_id: str) -> list[str]:
    """Live processes whose environment or command line mentions the job (zombies excluded)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"TFYARN_JOB_ID={job_id}".encode() in env.split(b"\0") or job_id in cmd:
            found.append(f"{pid}: {cmd}")
    return found


@pytest.fixture
def el_submit(tmp_path: Path):
    """Run `el_submit ARGS` for real; job dirs go under tmp_path (TMPDIR)."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()

    def run(*args: str, cwd: Path | None = None, timeout: float = 120,
            env: dict | None = None) -> subprocess.CompletedProcess:
        full_env = {**os.environ, "TMPDIR": str(tmpdir), **(env or {})}
        return subprocess.run([sys.executable, "-m", "tfyarn.cli", *args], cwd=cwd or tmp_path,
                              env=full_env, capture_output=True, text=True, timeout=timeout)

    run.tmpdir = tmpdir
    return run


def py(code: str) -> str:
    """`-c` is one shell line: a Python one-liner as the user would quote it."""
    return shlex.join(["python", "-c", code])
