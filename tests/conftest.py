"""Shared helpers: run the real CLI as a subprocess, inspect the real process table."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import interrupting
import proctable
import pytest
import shortjvms
from locks import beside_the_integration_suite, cluster_share, held, slot

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "adult"
CENSUS = REPO / "examples" / "census" / "census_single.py"
FIXTURES = REPO.parent / "shared" / "fixtures" / "hadoop-3.3.6"  # what Hadoop 3.3.6 returns


def pytest_configure(config: pytest.Config) -> None:
    interrupting.as_from_a_terminal()
    shortjvms.spark_conf_dir(REPO / "build")
    config.addinivalue_line("markers", "exclusive: stops, starts or reconfigures the sandbox's "
                            "daemons: runs alone on the cluster, as integration's do")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Beside the integration suite (`scripts/test-suites`): each test in a test slot, and
    one marked `exclusive` with the cluster to itself first (taken before the slot, so a
    wait for the cluster holds none)."""
    with contextlib.ExitStack() as hold:
        if beside_the_integration_suite() and item.get_closest_marker("exclusive"):
            hold.enter_context(cluster_share(exclusive=True))
        hold.enter_context(slot())
        yield


def real_memory_kill_message() -> str:
    """skein's exit_message for a container that a Hadoop 3.3.6 NodeManager killed over its
    memory, as captured on a real cluster (FIXTURES/memkill-skein-containers-...)."""
    text = (FIXTURES / "memkill-skein-containers-exit_message.txt").read_text()
    found = re.search(r"state=FAILED exit_message='([^']*)'", text)
    assert found, text
    return found.group(1)


def job_processes(job_id: str) -> list[str]:
    """Live processes whose environment, command line or working dir (the job dir, for
    what local mode forks) mentions the job (zombies excluded)."""
    return [f"{p.pid}: {p.comm}: {p.cmdline}" for p in proctable.live()
            if f"TFYARN_JOB_ID={job_id}".encode() in p.env or job_id in p.cmdline
            or job_id in p.cwd]


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


@pytest.fixture(scope="session")
def sandbox() -> dict[str, str]:
    """The real single-node Hadoop 3.3.6 (`scripts/yarn-sandbox start`: started if it is
    not running yet; CI starts it first) and the env its clients need: what `start` prints
    to export, plus CLASSPATH (`hadoop classpath --glob`) and LD_LIBRARY_PATH with libjvm,
    which libhdfs needs. One pytest process at a time runs `start` (the suite's workers
    run side by side: the first starts it, the others find it running). Beside the
    integration suite, only `env`: its caller started the sandbox, and a `start` would
    bring back a node that an integration test stopped on purpose."""
    command = "env" if beside_the_integration_suite() else "start"
    with held("sandbox-fixture"):
        out = subprocess.run([str(REPO / "scripts" / "yarn-sandbox"), command],
                             capture_output=True, text=True, timeout=900,
                             env={**os.environ, "SANDBOX_PYTHON": sys.executable})
    if out.returncode != 0:
        pytest.fail(f"scripts/yarn-sandbox {command} failed:\n{out.stderr[-4000:]}", pytrace=False)
    env = dict(re.findall(r'^export (\w+)="(.*)"$', out.stdout, re.M))
    env["PATH"] = env["PATH"].replace("$PATH", os.environ["PATH"])
    env["CLASSPATH"] = subprocess.run(
        [f"{env['HADOOP_HOME']}/bin/hadoop", "classpath", "--glob"], env={**os.environ, **env},
        capture_output=True, text=True, check=True).stdout.strip()
    env["LD_LIBRARY_PATH"] = f"{env['JAVA_HOME']}/lib/server"
    return env


def py(code: str) -> str:
    """`-c` is one shell line: a Python one-liner as the user would quote it."""
    return shlex.join(["python", "-c", code])


