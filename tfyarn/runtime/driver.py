"""The job's referee, one per job (`python -m tfyarn.runtime.driver`).

Owns the job's course: wait for every task to register (deadline: -wait_time), publish
the cluster spec, follow exits and heartbeats, stop everything once the outcome is
known, restart the whole gang when the restart policy says so (a new attempt: new
launchers, new addresses, keys under the attempt's own prefix), and publish the final
status. On YARN it runs as skein's `master.script` in the
ApplicationMaster, so a job ends right even when the client that submitted it is gone;
locally it notices a dead client and ends the job. On YARN it also passes YARN's
preemption notices to the gang they name, and keeps the job's course so that the driver
of a later ApplicationMaster attempt (the AM's node lost) resumes the job as a restart.
The rules themselves are pure (`tfyarn.core.policy`); this module only gathers what they
need and carries them out.
Must not run user code, nor ask which backend it runs on (`runtime/site.py` owns that).
Long because the job's course is one loop, carried out step by step here.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from tfyarn.core.appreport import FinalStatus
from tfyarn.core.errors import EnvironmentMissing, StoreGone, exit_code
from tfyarn.core.jobspec import JobSpec
from tfyarn.core.policy import (
    SHOWN_ATTEMPTS,
    Growth,
    Liveness,
    Stalls,
    StepLog,
    am_lost,
    attempt_time,
    backoff_s,
    blame_the_peer,
    cause_of,
    decide,
    describe_exit,
    final_message,
    give_back,
    goodput,
    grow_memory,
    lost_a_peer,
    lost_record,
    merge_records,
    needs_yarn_word,
    patience_s,
    plural,
    regroups,
    restart_after,
    restart_words,
    stall_outcome,
)
from tfyarn.core.records import (
    NEVER_REPORTED,
    Attempt,
    AttemptTime,
    Cause,
    Cluster,
    CourseSoFar,
    JobTasks,
    JobView,
    Milestone,
    Milestones,
    Outcome,
    RankTable,
    StepReport,
    TaskEnd,
    Training,
)
from tfyarn.core.say import say
from tfyarn.core.settings import Settings
from tfyarn.core.tfconfig import Task, allreduce_ranks, cluster_spec
from tfyarn.core.timing import (
    ACK_WAIT_S,
    CONTAINER_END_WAIT_S,
    CONTAINER_POLL_S,
    COURSE_HOLD_S,
    COURSE_KEEP_S,
    DRIVER_TICK_S,
    HISTORY_SAVE_S,
    PAGE_DELAY_S,
    PAGE_START_WAIT_S,
    PREEMPTION_HOLD_S,
    STOP_REPORT_S,
    SYSTEM,
    TENSORBOARD_DONE_SLACK_S,
    TRAINING_PUT_S,
    VERDICT_EXIT_S,
    Clock,
    heartbeat_s,
)
from tfyarn.protocol import kv as kvmod
from tfyarn.protocol import taskstate
from tfyarn.protocol.taskstate import Snapshot
from tfyarn.runtime import gang as gangmod
from tfyarn.runtime.site import Site, open_site
from tfyarn.system import tree

if TYPE_CHECKING:  # both load http.server (~15 ms): imported where used, off the start
    from tfyarn.protocol.rendezvous import RendezvousServer
    from tfyarn.runtime.jobpage import JobPage


@dataclass
class JobLife:
    """What outlives one attempt: the job's start (for --timeout, on the monotonic
    clock), the client process that started the driver, a signal it received, and
    whether a client said at submission that it follows the job to its end."""

    start: float = field(default_factory=time.monotonic)
    parent: int = field(default_factory=os.getppid)
    interrupted: str | None = None
    watched: bool = False  # el_submit without --detach, the API: its ACK is waited for


@dataclass
class Contention:
    """How the job fares against other jobs for the cluster (YARN): whether YARN
    preempted it (it then gives a partial gang back first) and how many partial gangs
    it gave back (each wait before asking again is longer)."""

    patience_s: float
    preempted: bool = False
    given_back: int = 0
    rng: random.Random = field(default_factory=random.Random)

    def patience(self) -> float:
        return patience_s(self.patience_s, self.preempted, self.rng.uniform(0.8, 1.2))

    def backoff(self) -> float:
        return backoff_s(self.patience_s, self.given_back, self.rng.uniform(0.5, 1.0))

    def note(self, ends: Mapping[Task, TaskEnd], gave_way: bool = False) -> bool:
        """Whether YARN preempted a container of this gang, or a task ended at YARN's
        notice before the kill (remembered for the job)."""
        now = gave_way or any(preempted(r) for r in ends.values())
        self.preempted |= now
        return now


def preempted(rec: TaskEnd | None) -> bool:
    return rec is not None and "preempt" in rec.yarn.lower()


@dataclass
class Referee:
    """One gang's loop state: deadlines, liveness, whether the cluster spec is out.
    `store` is the gang's scoped view, `job_store` the job-wide one (kill, phase);
    `start` is its attempt's (-wait_time counts from there, across gangs given back)."""

    spec: JobSpec
    store: kvmod.KV
    job_store: kvmod.KV
    gang: gangmod.Gang
    gang_no: int = 0
    life: JobLife = field(default_factory=JobLife)
    attempt: int = 0  # the task attempt this gang runs (TFYARN_ATTEMPT), in the cluster spec
    start: float = field(default_factory=time.monotonic)
    clock: Clock = SYSTEM  # where its decisions read the time
    patience: float = float("inf")  # a partial gang gives back after this (Contention)
    given_back: int = 0  # partial gangs of this attempt given back so far
    published: bool = False
    chief_done_said: bool = False
    liveness: Liveness = field(init=False)
    stalls: Stalls = field(init=False)
    steps: StepLog = field(default_factory=StepLog)  # the attempt's (shared by its gangs)
    last_records: dict[Task, TaskEnd] = field(default_factory=dict)
    advertise_host: str = "127.0.0.1"
    rendezvous: RendezvousServer | None = None
    said_lost: set[Task] = field(default_factory=set)
    heard: tuple[int, int] = (0, -1)  # the snapshot and its `heard` that liveness last saw
    notices: int = 0  # YARN's preemption notices for this gang, passed on
    noticed_at: float = -1e9  # the last one's time (the referee's clock)
    gave_way: bool = False  # a task ended at a preemption notice: YARN's room goes first
    kept: Callable[[], bool] = lambda: True  # the course kept: the cluster spec may go out

    def __post_init__(self) -> None:
        self.liveness = Liveness(self.spec.heartbeat_timeout_s)
        self.stalls = Stalls(self.spec.stall_timeout_s)

    def external_stop(self) -> Outcome | None:
        if os.getppid() != self.life.parent:  # before a signal: a dying client sends SIGTERM too
            self.life.interrupted = "the driver's parent process (the local client) died"
        reason = self.life.interrupted or self.job_store.get(kvmod.KILL)
        return None if reason is None else Outcome(FinalStatus.KILLED, f"killed: {reason}")

    def deadline_passed(self, addrs: Mapping[Task, str]) -> Outcome | None:
        now = self.clock.now()
        if self.spec.timeout_s is not None and now - self.life.start > self.spec.timeout_s:
            return Outcome(FinalStatus.FAILED,
                           f"the job ran past --timeout {self.spec.timeout_s:g} s")
        if not self.published and now - self.start > self.spec.register_timeout_s:
            missing = [str(t) for t in self.spec.tasks() if t not in addrs]
            minutes = self.spec.register_timeout_s / 60
            why = ("not enough free resources, or they failed to start: see their logs"
                   if not self.given_back else
                   f"the gang was given only part of its containers and gave them back "
                   f"{plural(self.given_back, 'time')}: the queue or cluster never had room "
                   "for every container at once; ask for less (-wn, -wm, -wc), another "
                   "--queue, or a longer -wait_time")
            return Outcome(FinalStatus.FAILED,
                           f"tasks never registered within -wait_time {minutes:g} min: "
                           f"{', '.join(missing)} "
                           f"({why})")
        return None

    def ends(self) -> dict[Task, TaskEnd]:
        """What the cluster says ended this attempt's containers."""
        return self.gang.ends(self.gang_no)

    def records(self, snap: Snapshot) -> dict[Task, TaskEnd]:
        """Exit records, plus a lost record for every launcher that died or went silent
        before reporting, and the cluster's word on containers it ended."""
        now = self.clock.now()
        heard = (id(snap), snap.heard)
        if heard != self.heard:  # else every beat is as last seen: nothing to observe (a
            self.heard = heard  # step per store event, 256 tasks: 65,000 observes a job)
            for task in snap.addrs:
                self.liveness.observe(task, snap.beats.get(task), now)
        silent = self.liveness.silent(now, snap.exits)
        lost = {t: lost_record(s, self.clock.wall()) for t, s in silent.items()}
        records = merge_records(snap.exits, {**lost, **snap.lost}, self.ends())
        self.publish_lost(snap, records)
        return records

    def publish_lost(self, snap: Snapshot, records: Mapping[Task, TaskEnd]) -> None:
        """A task found lost (silent, or its container ended by YARN) is written to the
        store once, with why, so `tfyarn status --tasks` and the page show it too."""
        for task, rec in records.items():
            if rec.lost and task not in snap.exits and task not in snap.lost \
                    and task not in self.said_lost:
                self.said_lost.add(task)
                self.store.put(kvmod.lost_key(task), rec.to_json())

    def publish_if_ready(self, addrs: Mapping[Task, str]) -> None:
        if self.published or len(addrs) < len(self.spec.tasks()) or not self.kept():
            return
        cluster = cluster_spec(addrs)
        if self.spec.allreduce:
            self.publish_ranks(addrs)
        self.store.put(kvmod.CLUSTER, Cluster({k: tuple(v) for k, v in cluster.items()},
                                              self.attempt).to_json())
        self.job_store.put(kvmod.PHASE, "running")
        self.published = True
        say(f"all {plural(len(addrs), 'task')} registered; cluster spec published: "
            + ", ".join(f"{k} {' '.join(v)}" for k, v in cluster.items()), "driver")

    def publish_ranks(self, addrs: Mapping[Task, str]) -> None:
        """Allreduce jobs: ranks grouped by host, torch's master (rank 0's reserved port)
        and, for Horovod (tensorflow-mpi), a fresh gloo rendezvous server."""
        ranks = allreduce_ranks(addrs)
        master = next(addrs[t] for t, r in ranks.items() if r.rank == 0)
        if self.spec.app_type == "tensorflow-mpi":
            from tfyarn.protocol.rendezvous import RendezvousServer

            hosts = {a.rsplit(":", 1)[0] for a in addrs.values()}  # the tasks' own hosts
            self.rendezvous = RendezvousServer(self.advertise_host, hosts).start()
            say(f"Horovod gloo rendezvous at {self.rendezvous.address}", "driver")
        table = RankTable({str(t): r for t, r in ranks.items()}, master,
                          self.rendezvous.address if self.rendezvous else None)
        self.store.put(kvmod.RANKS, table.to_json())

    def give_back(self) -> Outcome | None:
        """A partial gang, given nothing more for its patience, gives its containers back."""
        if self.published or self.patience == float("inf"):
            return None
        return give_back(self.gang.waiting(self.gang_no), self.patience)

    def note_chief_done(self, records: Mapping[Task, TaskEnd]) -> None:
        """-x False: say once that the chief is done and the job now waits for the rest."""
        chief = records.get(Task("chief", 0))
        if self.chief_done_said or chief is None or chief.code != 0:
            return
        self.chief_done_said = True
        msg = ("chief:0 finished; -x False: the job now waits for every ps and worker to exit "
               "by itself (ps never do unless your code stops them; use -x True or --timeout)")
        say(msg, "driver")
        self.job_store.put(kvmod.PHASE, msg)

    def final_steps(self) -> dict[Task, StepReport]:
        """The tasks' last step reports, read once the attempt ended."""
        try:
            return taskstate.read_steps(self.store)
        except StoreGone as exc:  # goodput then counts what was seen before
            say(f"could not read the tasks' last steps: {exc!r}", "driver")
            return {}

    def record_of(self, task: str | None) -> TaskEnd | None:
        """The deciding task's end, YARN's word first (a memory kill is YARN's)."""
        if task is None:
            return None
        t = Task.parse(task)
        return self.ends().get(t) or self.last_records.get(t)

    def lost(self) -> dict[Task, TaskEnd]:
        """Tasks counted as lost so far (silent, or dead before reporting)."""
        return {t: r for t, r in self.last_records.items() if r.lost}

    def gone(self) -> dict[Task, TaskEnd]:
        """Tasks whose launcher cannot report any more: lost, or its container ended."""
        return {**self.lost(), **self.ends()}

    def stalled(self, snap: Snapshot, records: Mapping[Task, TaskEnd]) -> Outcome | None:
        """--stall-timeout: reporting tasks whose step stood still that long."""
        if self.spec.stall_timeout_s is None:
            return None
        now = time.monotonic()
        for task, report in snap.steps.items():
            self.stalls.observe(task, report.step, now)
        stuck = self.stalls.stalled(now, records)
        return stall_outcome(stuck, self.spec.stall_timeout_s) if stuck else None

    def preemption(self, raw: str) -> None:
        """YARN's preemption notice (the AM's key): passed to the gang's launchers when it
        names this gang's containers, which tell their tasks (`tfyarn.preempting()`)."""
        notice = self.gang.notice(self.gang_no, raw)
        if notice is None:
            return
        if not notice.containers:  # an earlier gang's (it came during a restart)
            say("YARN's preemption notice names no container of the running gang: not "
                "passed on", "driver")
            self.job_store.put(kvmod.NOTICED, f"{notice.at:.3f}")
            return
        self.notices += 1
        self.noticed_at = self.clock.now()
        self.store.put(kvmod.preempting_key(self.notices), notice.to_json())
        words = (f"YARN's preemption notice for {', '.join(notice.containers)}: the tasks are "
                 "told (tfyarn.preempting()), so they can save a checkpoint before the kill")
        say(words, "driver")
        self.job_store.put(kvmod.PHASE, words)
        self.job_store.put(kvmod.NOTICED, f"{notice.at:.3f}")

    def after_notice(self, outcome: Outcome | None) -> Outcome | None:
        """A task that fails while a preemption notice stands (a
        PreemptionCheckpointHandler exits once it saved) was preempted, not broken:
        retryable. After the hold the notice has lapsed (the RM changed its mind)."""
        if outcome is None or outcome.cause != Cause.PERMANENT or \
                self.clock.now() - self.noticed_at > PREEMPTION_HOLD_S:
            return outcome
        self.gave_way = True
        return replace(outcome, cause=Cause.RETRYABLE,
                       message=f"{outcome.message} (after YARN's preemption notice)")

    def step(self, snap: Snapshot) -> Outcome | None:
        records = self.last_records = self.records(snap)
        self.steps.observe(snap.steps)
        outcome = (self.external_stop() or self.after_notice(decide(self.spec, records))
                   or self.deadline_passed(snap.addrs) or self.give_back()
                   or self.stalled(snap, records))
        if outcome is None:
            self.publish_if_ready(snap.addrs)
            self.note_chief_done(records)
        return outcome

    def peer_first(self, outcome: Outcome) -> Outcome:
        """A task that failed on losing a peer (`policy.lost_a_peer`: its stderr says so)
        waits, bounded, for the cluster's word on the others: a peer's container that
        ended abnormally decides instead. Its launcher killed -9, worker:1's death reached
        worker:0's collective before YARN's word on worker:1's container reached the
        driver, and read as worker:0's permanent exit 1 (a CI run of the census)."""
        task = Task.parse(outcome.task) if outcome.task else None
        rec = self.last_records.get(task) if task else None
        if task is None or rec is None or not self.gang.tells_ends or not lost_a_peer(rec):
            return outcome
        deadline = time.monotonic() + CONTAINER_END_WAIT_S
        while True:
            blamed = blame_the_peer(task, rec, self.gone())
            if blamed is not None or time.monotonic() > deadline:
                return blamed or outcome
            time.sleep(CONTAINER_POLL_S)

    def settle(self, outcome: Outcome) -> Outcome:
        """A failure its launcher could not explain (stopped by a signal, lost) waits,
        bounded, for the cluster's word on the container: a memory kill is permanent, a
        preemption retryable, and the message says which."""
        outcome = self.peer_first(outcome)
        task = Task.parse(outcome.task) if outcome.task else None
        if task is None or not self.gang.tells_ends or \
                not needs_yarn_word(self.last_records.get(task)):
            return outcome
        deadline = time.monotonic() + CONTAINER_END_WAIT_S
        while task not in self.gang.finished(self.gang_no) and time.monotonic() < deadline:
            time.sleep(CONTAINER_POLL_S)
        rec = self.ends().get(task)
        if rec is None:  # its container ended normally (or YARN said nothing in time)
            return outcome
        return replace(outcome, message=describe_exit(task, rec), code=None, tail=(),
                       cause=cause_of(rec))


