"""The gateway's YARN client: skein's Java driver, for submit, report, connect, kill, list.

It uses skein as `protocol/skeinlink.py` gives it (`tfyarns_skein`: tfyarn's build of
skein, checked; PyPI's is refused with what to run). Owns starting skein's driver JVM (one
per call, or the warm one `tfyarn skein-driver start` leaves running for a configuration),
giving it the Hadoop configuration by its classpath (never by this process's
environment), and turning skein's failures into one line that says what to run next.
Runs on the gateway only: nothing in a container imports it.
Must not write this process's environment or global hooks (a notebook's kernel outlives
many submits).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import shutil
import signal
import subprocess
from collections.abc import Iterator, Sequence
from typing import Any

from tfyarn.client import driverjvm
from tfyarn.client.driverjvm import ClassArchive
from tfyarn.core.appreport import AppReport
from tfyarn.core.errors import EnvironmentMissing, SpecError, TfYarnError
from tfyarn.core.timing import ARCHIVE_WRITE_S, WARM_STOP_S
from tfyarn.protocol.skeinlink import App, failures, tfyarns_skein


class YarnUnreachable(TfYarnError):
    """A call to YARN (the ResourceManager, through skein's driver) failed."""


NO_HADOOP = ("no Hadoop client here: skein needs the `yarn` command on PATH ($HADOOP_HOME/bin) "
             "and HADOOP_CONF_DIR (or -conf) pointing at the cluster; or run with --local")


def application_spec(spec: dict) -> Any:
    """skein's ApplicationSpec of a plain dict (its own validation included)."""
    skein = tfyarns_skein()

    return skein.ApplicationSpec.from_dict(spec)


class Yarn:
    """skein's YARN client (a Java driver process); use as a context manager."""

    def __init__(self, raw: Any, archive: ClassArchive | None = None) -> None:
        self.raw = raw
        self.archive = archive  # the driver's class-data archive (driverjvm)

    @classmethod
    def start(cls, principal: str | None, keytab: str | None, log: str,
              driver_conf: str | None = None, java_options: Sequence[str] = (),
              archive_dir: str | None = None) -> Yarn:
        """Start skein's driver, logging to `log`, with the Hadoop client configuration
        `driver_conf` (None: HADOOP_CONF_DIR's) and `java_options` for its JVM, from the
        class-data archive in `archive_dir` (written there as it ends where none is:
        `driverjvm`); what is missing is one line."""
        skein = tfyarns_skein()

        archive = None
        try:
            options, archive = _driver_options(driver_conf, java_options, archive_dir)
            return cls(_client_class()(principal=principal, keytab=keytab, log=log,
                                       log_level="INFO", java_options=options), archive)
        except (OSError, subprocess.SubprocessError, skein.exceptions.DriverError) as exc:
            message = _start_failure(exc)
            if archive is not None:  # a JVM that ended in failure may have written one
                archive.keep(exited_cleanly=False)
        raise _start_error(message, log, principal, keytab)

    @classmethod
    def warm(cls, conf_dir: str | None) -> Yarn | None:
        """The warm skein driver (`tfyarn skein-driver start`) when it runs for the same Hadoop
        configuration: a submit then starts no JVM. None otherwise."""
        skein = tfyarns_skein()

        marker = _read_warm()
        if marker is None or marker.get("conf_dir") != conf_dir or not marker.get("address"):
            return None
        try:
            return cls(_client_class()(address=marker["address"],
                                       security=skein.Security.from_default()))
        except (*failures(), skein.exceptions.DriverNotRunningError):
            return None

    @staticmethod
    def start_warm(conf_dir: str | None, principal: str | None, keytab: str | None,
                   log: str, driver_conf: str | None = None,
                   java_options: Sequence[str] = (), owned: bool = False,
                   archive_dir: str | None = None) -> str:
        """Start (or find) skein's global driver, for this configuration; its address.
        `driver_conf`, where given, is the dir the JVM reads its configuration from;
        `owned`: a dir of tfyarn's own, removed when the driver is stopped (never the
        site's). It maps the class-data archive in `archive_dir` where one is kept, and
        never writes one (it is stopped by a signal, with a deadline)."""
        skein = tfyarns_skein()

        try:
            address = skein.Client.start_global_driver(
                principal=principal, keytab=keytab, log=log, log_level="INFO",
                java_options=_driver_options(driver_conf, java_options, archive_dir,
                                             write=False)[0])
        except (OSError, subprocess.SubprocessError, skein.exceptions.DriverError) as exc:
            raise _start_error(_start_failure(exc), log, principal, keytab) from None
        _write_warm({"address": address, "conf_dir": conf_dir, "log": log,
                     "driver_conf": driver_conf if owned else None})
        return address

    @staticmethod
    def stop_warm() -> bool:
        """Stop the warm skein driver; whether one ran."""
        skein = tfyarns_skein()

        marker = _read_warm()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_warm_path())
        _, pid = skein.core._read_driver()  # skein's own note of its global driver
        try:
            skein.Client.stop_global_driver()
        except failures():
            skein.Client.stop_global_driver(force=True)
        if pid:
            _wait_gone(pid, WARM_STOP_S)
        own_conf = (marker or {}).get("driver_conf")
        if own_conf:
            shutil.rmtree(own_conf, ignore_errors=True)  # links and one file of tfyarn's
        return marker is not None

    def __enter__(self) -> Yarn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(keep_archive=exc[0] is None)

    def close(self, keep_archive: bool = True) -> None:
        """Closes the channel; stops the driver where this call started its own, with
        SIGKILL: every call to it has returned by now (a submit's uploads are closed
        before it answers), and the JVM's orderly exit on its stdin's end (Hadoop's and
        gRPC's shutdown hooks, with nothing left to do) cost 0.35 s of every cold
        command's end. Except once: a driver that writes the class-data archive ends
        in order (the JVM writes it then), within ARCHIVE_WRITE_S, unless
        `keep_archive` is false (an error or an interrupt is on its way out). The warm
        driver is never stopped here."""
        proc = getattr(self.raw, "_proc", None)
        archive, self.archive = self.archive, None
        clean = False
        try:
            if proc is not None and proc.poll() is None and archive is not None \
                    and archive.writing and keep_archive and proc.stdin is not None:
                proc.stdin.close()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    clean = proc.wait(ARCHIVE_WRITE_S) == 0
        finally:  # an interrupt in the wait above kills the driver too
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
            if archive is not None:
                archive.keep(clean)
            self.raw.close()

    def submit(self, app_spec: Any, gpus: int) -> str:
        """Submit; a cluster that refuses the request says so in one line (GPUs asked of
        a cluster without yarn.io/gpu: which flag to change)."""
        try:
            return self.raw.submit(app_spec)
        except ValueError as exc:
            if gpus and "gpu" in str(exc).lower():
                raise SpecError(f"-wg {gpus}: this cluster has no GPU resource (yarn.io/gpu) "
                                f"configured ({exc}); use -wg 0, or a cluster/queue with GPU "
                                "scheduling enabled") from None
            raise SpecError(f"YARN refused the application: {exc}") from None
        except failures() as exc:
            raise YarnUnreachable(f"submission failed: {exc}; check the cluster with: yarn "
                                  "node -list") from None

    def report(self, app_id: str) -> AppReport:
        """The application's report, from skein's."""
        try:
            return AppReport.from_skein(self.raw.application_report(app_id))
        except ValueError as exc:
            raise TfYarnError(f"no application {app_id}: {exc} (list them: tfyarn ls --all)")\
                from None
        except failures() as exc:
            raise YarnUnreachable(f"cannot reach YARN for {app_id}: {exc}; try again: "
                                  f"tfyarn status {app_id}") from None

    def connect(self, app_id: str) -> App | None:
        """The running application, or None when it does not run (yet, or any more)."""
        try:
            return App(self.raw.connect(app_id, wait=False))
        except (*failures(), ValueError, KeyError):  # not running: the report says more
            return None

    def kill(self, app_id: str) -> None:
        try:
            self.raw.kill_application(app_id)
        except failures() as exc:
            raise YarnUnreachable(f"could not kill {app_id}: {exc}; try: yarn application "
                                  f"-kill {app_id}") from None

    def applications(self, states: list[str] | None, tag: str) -> list[AppReport]:
        """The applications (default: the active ones) tagged `tag`."""
        try:
            return [AppReport.from_skein(a) for a in self.raw.get_applications(states=states)
                    if tag in set(a.tags or ())]
        except failures() as exc:
            raise YarnUnreachable(f"cannot list applications: {exc}; check the cluster with: "
                                  "yarn node -list") from None


