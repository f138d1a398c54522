"""How this client reaches a YARN cluster: `ClientOptions` (the configuration dir, the
Kerberos login, the settings), skein's driver (the warm one of `tfyarn skein-driver`, or
one of the call's own), the ResourceManager's REST client and the web services' login.

skein itself is `skeinclient`'s; this module decides which driver serves and checks
that YARN can be reached before anything is staged. Must not write the process
environment.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from tfyarn.client import kerberos, rm
from tfyarn.client.skeinclient import NO_HADOOP, Yarn, keeping_log, warm_driver
from tfyarn.core.appreport import AppReport
from tfyarn.core.errors import (
    EnvironmentMissing,
    SpecError,
    TfYarnError,
)
from tfyarn.core.say import say
from tfyarn.core.settings import Settings
from tfyarn.hdfs import siteconf
from tfyarn.hdfs.spnego import Negotiator
from tfyarn.protocol import kv as kvmod
from tfyarn.protocol.skeinlink import check_skein_build

DRIVER_ARCHIVES = "jvm"  # the cache dir of skein's driver's class-data archives (driverjvm)


@dataclass(frozen=True)
class ClientOptions:
    """How this client reaches the cluster: the Hadoop configuration dir (-conf), the
    Kerberos login, and the process's settings, read once where the client starts."""

    conf_dir: str | None = None
    principal: str | None = None
    keytab: str | None = None
    detach: bool = False
    interact: bool = False  # -interact True: every task's output relayed while watching
    settings: Settings = field(kw_only=True)  # the entry point's, read once there

    @property
    def hadoop_conf(self) -> str | None:
        """The configuration dir in effect: -conf, else HADOOP_CONF_DIR's (settings)."""
        return self.settings.conf_dir(self.conf_dir)


def require_client(opts: ClientOptions) -> None:
    """Refuse early, before staging anything or touching ~/.skein, if the installed skein
    is not tfyarn's build, YARN can't be reached or (Kerberos) cannot be logged in to: no
    ticket, an expired one, a keytab without the principal's key. A warm skein driver
    logged in already."""
    if opts.keytab and not os.path.isfile(opts.keytab):
        raise SpecError(f"--keytab: {opts.keytab!r} does not exist")
    check_skein_build()
    if shutil.which("yarn") is None:
        raise EnvironmentMissing(f"{NO_HADOOP} (missing: yarn)")
    conf_dir = opts.hadoop_conf
    warm = (warm_driver() or {}).get("conf_dir") == conf_dir
    if opts.keytab or not warm:
        kerberos.check_login(conf_dir, opts.principal, opts.keytab,
                             opts.settings.kerberos_env())


def _start_client(opts: ClientOptions, log: str, conf_dest: str) -> Yarn:
    """The warm skein driver when one serves this configuration (no --principal/--keytab of
    this call's own), else a driver of this call's own (a JVM: ~3 s from its class-data
    archive, ~5 s without), reading its Hadoop configuration from `conf_dest` (see
    `driver_conf`)."""
    conf_dir = opts.hadoop_conf
    if not opts.principal and not opts.keytab:
        warm = Yarn.warm(conf_dir)
        if warm is not None:
            return warm
    return Yarn.start(opts.principal, opts.keytab, log, driver_conf(dest=conf_dest,
                      conf_dir=conf_dir), opts.settings.java_options(),
                      opts.settings.own_dir(DRIVER_ARCHIVES))


def driver_conf(dest: str, conf_dir: str | None) -> str | None:
    """The Hadoop configuration skein's driver is started with: `conf_dir` (the site's),
    with faster HDFS close retries (siteconf.CLIENT_DEFAULTS: most of a submit was spent
    in them), made in `dest`; None where there is no configuration dir to start from."""
    return siteconf.client_conf(conf_dir, dest) if conf_dir else None


def _warm_running(conf_dir: str | None) -> bool:
    """Whether the warm skein driver runs already, for `conf_dir` (said); one for another
    configuration is refused (skein keeps one global driver: stop it first)."""
    note = warm_driver()
    if note is None:
        return False
    running = Yarn.warm(note.get("conf_dir"))
    if running is None:
        return False
    running.close()
    if note.get("conf_dir") != conf_dir:
        raise TfYarnError(f"a warm skein driver runs for HADOOP_CONF_DIR={note.get('conf_dir')}; "
                          "stop it first: tfyarn skein-driver stop")
    say(f"warm skein driver already running at {note['address']} for HADOOP_CONF_DIR={conf_dir}")
    return True


