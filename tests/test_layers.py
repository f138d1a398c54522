"""The layers' import contracts (pyproject.toml, docs/ARCHITECTURE.md) hold, and each
contract can fail: a forbidden import planted in a copy of the tree breaks it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from conftest import REPO

LINT = [os.path.join(os.path.dirname(sys.executable), "lint-imports"), "--no-cache"]


def lint(root) -> subprocess.CompletedProcess:
    return subprocess.run(LINT, cwd=root, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root)})


def test_the_contracts_hold():
    out = lint(REPO)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "5 kept, 0 broken" in out.stdout


@pytest.mark.parametrize(("module", "line", "broken"), [
    ("core/policy.py", "import yaml", "core imports the standard library only"),
    ("core/jobspec.py", "from tfyarn.client import yarn", "layers:"),
    ("runtime/driver.py", "import skein", "skein is wrapped in one module"),
    ("client/local.py", "from tfyarn.cli import main", "nothing imports the command line"),
    ("core/errors.py", "from tfyarn.core import policy", "no cycles"),
])
def test_each_contract_can_fail(tmp_path, module, line, broken):
    shutil.copytree(REPO / "tfyarn", tmp_path / "tfyarn",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "scripts", tmp_path / "scripts",
                    ignore=shutil.ignore_patterns("hadoop"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    target = tmp_path / "tfyarn" / module
    target.write_text(target.read_text() + f"\n{line}  # planted\n")
    out = lint(tmp_path)
    assert out.returncode != 0
    assert f"{broken}" in out.stdout.split("Broken contracts", 1)[-1], out.stdout[-3000:]
