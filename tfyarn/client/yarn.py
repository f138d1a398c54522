"""YARN backend: submit, watch, and the lifecycle commands (status, logs, kill, ls).

Thin on purpose: what runs the job is the same driver (in the ApplicationMaster) and
launchers (in the containers) as local mode; this module only talks to YARN, through
`skeinlink` (the one module that touches skein) and the RM's REST API where that serves
without a JVM. What both backends tell the user lives in `common`.
Must not import skein (that is `skeinclient`), nor write the process environment.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field, replace
from typing import Any

from tfyarn.client import appspec, common, history, kerberos, rm, staging
from tfyarn.client.follow import LiveLogs, http_get
from tfyarn.client.interrupts import Interrupts
from tfyarn.client.skeinclient import NO_HADOOP, Yarn, YarnUnreachable, keeping_log, warm_driver
from tfyarn.core import capacity
from tfyarn.core.errors import (
    STATE_EXIT,
    EnvironmentMissing,
    JobFailed,
    SpecError,
    StoreGone,
    TfYarnError,
)
from tfyarn.core.jobspec import JobSpec, YarnOptions, container_name
from tfyarn.core.policy import am_end, attempt_tables, elapsed_words, restart_words
from tfyarn.core.progress import Progress
from tfyarn.core.records import Outcome
from tfyarn.core.say import say
from tfyarn.core.settings import Settings
from tfyarn.core.tfconfig import Task, history_dir, model_dir, natural
from tfyarn.core.timing import (
    AGGREGATION_WAIT_S,
    GANG_WAIT_LOOK_S,
    LIVE_LOG_POLL_S,
    YARN_END_POLL_S,
    YARN_POLL_S,
)
from tfyarn.hdfs import siteconf, webhdfs
from tfyarn.hdfs.spnego import Negotiator
from tfyarn.protocol import kv as kvmod
from tfyarn.protocol import taskstate
from tfyarn.protocol.skeinlink import Puts, check_skein_build

TERMINAL = {"FINISHED", "FAILED", "KILLED"}
REPORT_RETRIES = 5  # consecutive failed report calls before the watcher gives up
RM_AWAY_S = 10.0  # a report call unanswered this long: the ResourceManager is said to be away
KILL_GRACE_S = 3.0  # `tfyarn kill`: the tasks' stop grace (the job's own is not known here)


@dataclass(frozen=True)
class ClientOptions:
    """How this client reaches the cluster: the Hadoop configuration dir (-conf), the
    Kerberos login, and the process's settings, read once where the client starts."""

    conf_dir: str | None = None
    principal: str | None = None
    keytab: str | None = None
    detach: bool = False
    follow: bool = False  # -interact True: stream every task's output while watching
    settings: Settings = field(default_factory=Settings.from_environ)

    @property
    def hadoop_conf(self) -> str | None:
        """The configuration dir in effect: -conf, else HADOOP_CONF_DIR's (settings)."""
        return self.settings.conf_dir(self.conf_dir)


# ---------------------------------------------------------------- skein's client


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
    this call's own), else a driver of this call's own (a JVM: ~5 s), reading its
    Hadoop configuration from `conf_dest` (see `driver_conf`)."""
    conf_dir = opts.hadoop_conf
    if not opts.principal and not opts.keytab:
        warm = Yarn.warm(conf_dir)
        if warm is not None:
            return warm
    return Yarn.start(opts.principal, opts.keytab, log, driver_conf(dest=conf_dest,
                      conf_dir=conf_dir), opts.settings.java_options())


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
                                  settings.java_options(), owned=conf == own)
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


def log_url(container: Any) -> str:
    url = container.yarn_container_logs
    return url if not url or "://" in url else f"http://{url}"


def next_steps(app_id: str, task: str | None = None) -> str:
    only = f" --task {task}" if task else ""
    return f"logs: tfyarn logs {app_id}{only}   (or: yarn logs -applicationId {app_id})"


def app_store(client: Yarn, app_id: str) -> kvmod.SkeinKV | None:
    """The running application's key-value store, or None when it does not run."""
    app = client.connect(app_id)
    return None if app is None else kvmod.SkeinKV(app)


# ---------------------------------------------------------------- submit and watch


def submit_and_watch(spec: JobSpec, opts: ClientOptions,
                     interrupts: Interrupts | None = None) -> int:
    interrupts = interrupts or Interrupts()
    with submitted(spec, opts, interrupts) as (client, app_id):
        common.emit_id(app_id, "application id")
        if opts.detach and not interrupts.count:  # a signal while submitting: kill it
            say(f"submitted {app_id}; follow it with: tfyarn status {app_id} | tfyarn "
                f"logs {app_id} | tfyarn kill {app_id}")
            return 0
        return Watcher(client, app_id, spec, interrupts, follow=opts.follow, opts=opts).run()


