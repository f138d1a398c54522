"""The JVM of skein's driver: its classpath, and the class-data archive it starts from.

Every cold command starts skein's driver, a JVM that loads some 6,700 classes of Hadoop's,
gRPC's and skein's: about 5 s of CPU before it answers. Java's AppCDS maps them from an
archive instead (half the CPU, and about 2 s sooner, measured on the sandbox). The
first driver that finds no archive writes one as it ends (`-XX:ArchiveClassesAtExit`:
some seconds added to that one command's end, once per user and JDK/Hadoop install);
every later driver maps it.

The classpath is ordered for that: skein's jar, then Hadoop's jars (`yarn classpath`'s
`dir/*` entries, which the JVM expands), then the plain dirs (the Hadoop configuration
first). The JVM archives nothing when a dir with files comes before a jar it loaded from,
and no class comes from those dirs. skein's jar's own log4j.properties now wins over
the configuration dir's, as it does when skein builds the classpath itself.

The archive is code the JVM runs. It lives in the user's own cache dir (0700,
owner-checked by `Settings.own_dir`) and is written 0600. It is used only when it is this
user's (or root's) and nobody else can write to it. Its name is a hash of the JDK, the JVM
flags and every jar (path, size, mtime), so a Hadoop or JDK upgrade gets a new archive,
never one the JVM would refuse.
Must not start the driver or talk to YARN (`client/skeinclient.py` does).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import stat
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tfyarn.core.settings import trusted
from tfyarn.core.timing import ARCHIVE_STALE_S, CLASSPATH_TIMEOUT_S

PREFIX = "skein-driver-"
SUFFIX = ".jsa"
KEEP_ARCHIVES = 2  # a user on two Hadoop installs keeps both; older ones are removed
# the JVM's own notes on the archive (a jar it skips, a stale archive it ignores) stay
# out of the driver's log: tfyarn checks the outcome itself
QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")


def hadoop_classpath(conf_dir: str | None, env: Mapping[str, str]) -> list[str]:
    """`yarn classpath` for `conf_dir` (a shell script, no JVM; not `--glob`, which
    starts one): its entries, wildcards unexpanded."""
    env = {**env, "HADOOP_CONF_DIR": conf_dir} if conf_dir else dict(env)
    out = subprocess.run(["yarn", "classpath"], capture_output=True, text=True, check=True,
                         env=env, timeout=CLASSPATH_TIMEOUT_S).stdout.strip()
    return [e for e in out.split(os.pathsep) if e]


def archivable_order(skein_jar: str, conf_dir: str | None, entries: Sequence[str],
                     isdir: Callable[[str], bool] = os.path.isdir) -> list[str]:
    """skein's jar, then the jars and `dir/*` entries in their order, then the plain
    dirs, `conf_dir` first (the module's docstring says why); no entry twice."""
    jars = [e for e in entries if e.endswith("*") or not isdir(e)]
    dirs = [e for e in (conf_dir, *entries) if e and not e.endswith("*") and isdir(e)]
    return list(dict.fromkeys([skein_jar, *jars, *dirs]))


def _fingerprint(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return f"{path}:-"
    return f"{path}:{st.st_size}:{st.st_mtime_ns}"


def archive_key(java: str, options: Sequence[str], classpath: Sequence[str]) -> str:
    """A hash of what an archive is valid for: the JDK (its java, libjvm and base
    archive), the JVM's flags (`-XX:`, `-Xmx`; not logging or `-D` properties), and every jar the
    classpath names or its `dir/*` holds. Not its dirs: they come after every jar, and a
    command's configuration dir is new each time."""
    home = os.path.dirname(os.path.dirname(os.path.realpath(java)))
    parts = [_fingerprint(os.path.realpath(java)),
             *(_fingerprint(os.path.join(home, "lib", "server", f))
               for f in ("libjvm.so", "classes.jsa")),
             *(o for o in options if o.startswith(("-XX:", "-Xmx")))]
    for entry in classpath:
        if entry.endswith("*"):
            jars = glob.glob(os.path.join(glob.escape(entry[:-1]), "*.[jJ][aA][rR]"))
            parts += [_fingerprint(j) for j in sorted(jars)]
        elif not os.path.isdir(entry):
            parts.append(_fingerprint(entry))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def usable(path: str) -> bool:
    """Whether the JVM may map the archive at `path`: a real file (no symlink) of this
    user's or root's, writable by nobody else (`settings.trusted`)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and trusted(st)


@dataclass
class ClassArchive:
    """The archive a driver starts from, or (`writing`) the file it writes as it ends."""

    path: str
    writing: str | None = None  # the file the JVM writes at its exit, kept by `keep`

    @classmethod
    def for_driver(cls, folder: str | None, java: str, options: Sequence[str],
                   classpath: Sequence[str], write: bool = True) -> ClassArchive | None:
        """The archive for this JVM in `folder`; where none is kept, one to write (with
        `write`) or None. None too without a cache dir."""
        if folder is None:
            return None
        path = os.path.join(folder, f"{PREFIX}{archive_key(java, options, classpath)}{SUFFIX}")
        if usable(path):
            return cls(path)
        if not write:
            return None
        return cls(path, writing=f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp")

    def options(self) -> list[str]:
        """The JVM options that map the archive, or write it at the JVM's exit."""
        if self.writing is None:
            return [f"-XX:SharedArchiveFile={self.path}", *QUIET]
        return [f"-XX:ArchiveClassesAtExit={self.writing}", *QUIET]

    def keep(self, exited_cleanly: bool) -> None:
        """After the writing JVM ended: its archive in place (0600), or nothing left when
        it did not end cleanly (a half-written archive is never used); older archives
        beyond KEEP_ARCHIVES removed."""
        if self.writing is None:
            return
        tmp, self.writing = self.writing, None
        try:
            if not exited_cleanly or not os.path.isfile(tmp):
                return
            os.chmod(tmp, 0o600)  # the JVM writes it 0444
            os.replace(tmp, self.path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        folder = glob.escape(os.path.dirname(self.path))
        kept = sorted(glob.glob(os.path.join(folder, f"{PREFIX}*{SUFFIX}")), key=_mtime)
        stale = [t for t in glob.glob(os.path.join(folder, f"{PREFIX}*.tmp"))
                 if _mtime(t) < time.time_ns() - ARCHIVE_STALE_S * 10**9]  # a killed client's
        for old in [*kept[:-KEEP_ARCHIVES], *stale]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(old)


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0