# skein's driver is a small gRPC server, most often started for one submit: the client
# compiler alone and the serial collector start it sooner, with less CPU
DRIVER_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def _driver_options(driver_conf: str | None, java_options: Sequence[str],
                    archive_dir: str | None, write: bool = True,
                    ) -> tuple[list[str], ClassArchive | None]:
    """The JVM options of skein's driver, and its class-data archive: tfyarn's start-up
    options, the user's SKEIN_DRIVER_JAVA_OPTIONS (skein's own setting, which a list
    given to skein would otherwise replace; later options win), `java_options`, the
    archive's, and the classpath (`-cp`, which wins over any CLASSPATH and spares skein's
    `yarn classpath --glob`): skein's jar, Hadoop's jars as `yarn classpath` names them for
    `driver_conf` (None: HADOOP_CONF_DIR), then its dirs, `driver_conf` first
    (`driverjvm.archivable_order`). So the JVM reads `driver_conf` while this process's
    own environment stays as it is (a notebook's kernel submits to two clusters in turn)."""
    skein = tfyarns_skein()

    options = [*DRIVER_JVM_OPTIONS, *os.environ.get("SKEIN_DRIVER_JAVA_OPTIONS", "").split(),
               *java_options]
    jar = os.path.join(os.path.dirname(skein.__file__), "java", "skein.jar")
    classpath = driverjvm.archivable_order(
        jar, driver_conf, driverjvm.hadoop_classpath(driver_conf, os.environ))
    java = (os.path.join(os.environ["JAVA_HOME"], "bin", "java") if "JAVA_HOME" in os.environ
            else shutil.which("java") or "java")
    archive = driverjvm.ClassArchive.for_driver(archive_dir, java, options, classpath, write)
    return [*options, *(archive.options() if archive else ()), "-cp",
            os.pathsep.join(classpath)], archive