@dataclass
class Tracker:
    """The driver's running picture of one attempt: its task keys as they are put (a
    feed of the store's changes, not rescans), heartbeats read as often as they beat."""

    store: kvmod.KV  # the whole store
    scoped: kvmod.Scoped
    beat_s: float
    feed: kvmod.Feed = field(init=False)
    snap: Snapshot = field(default_factory=Snapshot)
    beats_at: float = -1e9
    notices: list[str] = field(default_factory=list)  # YARN's, as they came (the AM's key)

    def __post_init__(self) -> None:
        dirs = [self.scoped.prefix + kind for kind in kvmod.EVENT_KINDS]
        # a store that pushes changes also wakes the driver on a kill request at once
        self.feed = self.store.feed(["", *dirs] if self.store.pushes else dirs)

    def next(self, timeout: float) -> Snapshot:
        """The snapshot once something changed or `timeout` passed."""
        n = len(self.scoped.prefix)
        for key, value in self.feed.next(timeout).items():
            if key.startswith(self.scoped.prefix):
                taskstate.apply(self.snap, key[n:], value)
            elif key == kvmod.PREEMPTION:
                self.notices.append(value)
        if time.monotonic() - self.beats_at >= self.beat_s:
            self.beats_at = time.monotonic()
            for key, value in self.scoped.beats("beat/").items():
                taskstate.apply(self.snap, key, value)
            self.snap.steps.update(taskstate.read_steps(self.scoped))  # tfyarn.progress
        return self.snap


