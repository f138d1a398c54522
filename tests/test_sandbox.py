"""scripts/yarn-sandbox writes a usable single-node config without needing Hadoop."""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET

from conftest import REPO


def props(path) -> dict[str, str]:
    root = ET.parse(path).getroot()
    return {p.findtext("name"): p.findtext("value") for p in root.iter("property")}


def test_config_is_well_formed_and_complete(tmp_path):
    env = {**os.environ, "TFYARN_SANDBOX": str(tmp_path / "sb"), "JAVA_HOME": "/opt/jdk17"}
    env.pop("HADOOP_HOME", None)
    out = subprocess.run([str(REPO / "scripts" / "yarn-sandbox"), "config"], env=env,
                         capture_output=True, text=True, check=True)
    conf = out.stdout.strip()
    yarn = props(os.path.join(conf, "yarn-site.xml"))
    assert yarn["yarn.nodemanager.vmem-check-enabled"] == "false"
    assert yarn["yarn.log-aggregation-enable"] == "true"
    assert int(yarn["yarn.nodemanager.resource.memory-mb"]) >= 8192
    assert int(yarn["yarn.nodemanager.resource.cpu-vcores"]) >= 8
    assert yarn["yarn.resourcemanager.hostname"] == "127.0.0.1"
    assert props(os.path.join(conf, "core-site.xml"))["fs.defaultFS"] == "hdfs://127.0.0.1:9000"
    assert props(os.path.join(conf, "hdfs-site.xml"))["dfs.replication"] == "1"
    props(os.path.join(conf, "capacity-scheduler.xml"))
    with open(os.path.join(conf, "hadoop-env.sh")) as f:
        hadoop_env = f.read()
    for opens in ("java.base/java.lang=", "java.base/java.util=", "java.base/java.lang.reflect=",
                  "java.base/java.io=", "java.base/java.net=", "java.base/sun.nio.ch="):
        assert f"--add-opens {opens}ALL-UNNAMED" in hadoop_env
    assert subprocess.run(["bash", "-n", os.path.join(conf, "hadoop-env.sh")]).returncode == 0
    printed = subprocess.run([str(REPO / "scripts" / "yarn-sandbox"), "env"], env=env,
                             capture_output=True, text=True, check=True).stdout
    assert f'export HADOOP_CONF_DIR="{conf}"' in printed


def test_start_without_hadoop_says_what_is_missing(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "HADOOP_HOME"}
    env["TFYARN_SANDBOX"] = str(tmp_path / "sb")
    out = subprocess.run([str(REPO / "scripts" / "yarn-sandbox"), "start"], env=env,
                         capture_output=True, text=True)
    assert out.returncode == 1 and "set HADOOP_HOME" in out.stderr
