"""Any Hadoop filesystem from Python, through Hadoop's own client: libhdfs (JNI) via pyarrow.

Used where WebHDFS cannot serve: a filesystem other than hdfs:// (s3a://, gs://, abfs://,
webhdfs://...) or a Kerberos cluster (the JVM's login: the ticket cache, or the YARN
container's token file). Owns finding what libhdfs needs: Hadoop's jars on CLASSPATH
(`hadoop classpath`, its `dir/*` expanded here as Java does: libhdfs's JVM does not expand
wildcards, and `classpath --glob` is a JVM of its own, 0.5 s of CPU), libhdfs.so, and a
JVM; for this process (Spark's executors) and for every task a YARN launcher starts
(`TaskHadoop`: what each task's env gets, so TF's hdfs:// plugin finds them).
Must not be imported on the gateway's hot paths, nor leave the process environment
changed (libhdfs reads it only while its JVM starts).
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


def _before(entries: list[str], existing: str | None) -> str:
    """A path list: `entries`, then what the variable held (CLASSPATH, LD_LIBRARY_PATH)."""
    return os.pathsep.join([*entries, *([existing] if existing else [])])


def expand_classpath(classpath: str) -> list[str]:
    """`hadoop classpath`'s entries with each `dir/*` made the dir's .jar and .JAR files
    (Java's rule, which libhdfs's JVM does not apply); other entries as they are."""
    out: list[str] = []
    for entry in classpath.split(os.pathsep):
        if entry.endswith("/*"):
            folder = entry[:-1]
            try:
                names = os.listdir(folder)
            except OSError:  # a dir that is not there adds nothing
                continue
            for ext in (".jar", ".JAR"):
                out += [folder + n for n in sorted(names)
                        if n.endswith(ext) and os.path.isfile(folder + n)]
        elif entry:
            out.append(entry)
    return out


def jvm_lib_dir(java_home: str) -> str | None:
    """The dir of the JVM's libjvm.so under `java_home` (Java 9+: lib/server), if any."""
    if not java_home:
        return None
    usual = os.path.join(java_home, "lib", "server")
    if os.path.isfile(os.path.join(usual, "libjvm.so")):
        return usual
    for folder, _dirs, files in os.walk(java_home, followlinks=True):  # Java 8's jre/lib/ARCH
        if "libjvm.so" in files:
            return folder
    return None


class TaskHadoop:
    """The Hadoop client env every task of a YARN container gets, so TF's hdfs:// plugin
    (libhdfs) starts: HADOOP_HOME, HADOOP_HDFS_HOME, CLASSPATH (Hadoop's jars, then the
    container's own) and LD_LIBRARY_PATH (libjvm.so's dir and Hadoop's native libs, then
    the container's own); nothing where the node has no `hadoop`. `hadoop classpath` (a
    shell script, 50 ms of CPU) starts with the launcher and is read when the tasks start:
    the container's start script ran it first, and with its own expansion cost each
    container about 0.35 s before the launcher began (#46)."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = dict(environ)
        binary = hadoop_bin(environ)
        self.home = environ.get("HADOOP_HOME") or (
            os.path.dirname(os.path.dirname(os.path.abspath(binary))) if binary else "")
        self.proc = None if binary is None else subprocess.Popen(
            [binary, "classpath"], env={**environ, "HADOOP_HOME": self.home},
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True)

    def env(self) -> dict[str, str]:
        """What to add to each task's env (waits for `hadoop classpath`)."""
        if self.proc is None:
            return {}
        out, _ = self.proc.communicate()
        environ, home = self.environ, self.home
        jars = expand_classpath(out.strip()) if self.proc.returncode == 0 else []
        jvm = jvm_lib_dir(environ.get("JAVA_HOME", ""))
        return {"HADOOP_HOME": home,
                "HADOOP_HDFS_HOME": environ.get("HADOOP_HDFS_HOME") or home,
                "CLASSPATH": _before(jars, environ.get("CLASSPATH")),
                "LD_LIBRARY_PATH": _before([*([jvm] if jvm else []),
                                            os.path.join(home, "lib", "native")],
                                           environ.get("LD_LIBRARY_PATH"))}

    def close(self) -> None:
        """`hadoop classpath` ended and reaped, if the tasks never started."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


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
    r = subprocess.run([binary, "classpath"], capture_output=True, text=True,
                       env=dict(environ))
    if r.returncode != 0:
        raise HadoopClientMissing(f"`{binary} classpath` failed: {r.stderr.strip()}")
    return {"CLASSPATH": _before(expand_classpath(r.stdout.strip()), environ.get("CLASSPATH")),
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