def stop_everything(spec: JobSpec, store: kvmod.KV, outcome: Outcome,
                    gone: Callable[[], Mapping[Task, TaskEnd]], tracker: Tracker) -> Snapshot:
    """Tell every launcher of the attempt to stop and wait (bounded) until the registered
    ones that can still answer reported (a lost launcher, or one whose container ended,
    cannot: it is not waited for). Returns what they published."""
    store.put(kvmod.STOP, outcome.message)
    deadline = time.monotonic() + spec.stop_grace_s + STOP_REPORT_S
    snap = tracker.snap
    while True:
        ended = gone()
        pending = [t for t in snap.addrs if t not in snap.exits and t not in ended
                   and t not in snap.lost]
        left = deadline - time.monotonic()
        if not pending or left <= 0:
            break
        snap = tracker.next(min(left, DRIVER_TICK_S))
    for task in pending:
        say(f"{task} did not report after the stop request; its container/process is killed",
            "driver")
    return snap


def task_table(spec: JobSpec, snap: Snapshot, lost: Mapping[Task, TaskEnd],
               ends: Mapping[Task, TaskEnd]) -> dict[str, TaskEnd]:
    """How each task of the attempt ended, for the final status and diagnostics (no
    stderr tails: the deciding task's is the outcome's own)."""
    records = merge_records(snap.exits, {**lost, **snap.lost}, ends)
    return {str(t): replace(records.get(t, NEVER_REPORTED), tail=(),
                            host=snap.addrs.get(t, "").rsplit(":", 1)[0])
            for t in spec.tasks()}


