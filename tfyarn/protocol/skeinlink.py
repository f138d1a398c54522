"""tfyarn's one link to skein (and, through it, gRPC and YARN's Java client).

The only module that imports skein or grpc, and the one place where their exceptions
become tfyarn's: every other module handles `StoreGone` (a running application cannot
be reached: its ApplicationMaster ended, or the network) or a `TfYarnError` that says
what to run next.

- `App`: a running application, from inside one of its containers (`App.current()`) or
  from the gateway (`Yarn.connect`): its key-value store, its containers, its web UI and
  its final status.
- `Yarn`: the gateway's YARN client (skein's Java driver): submit, report, connect, kill,
  list.
- gRPC's fork handlers: off in every process that holds a skein channel and starts
  children (they aborted children on YARN); user processes get the user's setting back.
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
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from tfyarn.core.errors import EnvironmentMissing, SpecError, StoreGone, TfYarnError

T = TypeVar("T")
GRPC_FORK_VAR = "GRPC_ENABLE_FORK_SUPPORT"
CLASSPATH_TIMEOUT_S = 60.0  # `yarn classpath` for skein's JVM: a shell script, milliseconds
WARM_STOP_S = 10.0  # `tfyarn driver stop`: the JVM's own shutdown, before it is killed
PRIMER_KEY = "tfyarn-primer"  # never put (see App._prime)
SUBSCRIBE_S = 10.0  # a watch the AM has not confirmed by then never will be (_confirmed)
PUT_TRIES = 5  # a put the ApplicationMaster failed (see App.kv_put) is tried this often
PUT_RETRY_S = 0.05
_users_grpc_fork: str | None = None  # its value before we turned it off, for user processes


class YarnUnreachable(TfYarnError):
    """A call to YARN (the ResourceManager, through skein's driver) failed."""


def _failures() -> tuple[type[BaseException], ...]:
    """What a skein call raises when the other side is gone: skein's family, gRPC's, and
    the OS's (a reset connection)."""
    import grpc
    import skein

    return (skein.exceptions.SkeinError, grpc.RpcError, OSError)


def without_grpc_fork_support() -> None:
    """gRPC's fork handlers off in this process, set before grpc loads: we start children
    with a live skein channel, and those handlers (restarting gRPC's threads in the child)
    aborted children and corrupted the parent's TLS stream on YARN."""
    global _users_grpc_fork
    if "grpc" not in sys.modules and os.environ.get(GRPC_FORK_VAR) != "false":
        _users_grpc_fork = os.environ.get(GRPC_FORK_VAR, "")
        os.environ[GRPC_FORK_VAR] = "false"


def users_env(env: dict[str, str]) -> dict[str, str]:
    """`env` with GRPC_ENABLE_FORK_SUPPORT as the user had it (a user's own gRPC code
    gets its own default, not tfyarn's setting)."""
    if _users_grpc_fork is None:
        return env
    env = {k: v for k, v in env.items() if k != GRPC_FORK_VAR}
    return {**env, GRPC_FORK_VAR: _users_grpc_fork} if _users_grpc_fork else env


# ---------------------------------------------------------------- a running application


class App:
    """A running application, through skein's ApplicationClient (`raw`); every failed
    call raises StoreGone."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.primer: Any = None
        self.watching: dict[str, Puts] = {}  # kv_expect's subscriptions, by key

    @classmethod
    def current(cls) -> App:
        """The application this process runs in (a YARN container of it)."""
        without_grpc_fork_support()
        import skein

        return cls(_gone_on_failure(skein.ApplicationClient.from_current))

    def _prime(self) -> None:
        """Open this process's watch stream with a watch nothing matches, before its first
        real one. skein carries every subscription of an application client over one
        stream, and its ApplicationMaster sends a stream's first message unsafely: a put
        matching a watch being created on a new stream can send it at the same time
        (`sendHeaders has already been called` in the AM's log). Then the put fails, or
        the watch's confirmation is lost and the stream breaks, and every later wait of
        the process hangs. Primed, the first message is this watch's confirmation."""
        if self.primer is None:
            self.primer = _confirmed(
                lambda: self.raw.kv.events(key=PRIMER_KEY, event_type="put"))

    def kv_put(self, key: str, value: bytes) -> None:
        """Put, again if skein's ApplicationMaster failed the call: a put whose key
        matches a watch being created at that moment can race the watch's own first
        message (`sendHeaders has already been called` in the AM's log; the value is
        stored, the call fails). A put is idempotent; a gone AM fails every try."""
        import skein

        for tries_left in range(PUT_TRIES - 1, -1, -1):
            try:
                self.raw.kv[key] = value
                return
            except skein.exceptions.ApplicationError as exc:  # not its ConnectionError
                if not tries_left:
                    raise StoreGone(f"the application failed the put of {key!r} {PUT_TRIES} "
                                    f"times: {exc}") from None
                time.sleep(PUT_RETRY_S)
            except _failures() as exc:
                raise StoreGone(f"the application cannot be reached: {exc}") from None

    def kv_get(self, key: str) -> bytes | None:
        return _gone_on_failure(self.raw.kv.get, key)

    def kv_prefix(self, prefix: str) -> dict[str, bytes]:
        return dict(_gone_on_failure(self.raw.kv.get_prefix, prefix))

    def kv_range(self, start: str, end: str | None) -> dict[str, bytes]:
        """Every key in [start, end) (end None: no bound)."""
        return dict(_gone_on_failure(self.raw.kv.get_range, start=start, end=end))

    def kv_wait(self, key: str, timeout: float | None,
                current: Callable[[], bytes | None]) -> bytes | None:
        """`current()` once subscribed to puts of `key` (so a put between the two is never
        missed), else the next put's value, else None after `timeout`. The subscription
        stays for the next wait on `key` (see `kv_expect`)."""
        puts = self.kv_expect(key)
        value = current()
        if value is not None:
            return value
        for k, v in puts.next(timeout if timeout is not None else 1e9):
            if k == key:
                return v
        return None

    def kv_expect(self, key: str) -> Puts:
        """This process's subscription to puts of `key`, made now if it has none: made
        before the process announces what makes another put `key` (a launcher its
        address, before the driver puts the cluster spec), no put can race its creation
        (see `_prime`), and repeated waits create nothing."""
        puts = self.watching.get(key)
        if puts is None:
            puts = self.watching[key] = self.kv_follow([(key, key + "\0")])
        return puts

    def kv_follow(self, ranges: Sequence[tuple[str, str | None]]) -> Puts:
        """A subscription to the puts of every key in each [start, end) range (end None:
        no bound), in one queue: events, not rescans."""
        self._prime()
        queue = _gone_on_failure(self.raw.kv.event_queue)
        for start, end in ranges:
            _confirmed(lambda s=start, e=end: queue.subscribe(start=s, end=e, event_type="put"))
        return Puts(queue)

    def containers(self, states: list[str] | None = None,
                   services: list[str] | None = None) -> list[Any]:
        """skein's container records (id, service_name, instance, state, exit_message,
        yarn_container_logs, ...)."""
        kw = {k: v for k, v in (("states", states), ("services", services)) if v is not None}
        return list(_gone_on_failure(self.raw.get_containers, **kw))

    def add_container(self, service: str, env: dict[str, str]) -> str:
        """Start one more container of `service`; its skein id."""
        return _gone_on_failure(self.raw.add_container, service, env=env).id

    def kill_container(self, container_id: str) -> None:
        """Kill a container; one that ended meanwhile is fine."""
        with contextlib.suppress(KeyError, ValueError):  # skein: no such running container
            _gone_on_failure(self.raw.kill_container, container_id)

    def add_page(self, route: str, target: str, link_name: str) -> str:
        """Register a page with skein's web UI (linked from the tracking URL); its
        proxied address."""
        return _gone_on_failure(self.raw.ui.add_page, route, target, link_name=link_name).address

    def shutdown(self, state: str, diagnostics: str) -> None:
        """End the application with this final status and diagnostics."""
        _gone_on_failure(self.raw.shutdown, state, diagnostics)


class Puts:
    """The puts a `kv_follow` subscription queued."""

    def __init__(self, queue: Any) -> None:
        self.queue = queue

    def next(self, timeout: float) -> list[tuple[str, bytes]]:
        """(key, value) of each put queued within `timeout` (once one came, every one
        queued by then); empty if none came."""
        import queue

        out: list[tuple[str, bytes]] = []
        block = True
        while True:
            try:
                event = _gone_on_failure(self.queue.get, block, timeout)
            except queue.Empty:
                return out
            out.append((event.key, event.result.value))
            block = False

    def close(self) -> None:
        with contextlib.suppress(*_failures()):
            self.queue.unsubscribe_all()


def _confirmed(subscribe: Callable[[], T]) -> T:
    """`subscribe()`, which waits for the ApplicationMaster's confirmation, bounded:
    skein's AM can lose it (a put matching the watch at its creation sends on the same
    stream at the same time), and skein would wait forever. StoreGone instead: the
    process fails, visibly, rather than hang."""
    out: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            out.append(_gone_on_failure(subscribe))
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(SUBSCRIBE_S)
    if failed:
        raise failed[0]
    if not out:
        raise StoreGone(f"skein's ApplicationMaster never confirmed a watch on the store in "
                        f"{SUBSCRIBE_S:g} s")
    return out[0]


def _gone_on_failure(fn: Callable[..., T], *args: Any, **kw: Any) -> T:
    try:
        return fn(*args, **kw)
    except _failures() as exc:
        raise StoreGone(f"the application cannot be reached: {exc}") from None


# ---------------------------------------------------------------- the gateway's client

NO_HADOOP = ("no Hadoop client here: skein needs the `yarn` command on PATH ($HADOOP_HOME/bin) "
             "and HADOOP_CONF_DIR (or -conf) pointing at the cluster; or run with --local")


def application_spec(spec: dict) -> Any:
    """skein's ApplicationSpec of a plain dict (its own validation included)."""
    import skein

    return skein.ApplicationSpec.from_dict(spec)


class Yarn:
    """skein's YARN client (a Java driver process); use as a context manager."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    @classmethod
    def start(cls, principal: str | None, keytab: str | None, log: str,
              driver_conf: str | None = None, java_options: Sequence[str] = ()) -> Yarn:
        """Start skein's driver, logging to `log`, with the Hadoop client configuration
        `driver_conf` (None: HADOOP_CONF_DIR's) and `java_options` for its JVM; what is
        missing is one line."""
        import skein

        try:
            options = _driver_options(driver_conf, java_options)
            return cls(_client_class()(principal=principal, keytab=keytab, log=log,
                                       log_level="INFO", java_options=options))
        except (OSError, subprocess.SubprocessError, skein.exceptions.DriverError) as exc:
            message = _start_failure(exc)
        raise _start_error(message, log, principal, keytab)

    @classmethod
    def warm(cls, conf_dir: str | None) -> Yarn | None:
        """The warm driver (`tfyarn driver start`) when it runs for the same Hadoop
        configuration: a submit then starts no JVM. None otherwise."""
        import skein

        marker = _read_warm()
        if marker is None or marker.get("conf_dir") != conf_dir or not marker.get("address"):
            return None
        try:
            return cls(_client_class()(address=marker["address"],
                                       security=skein.Security.from_default()))
        except (*_failures(), skein.exceptions.DriverNotRunningError):
            return None

    @staticmethod
    def start_warm(conf_dir: str | None, principal: str | None, keytab: str | None,
                   log: str, driver_conf: str | None = None,
                   java_options: Sequence[str] = (), owned: bool = False) -> str:
        """Start (or find) skein's global driver, for this configuration; its address.
        `driver_conf`, where given, is the dir the JVM reads its configuration from;
        `owned`: a dir of tfyarn's own, removed when the driver is stopped (never the
        site's)."""
        import skein

        try:
            address = skein.Client.start_global_driver(
                principal=principal, keytab=keytab, log=log, log_level="INFO",
                java_options=_driver_options(driver_conf, java_options))
        except (OSError, subprocess.SubprocessError, skein.exceptions.DriverError) as exc:
            raise _start_error(_start_failure(exc), log, principal, keytab) from None
        _write_warm({"address": address, "conf_dir": conf_dir, "log": log,
                     "driver_conf": driver_conf if owned else None})
        return address

    @staticmethod
    def stop_warm() -> bool:
        """Stop the warm driver; whether one ran."""
        import skein

        marker = _read_warm()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_warm_path())
        _, pid = skein.core._read_driver()  # skein's own note of its global driver
        try:
            skein.Client.stop_global_driver()
        except _failures():
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
        self.close()

    def close(self) -> None:
        """Closes the channel; stops the driver where this call started its own."""
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
        except _failures() as exc:
            raise YarnUnreachable(f"submission failed: {exc}; check the cluster with: yarn "
                                  "node -list") from None

    def report(self, app_id: str) -> Any:
        """skein's application report (state, final_status, diagnostics, tracking_url)."""
        try:
            return self.raw.application_report(app_id)
        except ValueError as exc:
            raise TfYarnError(f"no application {app_id}: {exc} (list them: tfyarn ls --all)")\
                from None
        except _failures() as exc:
            raise YarnUnreachable(f"cannot reach YARN for {app_id}: {exc}; try again: "
                                  f"tfyarn status {app_id}") from None

    def connect(self, app_id: str) -> App | None:
        """The running application, or None when it does not run (yet, or any more)."""
        try:
            return App(self.raw.connect(app_id, wait=False))
        except (*_failures(), ValueError, KeyError):  # not running: the report says more
            return None

    def kill(self, app_id: str) -> None:
        try:
            self.raw.kill_application(app_id)
        except _failures() as exc:
            raise YarnUnreachable(f"could not kill {app_id}: {exc}; try: yarn application "
                                  f"-kill {app_id}") from None

    def applications(self, states: list[str] | None) -> list[Any]:
        try:
            return list(self.raw.get_applications(states=states))
        except _failures() as exc:
            raise YarnUnreachable(f"cannot list applications: {exc}; check the cluster with: "
                                  "yarn node -list") from None


def _driver_options(driver_conf: str | None, java_options: Sequence[str]) -> list[str]:
    """The JVM options of skein's driver. With `driver_conf`, its classpath too (`-cp`,
    which wins over the CLASSPATH skein puts in the JVM's environment): that dir first,
    skein's jar, then Hadoop's jars as `yarn classpath` names them for that dir. So the
    JVM reads `driver_conf` while this process's own environment stays as it is (a
    notebook's kernel submits to two clusters in turn)."""
    if driver_conf is None:
        return list(java_options)
    import skein

    jar = os.path.join(os.path.dirname(skein.__file__), "java", "skein.jar")
    hadoop = subprocess.run(["yarn", "classpath"], capture_output=True, text=True, check=True,
                            env={**os.environ, "HADOOP_CONF_DIR": driver_conf},
                            timeout=CLASSPATH_TIMEOUT_S).stdout.strip()
    return ["-cp", os.pathsep.join([driver_conf, jar, hadoop]), *java_options]


@functools.cache
def _client_class() -> Any:
    """skein's Client, but one whose __del__ tolerates a half-built instance: skein's own
    raises from it when a start failed, noise on stderr after tfyarn's one line (this
    instead of quieting sys.unraisablehook, which is the whole process's)."""
    import skein

    class Client(skein.Client):  # type: ignore[misc]
        def __del__(self) -> None:
            if "_proc" in self.__dict__:
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
    import skein

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
    """What `tfyarn driver status` says: the warm driver's note, if one was started."""
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
