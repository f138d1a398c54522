"""The process environment, read once into one object and passed down from there.

Must not write the environment.
"""

from __future__ import annotations

import os
import pwd
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

LAUNCHER_TASKS = 64  # a local launcher's tasks at most (256 tasks: 4 launchers, so the
# cores share the work; each task's end scans its launcher's children)


@dataclass(frozen=True)
class Settings:
    """Every environment variable tfyarn reads, in one place."""

    job_id: str | None = None
    advertise_host: str | None = None
    hadoop_conf_dir: str | None = None
    hadoop_home: str | None = None
    java_home: str | None = None
    path: str = ""
    tmpdir: str | None = None
    keep_job_dir: bool = False
    conf_file: str | None = None
    home: str = "~"
    user: str = "tfyarn"  # the Hadoop user name (hadoop_user): HDFS paths, REST calls
    gpu_count: int | None = None  # local mode: GPUs to assume (TFYARN_GPU_COUNT), else count
    cache: str | None = None  # TFYARN_CACHE: a site's cache dir (may be cluster-wide)
    xdg_cache: str | None = None  # XDG_CACHE_HOME
    container_dir: str | None = None  # in a YARN container: its app's first LOCAL_DIRS entry
    krb5_config: str | None = None  # KRB5_CONFIG: MIT's tools read it, Java does not
    krb5_ccache: str | None = None  # KRB5CCNAME: the ticket cache (MIT's tools, Java)
    token_file: str | None = None  # HADOOP_TOKEN_FILE_LOCATION: in a YARN container, its tokens
    history_dir: str | None = None  # TFYARN_HISTORY_DIR: where local jobs' pages are kept
    progress_s: float | None = None  # TFYARN_PROGRESS_S: the live line's plain lines off a
    # terminal this often (0: no live line at all); else timing.LIVE_PLAIN_S
    launcher_tasks: int = LAUNCHER_TASKS  # TFYARN_LOCAL_LAUNCHER_TASKS: the most tasks
    # one local launcher serves (1: a launcher per container, as on YARN, so that its
    # death loses only its container's tasks)

    def cache_dirs(self) -> list[str]:
        """tfyarn's cache dirs, first usable wins: $TFYARN_CACHE; in a YARN container its
        application's local dir (the NodeManager's, writable, cleaned with the app; never
        the container's HOME, which may be a shared or unwritable /home/); else
        ~/.cache/tfyarn ($XDG_CACHE_HOME); last a per-user temp dir."""
        own = (os.path.join(self.container_dir, "tfyarn-cache") if self.container_dir else
               os.path.join(self.xdg_cache or os.path.join(os.path.expanduser(self.home),
                                                           ".cache"), "tfyarn"))
        spare = os.path.join(tempfile.gettempdir(), f"tfyarn-cache-{os.getuid()}")
        return [d for d in (self.cache, own, spare) if d]

    def own_dir(self, name: str) -> str | None:
        """`name/` under the first writable cache dir that is this user's, made; None where
        none is. A dir another user owns or may write to (a planted /tmp/tfyarn-cache-UID)
        is passed over: what tfyarn finds in its cache (native libraries) it loads."""
        for base in self.cache_dirs():
            folder = os.path.join(base, name)
            try:
                os.makedirs(base, mode=0o700, exist_ok=True)
                os.makedirs(folder, mode=0o700, exist_ok=True)
            except OSError:
                continue
            if own_dir_ok(base) and own_dir_ok(folder) and os.access(folder, os.W_OK):
                return folder
        return None

    def log_path(self, name: str) -> str:
        """A file for a log of tfyarn's own (skein's driver): under the first writable
        cache dir's `logs/`; /dev/null where none is."""
        folder = self.own_dir("logs")
        return os.devnull if folder is None else os.path.join(folder, name)

    def local_history(self) -> str:
        """Where local jobs' finished pages are kept: $TFYARN_HISTORY_DIR, else
        ~/.tfyarn/history (not a cache dir: `tfyarn history` lists them for days)."""
        return self.history_dir or os.path.join(os.path.expanduser(self.home), ".tfyarn",
                                                 "history")

    def conf_files(self) -> tuple[str, ...]:
        """Where site defaults (conf/tfyarn.yaml) are looked for, first found wins."""
        user = os.path.join(self.home, ".config", "tfyarn", "tfyarn.yaml")
        return tuple(p for p in (self.conf_file, user, "/etc/tfyarn/tfyarn.yaml") if p)

    @classmethod
    def from_environ(cls, env: Mapping[str, str] | None = None) -> Settings:
        e = os.environ if env is None else env
        return cls(
            job_id=e.get("TFYARN_JOB_ID") or e.get("SKEIN_APPLICATION_ID"),
            advertise_host=e.get("TFYARN_ADVERTISE_HOST") or e.get("NM_HOST"),
            hadoop_conf_dir=e.get("HADOOP_CONF_DIR"),
            hadoop_home=e.get("HADOOP_HOME"),
            java_home=e.get("JAVA_HOME"),
            path=e.get("PATH", ""),
            tmpdir=e.get("TMPDIR"),
            keep_job_dir=e.get("TFYARN_KEEP_JOB_DIR", "") not in ("", "0"),
            conf_file=e.get("TFYARN_CONF"),
            home=e.get("HOME", "~"),
            user=hadoop_user(e),
            gpu_count=int(e["TFYARN_GPU_COUNT"]) if e.get("TFYARN_GPU_COUNT", "").isdigit()
            else None,
            cache=e.get("TFYARN_CACHE") or None,
            xdg_cache=e.get("XDG_CACHE_HOME") or None,
            container_dir=(e["LOCAL_DIRS"].split(",")[0] if e.get("CONTAINER_ID")
                           and e.get("LOCAL_DIRS") else None),
            krb5_config=e.get("KRB5_CONFIG") or None,
            krb5_ccache=e.get("KRB5CCNAME") or None,
            token_file=e.get("HADOOP_TOKEN_FILE_LOCATION") or None,
            history_dir=e.get("TFYARN_HISTORY_DIR") or None,
            progress_s=_seconds(e.get("TFYARN_PROGRESS_S", "")),
            launcher_tasks=max(1, int(e["TFYARN_LOCAL_LAUNCHER_TASKS"]))
            if e.get("TFYARN_LOCAL_LAUNCHER_TASKS", "").isdigit() else LAUNCHER_TASKS,
        )

    def kerberos_env(self) -> dict[str, str]:
        """The environment MIT's `klist` needs to find this user's tickets."""
        env = {"PATH": self.path, "HOME": self.home}
        for key, value in (("KRB5_CONFIG", self.krb5_config), ("KRB5CCNAME", self.krb5_ccache)):
            if value:
                env[key] = value
        return env

    def java_options(self) -> list[str]:
        """Options for a JVM tfyarn starts (skein's driver): the Kerberos configuration
        KRB5_CONFIG names (its first file; MIT's tools take a list), which Java ignores
        and would read /etc/krb5.conf instead, another realm or none."""
        return krb5_java_options(self.krb5_config)

    def conf_dir(self, given: str | None = None) -> str | None:
        """The Hadoop client configuration: -conf, else HADOOP_CONF_DIR, else the
        distribution's own etc/hadoop."""
        if given:
            return os.path.abspath(given)
        if self.hadoop_conf_dir:
            return self.hadoop_conf_dir
        return os.path.join(self.hadoop_home, "etc", "hadoop") if self.hadoop_home else None


