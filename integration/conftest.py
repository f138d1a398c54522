"""Integration fixtures: real YARN at $HADOOP_CONF_DIR; opt-in with `pytest integration --yarn`.

Every application a test submits is killed at teardown if still alive, and its
`yarn logs` are printed when the test failed.
Tests share the cluster only where marked `concurrent` (audited: nothing of theirs sees
another test's applications, JVMs, nodes or capacity); every other test, and any marked
`exclusive`, runs alone (a file lock, writers first), so `-n 2` (pytest-xdist, CI's
`--dist loadgroup`) overlaps only those. A test must not be marked concurrent while it
lists the cluster's applications, kills nodes or daemons, or starts a warm skein driver.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the process-table reader and locks the checks share
import interrupting  # noqa: E402
import proctable  # noqa: E402
import shortjvms  # noqa: E402
from locks import cluster_share, slot  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "adult"
APP_ID = re.compile(r"^application_\d+_\d+$")


def pytest_configure(config: pytest.Config) -> None:
    interrupting.as_from_a_terminal()
    shortjvms.spark_conf_dir(REPO / "build")
    config.addinivalue_line("markers", "concurrent: may share the cluster with another "
                            "test (-n 2); unmarked tests run alone")
    config.addinivalue_line("markers", "exclusive: runs alone, in a concurrent file")


def pytest_addoption(parser):
    parser.addoption("--yarn", action="store_true", help="run tests against a real YARN cluster")


def alone(item: pytest.Item) -> bool:
    return item.get_closest_marker("concurrent") is None or \
        item.get_closest_marker("exclusive") is not None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:  # a file's tests that run alone stay in one worker: its fixtures once
        if alone(item) and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    if config.getoption("--yarn"):
        if not os.environ.get("HADOOP_CONF_DIR"):
            raise pytest.UsageError("--yarn needs HADOOP_CONF_DIR (see integration/README.md)")
        return
    skip = pytest.mark.skip(reason="needs a YARN cluster: pytest integration --yarn")
    for item in items:
        item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    setattr(item, f"rep_{call.when}", outcome.get_result())


NEXT = pytest.StashKey["pytest.Item | None"]()
_kept: contextlib.ExitStack | None = None  # the cluster, alone, between two tests that run alone


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """The test this worker runs next (xdist runs one only once it knows the next)."""
    item.stash[NEXT] = nextitem
    yield


@pytest.fixture(autouse=True)
def _the_cluster(request) -> Iterator[None]:
    """Autouse, so first set up and last torn down: a test's apps are gone when it lets go.
    A test that runs alone keeps the cluster for the next when that one runs alone too:
    let go between them, the other worker's shared test came in, ran beside nothing (the
    next waits for it), and CI's suite ran its shared tests one at a time, not in pairs.
    The test slot (`scripts/test-suites`) is taken once the cluster is: while this worker
    waits for the cluster, a unit test runs in the slot."""
    global _kept
    share, _kept = _kept, None
    if share is None:
        share = contextlib.ExitStack()
        share.enter_context(cluster_share(alone(request.node)))
    try:
        with slot():
            yield
    finally:
        following = request.node.stash.get(NEXT, None)
        if alone(request.node) and following is not None and alone(following):
            _kept = share
        else:
            share.close()


def yarn_cli(*args: str, timeout: float = 120) -> str:
    out = subprocess.run(["yarn", *args], capture_output=True, text=True, timeout=timeout)
    return out.stdout + out.stderr


def apps_by_name() -> dict[str, set[str]]:
    """The cluster's applications, any state, by name (Spark's are tfyarn-pre_train-PROGRAM;
    a training job's, its -a): one listing, a JVM of 3 s of CPU."""
    names: dict[str, set[str]] = {}
    for cols in (line.split() for line in yarn_cli("application", "-list", "-appStates",
                                                   "ALL").splitlines()):
        if len(cols) > 1 and APP_ID.match(cols[0]):
            names.setdefault(cols[1], set()).add(cols[0])
    return names


def yarn_site(name: str, default: str) -> str:
    """A property of the cluster's yarn-site.xml (Hadoop's default when it is not set)."""
    import xml.etree.ElementTree as ET

    path = Path(os.environ.get("HADOOP_CONF_DIR", "")) / "yarn-site.xml"
    if not path.is_file():
        return default
    for prop in ET.parse(path).getroot().iter("property"):
        if prop.findtext("name") == name:
            return (prop.findtext("value") or default).strip()
    return default


def rm_app(app_id: str) -> dict | None:
    """The ResourceManager's own report of the application, from its REST API: a GET of
    milliseconds where `yarn application -status` starts a JVM (0.7 s and 1.1 s of CPU on
    one of CI's two cores, at every test's teardown). None where REST does not answer it (the RM
    restarting, an RM that asks for SPNEGO, an unknown id): callers then ask the CLI."""
    rm_host = yarn_site("yarn.resourcemanager.hostname", "0.0.0.0")
    host, _, port = yarn_site("yarn.resourcemanager.webapp.address", f"{rm_host}:8088") \
        .rpartition(":")
    url = f"http://{'127.0.0.1' if host in ('', '0.0.0.0') else host}:{port}" \
          f"/ws/v1/cluster/apps/{app_id}"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return json.load(answer)["app"]
    except (OSError, ValueError, KeyError):  # the CLI answers instead (and says why)
        return None


def final_state(app_id: str) -> str:
    """`FINISHED/SUCCEEDED`, `KILLED/KILLED`, ... from the RM (REST, else yarn
    application -status: the same two enums)."""
    app = rm_app(app_id)
    if app is not None:
        return f"{app['state']}/{app['finalStatus']}"
    text = yarn_cli("application", "-status", app_id)
    state = re.search(r"^\s*State : (\S+)", text, re.M)
    final = re.search(r"^\s*Final-State : (\S+)", text, re.M)
    return f"{state and state.group(1)}/{final and final.group(1)}"


