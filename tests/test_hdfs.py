"""hdfs:// in TensorFlow 2.21 through tfyarn's plugin (tfyarn/hdfs/native/hdfs_plugin.cc).

Against the real thing: the sandbox's HDFS (Apache Hadoop 3.3.6's NameNode and DataNode)
through the real libhdfs (built by scripts/hadoop/install from Apache's C sources), so
TF's own calls (TextLineDataset, TFRecordDataset, gfile, checkpoints) go through the
plugin, libhdfs and the JVM client to a real NameNode.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import DATA, REPO, py

from tfyarn.hdfs import plugin as hdfs

pytestmark = pytest.mark.tf

NN = "hdfs://127.0.0.1:9000"


@pytest.fixture(scope="session")
def real_hdfs(sandbox, tmp_path_factory) -> dict[str, str]:
    """The sandbox's client env, a fresh HDFS dir (TFYARN_TEST_BASE) holding the census data
    under ml/adult, a viewfs mount table `viewfs://cluster/ml` -> that dir's ml (a conf dir
    first on CLASSPATH), and a plugin cache of this session (built once, by tfyarn's own
    build code). The HDFS dir is removed afterwards."""
    base = f"/tmp/tfyarn-test-{uuid.uuid4().hex[:12]}"
    dfs = [f"{sandbox['HADOOP_HOME']}/bin/hdfs", "dfs"]
    env = {**os.environ, **sandbox, "HADOOP_ROOT_LOGGER": "ERROR,console"}
    subprocess.run([*dfs, "-mkdir", "-p", f"{base}/ml/adult"], env=env, check=True)
    subprocess.run([*dfs, "-put", str(DATA / "adult.data"), str(DATA / "adult.test"),
                    f"{base}/ml/adult/"], env=env, check=True)
    local = tmp_path_factory.mktemp("hdfs")
    conf = local / "viewfs-conf"
    conf.mkdir()
    (conf / "core-site.xml").write_text(
        '<?xml version="1.0"?><configuration>'
        f"<property><name>fs.defaultFS</name><value>{NN}</value></property>"
        "<property><name>fs.viewfs.mounttable.cluster.link./ml</name>"
        f"<value>{NN}{base}/ml</value></property></configuration>\n")
    yield {**sandbox, "CLASSPATH": f"{conf}:{sandbox['CLASSPATH']}",
           "TFYARN_CACHE": str(local / "cache"), "TFYARN_TEST_BASE": base}
    subprocess.run([*dfs, "-rm", "-r", "-f", "-skipTrash", base], env=env, check=True)


def run_tf(code: str, env: dict[str, str], hook: bool = True) -> subprocess.CompletedProcess:
    """A fresh Python that imports TF; with `hook`, as a tfyarn task gets it (no import of
    tfyarn in the code)."""
    full = {**os.environ, **env}
    if hook:
        full.update(hdfs.plugin_env(full))
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                          text=True, timeout=300)


TF_CALLS = r'''
import json, os, tensorflow as tf
B = "hdfs://127.0.0.1:9000" + os.environ["TFYARN_TEST_BASE"]
out = {}
lines = list(tf.data.TextLineDataset(B + "/ml/adult/adult.data"))
out["lines"] = len(lines)
out["first"] = lines[0].numpy().decode()[:20]
tf.io.gfile.makedirs(B + "/tmp/a/b")
with tf.io.TFRecordWriter(B + "/tmp/a/b/r.tfrecord") as w:
    for i in range(100):
        w.write(f"record {i}".encode())
out["records"] = [r.numpy().decode() for r in
                  tf.data.TFRecordDataset(B + "/tmp/a/b/r.tfrecord")][::33]
out["glob"] = sorted(tf.io.gfile.glob(B + "/ml/adult/adult.*"))
out["listdir"] = sorted(tf.io.gfile.listdir(B + "/tmp/a"))
out["isdir"] = tf.io.gfile.isdir(B + "/tmp/a/b")
out["size"] = tf.io.gfile.stat(B + "/ml/adult/adult.data").length
with tf.io.gfile.GFile(B + "/tmp/log.txt", "a") as f:
    f.write("one\n")
with tf.io.gfile.GFile(B + "/tmp/log.txt", "a") as f:
    f.write("two\n")
out["appended"] = tf.io.gfile.GFile(B + "/tmp/log.txt").read()
tf.io.gfile.rename(B + "/tmp/log.txt", B + "/tmp/moved.txt")
tf.io.gfile.copy(B + "/tmp/moved.txt", B + "/tmp/copy.txt")
out["exists"] = [tf.io.gfile.exists(f"{B}/tmp/{n}") for n in ("log.txt", "moved.txt", "copy.txt")]
v = tf.Variable([1.0, 2.0, 3.0])
ckpt = tf.train.Checkpoint(v=v)
saved = ckpt.save(B + "/ckpt/model")
v.assign([0.0, 0.0, 0.0])
ckpt.restore(tf.train.latest_checkpoint(B + "/ckpt")).assert_consumed()
out["restored"] = v.numpy().tolist()
out["saved"] = saved
tf.io.gfile.rmtree(B + "/tmp")
out["gone"] = tf.io.gfile.exists(B + "/tmp")
try:
    tf.io.gfile.GFile(B + "/nope.txt").read()
except tf.errors.NotFoundError:
    out["missing"] = "NotFoundError"
out["viewfs"] = tf.io.gfile.exists("viewfs://cluster/ml/adult/adult.test")
out["default"] = tf.io.gfile.exists(f"hdfs://{os.environ['TFYARN_TEST_BASE']}/ml/adult/adult.test")
print("OUT " + json.dumps(out))
'''


def test_tf_reads_and_writes_hdfs_through_the_plugin(real_hdfs):
    r = run_tf(TF_CALLS, real_hdfs)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(next(x for x in r.stdout.splitlines() if x.startswith("OUT "))[4:])
    base = f"{NN}{real_hdfs['TFYARN_TEST_BASE']}"
    assert out["lines"] == 32562 and out["first"].startswith("39, State-gov")  # adult.data
    assert out["records"] == ["record 0", "record 33", "record 66", "record 99"]
    assert out["glob"] == [f"{base}/ml/adult/adult.data", f"{base}/ml/adult/adult.test"]
    assert out["listdir"] == ["b"] and out["isdir"] is True
    assert out["size"] == (DATA / "adult.data").stat().st_size
    assert out["appended"] == "one\ntwo\n"
    assert out["exists"] == [False, True, True]
    assert out["restored"] == [1.0, 2.0, 3.0] and out["saved"].startswith(f"{base}/ckpt/")
    assert out["gone"] is False and out["missing"] == "NotFoundError"
    assert out["viewfs"] is True and out["default"] is True


def test_what_tf_wrote_is_what_hdfs_holds(real_hdfs):
    """A file written through the plugin, read back by Hadoop's own `hdfs dfs -cat`."""
    path = f"{NN}{real_hdfs['TFYARN_TEST_BASE']}/written-by-tf.txt"
    code = f"import tensorflow as tf; tf.io.gfile.GFile({path!r}, 'w').write('from TF\\n' * 3)"
    r = run_tf(code, real_hdfs)
    assert r.returncode == 0, r.stderr[-3000:]
    cat = subprocess.run([f"{real_hdfs['HADOOP_HOME']}/bin/hdfs", "dfs", "-cat", path],
                         env={**os.environ, **real_hdfs}, capture_output=True, text=True)
    assert cat.stdout == "from TF\n" * 3, cat.stderr


