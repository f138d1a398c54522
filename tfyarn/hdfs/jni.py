"""Any Hadoop filesystem from Python, through Hadoop's own client: libhdfs (JNI) via pyarrow.

Used where WebHDFS cannot serve: a filesystem other than hdfs:// (s3a://, gs://, abfs://,
webhdfs://...) or a Kerberos cluster (the JVM's login: the ticket cache, or the YARN
container's token file). Owns finding what libhdfs needs in this process's environment:
Hadoop's jars on CLASSPATH (`hadoop classpath --glob`: libhdfs's JVM does not expand
wildcards), libhdfs.so, and a JVM. It mirrors what tasks get from
`client.appspec.HADOOP_ENV`, in Python, for processes that tfyarn does not launch (Spark's
executors).
Must not be imported on the gateway's hot paths (it starts a JVM), nor leave the process
environment changed (libhdfs reads it only while its JVM starts).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

from tfyarn.core.errors import EnvironmentMissing
from tfyarn.hdfs.plugin import jvm_env

_FILESYSTEMS: dict[tuple[str, str | None], Any] = {}  # one JVM client per process and fs


class HadoopClientMissing(EnvironmentMissing):
    """This host has no Hadoop client that libhdfs can use."""


def hadoop_bin(environ: Mapping[str, str]) -> str | None:
    """The `hadoop` command: under HADOOP_HOME or HADOOP_COMMON_HOME (what YARN gives a
    container), else on PATH."""
    for home in ("HADOOP_HOME", "HADOOP_COMMON_HOME"):
        candidate = os.path.join(environ.get(home, ""), "bin", "hadoop")
        if environ.get(home) and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("hadoop", path=environ.get("PATH"))


def client_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What to add to `environ` so that libhdfs starts: CLASSPATH (globbed, plus what was
    there), ARROW_LIBHDFS_DIR, HADOOP_HOME. Raises HadoopClientMissing saying what to set."""
    binary = hadoop_bin(environ)
    if binary is None:
        raise HadoopClientMissing(
            "writing through Hadoop's client needs a Hadoop install here (no `hadoop` "
            "under HADOOP_HOME or HADOOP_COMMON_HOME, none on PATH); set HADOOP_HOME")
    home = os.path.dirname(os.path.dirname(os.path.realpath(binary)))
    native = environ.get("ARROW_LIBHDFS_DIR") or os.path.join(home, "lib", "native")
    if not os.path.exists(os.path.join(native, "libhdfs.so")):
        raise HadoopClientMissing(f"{native}/libhdfs.so is missing: the Hadoop install at "
                                  f"{home} has no native client; set ARROW_LIBHDFS_DIR to "
                                  "the directory of libhdfs.so")
    if not environ.get("JAVA_HOME"):
        raise HadoopClientMissing("libhdfs needs a JVM: set JAVA_HOME")
    r = subprocess.run([binary, "classpath", "--glob"], capture_output=True, text=True,
                       env=dict(environ))
    if r.returncode != 0:
        raise HadoopClientMissing(f"`{binary} classpath --glob` failed: {r.stderr.strip()}")
    before = environ.get("CLASSPATH")
    return {"CLASSPATH": r.stdout.strip() + (os.pathsep + before if before else ""),
            "ARROW_LIBHDFS_DIR": native, "HADOOP_HOME": home, **jvm_env(environ)}


def filesystem(uri: str, user: str | None = None) -> Any:
    """A pyarrow filesystem for `uri`'s filesystem (scheme://authority), through libhdfs;
    one per process (a JVM starts once). `user` only where Hadoop's auth is simple."""
    parsed = urllib.parse.urlparse(uri)
    default_fs = f"{parsed.scheme}://{parsed.netloc}/"
    key = (default_fs, user)
    if key not in _FILESYSTEMS:
        from pyarrow.fs import HadoopFileSystem

        # the JVM starts once, with the first one's environment
        added = client_env(os.environ) if not _FILESYSTEMS else {}
        # "default" + fs.defaultFS: pyarrow would prefix any other host with hdfs://; an
        # hdfs:/// path (no NameNode named) is on the configuration's own fs.defaultFS
        conf = {} if parsed.scheme == "hdfs" and not parsed.netloc else {
            "fs.defaultFS": default_fs}
        try:
            with _environment(added):
                _FILESYSTEMS[key] = HadoopFileSystem("default", 0, user=user, extra_conf=conf)
        except OSError as exc:
            raise HadoopClientMissing(f"Hadoop's client could not open {default_fs}: {exc} "
                                      "(its own words are on this process's stderr)") from None
    return _FILESYSTEMS[key]


_ENV_LOCK = threading.Lock()


@contextlib.contextmanager
def _environment(added: Mapping[str, str]) -> Iterator[None]:
    """`added` in the process environment only while libhdfs loads and creates its JVM
    (they read CLASSPATH, JAVA_HOME, ARROW_LIBHDFS_DIR from it then, and never again),
    then everything as it was: a notebook's kernel keeps its own environment."""
    if not added:
        yield
        return
    with _ENV_LOCK:
        before = {k: os.environ.get(k) for k in added}
        os.environ.update(added)
        try:
            yield
        finally:
            for k, v in before.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
