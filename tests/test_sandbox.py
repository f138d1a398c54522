"""scripts/yarn-sandbox: the real Hadoop 3.3.6 daemons, started idempotently and loudly.

These use the one sandbox the suite shares (the `sandbox` fixture starts it if needed), and
for the failure case a second sandbox dir whose daemons cannot bind the first one's ports.
Beside the integration suite (`scripts/test-suites`), each has the cluster to itself.
"""

from __future__ import annotations

import os
import pwd
import re
import select
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import proctable
import pytest
from conftest import REPO

SANDBOX = REPO / "scripts" / "yarn-sandbox"
pytestmark = pytest.mark.exclusive  # starts, kills and restarts the sandbox's daemons


def props(path: Path) -> dict[str, str]:
    root = ET.parse(path).getroot()
    return {p.findtext("name"): p.findtext("value") for p in root.iter("property")}


def sandbox_cmd(*args: str, env: dict[str, str] | None = None,
                timeout: float = 600) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items()
            if k not in ("SANDBOX_PYTHON", "VIRTUAL_ENV", "SANDBOX_NODES")}
    return subprocess.run([str(SANDBOX), *args], capture_output=True, text=True,
                          timeout=timeout, env={**base, **(env or {})})


def pid_file(sandbox: dict[str, str], daemon: str, node: int | None = None) -> Path:
    """A daemon's pid file; a NodeManager's is in its node's dir (nodes/I/pids)."""
    home = Path(sandbox["HADOOP_CONF_DIR"]).parent
    home = home / "nodes" / str(node) if node else home
    user = os.environ.get("USER") or pwd.getpwuid(os.getuid()).pw_name  # as the script does
    return home / "pids" / f"hadoop-{user}-{daemon}.pid"


def test_config_is_well_formed_and_complete(tmp_path, sandbox):
    env = {"TFYARN_SANDBOX": str(tmp_path / "sb"), "SANDBOX_PYTHON": "/opt/py/bin/python3"}
    conf = Path(sandbox_cmd("config", env=env).stdout.strip())
    yarn = props(conf / "yarn-site.xml")
    assert yarn["yarn.nodemanager.vmem-check-enabled"] == "false"
    assert yarn["yarn.nodemanager.pmem-check-enabled"] == "true"  # Hadoop's default
    assert yarn["yarn.nodemanager.resource.memory.enforced"] == "false"  # else no pmem kill
    assert yarn["yarn.log-aggregation-enable"] == "true"
    assert int(yarn["yarn.nodemanager.resource.memory-mb"]) >= 8192
    assert yarn["yarn.nodemanager.address"] == "127.0.0.1:8041"
    assert "PATH=/opt/py/bin:" in yarn["yarn.nodemanager.admin-env"]
    assert props(conf / "core-site.xml")["fs.defaultFS"] == "hdfs://127.0.0.1:9000"
    assert props(conf / "hdfs-site.xml")["dfs.replication"] == "1"
    props(conf / "capacity-scheduler.xml")
    assert subprocess.run(["bash", "-n", str(conf / "hadoop-env.sh")]).returncode == 0
    opts = subprocess.run(["bash", "-c", f'. {conf / "hadoop-env.sh"}; echo "$HADOOP_OPTS"'],
                          capture_output=True, text=True, env={}).stdout.split()
    assert {"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"} <= set(opts)  # every JVM's
    printed = sandbox_cmd("env", env=env).stdout
    assert f'export HADOOP_CONF_DIR="{conf}"' in printed


def test_three_nodes_get_their_own_addresses_dirs_and_a_third_of_the_cluster(tmp_path, sandbox):
    env = {"TFYARN_SANDBOX": str(tmp_path / "sb"), "SANDBOX_NODES": "3",
           "SANDBOX_MEMORY_MB": "12288", "SANDBOX_VCORES": "12"}
    conf = Path(sandbox_cmd("config", env=env).stdout.strip())
    homes = [tmp_path / "sb" / "nodes" / str(i) for i in (1, 2, 3)]
    for i, home in enumerate(homes, 1):
        yarn = props(home / "conf" / "yarn-site.xml")
        assert yarn["yarn.nodemanager.address"] == f"127.0.0.{i}:8041"
        assert yarn["yarn.nodemanager.bind-host"] == f"127.0.0.{i}"
        assert yarn["yarn.nodemanager.resource.memory-mb"] == "4096"
        assert yarn["yarn.nodemanager.resource.cpu-vcores"] == "4"
        assert yarn["yarn.nodemanager.local-dirs"] == f"{home}/nm-local"
        assert f'HADOOP_PID_DIR="{home}/pids"' in (home / "conf" / "hadoop-env.sh").read_text()
        assert (home / "conf" / "core-site.xml").resolve() == conf / "core-site.xml"
    hosts = (conf / "hosts").read_text()
    assert all(f"127.0.0.{i} 127.0.0.{i}" in hosts for i in (2, 3))
    yarn = props(conf / "yarn-site.xml")
    assert yarn["yarn.resourcemanager.recovery.enabled"] == "true"
    assert int(yarn["yarn.nm.liveness-monitor.expiry-interval-ms"]) <= 30000
    assert yarn["yarn.resourcemanager.scheduler.monitor.enable"] == "true"
    cs = props(conf / "capacity-scheduler.xml")
    assert cs["yarn.scheduler.capacity.root.queues"] == "default,urgent"
    assert cs["yarn.scheduler.capacity.root.urgent.capacity"] == "50"
    assert cs["yarn.scheduler.capacity.root.default.maximum-capacity"] == "100"
    bad = sandbox_cmd("config", env={**env, "SANDBOX_NODES": "12"})
    assert bad.returncode == 1 and "SANDBOX_NODES=12" in bad.stderr


