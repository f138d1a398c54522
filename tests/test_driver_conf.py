"""The Hadoop configuration skein's driver is started with (`siteconf.client_conf`): the
site's own, with faster HDFS close retries and a shorter poll after a submit. Read back
by the real Hadoop client (a YarnConfiguration with HDFS's files, in one JVM: the sandbox's
Hadoop 3.3.6), as the driver's JVM reads it."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from conftest import REPO

from tfyarn.hdfs.siteconf import (
    CLIENT_DEFAULTS,
    HDFS_SITE,
    YARN_CLIENT_DEFAULTS,
    YARN_SITE,
    client_conf,
    read_site,
)

DELAY = "dfs.client.block.write.locateFollowingBlock.initial.delay.ms"
RETRIES = "dfs.client.block.write.locateFollowingBlock.retries"
POLL = "yarn.client.app-submission.poll-interval"


def read_conf(sandbox: dict[str, str], conf_dir: str, *keys: str) -> dict[str, str]:
    """Each key as Hadoop's clients read it from `conf_dir`: YARN's as a YarnConfiguration,
    HDFS's as an HdfsConfiguration (tests/java/YarnConfRead.java; "null": not set, Hadoop's
    own default in its code serves). One JVM for them all."""
    out = subprocess.run([f"{sandbox['JAVA_HOME']}/bin/java", "-cp",
                          f"{conf_dir}:{sandbox['CLASSPATH']}",
                          str(REPO / "tests" / "java" / "YarnConfRead.java"), *keys],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)


def test_the_driver_reads_the_sites_configuration_with_faster_close_retries(sandbox, tmp_path):
    site = sandbox["HADOOP_CONF_DIR"]
    conf = client_conf(site, str(tmp_path / "driver-conf"))
    assert conf == str(tmp_path / "driver-conf")
    for name in set(os.listdir(site)) - {HDFS_SITE, YARN_SITE}:  # every other: the site's
        assert os.path.realpath(os.path.join(conf, name)) == \
            os.path.realpath(os.path.join(site, name))
    rm = "yarn.resourcemanager.address"
    got = read_conf(sandbox, conf, DELAY, RETRIES, "dfs.namenode.rpc-address", "fs.defaultFS",
                    POLL, rm)
    site_got = read_conf(sandbox, site, DELAY, POLL, rm)
    assert got[DELAY] == CLIENT_DEFAULTS[DELAY] == "10"
    assert got[RETRIES] == CLIENT_DEFAULTS[RETRIES]
    assert got["dfs.namenode.rpc-address"] == "127.0.0.1:9000"  # hdfs-site
    assert got["fs.defaultFS"] == "hdfs://127.0.0.1:9000"  # a link
    assert site_got[DELAY] == "400"  # Hadoop's default: the site is untouched
    # YARN's client polls a submitted application's report every 20 ms, not 200
    assert got[POLL] == YARN_CLIENT_DEFAULTS[POLL] == "20"
    assert got[rm] == site_got[rm]  # the site's yarn-site
    assert site_got[POLL] == "null"


def test_a_value_the_site_sets_itself_wins(sandbox, tmp_path):
    site = tmp_path / "site"
    shutil.copytree(sandbox["HADOOP_CONF_DIR"], site)
    text = (site / HDFS_SITE).read_text()
    (site / HDFS_SITE).write_text(text.replace(
        "</configuration>", f"<property><name>{DELAY}</name><value>250</value></property>"
                            "</configuration>"))
    text = (site / YARN_SITE).read_text()
    (site / YARN_SITE).write_text(text.replace(
        "</configuration>", f"<property><name>{POLL}</name><value>500</value></property>"
                            "</configuration>"))
    conf = client_conf(str(site), str(tmp_path / "driver-conf"))
    assert read_conf(sandbox, conf, DELAY, RETRIES, POLL) == {
        DELAY: "250", RETRIES: CLIENT_DEFAULTS[RETRIES], POLL: "500"}


def test_a_site_without_hdfs_or_yarn_site_gets_ones_of_the_defaults_alone(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "core-site.xml").write_text("<configuration></configuration>\n")
    conf = client_conf(str(site), str(tmp_path / "driver-conf"))
    assert read_site(os.path.join(conf, HDFS_SITE)) == CLIENT_DEFAULTS
    assert read_site(os.path.join(conf, YARN_SITE)) == YARN_CLIENT_DEFAULTS
    assert os.path.islink(os.path.join(conf, "core-site.xml"))


@pytest.mark.parametrize("name", [HDFS_SITE, YARN_SITE])
def test_a_site_file_that_cannot_be_amended_leaves_the_sites_own(tmp_path, name):
    site = tmp_path / "site"
    site.mkdir()
    (site / name).write_text("<configuration/>\n")  # nothing to insert into
    assert client_conf(str(site), str(tmp_path / "driver-conf")) == str(site)
    assert not (tmp_path / "driver-conf").exists()