def with_site_acls(yarn: YarnOptions, defaults: appspec.ClusterDefaults) -> YarnOptions:
    """The job's ACLs with the site's (tfyarn.yaml `acls:`) added."""
    return replace(yarn, view_acls=tuple(dict.fromkeys((*defaults.view_acls, *yarn.view_acls))),
                   modify_acls=tuple(dict.fromkeys((*defaults.modify_acls,
                                                    *yarn.modify_acls))))


@contextmanager
def submitted(spec: JobSpec, opts: ClientOptions,
              interrupts: Interrupts) -> Iterator[tuple[Yarn, str]]:
    """Stage and submit the job; the YARN client (open until the block ends) and the
    application id. Signals are only recorded from before the submit on: one during it
    must not lose the id (the watcher's first step kills the application then)."""
    require_client(opts)
    settings, conf_dir = opts.settings, opts.hadoop_conf
    defaults = staging.load_defaults(settings, conf_dir)
    spec = staging.keytab_job(spec, opts.principal, opts.keytab)
    refuse_unfit(spec, opts)
    spec = with_memory_ceiling(spec, opts)
    spec = replace(spec, history_dir=spec.history_dir or defaults.history_dir,
                   redact=defaults.redact, yarn=with_site_acls(spec.yarn, defaults))
    with ExitStack() as held:
        with tempfile.TemporaryDirectory(prefix="tfyarn-stage-") as tmp:  # uploaded by then
            staged = staging.use_cache(staging.stage(spec, tmp), settings, conf_dir,
                                       web_login(opts))
            staged = staging.with_keytab(staged, opts.keytab)
            app_spec = appspec.application_spec(spec, staged, defaults)
            client = held.enter_context(yarn_client(opts))
            held.enter_context(interrupts.deferred())
            upload = Progress("submitting; skein uploads what YARN localizes",
                              staging.local_bytes(staged))
            app_id = client.submit(app_spec, max(r.resources.gpus for r in spec.roles))
            upload.finish(done=upload.total)
        yield client, app_id


def refuse_unfit(spec: JobSpec, opts: ClientOptions) -> None:
    """A container no node of the job's queue and label can ever hold is a SpecError
    before anything is staged or submitted (YARN would accept the application and fail
    or wait later): the flag and the largest value that could run. Where the
    ResourceManager's REST API does not answer, the job goes unchecked, and the submit
    says so."""
    queue = spec.yarn.queue or "default"
    try:
        client = rest_client(opts)
        nodes = capacity.nodes_of(client.get("nodes"))
        maximum = capacity.queue_maximum(client.get("scheduler"), queue)
    except rm.Unavailable as exc:
        say(f"could not read what the cluster can give ({exc}); submitting unchecked")
        return
    why = capacity.unfit(capacity.asks_of(spec), nodes, maximum, queue, spec.yarn.node_label)
    if why is not None:
        raise SpecError(why)


def with_memory_ceiling(spec: JobSpec, opts: ClientOptions) -> JobSpec:
    """--memory-growth: the job learns the queue's largest container, which no grown
    container may pass (skein's ApplicationMaster dies on a request over it). Where the
    ResourceManager does not say, memory is not grown, and the submit says so."""
    if spec.memory_growth is None:
        return spec
    try:
        ceiling = rest_client(opts).max_allocation_mb(spec.yarn.queue)
    except rm.Unavailable as exc:
        ceiling, why = None, str(exc)
    else:
        why = "its scheduler does not report one"
    if ceiling is None:
        say(f"--memory-growth: the ResourceManager did not say the queue's largest container "
            f"({why}); memory will not be grown")
        return spec
    spec = replace(spec, yarn=replace(spec.yarn, max_memory_mb=ceiling))
    ladders = [f"{r.name} " + " \u2192 ".join(str(mb) for mb in spec.memory_sizes(r.name))
               for r in spec.roles]
    say(f"--memory-growth: memory kills restart with {'; '.join(ladders)} MB (the queue's "
        f"largest container is {ceiling} MB)")
    return spec


def stop_application(client: Yarn, app_id: str, reason: str, escalation: common.Escalation) -> str:
    """Ask the driver to stop every task (orderly, final status KILLED); force it when
    the driver cannot (no AM yet, no answer in time) or a second signal says so."""
    asked = escalation.ask(app_store(client, app_id), reason)
    while asked and (why := escalation.forced()) is None:
        state = str(client.report(app_id).state)
        if state in TERMINAL:
            return state
        time.sleep(YARN_POLL_S)
    if asked and why == "second signal":
        say("second signal: killing the application now")
    client.kill(app_id)
    return "KILLED"


