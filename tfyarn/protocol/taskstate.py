"""The one reader of the store's task keys: what each task of an attempt is doing.

The driver decides from it, the job page and `tfyarn status --tasks` show it, and the
watching client prints log links from it, so they can never disagree. Keys (under the
attempt's prefix, see `kv`): `addr/<t>` (registered), `started/<t>` (the user process
runs), `beat/<t>` (heartbeat counter), `exit/<t>` (its exit record), `lost/<t>` (its
launcher died or went silent: written by the driver or the local client). The job-wide `tasks` key
lists every task of the job, so a task that never registered is shown as waiting; the
job's milestones are the driver's `milestones` and the launchers' Started records.
Must not write to the store nor decide the outcome (`core.policy` does, from what it reads).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from tfyarn.core.records import (
    Attempt,
    Cause,
    JobTasks,
    Milestone,
    Milestones,
    RecordError,
    Started,
    StepReport,
    TaskEnd,
)
from tfyarn.core.tfconfig import Task, natural
from tfyarn.protocol import kv as kvmod


class State(Enum):
    """A task's state, as the page's and the status table's words."""

    WAITING = "waiting"  # no address yet: its container or process is not up
    REGISTERED = "registered"  # its address is published; its user process not started
    RUNNING = "running"
    SUCCEEDED = "exited 0"
    FAILED = "failed"  # exited non-zero or killed by a signal
    STOPPED = "stopped"  # stopped by the driver (another task ended the job)
    LOST = "lost"  # its launcher died or went silent before reporting

    @property
    def ended(self) -> bool:
        return self in (State.SUCCEEDED, State.FAILED, State.STOPPED, State.LOST)


@dataclass(frozen=True)
class TaskState:
    """One task: its state, address, and the record that ended it (exit or lost)."""

    task: Task
    state: State
    addr: str | None = None
    record: TaskEnd | None = None
    steps: StepReport | None = None  # its last reported step (tfyarn.progress)

    def progress(self) -> str:
        """`step 1200 (35.2/s)`; empty when the task never reported."""
        if self.steps is None:
            return ""
        return f"step {self.steps.step} ({self.steps.rate:.1f}/s)"

    @property
    def code(self) -> int | None:
        return None if self.record is None else self.record.code

    def detail(self) -> str:
        """`exit 3: reason`, `exit -: its launcher process died ...`; empty while it runs."""
        if self.record is None:
            return ""
        code = "-" if self.code is None else str(self.code)
        reason = self.record.reason
        return f"exit {code}" + (f": {reason}" if reason else "")


@dataclass
class Snapshot:
    """Everything the launchers (and whoever saw one die) published, by task."""

    addrs: dict[Task, str] = field(default_factory=dict)
    started: set[Task] = field(default_factory=set)
    beats: dict[Task, str] = field(default_factory=dict)
    exits: dict[Task, TaskEnd] = field(default_factory=dict)
    lost: dict[Task, TaskEnd] = field(default_factory=dict)
    steps: dict[Task, StepReport] = field(default_factory=dict)  # tfyarn.progress reports
    heard: int = 0  # addresses and heartbeats applied so far: liveness looks again if it moved

    def state_of(self, task: Task) -> TaskState:
        addr = self.addrs.get(task)
        rec = self.exits.get(task) or self.lost.get(task)
        steps = self.steps.get(task)
        if rec is None:
            state = (State.RUNNING if task in self.started else
                     State.REGISTERED if addr else State.WAITING)
            return TaskState(task, state, addr, steps=steps)
        return TaskState(task, _ended(rec), addr, rec, steps)

    def states(self, tasks: Iterable[Task] | None = None) -> list[TaskState]:
        """The given tasks (default: every task seen), in natural order."""
        seen = tasks if tasks is not None else {*self.addrs, *self.started, *self.exits,
                                                *self.lost}
        return [self.state_of(t) for t in sorted(set(seen), key=natural)]


def _ended(rec: TaskEnd) -> State:
    if rec.lost:
        return State.LOST
    if rec.stopped:
        return State.STOPPED
    return State.SUCCEEDED if rec.code == 0 else State.FAILED


