"""skein's driver's JVM (`client/driverjvm.py`): a classpath the JVM can archive, and the
class-data archive's rules (whose, which, when kept). The JVM runs are real: the
sandbox's Hadoop 3.3.6 jars, its configuration dir, Java 17's AppCDS."""

from __future__ import annotations

import os
import subprocess

import pytest

from tfyarn.client import driverjvm
from tfyarn.client.driverjvm import ClassArchive

JAR = "/opt/skein.jar"


def test_the_jars_come_first_and_the_dirs_after_them_the_configuration_first(tmp_path):
    conf, hdfs, lib = (tmp_path / d for d in ("conf", "hdfs", "lib"))
    for d in (conf, hdfs, lib):
        d.mkdir()
    (lib / "a.jar").write_bytes(b"")
    entries = [str(conf), f"{lib}/*", str(hdfs), f"{hdfs}/*", str(lib / "a.jar")]
    assert driverjvm.archivable_order(JAR, str(tmp_path / "own-conf"), entries) == \
        [JAR, f"{lib}/*", f"{hdfs}/*", str(lib / "a.jar"), str(conf), str(hdfs)]
    (tmp_path / "own-conf").mkdir()
    assert driverjvm.archivable_order(JAR, str(tmp_path / "own-conf"), entries)[4:] == \
        [str(tmp_path / "own-conf"), str(conf), str(hdfs)]
    assert driverjvm.archivable_order(JAR, str(conf), entries)[4:] == [str(conf), str(hdfs)]


def test_the_key_follows_the_jars_and_the_jvm_options_not_the_dirs(tmp_path):
    java = os.path.realpath(subprocess.run(["sh", "-c", "command -v java"], capture_output=True,
                                           text=True, check=True).stdout.strip())
    lib, conf = tmp_path / "lib", tmp_path / "conf"
    lib.mkdir()
    conf.mkdir()
    jar = lib / "a.jar"
    jar.write_bytes(b"one")
    classpath = [f"{lib}/*", str(conf)]
    key = driverjvm.archive_key(java, ["-XX:+UseSerialGC", "-Dx=1"], classpath)
    assert driverjvm.archive_key(java, ["-XX:+UseSerialGC", "-Dx=2"], classpath) == key
    assert driverjvm.archive_key(java, ["-XX:+UseSerialGC"], [f"{lib}/*", str(tmp_path)]) == key
    assert driverjvm.archive_key(java, ["-XX:+UseG1GC"], classpath) != key
    jar.write_bytes(b"other")  # a jar replaced (a Hadoop upgrade): another archive
    assert driverjvm.archive_key(java, ["-XX:+UseSerialGC"], classpath) != key
    (lib / "b.JAR").write_bytes(b"")  # Java's wildcard takes .JAR too
    assert driverjvm.archive_key(java, ["-XX:+UseSerialGC"], classpath) != \
        driverjvm.archive_key(java, ["-XX:+UseSerialGC"], [str(jar), str(conf)])