def test_three_nodes_get_2_1_0_gpus_from_yarns_plugin_and_a_fake_nvidia_smi(tmp_path, sandbox):
    env = {"TFYARN_SANDBOX": str(tmp_path / "sb"), "SANDBOX_NODES": "3"}
    conf = Path(sandbox_cmd("config", env=env).stdout.strip())
    assert props(conf / "resource-types.xml")["yarn.resource-types"] == "yarn.io/gpu"
    for i, count in ((1, 2), (2, 1), (3, 0)):
        home = tmp_path / "sb" / "nodes" / str(i)
        yarn = props(home / "conf" / "yarn-site.xml")
        assert (home / "conf" / "resource-types.xml").resolve() == conf / "resource-types.xml"
        if not count:  # a CPU node runs no GPU plugin
            assert "yarn.nodemanager.resource-plugins" not in yarn
            assert not (home / "gpu").exists()
            continue
        assert yarn["yarn.nodemanager.resource-plugins"] == "yarn.io/gpu"
        smi_dir = yarn["yarn.nodemanager.resource-plugins.gpu.path-to-discovery-executables"]
        assert smi_dir == str(home / "gpu")  # a dir: Hadoop 3.3.6 refuses a file's path
        xml = subprocess.run([f"{smi_dir}/nvidia-smi", "-x", "-q"], capture_output=True,
                             text=True, check=True).stdout
        gpus = ET.fromstring(xml.split("\n", 2)[2]).findall("gpu")  # after the DOCTYPE
        assert [g.findtext("minor_number") for g in gpus] == [str(m) for m in range(count)]
    mine = sandbox_cmd("config", env={**env, "SANDBOX_GPUS": "0,0,4"})
    assert mine.returncode == 0
    assert props(tmp_path / "sb" / "nodes" / "3" / "conf" / "yarn-site.xml")[
        "yarn.nodemanager.resource-plugins"] == "yarn.io/gpu"
    bad = sandbox_cmd("config", env={**env, "SANDBOX_GPUS": "2,1"})
    assert bad.returncode == 1 and "SANDBOX_GPUS=2,1: give one GPU count per node (3)" in bad.stderr


def test_a_rewritten_config_is_replaced_whole_and_an_unchanged_one_left_alone(tmp_path, sandbox):
    """A start that restarts a dead daemon rewrites the config while the live daemons,
    clients and tests read it: a reader that opened a file before sees it whole, never
    truncated, and a file whose content is the same is not touched at all."""
    env = {"TFYARN_SANDBOX": str(tmp_path / "sb"), "SANDBOX_NODES": "3"}
    conf = Path(sandbox_cmd("config", env=env).stdout.strip())
    files = sorted(p for p in (tmp_path / "sb").rglob("*") if p.is_file() and not p.is_symlink())
    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in files}
    assert conf / "yarn-site.xml" in before and conf / "hosts" in before
    assert sandbox_cmd("config", env=env).returncode == 0
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in files} == before
    links = [p for p in (tmp_path / "sb" / "nodes").rglob("*") if p.is_symlink()]
    assert links and all(os.readlink(p) == str(conf / p.name) for p in links)

    site = tmp_path / "sb" / "nodes" / "3" / "conf" / "yarn-site.xml"
    with open(site) as held:  # a reader in the middle of the rewrite
        old = held.read()
        held.seek(0)
        assert sandbox_cmd("config", env={**env, "SANDBOX_GPUS": "0,0,4"}).returncode == 0
        assert held.read() == old  # the old file, whole: the new one came by a rename
    assert "yarn.io/gpu" in site.read_text() and "yarn.io/gpu" not in old
    assert site.stat().st_ino != before[site][0]
    assert not [p for p in (tmp_path / "sb").rglob("*.tmp.*")]