def reply(handler, code: int, body: bytes, kind: str = "application/json") -> None:
    """Send one HTTP response from a stand-in's request handler."""
    handler.send_response(code)
    handler.send_header("Content-Type", kind)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def serve_locally(handler_class):
    """A stand-in HTTP service on 127.0.0.1 (an ephemeral port), in a thread; quiet."""
    import http.server
    import threading

    handler_class.log_message = lambda *_a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_class)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def webhdfs(tmp_path):
    """A stand-in NameNode (CI has no HDFS): the WebHDFS calls tfyarn makes (GETFILESTATUS,
    LISTSTATUS, OPEN; CREATE with its redirect, RENAME, MKDIRS, DELETE) served from a local
    dir on 127.0.0.1. Yields .root, .conf (a conf dir pointing at it: hdfs-site.xml and
    fs.defaultFS) and .uploaded (bytes received per CREATE)."""
    import http.server
    import json
    import types
    import urllib.parse

    root = tmp_path / "webhdfs-root"
    root.mkdir()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            url = urllib.parse.urlparse(self.path)
            op = urllib.parse.parse_qs(url.query).get("op", [""])[0]
            local = root / url.path.removeprefix("/webhdfs/v1").lstrip("/")
            if not local.exists():
                return self._send(404, b'{"RemoteException": {"exception": '
                                  b'"FileNotFoundException", "message": "not found"}}')
            if op == "OPEN":
                return self._send(200, local.read_bytes(), "application/octet-stream")
            if op == "GETFILESTATUS":
                return self._send(200, json.dumps({"FileStatus": self._status(local)}).encode())
            if op == "LISTSTATUS":
                items = [{**self._status(p), "pathSuffix": p.name} for p in sorted(local.iterdir())]
                return self._send(200, json.dumps({"FileStatuses": {"FileStatus": items}}).encode())
            self._send(400, b"{}")

        def do_PUT(self):  # noqa: N802
            url = urllib.parse.urlparse(self.path)
            q = urllib.parse.parse_qs(url.query)
            op = q.get("op", [""])[0]
            local = root / url.path.removeprefix("/webhdfs/v1").lstrip("/")
            if op == "CREATE" and "data" not in q:  # the NameNode step: where to send it
                self.send_response(307)
                self.send_header("Location", f"http://127.0.0.1:{self.server.server_address[1]}"
                                 f"{self.path}&data=true")
                self.send_header("Content-Length", "0")
                return self.end_headers()
            if op == "CREATE":
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                local.parent.mkdir(parents=True, exist_ok=True)
                local.write_bytes(body)
                state.uploaded.append(len(body))
                return self._send(201, b"")
            if op == "MKDIRS":
                local.mkdir(parents=True, exist_ok=True)
                return self._send(200, b'{"boolean": true}')
            if op == "RENAME":
                dest = root / q["destination"][0].lstrip("/")
                if dest.exists():
                    return self._send(200, b'{"boolean": false}')
                local.rename(dest)
                return self._send(200, b'{"boolean": true}')
            self._send(400, b"{}")

        def do_DELETE(self):  # noqa: N802
            url = urllib.parse.urlparse(self.path)
            local = root / url.path.removeprefix("/webhdfs/v1").lstrip("/")
            local.unlink(missing_ok=True)
            self._send(200, b'{"boolean": true}')

        @staticmethod
        def _status(p):
            return {"type": "DIRECTORY" if p.is_dir() else "FILE",
                    "length": 0 if p.is_dir() else p.stat().st_size, "pathSuffix": ""}

        def _send(self, code, body, kind="application/json"):
            reply(self, code, body, kind)

    server = serve_locally(Handler)
    conf = tmp_path / "hadoop-conf"
    conf.mkdir()
    (conf / "hdfs-site.xml").write_text(
        "<configuration><property><name>dfs.namenode.http-address</name>"
        f"<value>0.0.0.0:{server.server_address[1]}</value></property></configuration>")
    (conf / "core-site.xml").write_text(
        "<configuration><property><name>fs.defaultFS</name>"
        "<value>hdfs://127.0.0.1:9000</value></property></configuration>")
    state = types.SimpleNamespace(root=root, conf=conf, uploaded=[])
    yield state
    server.shutdown()
