"""The job's referee, one per job (`python -m tfyarn.driver`).

Owns the job's course: wait for every task to register (deadline: -wait_time), publish
the cluster spec, follow exits and heartbeats, stop everything once the outcome is
known, and publish the final status. On YARN it runs as skein's `master.script` in the
ApplicationMaster, so a job ends right even when the client that submitted it is gone;
locally it notices a dead client and ends the job. The rules themselves are pure
(`tfyarn.policy`); this module only gathers what they need and carries them out.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tfyarn import kv as kvmod
from tfyarn.jobspec import JobSpec
from tfyarn.policy import (
    Liveness,
    Outcome,
    decide,
    exit_code,
    format_tasks,
    lost_record,
    plural,
)
from tfyarn.rendezvous import RendezvousServer
from tfyarn.settings import Settings
from tfyarn.tfconfig import Task, allreduce_ranks, cluster_spec
from tfyarn.timing import ACK_WAIT_S, RUNNING_POLL_S, STOP_REPORT_S


def log(msg: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(f"tfyarn: driver: {msg}", file=sys.stderr, flush=True)


@dataclass
class Snapshot:
    """Everything the launchers published so far, by task."""

    addrs: dict[Task, str] = field(default_factory=dict)
    exits: dict[Task, dict] = field(default_factory=dict)
    beats: dict[Task, str] = field(default_factory=dict)
    lost: dict[Task, dict] = field(default_factory=dict)


def read_tasks(store: kvmod.KV) -> Snapshot:
    snap = Snapshot()
    for key, value in store.scan("task/").items():
        _, name, what = key.split("/")
        task = Task.parse(name)
        if what == "addr":
            snap.addrs[task] = value
        elif what == "exit":
            snap.exits[task] = json.loads(value)
        elif what == "beat":
            snap.beats[task] = value
        elif what == "lost":
            snap.lost[task] = json.loads(value)
    return snap


@dataclass
class Referee:
    """The driver's loop state: deadlines, liveness, whether the cluster spec is out."""

    spec: JobSpec
    store: kvmod.KV
    start: float = field(default_factory=time.monotonic)
    published: bool = False
    chief_done_said: bool = False
    interrupted: str | None = None
    parent: int = field(default_factory=os.getppid)
    liveness: Liveness = field(init=False)
    last_records: dict[Task, dict] = field(default_factory=dict)
    advertise_host: str = "127.0.0.1"
    rendezvous: RendezvousServer | None = None

    def __post_init__(self) -> None:
        self.liveness = Liveness(self.spec.heartbeat_timeout_s)

    def external_stop(self) -> Outcome | None:
        if os.getppid() != self.parent:  # before a signal: a dying client sends SIGTERM too
            self.interrupted = "the driver's parent process (the local client) died"
        reason = self.interrupted or self.store.get(kvmod.KILL)
        return None if reason is None else Outcome("KILLED", f"killed: {reason}")

    def deadline_passed(self, addrs: Mapping[Task, str]) -> Outcome | None:
        elapsed = time.monotonic() - self.start
        if self.spec.timeout_s is not None and elapsed > self.spec.timeout_s:
            return Outcome("FAILED", f"the job ran past --timeout {self.spec.timeout_s:g} s")
        if not self.published and elapsed > self.spec.register_timeout_s:
            missing = [str(t) for t in self.spec.tasks() if t not in addrs]
            minutes = self.spec.register_timeout_s / 60
            return Outcome("FAILED", f"tasks never registered within -wait_time {minutes:g} min: "
                           f"{', '.join(missing)} (not enough free resources, or they failed to "
                           "start: see their logs)")
        return None

    def records(self, snap: Snapshot) -> dict[Task, dict]:
        """Exit records, plus a lost record for every launcher that died or went silent
        before reporting (an exit record, once there, always wins)."""
        now = time.monotonic()
        for task in snap.addrs:
            self.liveness.observe(task, snap.beats.get(task), now)
        silent = self.liveness.lost(now, snap.exits)
        lost = {t: lost_record(s, time.time()) for t, s in silent.items()}
        return {**lost, **snap.lost, **snap.exits}

    def publish_if_ready(self, addrs: Mapping[Task, str]) -> None:
        if self.published or len(addrs) < len(self.spec.tasks()):
            return
        cluster = cluster_spec(addrs)
        if self.spec.allreduce:
            self.publish_ranks(addrs)
        self.store.put(kvmod.CLUSTER, json.dumps(cluster))
        self.store.put(kvmod.PHASE, "running")
        self.published = True
        log(f"all {plural(len(addrs), 'task')} registered; cluster spec published: "
            f"{json.dumps(cluster)}")

    def publish_ranks(self, addrs: Mapping[Task, str]) -> None:
        """Allreduce jobs: ranks grouped by host, torch's master (rank 0's reserved port)
        and, for Horovod (tensorflow-mpi), a fresh gloo rendezvous server."""
        ranks = allreduce_ranks(addrs)
        master = next(addrs[t] for t, r in ranks.items() if r.rank == 0)
        if self.spec.app_type == "tensorflow-mpi":
            self.rendezvous = RendezvousServer(self.advertise_host).start()
            log(f"Horovod gloo rendezvous at {self.rendezvous.address}")
        table = {"ranks": {str(t): r._asdict() for t, r in ranks.items()}, "master": master,
                 "rendezvous": self.rendezvous.address if self.rendezvous else None}
        self.store.put(kvmod.RANKS, json.dumps(table))

    def note_chief_done(self, records: Mapping[Task, Mapping]) -> None:
        """-x False: say once that the chief is done and the job now waits for the rest."""
        chief = records.get(Task("chief", 0))
        if self.chief_done_said or chief is None or chief.get("code") != 0:
            return
        self.chief_done_said = True
        msg = ("chief:0 finished; -x False: the job now waits for every ps and worker to exit "
               "by itself (ps never do unless your code stops them; use -x True or --timeout)")
        log(msg)
        self.store.put(kvmod.PHASE, msg)

    def lost(self) -> dict[Task, dict]:
        """Tasks counted as lost so far (their launchers are not waited for)."""
        return {t: r for t, r in self.last_records.items() if r.get("lost")}

    def step(self) -> Outcome | None:
        snap = read_tasks(self.store)
        records = self.last_records = self.records(snap)
        outcome = (self.external_stop() or decide(self.spec, records)
                   or self.deadline_passed(snap.addrs))
        if outcome is None:
            self.publish_if_ready(snap.addrs)
            self.note_chief_done(records)
        return outcome