def trusted(st: os.stat_result, owners: tuple[int, ...] | None = None) -> bool:
    """The rule for what tfyarn trusts the contents of (caches, native libraries): owned
    by one of `owners` (default: this user or root) and writable by nobody else."""
    return st.st_uid in (owners or (os.geteuid(), 0)) and not st.st_mode & 0o022


def own_dir_ok(path: str) -> bool:
    """Whether `path` is a real dir (no symlink) that tfyarn may trust (`trusted`)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and trusted(st)


def hadoop_user(env: Mapping[str, str]) -> str:
    """The user Hadoop's client acts as with simple auth: HADOOP_USER_NAME, else the login
    name of this process's uid (never a `USER` that cron, Oozie or systemd left unset or
    stale). In a YARN container, the application's user, which the NodeManager sets as
    USER (the uid may be the NodeManager's own). USER/LOGNAME also for a uid with no name."""
    if env.get("HADOOP_USER_NAME"):
        return env["HADOOP_USER_NAME"]
    if env.get("CONTAINER_ID") and env.get("USER"):
        return env["USER"]
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return env.get("USER") or env.get("LOGNAME") or str(os.getuid())


def krb5_java_options(krb5_config: str | None) -> list[str]:
    """The JVM option naming KRB5_CONFIG's first file (MIT's tools take a list); Java
    ignores KRB5_CONFIG and reads /etc/krb5.conf, another realm or none."""
    first = (krb5_config or "").split(":")[0]
    return [f"-Djava.security.krb5.conf={first}"] if first else []


def _seconds(text: str) -> float | None:
    """A non-negative number of seconds, or None (unset or not one: the default)."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value >= 0 and value == value else None