@functools.cache
def _client_class() -> Any:
    """skein's Client, but one whose __del__ tolerates a half-built instance: skein's own
    raises from it when a start failed, noise on stderr after tfyarn's one line (this
    instead of quieting sys.unraisablehook, which is the whole process's)."""
    skein = tfyarns_skein()

    class Client(skein.Client):  # type: ignore[misc]
        def __del__(self) -> None:
            if hasattr(self, "_proc"):  # a slot of skein's: never in __dict__
                super().__del__()

    return Client


def _wait_gone(pid: int, timeout: float) -> None:
    """Until the process ends (skein only sends SIGTERM); SIGKILL after `timeout`."""
    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        return  # gone already (or no pidfds: nothing to wait on)
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            select.select([fd], [], [], timeout)
    finally:
        os.close(fd)


def _warm_path() -> str:
    """tfyarn's note beside skein's global driver: which Hadoop configuration it serves
    (skein's own file does not say, and a driver for another cluster must not be used)."""
    skein = tfyarns_skein()

    return os.path.join(skein.properties.config_dir, "tfyarn-warm-driver.json")


def _read_warm() -> dict | None:
    try:
        with open(_warm_path(), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _write_warm(marker: dict) -> None:
    path = _warm_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(f"{path}.tmp", "w", encoding="utf-8") as f:
        json.dump(marker, f)
    os.replace(f"{path}.tmp", path)


def warm_driver() -> dict | None:
    """What `tfyarn skein-driver status` says: the warm skein driver's note, if one was started."""
    return _read_warm()


LOGIN_FAILED = "KerberosAuthException: failure to login:"


def login_refused(log: str, principal: str | None, keytab: str | None) -> str | None:
    """The one line for a driver that Kerberos refused to log in (a keytab whose key is
    not the principal's current one, a ticket cache of another realm), from its log;
    None when the log says nothing of the kind."""
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            line = next((x for x in f if LOGIN_FAILED in x), None)
    except OSError:
        return None
    if line is None:
        return None
    why = line.split("LoginException:")[-1].strip() or line.split(LOGIN_FAILED)[1].strip()
    if keytab:
        return (f"Kerberos refused --principal {principal} with --keytab {keytab} ({why}): the "
                f"keytab's key is not {principal}'s current one; get a fresh keytab for it, "
                f"or kinit {principal} and drop --principal/--keytab")
    return (f"Kerberos refused the ticket cache's login ({why}): check KRB5_CONFIG (the "
            "cluster's realm) and run kinit YOU@REALM, or pass --principal and --keytab")


def _start_error(message: str, log: str, principal: str | None,
                 keytab: str | None) -> TfYarnError:
    """Why skein's driver did not start: Kerberos refusing the login (bad input, from its
    log), else `message` (what is missing here), naming the log."""
    refused = login_refused(log, principal, keytab)
    if refused:
        return SpecError(refused)
    return EnvironmentMissing(f"{message} (skein's driver log: {log})")


def _start_failure(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"{NO_HADOOP} (missing: {exc.filename or exc})"
    if isinstance(exc, subprocess.CalledProcessError):
        return (f"`{' '.join(exc.cmd)}` failed with exit code {exc.returncode}: the Hadoop client "
                "is not working here; check HADOOP_HOME, JAVA_HOME and HADOOP_CONF_DIR (-conf)")
    return f"cannot start skein's YARN client: {exc}; check HADOOP_CONF_DIR (-conf) and Kerberos"


@contextlib.contextmanager
def keeping_log(log: str) -> Iterator[None]:
    """A failed YARN call names skein's driver log (kept); otherwise it is removed."""
    keep = False
    try:
        yield
    except YarnUnreachable as exc:
        keep = True
        raise YarnUnreachable(f"{exc} (skein's driver log: {log})") from None
    except EnvironmentMissing as exc:  # its message names the log already
        keep = log in str(exc)
        raise
    finally:
        if not keep and log != os.devnull:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(log)