@dataclass
class Course:
    """The job's course so far, across attempts and gangs: passed to each attempt."""

    spec: JobSpec
    store: kvmod.KV
    gang: gangmod.Gang
    life: JobLife
    advertise_host: str
    contention: Contention
    earlier: list[Attempt] = field(default_factory=list)  # how earlier attempts ended
    gang_no: int = 0  # the gang now wanted
    yielding: bool = False  # YARN preempted the last gang: another queue is owed room
    memory: dict[str, int] = field(default_factory=dict)  # MB by role (--memory-growth)
    growth: Growth | None = None  # the last attempt's memory kill, answered
    began: float = field(default_factory=time.time)  # the job's start, wall clock
    spans: list[tuple[AttemptTime, StepLog]] = field(default_factory=list)  # timed attempts
    attempt: int = 0  # the attempt now running, when it began, and its steps so far
    attempt_began: float = field(default_factory=time.time)
    steps: StepLog = field(default_factory=StepLog)
    am: tuple[int, int] = (1, 1)  # the ApplicationMaster's attempt, of how many (YARN)
    am_host: str = ""
    keeper: Keeper | None = None  # keeps the course for a later AM attempt (YARN)
    kept_at: float = -1e9
    held: tuple[int, float] | None = None  # the offer a restart's cluster spec waits for, since
    shown: tuple[int, int] = (-1, -1)  # the training last put: attempts timed, reports seen
    shown_at: float = -1e9
    marks: Marks = field(init=False)  # the job's milestones, in the store

    def __post_init__(self) -> None:
        self.memory = {r.name: r.resources.memory_mb for r in self.spec.roles}
        self.marks = Marks(self.store)

    def so_far(self) -> CourseSoFar:
        return CourseSoFar(self.am[0], self.am_host, self.began, self.attempt,
                           self.attempt_began, tuple(self.earlier),
                           tuple(t for t, _ in self.spans),
                           tuple(log.kept() for _, log in self.spans), self.steps.kept(),
                           dict(self.memory))

    def keep(self, now: bool = False, hold: bool = False) -> None:
        """Hand the course to the keeper: at once (`now`: an attempt starts), else at most
        every COURSE_KEEP_S (the steps moved); never waits for HDFS. `hold`: the attempt's
        cluster spec waits until this course is kept (`kept`)."""
        if self.keeper is None or (not now and time.monotonic() - self.kept_at < COURSE_KEEP_S):
            return
        self.kept_at = time.monotonic()
        number = self.keeper.offer(self.so_far())
        if hold:
            self.held = (number, time.monotonic())

    def kept(self) -> bool:
        """Whether a restart's tasks may start: its course kept (or keeping it failed, or
        COURSE_HOLD_S passed). An AM lost after they started, with only the attempt before
        kept, would give the job a restart more than --max-restarts allows: the next AM
        attempt would count the earlier attempt as the one lost. The keeping overlaps the
        new gang's allocation and launch, so it seldom holds anything."""
        if self.keeper is None or self.held is None:
            return True
        number, since = self.held
        if self.keeper.done < number and time.monotonic() - since < COURSE_HOLD_S:
            return False
        if self.keeper.done < number:
            say(f"the job's course is still not kept after {COURSE_HOLD_S:g} s (HDFS is "
                "slow): the tasks start; an ApplicationMaster lost before it is kept "
                "counts this attempt's restart again", "driver")
        self.held = None
        return True

    def training(self) -> Training:
        """The job's training so far: every attempt timed (the running one to now) with
        its step log, and the goodput they make."""
        now, spans = time.time(), list(self.spans)
        if not spans or spans[-1][0].attempt != self.attempt:  # the attempt runs
            spans.append((attempt_time(self.attempt, self.attempt_began, now, None,
                                       self.steps), self.steps))
        shown = len(spans) - SHOWN_ATTEMPTS
        return Training(goodput(spans, now - self.began),
                        tuple(log.shown(series=i >= shown) for i, (_, log) in enumerate(spans)),
                        self.began)

    def show(self, now: bool = False) -> None:
        """Put the training in the store for the page's plots and `Job.metrics()`: at
        once (`now`: an attempt ended), else at most every TRAINING_PUT_S when a report
        came."""
        seen = (len(self.spans), self.steps.news)
        if seen == self.shown or (not now and time.monotonic() - self.shown_at < TRAINING_PUT_S):
            return
        self.shown, self.shown_at = seen, time.monotonic()
        self.store.put(kvmod.TRAINING, self.training().to_json())

    def resume(self, kept: CourseSoFar | None) -> Outcome:
        """A later ApplicationMaster attempt: the course the lost one kept (its attempts,
        their timing, grown memory, the job's start), and how its running attempt ended
        (`policy.am_lost`: retryable, so --max-restarts decides)."""
        lost = 0
        if kept is not None:
            lost = kept.attempt
            self.began = kept.began
            self.life.start = time.monotonic() - max(0.0, time.time() - kept.began)
            self.earlier = list(kept.earlier)
            self.spans = [(t, StepLog.of(log))
                          for t, log in zip(kept.spans, kept.logs, strict=True)]
            self.memory.update(kept.memory)
        # the attempt that kept the course is the one lost with the job running: an AM
        # attempt lost before its driver kept anything never ran the job
        outcome = am_lost(kept.am_attempt if kept else self.am[0] - 1,
                          kept.am_host if kept else "", lost)
        if kept is not None:
            log = StepLog.of(kept.running)
            self.spans.append((attempt_time(lost, kept.attempt_began, time.time(), outcome, log),
                               log))
        return outcome


