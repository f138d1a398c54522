"""The Hadoop configuration skein's driver is started with (`siteconf.client_conf`): the
site's own, with faster HDFS close retries. Read back by the real Hadoop client
(`hdfs getconf`, the sandbox's Hadoop 3.3.6), as the driver's JVM reads it."""

from __future__ import annotations

import os
import shutil
import subprocess

from tfyarn.hdfs.siteconf import CLIENT_DEFAULTS, HDFS_SITE, client_conf, read_site

DELAY = "dfs.client.block.write.locateFollowingBlock.initial.delay.ms"
RETRIES = "dfs.client.block.write.locateFollowingBlock.retries"


def getconf(sandbox: dict[str, str], conf_dir: str, key: str) -> str:
    env = {**os.environ, **sandbox, "HADOOP_CONF_DIR": conf_dir,
           "HADOOP_ROOT_LOGGER": "ERROR,console"}
    out = subprocess.run([f"{sandbox['HADOOP_HOME']}/bin/hdfs", "getconf", "-confKey", key],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_driver_reads_the_sites_configuration_with_faster_close_retries(sandbox, tmp_path):
    site = sandbox["HADOOP_CONF_DIR"]
    conf = client_conf(site, str(tmp_path / "driver-conf"))
    assert conf == str(tmp_path / "driver-conf")
    for name in set(os.listdir(site)) - {HDFS_SITE}:  # every other entry: the site's file
        assert os.path.realpath(os.path.join(conf, name)) == \
            os.path.realpath(os.path.join(site, name))
    assert getconf(sandbox, conf, DELAY) == CLIENT_DEFAULTS[DELAY] == "10"
    assert getconf(sandbox, conf, RETRIES) == CLIENT_DEFAULTS[RETRIES]
    assert getconf(sandbox, conf, "dfs.namenode.rpc-address") == "127.0.0.1:9000"  # hdfs-site
    assert getconf(sandbox, conf, "fs.defaultFS") == "hdfs://127.0.0.1:9000"  # a link
    assert getconf(sandbox, site, DELAY) == "400"  # Hadoop's default: the site is untouched


def test_a_value_the_site_sets_itself_wins(sandbox, tmp_path):
    site = tmp_path / "site"
    shutil.copytree(sandbox["HADOOP_CONF_DIR"], site)
    text = (site / HDFS_SITE).read_text()
    (site / HDFS_SITE).write_text(text.replace(
        "</configuration>", f"<property><name>{DELAY}</name><value>250</value></property>"
                            "</configuration>"))
    conf = client_conf(str(site), str(tmp_path / "driver-conf"))
    assert getconf(sandbox, conf, DELAY) == "250"
    assert getconf(sandbox, conf, RETRIES) == CLIENT_DEFAULTS[RETRIES]


def test_a_site_without_hdfs_site_gets_one_of_the_defaults_alone(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "core-site.xml").write_text("<configuration></configuration>\n")
    conf = client_conf(str(site), str(tmp_path / "driver-conf"))
    assert read_site(os.path.join(conf, HDFS_SITE)) == CLIENT_DEFAULTS
    assert os.path.islink(os.path.join(conf, "core-site.xml"))


def test_an_hdfs_site_that_cannot_be_amended_leaves_the_sites_own(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / HDFS_SITE).write_text("<configuration/>\n")  # nothing to insert into
    assert client_conf(str(site), str(tmp_path / "driver-conf")) == str(site)
    assert not (tmp_path / "driver-conf").exists()