def test_a_second_start_says_already_running(sandbox):
    out = sandbox_cmd("start")
    assert out.returncode == 0, out.stderr
    assert "already running" in out.stderr
    assert f'export HADOOP_CONF_DIR="{sandbox["HADOOP_CONF_DIR"]}"' in out.stdout


def test_the_gateway_commands_work_for_a_user_who_evals_the_env(sandbox):
    env = {**os.environ, **sandbox}
    nodes = subprocess.run(["yarn", "node", "-list"], env=env, capture_output=True, text=True)
    count = int((Path(sandbox["HADOOP_CONF_DIR"]).parent / "nodes" / "count").read_text())
    for i in range(1, count + 1):  # every node on its own address, named by it
        assert re.search(rf"^\s*127\.0\.0\.{i}:8041\s+RUNNING\s+127\.0\.0\.{i}:8042",
                         nodes.stdout, re.M), nodes.stdout + nodes.stderr
    assert f"Total Nodes:{count}" in nodes.stdout
    ls = subprocess.run(["hdfs", "dfs", "-ls", "/"], env=env, capture_output=True, text=True)
    assert ls.returncode == 0 and " /tmp" in ls.stdout, ls.stderr
    report = subprocess.run(["hdfs", "dfsadmin", "-report"], env=env, capture_output=True,
                            text=True)
    assert "Live datanodes (1)" in report.stdout, report.stderr
    classpath = subprocess.run(["yarn", "classpath"], env=env, capture_output=True, text=True)
    assert sandbox["HADOOP_CONF_DIR"] in classpath.stdout.split(":")


def test_a_killed_nodemanager_is_restarted_by_start_though_its_pid_was_reused(sandbox):
    """Its pid file names a pid another process has since (pids wrap within a CI run):
    Hadoop's `--daemon start` alone refuses that ("Stop it first"), and the sandbox
    stopped; the other process is left alone."""
    pid = int(pid_file(sandbox, "nodemanager", 1).read_text())
    pidfd = os.pidfd_open(pid)  # not our child: a pidfd turns readable when it has exited
    os.kill(pid, 9)
    assert select.select([pidfd], [], [], 60)[0], "the NodeManager outlived SIGKILL for 60 s"
    os.close(pidfd)
    with subprocess.Popen(["sleep", "600"]) as reused:
        try:
            pid_file(sandbox, "nodemanager", 1).write_text(f"{reused.pid}\n")
            status = sandbox_cmd("status")
            assert status.returncode == 1 and "nodemanager1: stopped" in status.stdout
            out = sandbox_cmd("start")
            assert out.returncode == 0, out.stderr
            assert "restarting the nodemanager1" in out.stderr
            assert reused.poll() is None  # not the sandbox's: untouched
        finally:
            reused.kill()
    assert int(pid_file(sandbox, "nodemanager", 1).read_text()) not in (pid, reused.pid)
    status = sandbox_cmd("status")
    assert status.returncode == 0 and "node 1 127.0.0.1: RUNNING" in status.stdout, status.stdout
    # restarted without SANDBOX_PYTHON: containers still find the sandbox's python first
    yarn = props(Path(sandbox["HADOOP_CONF_DIR"]) / "yarn-site.xml")
    python_dir = os.path.dirname(os.path.abspath(sys.executable))
    assert f"PATH={python_dir}:" in yarn["yarn.nodemanager.admin-env"], yarn


def test_a_daemon_that_cannot_start_is_named_and_nothing_is_left(tmp_path, sandbox):
    """A second sandbox on the same machine: its daemons find the ports taken. Its
    ResourceManager's state, left by an earlier life with no daemon of it running now, is
    dropped before any daemon starts: none of those applications' containers survived."""
    second = tmp_path / "second"
    earlier = second / "rm-state" / "FSRMStateRoot" / "RMAppRoot" / "application_1_0001"
    earlier.mkdir(parents=True)
    out = sandbox_cmd("start", env={"TFYARN_SANDBOX": str(second)})
    assert out.returncode == 1
    assert not list((second / "rm-state").iterdir()), out.stderr
    assert "no NodeManager was running: the ResourceManager starts with no application of " \
           "an earlier start" in out.stderr
    assert re.search(r"the (namenode|datanode|resourcemanager|nodemanager\d*) died while starting",
                     out.stderr), out.stderr
    assert "BindException" in out.stderr or "Address already in use" in out.stderr, out.stderr
    assert "nothing of the sandbox is left running" in out.stderr
    assert not [p.cmdline for p in proctable.live() if str(second / "conf") in p.cmdline]
    assert sandbox_cmd("status").returncode == 0  # the first sandbox is untouched
    first = Path(sandbox["HADOOP_CONF_DIR"]).parent / "rm-state" / "FSRMStateRoot"
    assert first.is_dir()
