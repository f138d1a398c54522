"""hdfs:// in TensorFlow 2.21 through tfyarn's plugin (tfyarn/native/hdfs_plugin.cc).

CI has no Hadoop: the plugin is loaded into real TF and calls a stand-in libhdfs.so
(tests/native/fake_libhdfs.c, the libhdfs functions it uses, over a local directory), so
TF's own calls (TextLineDataset, TFRecordDataset, gfile, checkpoints) go through the real
plugin code. The real libhdfs is exercised by integration/ against a real HDFS.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA, REPO, py

from tfyarn import hdfs

pytestmark = pytest.mark.tf


@pytest.fixture(scope="session")
def fake_hdfs(tmp_path_factory) -> dict[str, str]:
    """The stand-in libhdfs, a directory behind it holding the census data, and a plugin
    cache of this session (the plugin is built once, by tfyarn's own build code)."""
    base = tmp_path_factory.mktemp("hdfs")
    lib = base / "libfakehdfs.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(lib),
                    str(REPO / "tests" / "native" / "fake_libhdfs.c")], check=True)
    root = base / "root"
    (root / "ml" / "adult").mkdir(parents=True)
    for name in ("adult.data", "adult.test"):
        shutil.copy(DATA / name, root / "ml" / "adult" / name)
    return {"TFYARN_LIBHDFS": str(lib), "TFYARN_FAKE_HDFS_ROOT": str(root),
            "TFYARN_CACHE": str(base / "cache")}


def run_tf(code: str, env: dict[str, str], hook: bool = True) -> subprocess.CompletedProcess:
    """A fresh Python that imports TF; with `hook`, as a tfyarn task gets it (no import of
    tfyarn in the code)."""
    full = {**os.environ, **env}
    if hook:
        full.update(hdfs.task_env(full))
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                          text=True, timeout=300)


TF_CALLS = r'''
import json, tensorflow as tf
out = {}
lines = list(tf.data.TextLineDataset("hdfs://nn:9000/ml/adult/adult.data"))
out["lines"] = len(lines)
out["first"] = lines[0].numpy().decode()[:20]
tf.io.gfile.makedirs("hdfs://nn:9000/tmp/a/b")
with tf.io.TFRecordWriter("hdfs://nn:9000/tmp/a/b/r.tfrecord") as w:
    for i in range(100):
        w.write(f"record {i}".encode())
out["records"] = [r.numpy().decode() for r in
                  tf.data.TFRecordDataset("hdfs://nn:9000/tmp/a/b/r.tfrecord")][::33]
out["glob"] = sorted(tf.io.gfile.glob("hdfs://nn:9000/ml/adult/adult.*"))
out["listdir"] = sorted(tf.io.gfile.listdir("hdfs://nn:9000/tmp/a"))
out["isdir"] = tf.io.gfile.isdir("hdfs://nn:9000/tmp/a/b")
out["size"] = tf.io.gfile.stat("hdfs://nn:9000/ml/adult/adult.data").length
with tf.io.gfile.GFile("hdfs://nn:9000/tmp/log.txt", "a") as f:
    f.write("one\n")
with tf.io.gfile.GFile("hdfs://nn:9000/tmp/log.txt", "a") as f:
    f.write("two\n")
out["appended"] = tf.io.gfile.GFile("hdfs://nn:9000/tmp/log.txt").read()
tf.io.gfile.rename("hdfs://nn:9000/tmp/log.txt", "hdfs://nn:9000/tmp/moved.txt")
tf.io.gfile.copy("hdfs://nn:9000/tmp/moved.txt", "hdfs://nn:9000/tmp/copy.txt")
out["exists"] = [tf.io.gfile.exists(f"hdfs://nn:9000/tmp/{n}") for n in
                 ("log.txt", "moved.txt", "copy.txt")]
v = tf.Variable([1.0, 2.0, 3.0])
ckpt = tf.train.Checkpoint(v=v)
saved = ckpt.save("hdfs://nn:9000/ckpt/model")
v.assign([0.0, 0.0, 0.0])
ckpt.restore(tf.train.latest_checkpoint("hdfs://nn:9000/ckpt")).assert_consumed()
out["restored"] = v.numpy().tolist()
out["saved"] = saved
tf.io.gfile.rmtree("hdfs://nn:9000/tmp")
out["gone"] = tf.io.gfile.exists("hdfs://nn:9000/tmp")
try:
    tf.io.gfile.GFile("hdfs://nn:9000/nope.txt").read()
except tf.errors.NotFoundError:
    out["missing"] = "NotFoundError"
out["viewfs"] = tf.io.gfile.exists("viewfs://cluster/ml/adult/adult.test")
out["default"] = tf.io.gfile.exists("hdfs:///ml/adult/adult.test")
print("OUT " + json.dumps(out))
'''