def test_only_the_users_own_archive_is_used_and_a_failed_write_leaves_nothing(tmp_path):
    folder = tmp_path / "jvm"
    folder.mkdir(mode=0o700)
    first = ClassArchive.for_driver(str(folder), "/bin/sh", [], [])
    assert first is not None and first.writing is not None
    assert first.options() == [f"-XX:ArchiveClassesAtExit={first.writing}",
                               *driverjvm.QUIET]
    assert ClassArchive.for_driver(str(folder), "/bin/sh", [], [], write=False) is None
    assert ClassArchive.for_driver(None, "/bin/sh", [], []) is None
    with open(first.writing, "wb") as f:  # what a JVM killed mid-write leaves
        f.write(b"half")
    first.keep(exited_cleanly=False)
    assert os.listdir(folder) == []

    again = ClassArchive.for_driver(str(folder), "/bin/sh", [], [])
    assert again is not None and again.writing is not None
    with open(again.writing, "wb") as f:
        f.write(b"archive")
    os.chmod(again.writing, 0o444)  # as the JVM writes it
    again.keep(exited_cleanly=True)
    assert os.listdir(folder) == [os.path.basename(again.path)]
    assert os.stat(again.path).st_mode & 0o777 == 0o600
    used = ClassArchive.for_driver(str(folder), "/bin/sh", [], [])
    assert used == ClassArchive(again.path)
    assert used.options()[0] == f"-XX:SharedArchiveFile={again.path}"

    os.chmod(again.path, 0o620)  # writable by a group: not trusted, written anew
    assert ClassArchive.for_driver(str(folder), "/bin/sh", [], []).writing is not None
    os.chmod(again.path, 0o600)
    os.rename(again.path, tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", again.path)  # a link: not used
    assert ClassArchive.for_driver(str(folder), "/bin/sh", [], []).writing is not None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to give a file to another user")
def test_an_archive_another_user_owns_is_never_mapped(tmp_path):
    """Another local user's file where the archive would be (say, a cache dir shared by
    mistake): the JVM would run what it holds. It is not used, and a new one replaces it."""
    folder = tmp_path / "jvm"
    folder.mkdir(mode=0o700)
    planted = ClassArchive.for_driver(str(folder), "/bin/sh", [], []).path
    with open(planted, "wb") as f:
        f.write(b"forged")
    os.chmod(planted, 0o600)
    os.chown(planted, 65534, 65534)
    archive = ClassArchive.for_driver(str(folder), "/bin/sh", [], [])
    assert archive.writing is not None
    with open(archive.writing, "wb") as f:
        f.write(b"ours")
    archive.keep(exited_cleanly=True)
    assert os.stat(planted).st_uid == os.geteuid()
    with open(planted, "rb") as f:
        assert f.read() == b"ours"


def test_old_archives_and_stale_half_written_ones_are_removed(tmp_path):
    folder = tmp_path / "jvm"
    folder.mkdir(mode=0o700)
    for i, name in enumerate(["skein-driver-a.jsa", "skein-driver-b.jsa",
                              "skein-driver-c.jsa.1.x.tmp", "skein-driver-d.jsa.2.y.tmp"]):
        (folder / name).write_bytes(b"")
        age = 3 * 86400 if name.endswith("c.jsa.1.x.tmp") else 3600 * (3 - i)
        os.utime(folder / name, (os.path.getmtime(folder / name) - age,) * 2)
    archive = ClassArchive(str(folder / "skein-driver-new.jsa"), str(folder / "w.tmp"))
    (folder / "w.tmp").write_bytes(b"")
    archive.keep(exited_cleanly=True)
    assert sorted(os.listdir(folder)) == ["skein-driver-b.jsa", "skein-driver-d.jsa.2.y.tmp",
                                          "skein-driver-new.jsa"]


def test_a_real_jvm_archives_hadoops_classes_and_maps_them_with_another_conf_dir(
        sandbox, tmp_path):
    """Java 17 refuses to archive with a non-empty dir before a jar it loaded from; in
    `archivable_order` it writes the archive, and a JVM with another configuration dir
    (each command's is new) maps it."""
    env = {**os.environ, **sandbox}
    java = f"{sandbox['JAVA_HOME']}/bin/java"
    hadoop = driverjvm.hadoop_classpath(sandbox["HADOOP_CONF_DIR"], env)
    import skein

    jar = os.path.join(os.path.dirname(skein.__file__), "java", "skein.jar")
    folder = tmp_path / "jvm"
    folder.mkdir(mode=0o700)

    def run(conf: str) -> str:
        classpath = driverjvm.archivable_order(jar, conf, hadoop)
        assert os.path.isdir(classpath[-1]) and not os.path.isdir(classpath[0])
        archive = ClassArchive.for_driver(str(folder), java, [], classpath)
        out = subprocess.run([java, *archive.options(), "-Xlog:class+load=info", "-cp",
                              os.pathsep.join(classpath), "org.apache.hadoop.util.VersionInfo"],
                             capture_output=True, text=True, timeout=300, env=env)
        archive.keep(out.returncode == 0)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        return out.stdout

    written = run(sandbox["HADOOP_CONF_DIR"])
    assert "Hadoop 3.3.6" in written
    assert len(os.listdir(folder)) == 1
    other = tmp_path / "conf"
    other.mkdir()
    (other / "core-site.xml").write_text("<configuration/>")
    mapped = run(str(other))
    line = next(x for x in mapped.splitlines() if "org.apache.hadoop.util.VersionInfo " in x)
    assert "shared objects file (top)" in line, line
