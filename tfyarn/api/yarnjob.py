"""A YARN job behind a `Job` handle: el_submit's watcher, status, tasks, logs and kill, as
calls that return values; `tfyarn status/logs/kill/ls` print them (the one front end).

Owns the handle's YARN client (skein's driver: the warm one, or a JVM held while the
handle follows the job, closed by `Job.close`; none at all where the RM's REST API
answers what is asked), the job's spec (published by its driver, or a default before the
application runs). Must not install signal handlers or write the process environment.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

from tfyarn.api.job import JobStatus, _Backend, _ended
from tfyarn.client import appspec, common, rm
from tfyarn.client.cluster import (
    ClientOptions,
    app_store,
    never_uploading,
    rest_client,
    rest_report,
    yarn_client,
)
from tfyarn.client.common import live_tasks
from tfyarn.client.interrupts import Interrupts
from tfyarn.client.liveline import LiveLine
from tfyarn.client.skeinclient import Yarn
from tfyarn.client.watch import (
    Reports,
    Watcher,
    gang_wait,
    next_steps,
    ride_through,
    stop_application,
)
from tfyarn.client.yarnhistory import cluster_shelf, kept_task_lines
from tfyarn.client.yarnlogs import aggregated_text, finish_live_logs, live_get, live_log_urls
from tfyarn.core.appreport import ACTIVE_STATES, ALL_STATES, AppReport, FinalStatus, YarnState
from tfyarn.core.errors import EnvironmentMissing, StoreGone
from tfyarn.core.jobspec import JobSpec, Resources, Role
from tfyarn.core.records import Outcome, Training
from tfyarn.core.say import say
from tfyarn.core.tfconfig import model_dir
from tfyarn.core.timing import (
    AGGREGATION_WAIT_S,
    KEPT_PAGE_WAIT_S,
    KILL_GRACE_S,
    LIVE_LOG_POLL_S,
)
from tfyarn.protocol import kv as kvmod
from tfyarn.protocol import taskstate

PLACEHOLDER = JobSpec("attached", "standalone", (Role("worker", 1, Resources(1, 1)),), "-")


class YarnBackend(_Backend):
    """One application, followed from this process."""

    def __init__(self, app_id: str, opts: ClientOptions,
                 client: Yarn | None = None, spec: JobSpec | None = None,
                 held: ExitStack | None = None, watched: bool = False) -> None:
        self.id, self.opts, self.spec = app_id, opts, spec
        self.watched = watched  # submitted here: the driver waits for this handle's ACK
        self.held = held or ExitStack()
        self._client = client
        self.outcome: Outcome | None = None

    @property
    def client(self) -> Yarn:
        if self._client is None:
            self._client = self.held.enter_context(yarn_client(self.opts))
        return self._client

    def _store(self) -> kvmod.SkeinKV | None:
        with contextlib.suppress(StoreGone):
            return app_store(self.client, self.id)
        return None

    def model_dir(self) -> str:
        """--model-dir as submitted (attached: as the driver published it, while the
        application runs), else the default under the user's HDFS home."""
        given = self.spec.model_dir if self.spec is not None else None
        if self.spec is None and (raw := self.key(kvmod.JOB)) is not None:
            given = JobSpec.from_json(raw).model_dir
        return model_dir(given, self.id, self.opts.settings.user)

    def key(self, key: str) -> str | None:
        store = self._store()
        with contextlib.suppress(StoreGone):
            return None if store is None else store.get(key)
        return None

    def report(self) -> AppReport:
        """The RM's report: over REST (no JVM), else through skein's driver (riding
        through a ResourceManager that is away, as el_submit does)."""
        rep = rest_report(self.id, self.opts)
        return rep if rep is not None else ride_through(Reports(self.client, self.id))

    def status(self) -> JobStatus:
        rep = self.report()
        return JobStatus(str(rep.state), str(rep.final_status), rep.diagnostics, rep.name,
                         rep.tracking_url)

    def task_lines(self) -> list[str]:
        """While it runs: each task's line from the store (connects: a JVM unless a warm
        driver serves), and why the gang waits; once ended: its kept page's table."""
        rep = self.report()
        if rep.ended:  # ended just now (or still ending): its page may be on its way
            since = time.time() - rep.finished_ms / 1000 if rep.finished_ms else 0.0
            return kept_task_lines(self.id, self.opts, max(0.0, KEPT_PAGE_WAIT_S - since))
        store = self._store() if rep.state is YarnState.RUNNING else None
        if store is None:
            return []
        try:
            lines = live_tasks(store)
            raw = store.get(kvmod.JOB)
            why = None if raw is None else gang_wait(JobSpec.from_json(raw), self.id,
                                                     self.opts, store)
            return lines + ([f"waiting: {why}"] if why else [])
        except StoreGone as exc:
            return [f"(the application ended just now: {exc})"]

    def log_urls(self, task: str | None) -> list[tuple[str, str]]:
        return live_log_urls(self.client, self.id, task)

    def tasks(self) -> list[taskstate.TaskState]:
        if self.outcome is not None:
            return taskstate.ended(self.outcome.tasks)
        store = self._store()
        with contextlib.suppress(StoreGone):
            return [] if store is None else taskstate.current(store)[2]
        return []

    def wait(self, timeout: float | None, line: LiveLine | None = None) -> Outcome:
        until = None if timeout is None else time.monotonic() + timeout
        if self.outcome is None:
            watcher = Watcher(self.client, self.id, self._spec(until), Interrupts(),
                              opts=self.opts, line=line)
            watcher.run(until)
            self.outcome = watcher.view.outcome or self.outcome or \
                Outcome(FinalStatus.SUCCEEDED, "the application finished")
        return _ended(self.outcome, self.id, next_steps(self.id))

    def kept_training(self) -> Training | None:
        with contextlib.suppress(EnvironmentMissing):  # RecordError too: not one to show
            view = cluster_shelf(self.opts).read(self.id)
            return view.training if view is not None else None
        return None

    def _spec(self, until: float | None) -> JobSpec:
        """The job's spec: a handle of `attach` reads what the driver published, once
        the application runs (else, ended, one that asks nothing of the watcher)."""
        reports = Reports(self.client, self.id)
        while self.spec is None:
            if (raw := self.key(kvmod.JOB)) is not None:
                self.spec = JobSpec.from_json(raw)
            elif (rep := reports.next()) is not None and rep.ended:
                return PLACEHOLDER
            elif until is not None and time.monotonic() > until:
                raise TimeoutError(f"{self.id} has not started its driver yet")
            else:
                time.sleep(LIVE_LOG_POLL_S)
        return self.spec

    def _note_outcome(self, store: kvmod.KV) -> None:
        """The final status, kept while the store can be read (it goes with the AM, which
        waits for this handle's acknowledgement, bounded, as for el_submit's)."""
        raw = None if self.outcome is not None else store.get(kvmod.STATUS)
        if raw is not None:
            self.outcome = Outcome.from_json(raw, kvmod.STATUS)
            store.put(kvmod.ACK, "1")

    def logs(self, task: str | None, follow: bool) -> Iterator[str]:
        if follow or not self.status().done:
            yield from self._live_lines(task, once=not follow)
            return
        self._aggregated()
        yield from aggregated_text(self.id, task, self.opts).splitlines()

    def _aggregated(self) -> None:
        """Until YARN says every node uploaded the ended application's logs (each
        NodeManager uploads its own, seconds after the end), bounded: a node lost while
        the job ran never uploads, so the wait is said, and what YARN has is shown: at
        once when only nodes the RM lists LOST are left (`never_uploading`), or when the
        RM's REST API does not answer (said too: not waited for, as a gateway without
        REST access would wait on every call)."""
        deadline = time.monotonic() + AGGREGATION_WAIT_S
        waited = False
        while time.monotonic() < deadline:
            rep = rest_report(self.id, self.opts)
            if rep is None:
                say(f"the ResourceManager's REST API did not say whether every node uploaded "
                    f"{self.id}'s logs: here is what YARN has; any rest later: tfyarn logs "
                    f"{self.id}")
                return
            if (rep.log_aggregation or "SUCCEEDED") in rm.AGGREGATED:
                return
            lost = never_uploading(self.id, self.opts)
            if lost:
                say(f"YARN has {self.id}'s logs from every node but {', '.join(lost)}, lost "
                    f"while the job ran (a lost node never uploads its own): here is what it "
                    f"has")
                return
            if not waited:
                say(f"YARN is still aggregating {self.id}'s logs (each node uploads its own);"
                    f" waiting up to {AGGREGATION_WAIT_S:.0f} s")
                waited = True
            time.sleep(LIVE_LOG_POLL_S)
        say(f"YARN has not aggregated every node's logs of {self.id} (a node lost while the "
            f"job ran never uploads its own): here is what it has; any rest later: tfyarn "
            f"logs {self.id}")

    def _live_lines(self, task: str | None, once: bool = False) -> Iterator[str]:
        """As `tfyarn logs APP --follow`: every line once, until the application ended
        (`once`: what the containers have written so far)."""
        from tfyarn.client.livelogs import LiveLogs

        lines, live, am, stale = _Lines(), None, None, False
        reports = Reports(self.client, self.id)
        while True:
            # the report first: one that waits out an absent ResourceManager says so, where
            # connecting would only hang in Hadoop's retries
            rep = reports.next()  # None: the RM is away (said), or a passing failure
            if (live is None or stale) and rep is not None and rep.state is YarnState.RUNNING \
                    and (app := self.client.connect(self.id)) is not None:
                with contextlib.suppress(StoreGone):
                    if live is None:  # the AM attempt first followed
                        am = kvmod.SkeinKV(app).get(kvmod.AM)
                        live = LiveLogs(app, lines, task, live_get(self.opts))  # type: ignore[arg-type]
                        kvmod.SkeinKV(app).put(kvmod.CLIENT, "following")  # the driver waits
                    live.app, stale = app, False
            if live is not None and not stale:
                try:
                    store = kvmod.SkeinKV(live.app)
                    if (now := store.get(kvmod.AM)) != am:  # a later AM attempt's store
                        say(f"the ApplicationMaster was lost; YARN started its attempt "
                            f"{now}: following the resumed job's containers")
                        live = LiveLogs(live.app, lines, task,  # type: ignore[arg-type]
                                        live_get(self.opts))
                        store.put(kvmod.CLIENT, "following")
                        am = now
                    live.poll()
                    self._note_outcome(store)
                except StoreGone:  # the end, or a lost ApplicationMaster: the report says
                    stale = True
            yield from lines.take()
            if once and live is not None:
                yield from lines.take(final=True)
                return
            if rep is not None and rep.ended:
                if live is not None:
                    finish_live_logs(live, self.id, self.opts)
                yield from lines.take(final=True)
                return
            time.sleep(LIVE_LOG_POLL_S)

    def stop(self, reason: str) -> str:
        rep = self.report()
        if rep.ended:
            return str(rep.state)
        return stop_application(self.client, self.id, reason,
                                common.Escalation(Interrupts(), KILL_GRACE_S), self.watched)

    def close(self) -> None:
        self.held.close()
        self._client = None