def aggregation_done(app_id: str) -> bool:
    """Every node has aggregated the app's logs (or given up): on several nodes each
    NodeManager uploads its own, so a first non-empty answer may lack some."""
    app = rm_app(app_id)
    if app is not None:
        found = app.get("logAggregationStatus")
    else:
        text = yarn_cli("application", "-status", app_id)
        status = re.search(r"^\s*Log Aggregation Status : (\S+)", text, re.M)
        found = status and status.group(1)
    return found is None or found in ("SUCCEEDED", "FAILED", "TIME_OUT", "DISABLED")


def tfyarn_logs(app_id: str, task: str | None = None,
                wait_s: float = 240) -> subprocess.CompletedProcess:
    """tfyarn logs (which waits, bounded, until YARN says every node uploaded the ended
    application's logs: a second wait here only doubled it where a node was lost and
    never uploads); retried while the application is still ending, and while tfyarn logs
    says it showed only part (its bound passed on a loaded machine, or the RM's REST API
    did not answer): a test reads every node's logs or fails saying why."""
    cmd = [sys.executable, "-m", "tfyarn", "logs", app_id] + (["--task", task] if task else [])
    deadline = time.monotonic() + wait_s
    while True:
        out = subprocess.run(cmd, capture_output=True, text=True)
        if _logs_whole(out) or time.monotonic() > deadline:
            return out
        time.sleep(3)


def _logs_shown(out: subprocess.CompletedProcess) -> bool:
    """tfyarn logs showed an ended application's aggregated logs."""
    return out.returncode == 0 and bool(out.stdout.strip()) and "is running" not in out.stdout


def _logs_whole(out: subprocess.CompletedProcess) -> bool:
    """tfyarn logs showed them, and did not say YARN may not have every live node's yet
    (a lost node's never come: that it says in other words)."""
    return _logs_shown(out) and "any rest later: tfyarn logs" not in out.stderr


def hdfs_exists(url: str) -> bool:
    """Over WebHDFS: polled, and a JVM per look would take the cores the job needs."""
    import getpass

    from hdfs import InsecureClient

    from tfyarn.hdfs import webhdfs

    client = InsecureClient(webhdfs.http_address(url, os.environ["HADOOP_CONF_DIR"]),
                            user=getpass.getuser())
    return client.status(webhdfs.hdfs_path(url), strict=False) is not None


def aggregated_logs(app_id: str, task: str | None = None, wait_s: float = 240) -> str:
    """tfyarn logs' output (with its words on stderr where it failed or showed part)."""
    out = tfyarn_logs(app_id, task, wait_s)
    return out.stdout if _logs_whole(out) else out.stdout + out.stderr


@pytest.fixture
def apps(request):
    """Application ids a test created; killed afterwards, logs printed on failure."""
    ids: list[str] = []
    yield ids
    failed = getattr(request.node, "rep_call", None) and request.node.rep_call.failed
    for app_id in ids:
        if final_state(app_id).split("/")[0] in ("RUNNING", "ACCEPTED", "SUBMITTED", "NEW"):
            yarn_cli("application", "-kill", app_id)
        if failed:
            print(f"\n===== yarn logs -applicationId {app_id} =====")
            print(yarn_cli("logs", "-applicationId", app_id, timeout=300)[-20000:])


@pytest.fixture
def el_submit(apps, tmp_path):
    """Run el_submit (no --local) with the node's python = this interpreter (-m local)."""

    def run(*args: str, cwd: Path | None = None, timeout: float = 900, env: dict | None = None):
        cmd = [sys.executable, "-m", "tfyarn.cli", *args[:args.index("-c")],
               "--python", sys.executable, *args[args.index("-c"):]]
        out = subprocess.run(cmd, cwd=cwd or tmp_path, capture_output=True, text=True,
                             timeout=timeout, env={**os.environ, **(env or {})})
        app_id = out.stdout.strip().splitlines()[0] if out.stdout.strip() else ""
        if APP_ID.match(app_id):
            apps.append(app_id)
        return out, app_id

    return run


def py(code: str) -> str:
    """`-c` is one shell line: a Python one-liner as the user would quote it."""
    return shlex.join(["python", "-c", code])


def packed_env(tmp_path: Path) -> Path:
    """tmp_path/env.tar.gz: a venv with tfyarn installed in it (tests/venvs.py), packed,
    as a user makes one."""
    import tarfile

    from venvs import small_venv

    venv = small_venv(tmp_path)
    with tarfile.open(tmp_path / "env.tar.gz", "w:gz") as tar:
        for item in venv.iterdir():
            tar.add(item, arcname=item.name)
    return tmp_path / "env.tar.gz"


def node_processes(app_id: str) -> list[str]:
    """Live processes on this node that belong to the application (its containers' env).

    Works on a single-node cluster whose containers run as this user (the sandbox's
    DefaultContainerExecutor); with LinuxContainerExecutor run the suite as root.
    """
    return [f"{p.pid}:{p.comm}: {p.cmdline}"
            for p in proctable.carrying(f"TFYARN_JOB_ID={app_id}", f"SKEIN_APPLICATION_ID={app_id}")
            if "java" not in p.comm]


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1)


def launcher_pid(app_id: str, task: str) -> int:
    """The launcher process of `task` (not its watchdog, which shares its command line)."""
    pids = [int(p.split(":", 1)[0]) for p in node_processes(app_id)
            if "tfyarn.runtime.launcher" in p and f"--tasks {task} " in p
            and "tfyarn-watchdog" not in p]
    assert len(pids) == 1, node_processes(app_id)
    return pids[0]