def test_a_task_reads_hdfs_with_no_change_to_user_code(el_submit, real_hdfs):
    code = ("import tensorflow as tf; "
            "print('ROWS', sum(1 for _ in tf.data.TextLineDataset("
            f"'{NN}{real_hdfs['TFYARN_TEST_BASE']}/ml/adult/adult.test')))")
    out = el_submit("-t", "standalone", "--local", "-c", py(code), env=real_hdfs, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "[worker:0] ROWS 16283" in out.stderr


def test_census_trains_from_hdfs(el_submit, real_hdfs):
    out = el_submit("-t", "standalone", "--local", "-f", str(REPO / "examples" / "census"),
                    "-c", "python", "census/census_single.py", "--data-dir",
                    f"{NN}{real_hdfs['TFYARN_TEST_BASE']}/ml/adult", "--epochs", "1",
                    env=real_hdfs, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "eval_accuracy=" in out.stderr


def test_missing_libhdfs_is_named(real_hdfs, tmp_path):
    env = {**real_hdfs, "TFYARN_LIBHDFS": str(tmp_path / "none.so"), "HADOOP_HDFS_HOME": "",
           "HADOOP_HOME": ""}
    r = run_tf(f"import tensorflow as tf; tf.io.gfile.exists('{NN}/x')", env)
    assert r.returncode == 1
    assert "cannot load libhdfs for hdfs:// (set HADOOP_HDFS_HOME or HADOOP_HOME" in r.stderr
    assert "LD_LIBRARY_PATH" in r.stderr


def test_the_real_libhdfs_without_classpath_is_named(real_hdfs):
    env = {**real_hdfs, "CLASSPATH": ""}
    r = run_tf(f"import tensorflow as tf; tf.io.gfile.exists('{NN}/x')", env)
    assert r.returncode == 1
    assert "CLASSPATH is empty: libhdfs needs Hadoop's jars; export CLASSPATH=$(hadoop " \
        "classpath --glob)" in r.stderr


def test_the_hook_keeps_the_envs_own_sitecustomize(real_hdfs, tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import os; os.environ['SITE_RAN'] = 'yes'\n")
    env = {**real_hdfs, "PYTHONPATH": str(tmp_path)}
    r = run_tf("import os; print('SITE', os.environ.get('SITE_RAN'))", env)
    assert r.returncode == 0 and "SITE yes" in r.stdout, r.stderr


def test_opting_out(real_hdfs):
    r = run_tf("import tensorflow as tf; print('SCHEMES', 'hdfs' in "
               "tf.io.gfile.get_registered_schemes())", {**real_hdfs,
                                                          "TFYARN_HDFS_PLUGIN": "off"})
    assert r.returncode == 0 and "SCHEMES False" in r.stdout, r.stderr


def test_build_command_prints_the_cached_plugin(real_hdfs):
    r = subprocess.run([sys.executable, "-m", "tfyarn", "build-hdfs-plugin"], capture_output=True,
                       text=True, env={**os.environ, **real_hdfs}, timeout=300)
    assert r.returncode == 0, r.stderr
    path = Path(r.stdout.strip())
    assert path.exists() and path.parent.name.startswith("tf-2.")


def test_a_container_keeps_the_plugin_in_its_local_dir_not_its_home(monkeypatch, tmp_path):
    """A NodeManager may give containers HOME=/home/ (shared, or not writable)."""
    monkeypatch.delenv("TFYARN_CACHE", raising=False)
    monkeypatch.setenv("HOME", "/home/")
    monkeypatch.setenv("CONTAINER_ID", "container_1795436950494_0007_01_000003")
    monkeypatch.setenv("LOCAL_DIRS", f"{tmp_path}/appcache/a,{tmp_path}/appcache/b")
    roots = hdfs.cache_roots()
    assert roots[0] == Path(tmp_path, "appcache", "a", "tfyarn-cache", "hdfs-plugin")
    assert not any(str(r).startswith("/home/") for r in roots)
    monkeypatch.setenv("TFYARN_CACHE", str(tmp_path / "site"))  # a cluster-wide setting wins
    assert hdfs.cache_roots()[0] == Path(tmp_path, "site", "hdfs-plugin")


def test_private_dir_makes_0700_tightens_hdfs_default_and_keeps_a_chosen_mode(real_hdfs):
    """docs/security.md C4 against the sandbox's NameNode: a missing dir is made 0700; one
    at HDFS's default 0755 (an older tfyarn's) is tightened; 0750 is its owner's choice."""
    from tfyarn.hdfs import webhdfs

    client = webhdfs.client_for("hdfs:///", real_hdfs["HADOOP_CONF_DIR"], "root")
    base = real_hdfs["TFYARN_TEST_BASE"]
    assert webhdfs.private_dir(client, f"{base}/new/.tfyarn") == "made"
    assert client.status(f"{base}/new/.tfyarn")["permission"] == "700"
    client.makedirs(f"{base}/old", permission="755")
    assert webhdfs.private_dir(client, f"{base}/old") == "tightened"
    assert client.status(f"{base}/old")["permission"] == "700"
    client.makedirs(f"{base}/shared", permission="750")
    assert webhdfs.private_dir(client, f"{base}/shared") == ""
    assert client.status(f"{base}/shared")["permission"] == "750"


KERBEROS = {"hadoop.security.authentication": "kerberos"}


@pytest.mark.parametrize("url, site, spnego, tf, web, how", [
    ("/data/x", {}, False, (), ("hdfs",), "file"),
    ("file:///data/x", KERBEROS, True, ("file", "hdfs"), ("hdfs",), "file"),
    ("hdfs://nn/x", {}, True, ("hdfs",), ("hdfs",), "tensorflow"),  # a task with the plugin
    ("hdfs://nn/x", {}, False, (), ("hdfs",), "webhdfs"),  # simple auth: no login needed
    ("viewfs://c/x", {}, False, (), ("hdfs", "viewfs"), "webhdfs"),
    ("viewfs://c/x", {}, False, (), ("hdfs",), "hadoop"),  # Spark's executors: hdfs only
    ("hdfs://nn/x", KERBEROS, True, (), ("hdfs",), "webhdfs"),  # a gateway's SPNEGO login
    ("hdfs://nn/x", KERBEROS, False, (), ("hdfs",), "hadoop"),  # a container's tokens
    ("hdfs://nn/x", {"dfs.webhdfs.enabled": "false"}, True, (), ("hdfs",), "hadoop"),
    ("s3a://bucket/x", {}, True, (), ("hdfs",), "hadoop"),
])
def test_one_decision_says_how_each_process_reaches_a_filesystem(url, site, spnego, tf, web,
                                                                  how):
    from tfyarn.hdfs.siteconf import route

    assert route(url, site, spnego, tf, web) == how
