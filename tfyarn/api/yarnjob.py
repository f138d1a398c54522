"""A YARN job behind a `Job` handle: el_submit's watcher, status, logs and kill, as calls.

Owns the handle's YARN client (skein's driver: the warm one, or a JVM held while the
handle follows the job, closed by `Job.close`), the job's spec (published by its driver,
or a default before the application runs), and turning the output the lifecycle
commands print into values and iterators. Must not install signal handlers or write the
process environment.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

from tfyarn.api.job import JobStatus, _Backend, _ended
from tfyarn.client import yarn
from tfyarn.client.interrupts import Interrupts
from tfyarn.core.errors import StoreGone
from tfyarn.core.jobspec import JobSpec, Resources, Role
from tfyarn.core.records import Outcome
from tfyarn.core.say import say
from tfyarn.core.tfconfig import model_dir
from tfyarn.core.timing import AGGREGATION_WAIT_S, LIVE_LOG_POLL_S
from tfyarn.protocol import kv as kvmod
from tfyarn.protocol import taskstate

AGGREGATED = ("SUCCEEDED", "FAILED", "TIME_OUT", "DISABLED")  # not NOT_START: just ended
PLACEHOLDER = JobSpec("attached", "standalone", (Role("worker", 1, Resources(1, 1)),), "-")


class YarnBackend(_Backend):
    """One application, followed from this process."""

    def __init__(self, app_id: str, opts: yarn.ClientOptions,
                 client: yarn.Yarn | None = None, spec: JobSpec | None = None,
                 held: ExitStack | None = None) -> None:
        self.id, self.opts, self.spec = app_id, opts, spec
        self.held = held or ExitStack()
        self._client = client
        self.outcome: Outcome | None = None

    @property
    def client(self) -> yarn.Yarn:
        if self._client is None:
            self._client = self.held.enter_context(yarn.yarn_client(self.opts))
        return self._client

    def _store(self) -> kvmod.SkeinKV | None:
        with contextlib.suppress(StoreGone):
            return yarn.app_store(self.client, self.id)
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

    def status(self) -> JobStatus:
        rep = yarn.rest_report(self.id, self.opts)
        if rep is not None:
            return JobStatus(rep.get("state", ""), rep.get("finalStatus", ""),
                             rep.get("diagnostics", ""))
        r = yarn.ride_through(yarn.Reports(self.client, self.id))
        return JobStatus(str(r.state), str(r.final_status), r.diagnostics or "")

    def tasks(self) -> list[taskstate.TaskState]:
        if self.outcome is not None:
            return taskstate.ended(self.outcome.tasks)
        store = self._store()
        with contextlib.suppress(StoreGone):
            return [] if store is None else taskstate.current(store)[2]
        return []

    def wait(self, timeout: float | None) -> Outcome:
        until = None if timeout is None else time.monotonic() + timeout
        if self.outcome is None:
            watcher = yarn.Watcher(self.client, self.id, self._spec(until), Interrupts(),
                                   opts=self.opts)
            watcher.run(until)
            self.outcome = watcher.view.outcome or self.outcome or \
                Outcome("SUCCEEDED", "the application finished")
        return _ended(self.outcome, self.id, yarn.next_steps(self.id))

    def _spec(self, until: float | None) -> JobSpec:
        """The job's spec: a handle of `attach` reads what the driver published, once
        the application runs (else, ended, one that asks nothing of the watcher)."""
        reports = yarn.Reports(self.client, self.id)
        while self.spec is None:
            if (raw := self.key(kvmod.JOB)) is not None:
                self.spec = JobSpec.from_json(raw)
            elif (rep := reports.next()) is not None and str(rep.state) in yarn.TERMINAL:
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
            yield from self._follow(task, once=not follow)
            return
        self._aggregated()
        yield from yarn.aggregated_text(self.id, task, self.opts).splitlines()

    def _aggregated(self) -> None:
        """Until YARN says every node uploaded the ended application's logs (each
        NodeManager uploads its own, seconds after the end), bounded."""
        deadline = time.monotonic() + AGGREGATION_WAIT_S
        while time.monotonic() < deadline:
            rep = yarn.rest_report(self.id, self.opts) or {}
            if rep.get("logAggregationStatus", "SUCCEEDED") in AGGREGATED:
                return
            time.sleep(LIVE_LOG_POLL_S)

    def _follow(self, task: str | None, once: bool = False) -> Iterator[str]:
        """As `tfyarn logs APP --follow`: every line once, until the application ended
        (`once`: what the containers have written so far)."""
        from tfyarn.client.follow import LiveLogs

        lines, live = _Lines(), None
        reports = yarn.Reports(self.client, self.id)
        while True:
            if live is None and (app := self.client.connect(self.id)) is not None:
                live = LiveLogs(app, lines, task, yarn.live_get(self.opts))  # type: ignore[arg-type]
                with contextlib.suppress(StoreGone):
                    kvmod.SkeinKV(app).put(kvmod.CLIENT, "following")  # the driver waits
            if live is not None:
                with contextlib.suppress(StoreGone):
                    live.poll()
                    self._note_outcome(kvmod.SkeinKV(live.app))
            yield from lines.take()
            if once and live is not None:
                yield from lines.take(final=True)
                return
            rep = reports.next()
            if rep is not None and str(rep.state) in yarn.TERMINAL:
                if live is not None:
                    yarn.finish_live_logs(live, self.id, self.opts)
                yield from lines.take(final=True)
                return
            time.sleep(LIVE_LOG_POLL_S)

    def stop(self, reason: str) -> None:
        rep = self.status()
        if rep.state in yarn.TERMINAL:
            return
        yarn.stop_application(self.client, self.id, reason,
                              yarn.common.Escalation(Interrupts(), yarn.KILL_GRACE_S))

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


def submit(spec: JobSpec, opts: yarn.ClientOptions) -> YarnBackend:
    """Submit `spec`; the handle keeps the YARN client it submitted with."""
    held = ExitStack()
    try:
        client, app_id = held.enter_context(yarn.submitted(spec, opts, Interrupts()))
    except BaseException:
        held.close()
        raise
    say(f"submitted {app_id}")
    return YarnBackend(app_id, opts, client, spec, held)