class Marks:
    """The driver's milestones (`kvmod.MILESTONES`), each put as it happens: the job page,
    the kept page and `scripts/bench.py --yarn` read where the job's time went from them
    and from the launchers' Started records."""

    def __init__(self, store: kvmod.KV) -> None:
        self.store = store
        self.marks: list[Milestone] = []

    def add(self, name: str, at: float | None = None) -> None:
        """Once per name: the first time it happens is the one that counts."""
        if any(m.name == name for m in self.marks):
            return
        self.marks.append(Milestone(name, time.time() if at is None else at))
        self.store.put(kvmod.MILESTONES, Milestones(tuple(self.marks)).to_json())


class Keeper:
    """Keeps the job's course (`Site.keep_course`) on a thread of its own: a slow
    NameNode never holds the referee's loop, and the newest course offered wins. Offers
    are numbered: `done` is the last one kept (or that failed), so a restart can hold its
    cluster spec until its course is kept (`Course.kept`); each one kept is put in the
    store too (`kvmod.KEPT`), which wakes the referee on YARN."""

    def __init__(self, keep: Callable[[CourseSoFar], None], store: kvmod.KV) -> None:
        self.keep_course, self.store = keep, store
        self.latest: CourseSoFar | None = None
        self.offered = self.done = 0
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.failing = False
        threading.Thread(target=self._run, daemon=True, name="tfyarn-course").start()

    def offer(self, so_far: CourseSoFar) -> int:
        """The offer's number."""
        with self.lock:
            self.latest = so_far
            self.offered += 1
            number = self.offered
        self.wake.set()
        return number

    def _run(self) -> None:
        while self.wake.wait():
            self.wake.clear()
            with self.lock:
                so_far, self.latest, number = self.latest, None, self.offered
            if so_far is None:
                continue
            try:
                self.keep_course(so_far)
            except EnvironmentMissing as exc:  # said once: the job runs on without it
                if not self.failing:
                    say(f"{exc}: a lost ApplicationMaster's next attempt will not know the "
                        "attempts before it", "driver")
                self.failing = True
                self.done = number
                continue
            self.failing = False
            self.done = number  # before the put that wakes the referee, which reads it
            self.store.put(kvmod.KEPT, str(so_far.attempt))


