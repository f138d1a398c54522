"""The Docker Engine and test image that -m docker's tests run on, for tests/ and integration/.

`scripts/docker-sandbox start` installs Debian's docker.io, starts the daemon and builds the
image (Debian 13 from Debian's packages) where they are missing. Without an engine, and
without dockerd to start one, the tests skip saying so; TFYARN_REQUIRE_DOCKER=1 (CI) makes
them fail instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from locks import held

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "docker-sandbox"


def test_image() -> str:
    """The test image's name, on a daemon that answers."""
    required = os.environ.get("TFYARN_REQUIRE_DOCKER") == "1"
    if not required and not shutil.which("docker") and not shutil.which("dockerd"):
        pytest.skip("no Docker Engine here (scripts/docker-sandbox start installs one)")
    with held("docker-sandbox"):  # the unit and integration suites may ask at once
        out = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True,
                             timeout=900)
    if out.returncode != 0:
        pytest.fail(f"scripts/docker-sandbox start failed:\n{out.stderr[-3000:]}", pytrace=False)
    return out.stdout.strip()


test_image.__test__ = False  # a helper, not a test