def test_tf_reads_and_writes_hdfs_through_the_plugin(fake_hdfs):
    r = run_tf(TF_CALLS, fake_hdfs)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(next(x for x in r.stdout.splitlines() if x.startswith("OUT "))[4:])
    assert out["lines"] == 32562 and out["first"].startswith("39, State-gov")  # adult.data
    assert out["records"] == ["record 0", "record 33", "record 66", "record 99"]
    assert out["glob"] == ["hdfs://nn:9000/ml/adult/adult.data",
                           "hdfs://nn:9000/ml/adult/adult.test"]
    assert out["listdir"] == ["b"] and out["isdir"] is True
    assert out["size"] == (DATA / "adult.data").stat().st_size
    assert out["appended"] == "one\ntwo\n"
    assert out["exists"] == [False, True, True]
    assert out["restored"] == [1.0, 2.0, 3.0] and out["saved"].startswith("hdfs://nn:9000/ckpt/")
    assert out["gone"] is False and out["missing"] == "NotFoundError"
    assert out["viewfs"] is True and out["default"] is True
    namenodes = set(Path(fake_hdfs["TFYARN_FAKE_HDFS_ROOT"], ".namenodes").read_text().split())
    assert namenodes == {"hdfs://nn:9000", "viewfs://cluster", "default"}


def test_a_task_reads_hdfs_with_no_change_to_user_code(el_submit, fake_hdfs):
    code = ("import tensorflow as tf; "
            "print('ROWS', sum(1 for _ in tf.data.TextLineDataset("
            "'hdfs://nn:9000/ml/adult/adult.test')))")
    out = el_submit("-t", "standalone", "--local", "-c", py(code), env=fake_hdfs, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "[worker:0] ROWS 16283" in out.stderr


def test_census_trains_from_hdfs(el_submit, fake_hdfs):
    out = el_submit("-t", "standalone", "--local", "-f", str(REPO / "examples" / "census"),
                    "-c", "python", "census/census_single.py", "--data-dir",
                    "hdfs://nn:9000/ml/adult", "--epochs", "1", env=fake_hdfs, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "eval_accuracy=" in out.stderr


def test_missing_libhdfs_is_named(fake_hdfs, tmp_path):
    env = {**fake_hdfs, "TFYARN_LIBHDFS": str(tmp_path / "none.so"), "HADOOP_HDFS_HOME": "",
           "HADOOP_HOME": ""}
    r = run_tf("import tensorflow as tf; tf.io.gfile.exists('hdfs://nn:9000/x')", env)
    assert r.returncode == 1
    assert "cannot load libhdfs for hdfs:// (set HADOOP_HDFS_HOME or HADOOP_HOME" in r.stderr
    assert "LD_LIBRARY_PATH" in r.stderr


def test_a_real_libhdfs_without_classpath_is_named(fake_hdfs, tmp_path):
    native = tmp_path / "hadoop" / "lib" / "native"
    native.mkdir(parents=True)
    shutil.copy(fake_hdfs["TFYARN_LIBHDFS"], native / "libhdfs.so")
    env = {**fake_hdfs, "TFYARN_LIBHDFS": "", "HADOOP_HDFS_HOME": str(tmp_path / "hadoop"),
           "CLASSPATH": ""}
    r = run_tf("import tensorflow as tf; tf.io.gfile.exists('hdfs://nn:9000/x')", env)
    assert r.returncode == 1
    assert "CLASSPATH is empty: libhdfs needs Hadoop's jars; export CLASSPATH=$(hadoop " \
        "classpath --glob)" in r.stderr


def test_the_hook_keeps_the_envs_own_sitecustomize(fake_hdfs, tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import os; os.environ['SITE_RAN'] = 'yes'\n")
    env = {**fake_hdfs, "PYTHONPATH": str(tmp_path)}
    r = run_tf("import os; print('SITE', os.environ.get('SITE_RAN'))", env)
    assert r.returncode == 0 and "SITE yes" in r.stdout, r.stderr


def test_opting_out(fake_hdfs):
    r = run_tf("import tensorflow as tf; print('SCHEMES', 'hdfs' in "
               "tf.io.gfile.get_registered_schemes())", {**fake_hdfs,
                                                          "TFYARN_HDFS_PLUGIN": "off"})
    assert r.returncode == 0 and "SCHEMES False" in r.stdout, r.stderr


def test_build_command_prints_the_cached_plugin(fake_hdfs):
    r = subprocess.run([sys.executable, "-m", "tfyarn", "build-hdfs-plugin"], capture_output=True,
                       text=True, env={**os.environ, **fake_hdfs}, timeout=300)
    assert r.returncode == 0, r.stderr
    path = Path(r.stdout.strip())
    assert path.exists() and path.parent.name.startswith("tf-2.")