def stop_everything(spec: JobSpec, store: kvmod.KV, outcome: Outcome,
                    lost: Mapping[Task, dict]) -> dict[str, dict]:
    """Tell every launcher to stop and wait (bounded) until the registered ones that can
    still answer reported (a lost launcher cannot: it is not waited for)."""
    store.put(kvmod.STOP, outcome.message)
    store.put(kvmod.PHASE, "stopping")
    deadline = time.monotonic() + spec.stop_grace_s + STOP_REPORT_S
    while True:
        snap = read_tasks(store)
        gone = {**lost, **snap.lost}
        pending = [t for t in snap.addrs if t not in snap.exits and t not in gone]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(store.poll_s)
    for task in pending:
        log(f"{task} did not report after the stop request; its container/process is killed")
    return {str(t): {"host": snap.addrs.get(t, "").rsplit(":", 1)[0],
                     **_brief(snap.exits.get(t) or gone.get(t))}
            for t in spec.tasks()}


def _brief(rec: Mapping | None) -> dict:
    if rec is None:
        return {"code": None, "stopped": False, "reason": "never reported"}
    return {"code": rec.get("code"), "stopped": bool(rec.get("stopped")),
            "lost": bool(rec.get("lost")), "reason": rec.get("reason")}


def run(spec: JobSpec, store: kvmod.KV, advertise_host: str = "127.0.0.1") -> Outcome:
    """Drive one job to its end and publish the final status."""
    referee = Referee(spec, store, advertise_host=advertise_host)
    if threading.current_thread() is threading.main_thread():
        _trap_signals(referee)
    store.put(kvmod.PHASE, "registering")
    log(f"waiting for {plural(len(spec.tasks()), 'task')} to register "
        f"(-wait_time {spec.register_timeout_s / 60:g} min)")
    while (outcome := referee.step()) is None:
        time.sleep(max(store.poll_s, RUNNING_POLL_S) if referee.published else store.poll_s)
    log(f"{outcome.state}: {outcome.message}")
    tasks = stop_everything(spec, store, outcome, referee.lost())
    if referee.rendezvous is not None:
        referee.rendezvous.stop()
    final = Outcome(outcome.state, outcome.message, outcome.task, outcome.code, outcome.tail, tasks)
    store.put(kvmod.STATUS, final.to_json())
    if store.get(kvmod.CLIENT) is not None:  # let a watching client read it before we go
        store.wait(kvmod.ACK, timeout=ACK_WAIT_S)
    return final


def _trap_signals(referee: Referee) -> None:
    def handler(signum: int, _frame: object) -> None:
        referee.interrupted = f"the driver received {signal.Signals(signum).name}"

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, handler)


def finish_yarn(store: kvmod.SkeinKV, outcome: Outcome) -> None:
    """On YARN, hand the final status and a diagnostics text naming the task to the AM."""
    diagnostics = outcome.message
    if outcome.tail:
        diagnostics += f"\nlast stderr lines of {outcome.task}:\n" + "\n".join(outcome.tail)
    diagnostics += "\ntasks:\n" + "\n".join(format_tasks(outcome.tasks))
    try:
        store.app.shutdown(outcome.state, diagnostics)
    except Exception as exc:  # the master script's exit code still carries the status
        log(f"could not set the final status through skein: {exc!r}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tfyarn.driver")
    p.add_argument("--job", required=True, help="path of the job JSON")
    p.add_argument("--kv", required=True, help="dir:/path or skein:")
    ns = p.parse_args(argv)
    with open(ns.job, encoding="utf-8") as f:
        spec = JobSpec.from_json(f.read())
    store = kvmod.open_kv(ns.kv)
    settings = Settings.from_environ()
    outcome = run(spec, store, settings.advertise_host or socket.getfqdn())
    if isinstance(store, kvmod.SkeinKV):
        finish_yarn(store, outcome)
    return exit_code(outcome.state)


if __name__ == "__main__":
    sys.exit(main())