def run_attempt(course: Course, attempt: int) -> tuple[Outcome, dict[str, TaskEnd]]:
    """One attempt: its gang, and on YARN a new gang each time one is given back before
    it ran (no restart spent), until one runs to an outcome; the attempt's outcome and
    task table."""
    start, given_back, began, steps = time.monotonic(), 0, time.time(), StepLog()
    course.attempt, course.attempt_began, course.steps = attempt, began, steps
    course.keep(now=True, hold=attempt > 0)  # the first: a lost AM's next counts it anyway
    while True:
        course.marks.add(f"gang {course.gang_no} asked")
        course.gang.start(course.gang_no, attempt, course.earlier, course.memory)
        referee = Referee(course.spec, kvmod.Scoped(course.store, course.gang_no), course.store,
                          course.gang, course.gang_no, course.life, attempt, start,
                          advertise_host=course.advertise_host, given_back=given_back,
                          steps=steps, kept=course.kept)
        if course.gang.tells_ends:
            referee.patience = course.contention.patience()
        outcome, tasks = run_gang(course, referee, attempt)
        rec = referee.ends().get(Task.parse(outcome.task)) if outcome.task else None
        if not regroups(outcome, rec, referee.published):
            steps.observe(referee.final_steps())  # what the launchers put as they ended
            course.spans.append((attempt_time(attempt, began, time.time(), outcome, steps),
                                 steps))
            return outcome, tasks
        given_back += 1
        contended = outcome.cause == Cause.REGROUP or preempted(rec)
        outcome = wait_to_ask_again(course, referee, outcome, attempt, given_back, contended)
        if outcome is not None:
            return outcome, tasks
        course.gang_no += 1


def wait_to_ask_again(course: Course, referee: Referee, outcome: Outcome, attempt: int,
                      given_back: int, contended: bool = True) -> Outcome | None:
    """A gang given back (or taken back by YARN before it ran): its containers go, and
    the next gang is asked for after a backoff where another job or queue is owed the
    room (`contended`: given back, preempted), at once where a node failed (lost, or its
    NodeManager did not start a container: YARN gives the next ones elsewhere); a kill,
    --timeout or -wait_time during the wait ends the attempt (its outcome)."""
    wait = 0.0
    if contended:
        course.contention.given_back += 1
        wait = course.contention.backoff()
    when = f"in {wait:.0f} s" if contended else "at once, on other nodes"
    words = f"{outcome.message}; asking again {when} (no restart spent)"
    say(words, "driver")
    course.store.put(kvmod.PHASE, f"waiting for resources: {words}")
    _clear(course.gang, course.gang_no)
    referee.given_back = given_back
    stop = hold_off(referee, wait)
    return None if stop is None else replace(stop, attempt=attempt)


