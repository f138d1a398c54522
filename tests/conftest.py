"""Shared helpers: run the real CLI as a subprocess, inspect the real process table."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import proctable
import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "adult"
CENSUS = REPO / "examples" / "census" / "census_single.py"


def job_processes(job_id: str) -> list[str]:
    """Live processes whose environment or command line mentions the job (zombies excluded)."""
    return [f"{p.pid}: {p.cmdline}" for p in proctable.live()
            if f"TFYARN_JOB_ID={job_id}".encode() in p.env or job_id in p.cmdline]


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