class _Call:
    """One call on a daemon thread of its own, waited for with a timeout: a ResourceManager
    that restarts makes Hadoop's client retry for up to 15 minutes
    (`yarn.resourcemanager.connect.max-wait.ms`), and el_submit must say so meanwhile.
    A daemon thread, not an executor: exit never waits for a call that still hangs."""

    def __init__(self, fn: Any, *args: Any) -> None:
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        threading.Thread(target=self._run, args=(fn, *args), daemon=True,
                         name="tfyarn-report").start()

    def _run(self, fn: Any, *args: Any) -> None:
        try:
            self.result = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self.error = exc
        finally:
            self.done.set()

    def get(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


@dataclass
class Reports:
    """The application's reports, tolerating a few failed calls in a row and a
    ResourceManager that is away for a while (said once when it goes, once when it is
    back); an application the ResourceManager forgot after a restart is said as such."""

    client: Yarn
    app_id: str
    failures: int = 0
    call: _Call | None = None
    away_since: float | None = None
    seen: bool = False

    def next(self) -> Any:
        """The report, or None after a passing failure or while the ResourceManager does
        not answer; gives up after a few failures in a row."""
        if self.call is None:
            self.call = _Call(self.client.report, self.app_id)
        if not self.call.done.wait(YARN_POLL_S if self.away_since else RM_AWAY_S):
            self._away()
            return None
        call, self.call = self.call, None
        try:
            rep = call.get()
        except YarnUnreachable:
            self.failures += 1
            if self.failures >= REPORT_RETRIES:
                raise
            return None
        except TfYarnError as exc:  # the ResourceManager does not know the application
            if self.seen:
                raise JobFailed(rm_lost(self.app_id, str(exc))) from None
            raise
        self.failures, self.seen = 0, True
        if self.away_since is not None:
            say(f"the ResourceManager answers again (after "
                f"{elapsed_words(time.monotonic() - self.away_since)})")
            self.away_since = None
        return rep

    def _away(self) -> None:
        if self.away_since is None:
            self.away_since = time.monotonic() - RM_AWAY_S
            say(f"the ResourceManager does not answer (for {RM_AWAY_S:g} s: restarting, or "
                "unreachable); the job's containers run on, and el_submit waits for it")


def ride_through(reports: Reports) -> Any:
    """The next report, waiting while the ResourceManager is away (said once when it
    goes, once when it is back): `tfyarn status` and `logs` wait as el_submit does."""
    while (rep := reports.next()) is None:
        if reports.away_since is None:  # a passing failure (an away wait already waited)
            time.sleep(YARN_POLL_S)
    return rep


def rm_lost(app_id: str, why: str) -> str:
    """An application the ResourceManager no longer knows, though it reported it before:
    the ResourceManager restarted without recovery, and ended the application with it."""
    return (f"{app_id} is gone: the ResourceManager restarted and lost the application "
            f"({why.split(' (list them')[0]}); with no recovery "
            "(yarn.resourcemanager.recovery.enabled) a restart ends every running "
            f"application. Resubmit the job; ask the cluster's admins to enable recovery")


@dataclass
class StoreView:
    """What the running job's store says, as progress lines: tasks registered, the
    phase, the page and TensorBoard, restarts, each task's log link, -interact's output,
    and the final status (acknowledged, so the ApplicationMaster may go)."""

    spec: JobSpec
    follow: bool = False
    login: Negotiator | None = None  # a Kerberized cluster's: the NodeManagers' SPNEGO
    explain: Callable[[kvmod.SkeinKV], str | None] | None = None  # why a gang waits
    news: common.News = field(init=False)
    registered: int = -1
    gang: int = 0
    said: set[str] = field(default_factory=set)  # phases told (a restart's is one)
    phase: str | None = None
    started: set[Task] = field(default_factory=set)
    outcome: Outcome | None = None
    live: LiveLogs | None = None
    followed: float = -1e9
    waiting_since: float | None = None  # this gang's first look with tasks unregistered
    waited: str | None = None  # the last reason told

    def __post_init__(self) -> None:
        self.news = common.News(self.spec)

    def read(self, store: kvmod.SkeinKV) -> None:
        if (restart := self.news.restart(store)) is not None \
                and (words := restart_words(self.spec, *restart)) not in self.said:
            say(words)  # unless the driver's phase said it already
        if self.news.gang != self.gang:  # a restart, or a gang given back and asked again
            self.gang, self.registered, self.started = self.news.gang, -1, set()
        snap = taskstate.read(kvmod.Scoped(store, self.news.gang))
        self._registered(len(snap.addrs))
        self._phase(store.get(kvmod.PHASE))
        self._waiting(store, len(snap.addrs) < len(self.spec.tasks()))
        self.news.read(store)
        for task in sorted(snap.started - self.started, key=natural):
            self._log_link(store, task)
        self.started |= snap.started
        raw = store.get(kvmod.STATUS)
        self._follow(store, final=bool(raw))
        if raw and self.outcome is None:
            self.outcome = Outcome.from_json(raw, kvmod.STATUS)
            store.put(kvmod.ACK, "1")

    def _registered(self, n: int) -> None:
        if n != self.registered:
            self.registered = n
            say(f"tasks registered {n}/{len(self.spec.tasks())}")

    def _waiting(self, store: kvmod.SkeinKV, unregistered: bool) -> None:
        """A gang some of whose containers YARN has not given: after GANG_WAIT_LOOK_S,
        and again as often, why (the short resource, who holds it), when that changed."""
        if not unregistered or self.explain is None:
            self.waiting_since = None
            return
        now = time.monotonic()
        if self.waiting_since is None:
            self.waiting_since = now
            return
        if now - self.waiting_since < GANG_WAIT_LOOK_S:
            return
        self.waiting_since = now
        why = self.explain(store)
        if why is not None and why != self.waited:
            say(why)
        self.waited = why

    def _phase(self, phase: str | None) -> None:
        if phase and phase != self.phase:
            self.phase = phase
            self.said.add(phase)
            say({"running": "training", "stopping": "finishing"}.get(phase, phase))

    def _follow(self, store: kvmod.SkeinKV, final: bool) -> None:
        """-interact: the tasks' new output; at most every LIVE_LOG_POLL_S, and once more
        when the final status is out (before the ApplicationMaster may go)."""
        if not self.follow or (not final and time.monotonic() - self.followed < LIVE_LOG_POLL_S):
            return
        self.followed = time.monotonic()
        self.live = self.live or LiveLogs(store.app, getattr(sys.stderr, "buffer", None),
                                          get=functools.partial(http_get, login=self.login))
        self.live.poll()

    def _log_link(self, store: kvmod.SkeinKV, task: Task) -> None:
        name = appspec.service_name(task, self.spec)
        for c in store.app.containers(services=[name]):
            say(f"{task} started: logs {log_url(c)}")


@dataclass
class Watcher:
    """Follows one application to its end, printing progress to stderr; returns its
    exit code or raises JobFailed."""

    client: Yarn
    app_id: str
    spec: JobSpec
    interrupts: Interrupts = field(default_factory=Interrupts)
    follow: bool = False
    state: str = ""
    tracking_shown: bool = False
    am_host: str = ""  # where the ApplicationMaster ran, for a failure that took it away
    store: kvmod.SkeinKV | None = None
    status_puts: Puts | None = None  # the store's STATUS, subscribed to once
    opts: ClientOptions = field(default_factory=ClientOptions)  # logins, the user, settings
    begun: float = field(default_factory=time.monotonic)
    view: StoreView = field(init=False)
    reports: Reports = field(init=False)

    def __post_init__(self) -> None:
        self.view = StoreView(self.spec, self.follow, web_login(self.opts),
                              functools.partial(gang_wait, self.spec, self.app_id, self.opts))
        self.reports = Reports(self.client, self.app_id)

    def run(self, until: float | None = None) -> int:
        """Until the application ended (or `until`, on the monotonic clock: then
        TimeoutError, the application untouched)."""
        while True:
            if self.interrupts.count:
                raise self._interrupted()
            if until is not None and time.monotonic() > until:
                raise TimeoutError(f"{self.app_id} still runs ({self.state or 'not started'})")
            rep = self.reports.next()
            if rep is not None:
                self._state(rep)
                if str(rep.state) in TERMINAL:
                    return self._final(str(rep.final_status), rep.diagnostics)
                if str(rep.state) == "RUNNING":
                    self._progress()
                    if self.view.outcome is not None and self.spec.tensorboard_linger_s:
                        return self._lingering()
                elif time.monotonic() - self.begun > self.spec.register_timeout_s:
                    raise self._never_started()
            self._pause()

    def _pause(self) -> None:
        """Until the next look. While the job runs, the driver's final status ends the
        pause at once (skein's blocking wait on the store: the driver holds the
        ApplicationMaster until we acknowledge it); once it is out, YARN is asked often,
        as its FINISHED follows within a second."""
        if self.view.outcome is not None:
            time.sleep(YARN_END_POLL_S)
            return
        if self.status_puts is None:
            time.sleep(YARN_POLL_S)
            return
        try:
            self.status_puts.next(YARN_POLL_S)
        except StoreGone:
            self.store = self.status_puts = None

    def _interrupted(self) -> JobFailed:
        words = self.interrupts.words()
        say(f"{words}: killing {self.app_id} (send it again to kill at once)")
        stop_application(self.client, self.app_id, f"{words} (el_submit)",
                         common.Escalation(self.interrupts, self.spec.stop_grace_s))
        return common.interrupted(self.app_id, self.interrupts, next_steps(self.app_id))

    def _never_started(self) -> JobFailed:
        """The AM never ran, so no driver enforces -wait_time: the client does."""
        self.client.kill(self.app_id)
        minutes = self.spec.register_timeout_s / 60
        return JobFailed(f"{self.app_id} was still {self.state} after -wait_time {minutes:g} min: "
                         "YARN never started its ApplicationMaster (queue full or AM resources "
                         f"too large?); it was killed. See: yarn application -status {self.app_id}")

    def _state(self, rep: Any) -> None:
        state = str(rep.state)
        if state != self.state:
            self.state = state
            say(f"{self.app_id}: {state}")
        if state == "RUNNING" and rep.host and rep.host != "N/A":
            self.am_host = str(rep.host)
        if rep.tracking_url and not self.tracking_shown:
            self.tracking_shown = True
            say(f"tracking URL: {rep.tracking_url}")

    def _progress(self) -> None:
        """Read the job's store; an AM that went away is not an error here: the next
        report says how the application ended."""
        try:
            if self.store is None:
                self.store = app_store(self.client, self.app_id)
                if self.store is None:
                    return
                self.store.put(kvmod.CLIENT, "watching")  # fails at once if the AM is gone
                # subscribed before the first read, so no put of it falls in between
                self.status_puts = self.store.app.kv_expect(kvmod.STATUS)
            self.view.read(self.store)
        except StoreGone:
            self.store = self.status_puts = None

    def _lingering(self) -> int:
        """The job ended but its application stays up for TensorBoard: the outcome is
        final already, so el_submit returns it now."""
        assert self.view.outcome is not None
        say(f"the job ended; TensorBoard stays up {self.spec.tensorboard_linger_s / 60:g} min "
            f"(--tensorboard-linger); end it sooner with: tfyarn kill {self.app_id}")
        return self._final(self.view.outcome.state, "")

    def _final(self, final: str, diagnostics: str | None) -> int:
        if self.view.live is not None:
            finish_live_logs(self.view.live, self.app_id, self.opts)
        outcome = self.view.outcome
        if outcome is not None:
            say("tasks:")
            for line in attempt_tables(outcome):
                say(f"  {line}")
        state = final if final in STATE_EXIT else ("KILLED" if self.state == "KILLED" else "FAILED")
        if state == "SUCCEEDED":
            say(f"{self.app_id} SUCCEEDED in {elapsed_words(time.monotonic() - self.begun)}")
            say(f"model dir (TFYARN_MODEL_DIR): "
                f"{model_dir(self.spec.model_dir, self.app_id, self.opts.settings.user)}")
            return 0
        if outcome is None:
            diagnostics = am_end(diagnostics or "", self.am_host) or diagnostics
            raise JobFailed(f"{self.app_id} {state}: {(diagnostics or 'no diagnostics').strip()}"
                            f"\n{next_steps(self.app_id)}", STATE_EXIT[state])
        raise common.failed(outcome, self.app_id, state, next_steps(self.app_id, outcome.task))


# ---------------------------------------------------------------- lifecycle commands


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


def rest_report(app_id: str, opts: ClientOptions) -> dict | None:
    """The RM's report as a dict (state, finalStatus, ...), or None where REST can't serve."""
    try:
        return rest_client(opts).app(app_id)
    except rm.NotFound:
        raise TfYarnError(f"no application {app_id} (list them: tfyarn ls --all)") from None
    except rm.Unavailable:
        return None


def _print_report(app_id: str, name: str, state: str, final: str, url: str, diag: str) -> None:
    print(f"application: {app_id}\nname: {name}\nstate: {state}\nfinal status: {final}\n"
          f"tracking URL: {url}")
    if diag:
        print(f"diagnostics:\n{diag.strip()}")


def status(app_id: str, opts: ClientOptions | None = None, tasks: bool = False) -> int:
    opts = opts or ClientOptions()
    rep = rest_report(app_id, opts)
    if rep is not None and not (tasks and rep.get("state") == "RUNNING"):
        _print_report(app_id, rep.get("name", ""), rep.get("state", ""),
                      rep.get("finalStatus", ""), rep.get("trackingUrl", ""),
                      rep.get("diagnostics", ""))
        if rep.get("state") == "RUNNING":
            print(f"(per-task table: tfyarn status {app_id} --tasks)")
        elif tasks:
            _print_kept(app_id, opts)
        return 0
    with yarn_client(opts) as client:
        r = ride_through(Reports(client, app_id))
        _print_report(app_id, r.name, str(r.state), str(r.final_status), r.tracking_url or "",
                      r.diagnostics or "")
        if str(r.state) == "RUNNING" and (store := app_store(client, app_id)):
            print("tasks:")
            try:
                lines = live_tasks(store)
                raw = store.get(kvmod.JOB)
                why = None if raw is None else gang_wait(JobSpec.from_json(raw), app_id,
                                                         opts, store)
                lines += [f"waiting: {why}"] if why else []
            except StoreGone as exc:
                lines = [f"(the application ended just now: {exc})"]
            for line in lines:
                print(f"  {line}")
    return 0


def _print_kept(app_id: str, opts: ClientOptions) -> None:
    """A finished job's task table, from the page its driver kept at the end."""
    try:
        shelf = cluster_shelf(opts)
        view = history.HistoryReader([shelf]).view(app_id)
    except EnvironmentMissing as exc:  # no NameNode named, HDFS down, no login
        print(f"(its kept page could not be read: {exc})")
        return
    if view is None:
        print(f"(no kept page in {shelf.where}: its driver did not save one (killed by "
              "YARN, or an older tfyarn); the diagnostics above list every task's end)")
        return
    print("tasks (its kept page; all of it: tfyarn history):")
    for line in history.task_lines(view):
        print(f"  {line}")


def cluster_shelf(opts: ClientOptions, where: str | None = None) -> history.HdfsShelf:
    """The cluster's history dir (tfyarn.yaml's `history: dir:`, else the user's), or
    `where`, read over WebHDFS as this client's login."""
    settings, conf_dir = opts.settings, opts.hadoop_conf
    folder = where or history_dir(staging.load_defaults(settings, conf_dir).history_dir,
                                  settings.user)
    return history.HdfsShelf(folder, webhdfs.client_for(folder, conf_dir, settings.user,
                                                        web_login(opts)))


def history_of(opts: ClientOptions, dirs: tuple[str, ...]) -> history.HistoryReader:
    """What `tfyarn history` lists: the given dirs (hdfs:// or local), else the cluster's
    (where a Hadoop configuration is) and local jobs'; the running jobs of both."""
    settings, conf_dir = opts.settings, opts.hadoop_conf
    yarn = conf_dir is not None and os.path.isdir(conf_dir)
    shelves: list[history.Shelf] = [
        cluster_shelf(opts, d) if "://" in d else history.LocalShelf(d) for d in dirs]
    notes = []
    if not dirs:
        shelves.append(history.LocalShelf(settings.local_history(), mine=True))
        if not yarn:
            notes.append("no Hadoop configuration (HADOOP_CONF_DIR, -conf): local jobs only")
        else:  # the cluster's, where its configuration names one
            try:
                shelves.insert(0, cluster_shelf(opts))
            except EnvironmentMissing as exc:
                notes.append(f"the cluster's kept pages are not listed: {exc}")

    def running() -> list[history.Listed]:
        apps = []
        if yarn:
            try:
                apps = rest_client(opts).apps(appspec.APP_TAG, rm.ACTIVE_STATES)
            except rm.Unavailable as exc:
                raise EnvironmentMissing(str(exc)) from None
        return history.running_yarn(apps) + history.running_local(settings.tmpdir)

    def job_dir(job_id: str) -> str | None:
        from tfyarn.client.jobdir import find_job_dir

        return find_job_dir(job_id, settings) if job_id.startswith("local_") else None
    return history.HistoryReader(shelves, running, job_dir, notes)


def history_gate(opts: ClientOptions, keytab: str) -> history.Gate:
    """`tfyarn history --spnego-keytab`'s gate: viewers by SPNEGO with that service
    keytab, YARN's admins (yarn-site's yarn.admin.acl, where the site sets it) shown all.
    SpecError where the keytab is missing, gives no key, or is readable by every user of
    this host (anyone could then pose as this server)."""
    import stat

    from tfyarn.core.jobspec import yarn_acl
    from tfyarn.hdfs import spnego
    from tfyarn.hdfs.siteconf import read_site

    try:
        mode = os.stat(keytab).st_mode
    except OSError as exc:
        raise SpecError(f"--spnego-keytab {keytab}: {exc.strerror}; pass the keytab holding "
                        "HTTP/HOST@REALM for this host") from None
    if mode & stat.S_IROTH:
        raise SpecError(f"--spnego-keytab {keytab}: every user of this host can read it "
                        f"(mode {stat.S_IMODE(mode):o}), so any of them could pose as this "
                        f"server; chmod o-r {keytab}")
    acceptor = spnego.Acceptor(keytab)
    acceptor.check()
    conf = opts.hadoop_conf
    site = read_site(os.path.join(conf, "yarn-site.xml")) if conf else {}
    admins = site.get("yarn.admin.acl")
    return history.Gate(acceptor, yarn_acl(admins) if admins is not None else ())


def gang_wait(spec: JobSpec, app_id: str, opts: ClientOptions,
              store: kvmod.SkeinKV) -> str | None:
    """Why containers of the job's gang that YARN has not given yet wait (the short
    resource: what the cluster has, what is free, who holds the rest), from skein's
    requested containers and the ResourceManager's nodes and running applications; None
    when none waits, some node has room, or the ResourceManager does not answer."""
    try:
        asked = {container_name(c.service_name)
                 for c in store.app.containers(states=["WAITING", "REQUESTED"])}
    except StoreGone:
        return None
    if not asked:
        return None
    try:
        client = rest_client(opts)
        nodes = capacity.nodes_of(client.get("nodes"))
        holders = capacity.holders_of(client.get("apps", {"states": "RUNNING"}))
    except rm.Unavailable:
        return None
    return capacity.waiting_for(capacity.asks_of(spec, asked), nodes, holders, app_id,
                                spec.yarn.node_label)


def live_tasks(store: kvmod.KV) -> list[str]:
    """Per-task lines while the job runs, in natural order (ps, chief, worker:0, worker:2,
    worker:10): address, state, exit code and reason once it ended; after a restart, one
    line per earlier attempt first."""
    attempt, earlier, states = taskstate.current(store)
    out = [a.words() for a in earlier]
    if out:
        out.append(f"attempt {attempt + 1}: running")
    indent = "  " if earlier else ""
    for s in states:
        detail = "" if s.state is taskstate.State.SUCCEEDED else s.detail()
        step = f" {s.progress()}" if s.progress() else ""
        out.append(f"{indent}{str(s.task):<12} {s.addr or '-':<30} {s.state.value}{step}"
                   + (f" ({detail})" if detail else ""))
    return out


def select_task_logs(text: str, task: str) -> str:
    """From `yarn logs` output, the sections of the container that ran `task`."""
    blocks, current = [], []
    for line in text.splitlines(keepends=True):
        if line.startswith("Container: ") and current:
            blocks.append("".join(current))
            current = []
        current.append(line)
    if current:
        blocks.append("".join(current))
    marker = f"tfyarn: {task}: "
    return "".join(b for b in blocks if marker in b)


def logs(app_id: str, task: str | None, opts: ClientOptions | None = None,
         follow: bool = False) -> int:
    opts = opts or ClientOptions()
    if task:
        try:
            Task.parse(task)
        except ValueError as exc:
            raise SpecError(f"--task: {exc}") from None
    rep = rest_report(app_id, opts)
    if rep is not None and rep.get("state") in TERMINAL:
        return _aggregated_logs(app_id, task, opts)
    with yarn_client(opts) as client:
        if str(ride_through(Reports(client, app_id)).state) not in TERMINAL:
            if follow:
                return _follow_logs(client, app_id, task, opts)
            return _live_log_urls(client, app_id, task)
    return _aggregated_logs(app_id, task, opts)


def _follow_logs(client: Yarn, app_id: str, task: str | None, opts: ClientOptions) -> int:
    """`tfyarn logs APP --follow`: the output as it comes (once the application master
    runs: right after a --detach it may still be queued), until the application ends;
    through a ResourceManager restart too (said once when it goes, once when back)."""
    live, reports = None, Reports(client, app_id)
    while True:
        if live is None and (app := client.connect(app_id)) is not None:
            live = LiveLogs(app, getattr(sys.stdout, "buffer", None), task, live_get(opts))
        if live is not None:
            with suppress(StoreGone):  # the AM is gone: the report says how it ended
                live.poll()
        rep = reports.next()
        state = "" if rep is None else str(rep.state)  # None: the RM is away (said)
        if state in TERMINAL:
            if live is not None:
                finish_live_logs(live, app_id, opts)
            say(f"{app_id} ended: {state}; all of it: tfyarn logs {app_id}")
            return 0
        time.sleep(LIVE_LOG_POLL_S)


def live_get(opts: ClientOptions) -> Any:
    """How live logs are fetched from the NodeManagers: HTTP, signed under Kerberos."""
    return functools.partial(http_get, login=web_login(opts))


@contextmanager
def logs_env(opts: ClientOptions | None) -> Iterator[dict[str, str]]:
    """The environment `yarn logs` runs in: -conf's configuration; with --keytab, a ticket
    cache of its own (one kinit for every `yarn logs` run inside)."""
    if shutil.which("yarn") is None:
        raise EnvironmentMissing(f"`yarn` is not on PATH: {NO_HADOOP}")
    opts = opts or ClientOptions()
    env = dict(os.environ)
    if opts.conf_dir:
        env["HADOOP_CONF_DIR"] = os.path.abspath(opts.conf_dir)
    with kerberos.keytab_env(opts.principal, opts.keytab, env) as env:
        yield env


def yarn_logs(app_id: str, env: dict[str, str],
              timeout: float | None = None) -> subprocess.CompletedProcess:
    """`yarn logs -applicationId APP` in `env` (`logs_env`; skein's own reader fails on
    Hadoop 3.3's bucket-logs-tfile layout): the aggregated logs, as bytes."""
    return subprocess.run(["yarn", "logs", "-applicationId", app_id], capture_output=True,
                          env=env, timeout=timeout)


def finish_live_logs(live: LiveLogs, app_id: str, opts: ClientOptions | None = None) -> None:
    """After the end: the rest of each followed container's output, from the aggregated
    logs (the NodeManager forgets an ended application's containers within seconds; YARN
    aggregates their logs within seconds too). Bounded: says what to run when it gives up."""
    deadline = time.monotonic() + AGGREGATION_WAIT_S
    with logs_env(opts) as env:
        while live.pending():
            live.finish(yarn_logs(app_id, env, timeout=AGGREGATION_WAIT_S).stdout)
            if not live.pending() or time.monotonic() > deadline:
                break
            time.sleep(LIVE_LOG_POLL_S)
    if live.pending():
        say(f"some output is not aggregated yet; all of it later: tfyarn logs {app_id}")


def _live_log_urls(client: Yarn, app_id: str, task: str | None) -> int:
    app = client.connect(app_id)
    if app is None:
        raise TfYarnError(f"{app_id} is not running yet; try again: tfyarn logs {app_id}")
    try:
        containers = app.containers()
    except StoreGone as exc:  # the AM ended between the report and this call
        raise TfYarnError(f"{app_id} ended just now ({exc}); try again: tfyarn logs "
                          f"{app_id}") from None
    print(f"{app_id} is running; container logs:")
    if task:  # its own container, else (-ppn/-wnpg packing) every container: one has it
        own = [c for c in containers
               if container_name(c.service_name) == appspec.service_name(Task.parse(task))]
        containers = own or containers
    for c in containers:
        print(f"  {c.service_name:<12} {log_url(c)}")
    return 0


def _aggregated_logs(app_id: str, task: str | None, opts: ClientOptions) -> int:
    sys.stdout.write(aggregated_text(app_id, task, opts))
    return 0


def aggregated_text(app_id: str, task: str | None, opts: ClientOptions) -> str:
    """An ended application's aggregated logs (one task's container, or all of them)."""
    with logs_env(opts) as env:
        r = yarn_logs(app_id, env)
    if r.returncode != 0:
        raise TfYarnError(f"yarn logs failed for {app_id}: "
                          f"{r.stderr.decode(errors='replace').strip()[-500:]} "
                          "(is log aggregation enabled, yarn.log-aggregation-enable?)")
    out = r.stdout.decode(errors="replace")
    text = select_task_logs(out, task) if task else out
    if task and not text:
        raise TfYarnError(f"no container of {app_id} ran {task}; see all: tfyarn logs {app_id}")
    return text


def kill(app_id: str, opts: ClientOptions | None = None) -> int:
    opts = opts or ClientOptions()
    rep = rest_report(app_id, opts)
    if rep is not None and rep.get("state") in TERMINAL:
        say(f"{app_id} already ended: {rep.get('state')} / {rep.get('finalStatus')}")
        return 0
    with yarn_client(opts) as client:
        r = client.report(app_id)
        if str(r.state) in TERMINAL:
            say(f"{app_id} already ended: {r.state} / {r.final_status}")
            return 0
        state = stop_application(client, app_id, "killed with tfyarn kill",
                                 common.Escalation(Interrupts(), KILL_GRACE_S))
        say(f"{app_id}: {state}")
    return 0


def ls(show_all: bool, opts: ClientOptions | None = None) -> int:
    opts = opts or ClientOptions()
    states = rm.ALL_STATES if show_all else rm.ACTIVE_STATES
    try:
        rows = [(a["id"], a.get("name", ""), a.get("state", ""), a.get("finalStatus", ""),
                 a.get("startedTime", 0)) for a in rest_client(opts).apps(appspec.APP_TAG, states)]
    except rm.Unavailable:
        rows = _ls_skein(show_all, opts)
    rows.sort(key=lambda r: r[4] or 0, reverse=True)
    print(f"{'APPLICATION':<32} {'NAME':<20} {'STATE':<10} {'FINAL':<10} STARTED")
    for app_id, name, state, final, started in rows:
        print(f"{app_id:<32} {str(name)[:20]:<20} {state:<10} {final:<10} {_when(started)}")
    return 0


def _when(millis: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(int(millis) / 1000))
    except (TypeError, ValueError, OverflowError, OSError):
        return str(millis)


def _ls_skein(show_all: bool, opts: ClientOptions) -> list[tuple]:
    states = list(rm.ALL_STATES[2:]) if show_all else None
    with yarn_client(opts) as client:
        apps = [a for a in client.applications(states)
                if appspec.APP_TAG in set(a.tags or ())]
    return [(a.id, a.name, str(a.state), str(a.final_status),
             int(a.start_time.timestamp() * 1000) if hasattr(a.start_time, "timestamp")
             else a.start_time) for a in apps]