def hold_off(referee: Referee, seconds: float) -> Outcome | None:
    """Ask YARN for nothing for `seconds`; a kill, --timeout or -wait_time meanwhile
    ends the wait with that outcome."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        stop = referee.external_stop() or referee.deadline_passed({})
        if stop is not None:
            say(f"{stop.state}: {stop.message}", "driver")
            return stop
        time.sleep(min(DRIVER_TICK_S, max(0.0, until - time.monotonic())))
    return None


def run_gang(course: Course, referee: Referee, attempt: int
             ) -> tuple[Outcome, dict[str, TaskEnd]]:
    """One gang, from registration to every task stopped: its outcome and task table."""
    spec, store, gang = course.spec, course.store, course.gang
    store.put(kvmod.PHASE, "registering")
    say(f"attempt {attempt + 1}/{spec.attempts}: waiting for "
        f"{plural(len(spec.tasks()), 'task')} to register "
        f"(-wait_time {spec.register_timeout_s / 60:g} min"
        f"{', gang ' + str(course.gang_no) if course.gang_no != attempt else ''})", "driver")
    scoped = kvmod.Scoped(store, course.gang_no)
    tracker = Tracker(store, scoped, heartbeat_s(spec.heartbeat_timeout_s))
    while (outcome := referee.step(tracker.next(DRIVER_TICK_S))) is None:
        while tracker.notices:
            referee.preemption(tracker.notices.pop(0))
        course.keep()
        course.show()
    course.marks.add(f"gang {course.gang_no} ended")
    if outcome.cause != Cause.REGROUP:  # a gang given back is told once, with when it asks again
        say(f"{outcome.state}: {outcome.message}", "driver")
    store.put(kvmod.PHASE, "stopping")
    rec = referee.last_records.get(Task.parse(outcome.task)) if outcome.task else None
    if restart_after(spec, outcome, attempt) and not needs_yarn_word(rec) \
            and not regroups(outcome, rec, referee.published) and not preempted(rec) \
            and not (rec is not None and rec.memory_mb):
        # settled: YARN cannot say otherwise
        course.marks.add(f"gang {course.gang_no + 1} asked")
        _request(gang, course.gang_no + 1, attempt + 1, course.memory)
    snap = stop_everything(spec, scoped, outcome, referee.gone, tracker)
    tracker.feed.close()
    if referee.rendezvous is not None:
        referee.rendezvous.stop()
    outcome = replace(referee.settle(outcome), attempt=attempt)
    outcome, course.growth = grow_memory(spec, outcome, referee.record_of(outcome.task),
                                         course.memory)
    course.yielding = course.contention.note(referee.ends(), referee.gave_way)
    return outcome, task_table(spec, snap, referee.lost(), referee.ends())


def yield_to_the_owed_queue(course: Course, attempt: int) -> Outcome | None:
    """YARN preempted the gang: another queue is owed room. The next gang is asked for
    after a backoff, so the owed queue's containers come first (asked at once, the new
    gang took them back before the preempting job was given any, and was preempted
    again); a kill or --timeout meanwhile ends the job."""
    wait = course.contention.backoff()
    words = (f"YARN preempted the gang: asking for attempt {attempt + 1}'s containers in "
             f"{wait:.0f} s, once the queue owed them had its share")
    say(words, "driver")
    course.store.put(kvmod.PHASE, f"waiting for resources: {words}")
    referee = Referee(course.spec, kvmod.Scoped(course.store, course.gang_no), course.store,
                      course.gang, course.gang_no, course.life)
    stop = hold_off(referee, wait)
    return None if stop is None else replace(stop, attempt=attempt)


@dataclass(frozen=True)
class AmAttempt:
    """The ApplicationMaster attempt the driver runs in (YARN; locally 1 of 1): its
    number and how many there may be, the host it runs on, where the job's course is
    kept for a later attempt, and (a later attempt) what the lost one kept."""

    number: int = 1
    of: int = 1
    host: str = ""
    keep: Callable[[CourseSoFar], None] | None = None
    kept: CourseSoFar | None = None


def run(spec: JobSpec, store: kvmod.KV, advertise_host: str = "127.0.0.1",
        gang: gangmod.Gang | None = None, am: AmAttempt = AmAttempt(),
        started: float | None = None, watched: bool = False) -> Outcome:
    """Drive the job to its end, restarting the whole gang after a failure the restart
    policy accepts, and publish the final status. In a later ApplicationMaster attempt
    the lost one's running attempt counts as a failure, and the job resumes as a restart
    when --max-restarts allows (its gang 0 is skein's from the spec). `started`: the
    driver process's start, its first milestone; `watched`: a client follows the job
    (it may not have reached the store yet when a job fails within seconds)."""
    gang = gang or gangmod.Gang(store)
    life = JobLife(watched=watched)
    if threading.current_thread() is threading.main_thread():
        _trap_signals(life)
    course = Course(spec, store, gang, life, advertise_host,
                    Contention(spec.yarn.gang_patience_s), am=(am.number, am.of),
                    am_host=am.host, keeper=Keeper(am.keep, store) if am.keep else None)
    attempt = 0
    store.expect_all()  # first: the one watch every gang's feed and wait shares
    store.put(kvmod.JOB, spec.shown().to_json())  # skein's key-value page shows the store
    store.put(kvmod.TASKS, JobTasks(tuple(str(t) for t in spec.tasks())).to_json())
    if started is not None:
        course.marks.add("driver", started)
    if am.number > 1:
        store.put(kvmod.AM, str(am.number))
        lost = course.resume(am.kept)
        if not restart_after(spec, lost, lost.attempt):
            _clear(gang, 0)  # skein's gang from the spec: not wanted
            return finish(course, replace(lost, message=lost.message + (
                f" (--max-restarts {spec.max_restarts}: no restart left to resume it)")), {})
        attempt = lost.attempt + 1
        course.earlier.append(lost.summary())
        words = restart_words(spec, attempt, lost.message)
        say(words, "driver")
        store.put(kvmod.PHASE, words)
        if course.memory != {r.name: r.resources.memory_mb for r in spec.roles}:
            _clear(gang, 0)  # grown since: the spec's containers are the wrong size
            course.gang_no = 1
    while True:
        outcome, tasks = run_attempt(course, attempt)
        if not restart_after(spec, outcome, attempt):
            _clear(gang, course.gang_no + 1)  # asked for early, and not wanted after all
            break
        grown = course.growth.words if course.growth is not None else ""
        words = restart_words(spec, attempt + 1, outcome.message, grown)
        if course.growth is not None:  # the next gang's containers of that role are larger
            course.memory[course.growth.role] = course.growth.memory_mb
        say(words, "driver")
        course.earlier.append(replace(replace(outcome, tasks=tasks).summary(), grown=grown))
        store.put(kvmod.PHASE, words)
        _clear(gang, course.gang_no)
        attempt += 1
        course.gang_no += 1
        if course.yielding and (stop := yield_to_the_owed_queue(course, attempt)):
            outcome, tasks = stop, {}
            break
    return finish(course, outcome, tasks)


def finish(course: Course, outcome: Outcome, tasks: Mapping[str, TaskEnd]) -> Outcome:
    """The final status, put in the store (a watching client acknowledges it)."""
    spec, store, earlier = course.spec, course.store, course.earlier
    final = replace(outcome, message=final_message(spec, outcome, earlier), tasks=tasks,
                    attempts=tuple(earlier),
                    goodput=goodput(course.spans, time.time() - course.began))
    course.marks.add("verdict")
    store.expect([kvmod.ACK])  # before the status: a watching client acknowledges at once
    store.put(kvmod.STATUS, final.to_json())
    course.show(now=True)  # after the verdict: the kept page and Job.metrics() read it
    # let a watching client read it before we go: one that said so at submission too,
    # as a job that fails at once can reach its verdict before that client's first look
    if course.life.watched or store.get(kvmod.CLIENT) is not None:
        store.wait(kvmod.ACK, timeout=ACK_WAIT_S)
    return final


def _request(gang: gangmod.Gang, gang_no: int, attempt: int,
             memory: Mapping[str, int]) -> None:
    try:
        gang.request(gang_no, attempt, memory)
    except StoreGone as exc:  # asked again when the attempt starts
        say(f"could not ask for attempt {attempt + 1}'s containers early: {exc!r}", "driver")


def _clear(gang: gangmod.Gang, gang_no: int) -> None:
    try:
        gang.clear(gang_no)
    except StoreGone as exc:  # the next gang still starts; YARN ends leftovers with the app
        say(f"could not kill gang {gang_no}'s leftover containers: {exc!r}", "driver")


def _trap_signals(life: JobLife) -> None:
    def handler(signum: int, _frame: object) -> None:
        life.interrupted = f"the driver received {signal.Signals(signum).name}"

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, handler)


def serve_page(spec: JobSpec, site: Site, settings: Settings, host: str,
               logs_dir: str | None, began: float) -> JobPage | None:
    """Start the job page and publish its URL (on YARN: registered with skein's web UI);
    a page that cannot start never stops the job."""
    from tfyarn.runtime.jobpage import JobPage

    def view() -> JobView:
        return page_view(spec, site, settings, began)

    def log_file(name: str) -> str | None:
        ok = logs_dir and name in {c.name for c in spec.containers()}
        return os.path.join(logs_dir, f"{name}.log") if ok else None

    page = JobPage(view, log_file, site.page_secret(settings), site.page_admit())
    try:
        site.store.put(kvmod.PAGE, site.page_url(page.start(site.page_host(host))))
        return page
    except (StoreGone, OSError) as exc:  # skein's web UI or a port: the job runs without it
        say(f"the job page could not start: {exc!r}", "driver")
        page.stop()
        return None


def page_view(spec: JobSpec, site: Site, settings: Settings, began: float) -> JobView:
    """What the job's page shows now (served live, and kept at the end)."""
    from tfyarn.runtime.jobpage import read_view

    return read_view(spec, site.store, settings.job_id or "unknown", began,
                     site.log_links(spec), settings.user)


def save_page(spec: JobSpec, site: Site, settings: Settings, began: float) -> None:
    """Keep the job's final page for `tfyarn history` (and `tfyarn status --tasks` once
    the application is gone), and forget the course kept for a later ApplicationMaster
    attempt; a page that cannot be kept never changes the verdict."""
    try:
        site.forget_course(spec, settings)
    except EnvironmentMissing as exc:
        say(f"the job's kept course stays in HDFS: {exc}", "driver")
    try:
        view = page_view(spec, site, settings, began)
        tb = view.tensorboard and view.tensorboard.split("?", 1)[0]  # a kept page, no token
        where = site.save_page(spec, replace(view, ended=time.time(), tensorboard=tb),
                               settings)
    except (EnvironmentMissing, StoreGone, OSError) as exc:  # HDFS, the disk, the store
        say(f"the job's page was not kept for `tfyarn history`: {exc}", "driver")
        return
    say(f"job page kept: {where}", "driver")


def am_attempt(spec: JobSpec, site: Site, settings: Settings, host: str) -> AmAttempt:
    """Which ApplicationMaster attempt this is; where there may be a later one, how the
    course is kept for it; in a later one, what the lost one kept (a NameNode that does
    not answer costs the earlier attempts' record, not the job)."""
    number, of = site.am_attempt()
    kept = None
    if number > 1:
        try:
            kept = site.kept_course(spec, settings)
        except EnvironmentMissing as exc:
            say(f"{exc}: resuming without the earlier attempts' record", "driver")
        say(f"ApplicationMaster attempt {number} on {host}: the one before was lost; "
            f"resuming the job" + ("" if kept is None else
                                   f" after its attempt {kept.attempt + 1}"), "driver")

    def keep(so_far: CourseSoFar) -> None:
        site.keep_course(spec, settings, so_far)
    # kept wherever YARN may start another attempt: it does after every node loss, which
    # never counts toward the maximum (YARN-614), so attempt 3 of 2 happens
    return AmAttempt(number, of, host, keep if of > 1 else None, kept)


def exit_within(seconds: float, code: int) -> None:
    """Once the driver has its verdict, the process (on YARN the master script, whose exit
    ends the ApplicationMaster with that status) ends within `seconds`, whatever a side
    task, a page handler or a gRPC stream is doing: an app once stayed RUNNING for 10
    minutes after its driver had logged FAILED."""

    def force() -> None:
        say(f"still shutting down after {seconds:g} s: exiting with the verdict", "driver")
        sys.stderr.flush()
        os._exit(code)

    timer = threading.Timer(seconds, force)
    timer.daemon = True
    timer.start()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tfyarn.runtime.driver")
    p.add_argument("--job", required=True, help="path of the job JSON")
    p.add_argument("--kv", required=True, help="dir:/path or skein:")
    p.add_argument("--logs", help="local mode: the dir of the job's log files (the page "
                   "serves them)")
    p.add_argument("--watched", action="store_true",
                   help="a client follows the job: the final status waits for its ACK")
    ns = p.parse_args(argv)
    started = tree.started_at()
    with open(ns.job, encoding="utf-8") as f:
        spec = JobSpec.from_json(f.read())
    site = open_site(ns.kv)
    settings = Settings.from_environ()
    host = settings.advertise_host or socket.getfqdn()
    am = am_attempt(spec, site, settings, host)
    began = am.kept.began if am.kept else time.time()
    pages: list[JobPage] = []
    ended = threading.Event()

    def start_page() -> None:  # a job over within PAGE_DELAY_S never needed a page
        if not ended.wait(PAGE_DELAY_S):
            pages.extend(p for p in [serve_page(spec, site, settings, host, ns.logs, began)]
                         if p)

    starter = threading.Thread(target=start_page, daemon=True)
    starter.start()
    site.prepare(settings)
    outcome = run(spec, site.store, host, site.gang(spec), am, started, ns.watched)
    linger = site.tensorboard_linger_s(spec)
    exit_within(VERDICT_EXIT_S + (linger + TENSORBOARD_DONE_SLACK_S if linger else 0),
                exit_code(outcome.state))
    site.finish(spec, outcome)  # YARN has the verdict now (skein patch 0012): then the rest
    keeping = threading.Thread(target=save_page, args=(spec, site, settings, began),
                               daemon=True)
    keeping.start()  # bounded: a NameNode that hangs delays the AM's own exit this much only
    keeping.join(timeout=HISTORY_SAVE_S)
    if keeping.is_alive():
        say(f"keeping the job's page took over {HISTORY_SAVE_S:g} s: ending without it",
            "driver")
    ended.set()
    starter.join(timeout=PAGE_START_WAIT_S)
    for page in pages:
        page.stop()
    return exit_code(outcome.state)


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # no interpreter shutdown: nothing left (a thread, gRPC) may hold us
