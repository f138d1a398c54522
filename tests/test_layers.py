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
    ("core/jobspec.py", "from tfyarn.client import cluster", "layers:"),
    ("runtime/driver.py", "import skein", "skein is imported in one module"),
    ("client/local.py", "import grpc", "skein is imported in one module"),
    ("client/skeinclient.py", "import skein", "skein is imported in one module"),
    ("system/tree.py", "from tfyarn.protocol import kv", "layers:"),
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


ENV_WRITES = ("__setitem__", "__delitem__", "update", "pop", "popitem", "setdefault", "clear")


def _environ_writes(path) -> list[str]:
    """Where a module writes the process environment: os.environ[...] = / del / its
    mutating methods, os.putenv, os.unsetenv."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        target = None
        if isinstance(node, ast.Assign | ast.AugAssign | ast.Delete):
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
            target = next((t for t in targets if isinstance(t, ast.Subscript)
                           and ast.unparse(t.value) == "os.environ"), None)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner, name = ast.unparse(node.func.value), node.func.attr
            if (owner == "os.environ" and name in ENV_WRITES) or \
                    (owner == "os" and name in ("putenv", "unsetenv")):
                target = node
        if target is not None:
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)[:60]}")
    return found


def test_nothing_on_the_gateway_writes_the_process_environment():
    """The API, the client and the command line read the environment once (Settings) and
    never write it: a notebook's kernel outlives many submits to many clusters. (libhdfs,
    which reads it while its JVM starts, puts it back: tests/test_data.py checks.)"""
    writes = [w for pkg in ("api", "client", "cli", "data")
              for path in sorted((REPO / "tfyarn" / pkg).glob("*.py"))
              for w in _environ_writes(path)]
    assert writes == []
    planted = REPO / "tfyarn" / "runtime" / "jni_probe_for_test.py"  # the check sees one
    try:
        planted.write_text("import os\nos.environ['X'] = '1'\nos.environ.update(Y='2')\n")
        assert len(_environ_writes(planted)) == 2
    finally:
        planted.unlink()


def test_every_interval_is_named_in_timing_once():
    """Intervals and timeouts (`*_S` constants) live in core/timing.py with their reason,
    each name once; a module may only import them."""
    import ast

    elsewhere = []
    for path in sorted((REPO / "tfyarn").rglob("*.py")):
        if path.name == "timing.py":
            continue
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign) else []
            elsewhere += [f"{path.relative_to(REPO)}: {t.id}" for t in targets
                          if isinstance(t, ast.Name) and t.id.endswith("_S")]
    assert elsewhere == []
    timing = ast.parse((REPO / "tfyarn" / "core" / "timing.py").read_text())
    names = [t.id for n in timing.body if isinstance(n, ast.Assign) for t in n.targets
             if isinstance(t, ast.Name)]
    assert len(names) == len(set(names))


def test_every_module_says_what_it_must_not_do():
    """The map's detail: each module's opening docstring says what it owns and what it
    must not do (`__main__` shims aside)."""
    import ast

    silent = []
    for path in sorted((REPO / "tfyarn").rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if path.name != "__main__.py" and "must not" not in doc.lower() \
                and "must never" not in doc.lower():
            silent.append(str(path.relative_to(REPO)))
    assert silent == []


def test_the_installed_package_has_every_module(tmp_path):
    """A real (non-editable) install, as a packed env or a node has it, carries every
    module of the tree: a package list once left out system/, and every job in a packed
    env failed in its ApplicationMaster."""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(tmp_path), str(REPO)],
                   check=True, capture_output=True, timeout=300)
    tree = {str(p.relative_to(REPO)) for p in (REPO / "tfyarn").rglob("*.py")
            if "__pycache__" not in p.parts}
    installed = {str(p.relative_to(tmp_path)) for p in (tmp_path / "tfyarn").rglob("*.py")
                 if "__pycache__" not in p.parts}
    assert tree - installed == set()