def read(store: kvmod.KV) -> Snapshot:
    """One scan of an attempt's (scoped) store into a Snapshot."""
    snap = Snapshot()
    for key, value in store.scan("").items():  # one call (on YARN, one gRPC round trip)
        apply(snap, key, value)
    return snap


def read_steps(store: kvmod.KV) -> dict[Task, StepReport]:
    """The tasks' last step reports (`steps/<t>`), in one scan of an attempt's store."""
    snap = Snapshot()
    for key, value in store.scan("steps/").items():
        apply(snap, key, value)
    return snap.steps


def apply(snap: Snapshot, key: str, value: str) -> bool:
    """Put one task key (`exit/worker:1`, relative to the attempt) into `snap`; False if
    it is not one."""
    kind, _, name = key.partition("/")
    if kind not in kvmod.TASK_KINDS or not name or "/" in name:
        return False
    try:
        task = Task.parse(name)
    except ValueError:
        return False  # not a task key of ours
    if kind == "addr":
        snap.addrs[task] = value
        snap.heard += 1
    elif kind == "started":
        snap.started.add(task)
    elif kind == "beat":
        snap.beats[task] = value
        snap.heard += 1
    elif kind == "steps":
        with contextlib.suppress(RecordError):  # another version's: no progress known
            snap.steps[task] = StepReport.from_json(value, key)
    elif kind == "exit":
        snap.exits[task] = _end(key, value)
    else:
        snap.lost[task] = _end(key, value)
    return True


def _end(key: str, value: str) -> TaskEnd:
    """A task's end as written; one this tfyarn cannot read (another version's) fails
    the task, permanently, saying so: never a task silently taken as a success."""
    try:
        return TaskEnd.from_json(value, key)
    except RecordError as exc:
        return TaskEnd(None, str(exc), explained=True, cause=Cause.PERMANENT)


def ended(tasks: Mapping[str, TaskEnd]) -> list[TaskState]:
    """The states of a finished attempt's tasks (an outcome's table), in natural order."""
    snap = Snapshot(addrs={Task.parse(n): e.host for n, e in tasks.items() if e.host},
                    exits={Task.parse(n): e for n, e in tasks.items()})
    return snap.states()


def job_tasks(store: kvmod.KV) -> list[Task] | None:
    """Every task of the job, as the driver published it (None before it did)."""
    raw = store.get(kvmod.TASKS)
    return None if raw is None else [Task.parse(t)
                                     for t in JobTasks.from_json(raw, kvmod.TASKS).tasks]


def current(store: kvmod.KV, tasks: Iterable[Task] | None = None
            ) -> tuple[int, tuple[Attempt, ...], list[TaskState]]:
    """The attempt now running, how the earlier ones ended, and the states of `tasks`
    (default: every task of the job once the driver published them)."""
    wanted = kvmod.wanted(store)
    snap = read(kvmod.Scoped(store, wanted.gang))
    return wanted.attempt, wanted.earlier, snap.states(job_tasks(store) if tasks is None else tasks)


# what each launcher's Started record says, the slowest task's time (the gang waits for it)
GANG_MARKS = (("launched", "launchers started"), ("registered", "registered"),
              ("cluster", "cluster spec read"), ("time", "user code started"))


def milestones(store: kvmod.KV, tasks: int) -> tuple[Milestone, ...]:
    """The job's milestones in time order: the driver's (`milestones`), and for each gang
    whose `tasks` tasks all started, when the last of them reached each step of GANG_MARKS
    (one scan per gang). A record this tfyarn cannot read counts as absent."""
    marks: list[Milestone] = []
    with contextlib.suppress(RecordError):
        raw = store.get(kvmod.MILESTONES)
        marks.extend(Milestones.from_json(raw, kvmod.MILESTONES).marks if raw else ())
    for gang in range(kvmod.wanted(store).gang + 1):
        started = []
        for key, value in kvmod.Scoped(store, gang).scan("started/").items():
            with contextlib.suppress(RecordError):
                started.append(Started.from_json(value, key))
        if len(started) < tasks:
            continue
        for field_name, words in GANG_MARKS:
            times = [getattr(s, field_name) for s in started]
            if None not in times:
                marks.append(Milestone(f"gang {gang} {words}", max(times)))
    return tuple(sorted(marks, key=lambda m: m.at))