class _Lines:
    """A sink that LiveLogs writes bytes to, read back as whole lines."""

    def __init__(self) -> None:
        self.buf = b""

    def write(self, data: Any) -> int:
        self.buf += bytes(data)
        return len(data)

    def flush(self) -> None:
        """Nothing buffered beyond `buf`."""

    def take(self, final: bool = False) -> Iterator[str]:
        *whole, self.buf = self.buf.split(b"\n")
        if final and self.buf:
            whole, self.buf = [*whole, self.buf], b""
        return iter([line.decode(errors="replace") for line in whole])


def submit(spec: JobSpec, opts: ClientOptions) -> YarnBackend:
    """Submit `spec`; the handle keeps the YARN client it submitted with."""
    from tfyarn.client.yarnsubmit import submitted

    held = ExitStack()
    try:
        # watched: a handle's wait() (tfyarn.run's at once) may come after a quick job's
        # verdict; its driver waits for it as for el_submit's, bounded (ACK_WAIT_S)
        client, app_id = held.enter_context(submitted(spec, opts, Interrupts(), watched=True))
    except BaseException:
        held.close()
        raise
    say(f"submitted {app_id}")
    return YarnBackend(app_id, opts, client, spec, held, watched=True)


def applications(finished: bool, opts: ClientOptions) -> list[AppReport]:
    """tfyarn's applications on the cluster (with `finished`, ended ones too), newest
    first: over REST, else through skein's driver."""
    states = ALL_STATES if finished else ACTIVE_STATES
    try:
        apps = rest_client(opts).apps(appspec.APP_TAG, states)
    except rm.Unavailable:
        with yarn_client(opts) as client:
            apps = client.applications(list(ALL_STATES[2:]) if finished else None,
                                       appspec.APP_TAG)
    return sorted(apps, key=lambda a: a.started_ms, reverse=True)
