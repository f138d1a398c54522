"""Following one YARN application to its end: its reports (riding through a
ResourceManager that is away), what its store says (tasks registered, phases, restarts,
why a gang waits, the final status, acknowledged), stopping it, and the words for it.

One watcher serves el_submit and the API's `Job` alike. Must not write the process
environment.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tfyarn.client import appspec, common, rm
from tfyarn.client.cluster import ClientOptions, app_store, rest_client, web_login
from tfyarn.client.interrupts import Interrupts
from tfyarn.client.liveline import LiveLine
from tfyarn.client.livelogs import LiveLogs, http_get
from tfyarn.client.skeinclient import Yarn, YarnUnreachable
from tfyarn.client.yarnlogs import finish_live_logs, log_url
from tfyarn.core import capacity
from tfyarn.core.appreport import AppReport, FinalStatus, YarnState
from tfyarn.core.errors import (
    STATE_EXIT,
    JobFailed,
    StoreGone,
    TfYarnError,
)
from tfyarn.core.jobspec import JobSpec, container_name
from tfyarn.core.policy import am_end, elapsed_words, restart_words, tasks_section
from tfyarn.core.records import Outcome
from tfyarn.core.say import say
from tfyarn.core.settings import Settings
from tfyarn.core.tfconfig import Task, model_dir, natural
from tfyarn.core.timing import (
    GANG_WAIT_LOOK_S,
    LIVE_LOG_POLL_S,
    REPORT_RETRIES,
    RM_AWAY_S,
    YARN_END_POLL_S,
    YARN_POLL_S,
)
from tfyarn.hdfs.spnego import Negotiator
from tfyarn.protocol import kv as kvmod
from tfyarn.protocol import taskstate
from tfyarn.protocol.skeinlink import Puts


def next_steps(app_id: str, task: str | None = None) -> str:
    only = f" --task {task}" if task else ""
    return f"logs: tfyarn logs {app_id}{only}   (or: yarn logs -applicationId {app_id})"


def stop_application(client: Yarn, app_id: str, reason: str, escalation: common.Escalation,
                     watching: bool = False) -> str:
    """Ask the driver to stop every task (orderly, final status KILLED); force it when
    the driver cannot (no AM yet, no answer in time) or a second signal says so.
    `watching`: the caller is the client the driver waits for (el_submit stopping its
    own job), so it acknowledges the final status, and the AM goes without that wait."""
    store = app_store(client, app_id)
    asked = escalation.ask(store, reason)
    while asked and (why := escalation.forced()) is None:
        rep = client.report(app_id)
        if rep.ended:
            return str(rep.state)
        if watching and store is not None:
            store = _acknowledged(store)
        time.sleep(YARN_POLL_S)
    if asked and why == "second signal":
        say("second signal: killing the application now")
    client.kill(app_id)
    return str(YarnState.KILLED)


def _acknowledged(store: kvmod.SkeinKV) -> kvmod.SkeinKV | None:
    """The final status acknowledged once the driver has put it (the store, None once
    acknowledged or gone)."""
    try:
        if store.get(kvmod.STATUS) is None:
            return store
        store.put(kvmod.ACK, "1")
    except StoreGone:
        pass
    return None


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
    poll_s: float = YARN_POLL_S  # between calls while the ResourceManager is away
    away_s: float = RM_AWAY_S  # a call unanswered this long: it is said to be away
    failures: int = 0
    call: _Call | None = None
    away_since: float | None = None
    seen: bool = False

    def next(self) -> AppReport | None:
        """The report, or None after a passing failure or while the ResourceManager does
        not answer; gives up after a few failures in a row."""
        if self.call is None:
            self.call = _Call(self.client.report, self.app_id)
        if not self.call.done.wait(self.poll_s if self.away_since else self.away_s):
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
            self.away_since = time.monotonic() - self.away_s
            say(f"the ResourceManager does not answer (for {self.away_s:g} s: restarting, or "
                "unreachable); the job's containers run on, and el_submit waits for it")


def ride_through(reports: Reports) -> AppReport:
    """The next report, waiting while the ResourceManager is away (said once when it
    goes, once when it is back): `tfyarn status` and `logs` wait as el_submit does."""
    while (rep := reports.next()) is None:
        if reports.away_since is None:  # a passing failure (an away wait already waited)
            time.sleep(reports.poll_s)
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
    interact: bool = False  # -interact: relay every task's output
    login: Negotiator | None = None  # a Kerberized cluster's: the NodeManagers' SPNEGO
    explain: Callable[[kvmod.SkeinKV], str | None] | None = None  # why a gang waits
    line: LiveLine | None = None  # the live line on training: -interact's output goes above
    news: common.News = field(init=False)
    registered: int = -1
    gang: int = 0
    said: set[str] = field(default_factory=set)  # phases told (a restart's is one)
    phase: str | None = None
    started: set[Task] = field(default_factory=set)
    outcome: Outcome | None = None
    live: LiveLogs | None = None
    relayed: float = -1e9
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
        self._relay(store, final=bool(raw))
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

    def _relay(self, store: kvmod.SkeinKV, final: bool) -> None:
        """-interact: the tasks' new output; at most every LIVE_LOG_POLL_S, and once more
        when the final status is out (before the ApplicationMaster may go)."""
        if not self.interact or (not final and time.monotonic() - self.relayed < LIVE_LOG_POLL_S):
            return
        self.relayed = time.monotonic()
        if self.live is None:
            out = getattr(sys.stderr, "buffer", None)
            self.live = LiveLogs(store.app, self.line.above(out) if self.line else out,
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
    interact: bool = False  # -interact: relay every task's output
    state: YarnState | None = None  # the last one told
    tracking_shown: bool = False
    am_hosts: list[str] = field(default_factory=list)  # where each ApplicationMaster ran
    am: str = "1"  # the ApplicationMaster attempt whose store is read (its `am` key)
    store: kvmod.SkeinKV | None = None
    status_puts: Puts | None = None  # the store's STATUS, subscribed to once
    # logins, the user, settings: the caller's (default: none of them, for a bare watcher)
    opts: ClientOptions = field(default_factory=lambda: ClientOptions(settings=Settings()))
    poll_s: float = YARN_POLL_S  # between report calls while the job runs
    end_poll_s: float = YARN_END_POLL_S  # ... once its final status is out
    away_s: float = RM_AWAY_S  # a report call unanswered this long: the RM is said away
    begun: float = field(default_factory=time.monotonic)
    line: LiveLine | None = None  # the live line on training (el_submit's stderr, a cell)
    view: StoreView = field(init=False)
    reports: Reports = field(init=False)

    def __post_init__(self) -> None:
        self.view = StoreView(self.spec, self.interact, web_login(self.opts),
                              functools.partial(gang_wait, self.spec, self.app_id, self.opts),
                              self.line)
        self.reports = Reports(self.client, self.app_id, self.poll_s, self.away_s)

    def run(self, until: float | None = None) -> int:
        """Until the application ended (or `until`, on the monotonic clock: then
        TimeoutError, the application untouched)."""
        try:
            return self._follow(until)
        finally:
            if self.line is not None:
                self.line.end()

    def _follow(self, until: float | None) -> int:
        while True:
            if self.interrupts.count:
                raise self._interrupted()
            if until is not None and time.monotonic() > until:
                raise TimeoutError(f"{self.app_id} still runs ({self.state or 'not started'})")
            rep = self.reports.next()
            if rep is not None:
                self._state(rep)
                if rep.ended:
                    return self._final(rep.final_status, rep.diagnostics)
                if rep.state is YarnState.RUNNING:
                    self._progress()
                    self._line()
                    if self.view.outcome is not None and self.spec.tensorboard_linger_s:
                        return self._lingering()
                elif not self.am_hosts and \
                        time.monotonic() - self.begun > self.spec.register_timeout_s:
                    raise self._never_started()  # (a later AM attempt's wait is the RM's)
            self._pause()

    def _pause(self) -> None:
        """Until the next look. While the job runs, the driver's final status ends the
        pause at once (skein's blocking wait on the store: the driver holds the
        ApplicationMaster until we acknowledge it); once it is out, YARN is asked often,
        as its FINISHED follows within a second."""
        if self.view.outcome is not None:
            time.sleep(self.end_poll_s)
            return
        if self.status_puts is None:
            time.sleep(self.poll_s)
            return
        try:
            self.status_puts.next(self.poll_s)
        except StoreGone:
            self.store = self.status_puts = None

    def _interrupted(self) -> JobFailed:
        words = self.interrupts.words()
        say(f"{words}: killing {self.app_id} (send it again to kill at once)")
        stop_application(self.client, self.app_id, f"{words} (el_submit)",
                         common.Escalation(self.interrupts, self.spec.stop_grace_s),
                         watching=True)
        return common.interrupted(self.app_id, self.interrupts, next_steps(self.app_id))

    def _never_started(self) -> JobFailed:
        """The AM never ran, so no driver enforces -wait_time: the client does."""
        self.client.kill(self.app_id)
        minutes = self.spec.register_timeout_s / 60
        return JobFailed(f"{self.app_id} was still {self.state} after -wait_time {minutes:g} min: "
                         "YARN never started its ApplicationMaster (queue full or AM resources "
                         f"too large?); it was killed. See: yarn application -status {self.app_id}")

    def _state(self, rep: AppReport) -> None:
        if rep.state != self.state:
            self.state = rep.state
            say(f"{self.app_id}: {rep.state}")
        if rep.state is YarnState.RUNNING and rep.host and \
                (not self.am_hosts or self.am_hosts[-1] != rep.host):
            self.am_hosts.append(rep.host)
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
            self._resumed(self.store.get(kvmod.AM))
            self.view.read(self.store)
        except StoreGone:
            self.store = self.status_puts = None

    def _line(self) -> None:
        """The live line: drawn while the job trains, cleared once its outcome is out."""
        if self.line is None or self.store is None:
            return
        if self.view.outcome is not None:
            self.line.end()
        else:
            self.line.look(self.store, self.view.gang, self.view.news.attempt,
                           self.spec.attempts)

    def _resumed(self, am: str | None) -> None:
        """A later ApplicationMaster attempt's store (its driver put AM): said once, and
        followed from scratch (its gangs count from 0 again)."""
        if am is None or am == self.am:
            return
        self.am = am
        lost = f" on {self.am_hosts[-2]}" if len(self.am_hosts) > 1 else ""
        now = f" on {self.am_hosts[-1]}" if self.am_hosts else ""
        say(f"the ApplicationMaster was lost{lost}; YARN started its attempt {am}{now}: "
            "the job resumes")
        self.view = StoreView(self.spec, self.interact, self.view.login, self.view.explain,
                              self.line)

    def _lingering(self) -> int:
        """The job ended but its application stays up for TensorBoard: the outcome is
        final already, so el_submit returns it now."""
        assert self.view.outcome is not None
        say(f"the job ended; TensorBoard stays up {self.spec.tensorboard_linger_s / 60:g} min "
            f"(--tensorboard-linger); end it sooner with: tfyarn kill {self.app_id}")
        return self._final(FinalStatus.of(self.view.outcome.state), "")

    def _final(self, final: FinalStatus, diagnostics: str | None) -> int:
        if self.view.live is not None:
            finish_live_logs(self.view.live, self.app_id, self.opts)
        outcome = self.view.outcome
        if outcome is not None:
            for line in tasks_section(outcome):
                say(line)
        state = str(final) if final in STATE_EXIT else \
            str(FinalStatus.KILLED if self.state is YarnState.KILLED else FinalStatus.FAILED)
        if final is FinalStatus.SUCCEEDED:
            say(f"{self.app_id} SUCCEEDED in {elapsed_words(time.monotonic() - self.begun)}")
            say(f"model dir (TFYARN_MODEL_DIR): "
                f"{model_dir(self.spec.model_dir, self.app_id, self.opts.settings.user)}")
            return 0
        if outcome is None:
            diagnostics = am_end(diagnostics or "", self.am_hosts) or diagnostics
            raise JobFailed(f"{self.app_id} {state}: {(diagnostics or 'no diagnostics').strip()}"
                            f"\n{next_steps(self.app_id)}", STATE_EXIT[state])
        raise common.failed(outcome, self.app_id, state, next_steps(self.app_id, outcome.task))


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