def _start_warm(conf_dir: str | None, opts: ClientOptions) -> None:
    """Start the warm skein driver on a Hadoop configuration of its own (`driver_conf`), kept
    in the cache, not /tmp: a cleaner of old files there would take it from under a
    driver that runs for weeks (its JVM rereads it at times); removed by `driver stop`."""
    settings = opts.settings
    log = settings.log_path("skein-warm-driver.log")
    own = tempfile.mkdtemp(prefix="warm-driver-conf-", dir=settings.own_dir("driver-conf"))
    conf = driver_conf(own, conf_dir)
    if conf != own:  # the site's own serves as it is (see siteconf.client_conf)
        shutil.rmtree(own, ignore_errors=True)
    try:
        address = Yarn.start_warm(conf_dir, opts.principal, opts.keytab, log, conf,
                                  settings.java_options(), owned=conf == own,
                                  archive_dir=settings.own_dir(DRIVER_ARCHIVES))
    except BaseException:  # no driver started: nothing reads it
        shutil.rmtree(own, ignore_errors=True)
        raise
    say(f"warm skein driver at {address} for HADOOP_CONF_DIR={conf_dir} (log: {log}); "
        "stop it with: tfyarn skein-driver stop")


def skein_driver(action: str, opts: ClientOptions) -> int:
    """`tfyarn skein-driver start|stop|status`: a warm skein driver that submits, status and
    kill calls share instead of each starting a JVM."""
    conf_dir = opts.hadoop_conf
    if action == "start":
        require_client(opts)
        if _warm_running(conf_dir):
            return 0
        _start_warm(conf_dir, opts)
    elif action == "stop":
        say("warm skein driver stopped" if Yarn.stop_warm() else "no warm skein driver was running")
    else:
        note = warm_driver()
        running = note is not None and Yarn.warm(note.get("conf_dir")) is not None
        print(f"running at {note['address']} for HADOOP_CONF_DIR={note.get('conf_dir')}"
              if running and note else "not running (start one: tfyarn skein-driver start)")
    return 0


@contextmanager
def yarn_client(opts: ClientOptions) -> Iterator[Yarn]:
    """skein's YARN client; its driver's log goes to a file, named when a call fails and
    removed otherwise."""
    require_client(opts)
    log = opts.settings.log_path(f"skein-driver-{os.getpid()}.log")
    with keeping_log(log), tempfile.TemporaryDirectory(prefix="tfyarn-driver-conf-") as conf, \
            _start_client(opts, log, conf) as client:
        yield client


def web_login(opts: ClientOptions) -> Negotiator | None:
    """How this client signs in to the cluster's web services (SPNEGO): None without
    Kerberos."""
    return kerberos.login(opts.hadoop_conf, opts.principal, opts.keytab,
                          opts.settings.krb5_ccache)


def rest_client(opts: ClientOptions) -> rm.RestClient:
    """The RM's REST API; under Kerberos after the login check a submit makes (one
    `Error:` line naming the principal and what to run, rather than GSS-API's words)."""
    conf_dir = opts.hadoop_conf
    kerberos.check_login(conf_dir, opts.principal, opts.keytab, opts.settings.kerberos_env())
    return rm.RestClient.from_conf_dir(conf_dir, opts.settings.user, web_login(opts))


def rest_report(app_id: str, opts: ClientOptions) -> AppReport | None:
    """The RM's report over REST (no JVM), or None where REST can't serve."""
    try:
        return rest_client(opts).app(app_id)
    except rm.NotFound:
        raise TfYarnError(f"no application {app_id} (list them: tfyarn ls --all)") from None
    except rm.Unavailable:
        return None


def never_uploading(app_id: str, opts: ClientOptions) -> list[str]:
    """The nodes YARN still waits for to upload an ended application's logs, when each is
    one the RM lists LOST (`rm.in_vain`); [] while a live node is still at it, or where
    REST cannot say."""
    try:
        client = rest_client(opts)
        by_node = client.aggregation_by_node(app_id)
        if all(status in rm.AGGREGATED for status in by_node.values()):
            return []
        return rm.in_vain(by_node, client.lost_nodes())
    except (rm.Unavailable, rm.NotFound):
        return []


def app_store(client: Yarn, app_id: str) -> kvmod.SkeinKV | None:
    """The running application's key-value store, or None when it does not run."""
    app = client.connect(app_id)
    return None if app is None else kvmod.SkeinKV(app)

