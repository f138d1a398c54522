"""The typed records that cross the job's store, and their one JSON codec.

Owns every structured value the driver, the launchers, the side tasks and the clients
put in the store (a task's start and end, the cluster spec, the rank table, the gang
wanted, an attempt's summary, TensorBoard's word, the final outcome): frozen dataclasses
whose `to_json`/`from_json` are the only code that writes or reads that JSON. A record
carries the store's format number, so a launcher and a driver (or a gateway) of
different tfyarn versions fail loudly, naming what to do, instead of misreading each
other; a field unknown or missing is named too. Must not do I/O (core: stdlib only).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeVar

from tfyarn.core.errors import EnvironmentMissing

FORMAT = 3  # bump when a record's fields change: older readers then refuse, by name
FORMAT_KEY = "format"

R = TypeVar("R", bound="Record")


class RecordError(EnvironmentMissing):
    """A value in the job's store that this tfyarn cannot read: another tfyarn version
    wrote it, or something that is not tfyarn."""


class Record:
    """Base of the store's records: JSON out with the format number, JSON in checked."""

    # fields added since FORMAT was last bumped, read as their default where missing: for
    # records kept past the job (a kept page), which an older tfyarn wrote
    LATER: typing.ClassVar[frozenset[str]] = frozenset()

    def to_json(self) -> str:
        assert dataclasses.is_dataclass(self)
        return json.dumps({FORMAT_KEY: FORMAT, **_plain(self)}, sort_keys=True)

    @classmethod
    def from_json(cls: type[R], text: str, where: str = "") -> R:
        """The record in `text`; `where` (a store key) names it in errors."""
        where = where or cls.__name__
        try:
            d = json.loads(text)
        except ValueError as exc:
            raise RecordError(f"{where}: not a tfyarn record ({exc}): {text[:80]!r}") from None
        if not isinstance(d, dict):
            raise RecordError(f"{where}: not a tfyarn record: {text[:80]!r}")
        fmt = d.pop(FORMAT_KEY, None)
        if fmt != FORMAT:
            raise RecordError(
                f"{where} was written in tfyarn's store format {fmt}, and this tfyarn reads "
                f"format {FORMAT}: the gateway and the job's environment run different "
                "tfyarn versions; install the same tfyarn in both (or ship the gateway's "
                "with -m virtual-env)")
        return _fields(cls, d, where)


@functools.cache
def _shape(cls: type) -> tuple[dict[str, Any], tuple[str, ...]]:
    """A record class's field types and names, worked out once per process: the
    annotations are strings (postponed evaluation), and evaluating them on every read cost
    a launcher of a 256-task job more than parsing the cluster spec itself (#46)."""
    return typing.get_type_hints(cls), tuple(f.name for f in dataclasses.fields(cls))


def _plain(v: Any) -> Any:
    """`v` as JSON's types, as `dataclasses.asdict` gives it but without its deep copy of
    every leaf: a launcher writes a record per task, and the driver's last ones hold every
    task's (#46). Records are frozen, their leaves str, numbers, None or enums."""
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {n: _plain(getattr(v, n)) for n in _shape(type(v))[1]}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def warm(*classes: type) -> None:
    """Work out `classes`' shapes now (in a fork server, once for all its children)."""
    for cls in classes:
        _shape(cls)


def _fields(cls: type[R], d: Mapping[str, Any], where: str) -> R:
    hints, names = _shape(cls)
    unknown = sorted(set(d) - set(names))
    missing = [n for n in names if n not in d and n not in cls.LATER]
    if unknown or missing:
        raise RecordError(
            f"{where}: a {cls.__name__} record with "
            + "; ".join(x for x in (f"unknown fields {', '.join(unknown)}" if unknown else "",
                                    f"missing fields {', '.join(missing)}" if missing else "")
                        if x)
            + ": the gateway and the job's environment run different tfyarn versions")
    return cls(**{n: _value(hints[n], d[n], f"{where}.{n}") for n in names if n in d})


def _value(tp: Any, v: Any, where: str) -> Any:
    """`v` (from JSON) as type `tp`, or a RecordError naming the field."""
    if tp is str:  # the common leaf (a cluster spec's addresses), without typing's calls
        return _typed(v, str, where)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if v is None and type(None) in args:
            return None
        return _value(next(a for a in args if a is not type(None)), v, where)
    if origin is tuple:
        return tuple(_value(args[0], x, where) for x in _typed(v, list, where))
    if origin in (dict, collections.abc.Mapping):
        return {k: _value(args[1], x, f"{where}.{k}") for k, x in _typed(v, dict, where).items()}
    if dataclasses.is_dataclass(tp):
        return _fields(tp, _typed(v, dict, where), where)  # type: ignore[arg-type]
    if tp is float and isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    if tp is int and isinstance(v, bool):
        raise RecordError(f"{where}: expected int, found {v!r}")
    return _typed(v, tp, where)


def _typed(v: Any, tp: type, where: str) -> Any:
    if not isinstance(v, tp):
        raise RecordError(f"{where}: expected {tp.__name__}, found {v!r}")
    return v


class Cause(str, Enum):
    """Why a failure ended an attempt, as far as restarting goes (a record's `cause`; the
    records keep YARN-free strings, which compare equal to these)."""

    RETRYABLE = "retryable"  # not the code's fault: a signal, preemption, a lost node/launcher
    PERMANENT = "permanent"  # would fail again: exit codes 1-127, a memory kill, tfyarn errors
    REGROUP = "regroup"  # a gang given back before it ran: no restart spent

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


# ---------------------------------------------------------------- what tasks report


@dataclass(frozen=True)
class TaskEnd(Record):
    """How one task ended: its launcher's exit record (`exit/<t>`), a lost launcher's
    (`lost/<t>`, written by whoever saw it die or go silent), or YARN's word on the
    container it ended. `explained`: `reason` says it all (a docker memory kill, a node
    that cannot run the task, an expired token); `cause`: retryable or permanent where
    known better than the exit code says; `yarn`: YARN's exit message; `taken`: YARN took
    the container back (preempted, lost node, disks); `result`: a `tfyarn.run` task's
    pickled return value or exception, base64; `memory_mb`: the size of a container
    killed for its memory (what --memory-growth grows from)."""

    code: int | None
    reason: str = ""
    stopped: bool = False
    lost: bool = False
    explained: bool = False
    cause: str = ""
    yarn: str = ""
    taken: bool = False
    tail: tuple[str, ...] = ()
    time: float = 0.0
    host: str = ""
    addr: str = ""
    rank: int | None = None
    result: str = ""  # tfyarn.run: the function's return value or exception (callfn)
    memory_mb: int = 0  # killed for exceeding its memory: the container's size (else 0)

    @property
    def failed(self) -> bool:
        return self.code != 0 or self.stopped or self.lost


NEVER_REPORTED = TaskEnd(None, "never reported")


@dataclass(frozen=True)
class StepReport(Record):
    """`steps/<t>`: the task's last reported training step (`tfyarn.progress`), when
    (its host's clock), steps/s since its previous report, its numbers (loss, ...), and
    the first step its process reported, when, and the steps it said training runs
    (`progress(step, total=)`, for an ETA)."""

    step: int
    time: float
    rate: float = 0.0
    metrics: Mapping[str, float] = field(default_factory=dict)
    first: int = 0  # the process's first reported step (where it resumed from)
    first_time: float = 0.0  # and when
    total: int | None = None
    LATER = frozenset({"total"})


@dataclass(frozen=True)
class Started(Record):
    """`started/<t>`: the task's user process runs (its pid, on its host's clock), and
    when its launcher's process started, registered and read the cluster spec (the
    milestones of a gang's start, epoch seconds; None from a launcher before #46)."""

    pid: int
    time: float
    launched: float | None = None
    registered: float | None = None
    cluster: float | None = None
    LATER = frozenset({"launched", "registered", "cluster"})


@dataclass(frozen=True)
class Cluster(Record):
    """`cluster`: every task's address by role, in index order (TF_CONFIG's cluster), and
    the attempt the gang runs (TFYARN_ATTEMPT: a gang that skein started from the spec
    for a later ApplicationMaster attempt cannot know it from its env)."""

    roles: Mapping[str, tuple[str, ...]]
    attempt: int | None = None  # None: a driver before #45; the launcher's --attempt holds
    LATER = frozenset({"attempt"})


@dataclass(frozen=True)
class Rank:
    """A process's place in an allreduce job, as Horovod and torch.distributed count it."""

    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    host: str


@dataclass(frozen=True)
class RankTable(Record):
    """`ranks` (allreduce jobs): each task's rank, torch's master address (rank 0's
    reserved port) and Horovod's gloo rendezvous (tensorflow-mpi only)."""

    ranks: Mapping[str, Rank]
    master: str
    rendezvous: str | None = None


@dataclass(frozen=True)
class JobTasks(Record):
    """`tasks`: every task of the job, put by the driver first."""

    tasks: tuple[str, ...]


@dataclass(frozen=True)
class TensorBoard(Record):
    """`tensorboard`: the side task's URL once it answers, or why it did not start."""

    url: str | None = None
    error: str | None = None

    def announce(self) -> str:
        """The line el_submit prints about it."""
        if self.url:
            return f"TensorBoard: {self.url}"
        return f"TensorBoard did not start (the job goes on): {self.error}"


# ---------------------------------------------------------------- attempts and outcome


@dataclass(frozen=True)
class Attempt(Record):
    """How one earlier attempt ended (a restart followed): its 0-based number, state,
    message, the deciding task and cause, and each task's end."""

    attempt: int
    state: str
    message: str
    task: str | None = None
    cause: str | None = None
    tasks: Mapping[str, TaskEnd] = field(default_factory=dict)
    grown: str = ""  # the memory the next attempt was given after a memory kill (words)

    def words(self) -> str:
        """`attempt 1: FAILED: worker:0 exited with code 1`."""
        return f"attempt {self.attempt + 1}: {self.state}: {self.message}"


@dataclass(frozen=True)
class Wanted(Record):
    """`attempts`: the gang the driver last started, its attempt (0 before any restart;
    locally the gang's number), and how each earlier attempt ended."""

    attempt: int = 0
    gang: int = 0
    earlier: tuple[Attempt, ...] = ()


@dataclass(frozen=True)
class AttemptTime(Record):
    """One attempt as the driver timed it (wall clock, the driver's): when its gang was
    asked for and when it ended, how, the steps its tasks reported (`tfyarn.progress`:
    the first and highest seen, and when), each task's steps/s at the end, and the time
    it lost: from its failure back to when it had reached the step the next attempt
    resumed from (work done again)."""

    attempt: int
    start: float
    end: float
    state: str
    cause: str | None = None
    first_step: int | None = None
    last_step: int | None = None
    first_at: float | None = None
    last_at: float | None = None
    lost_s: float = 0.0
    rates: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PreemptionNotice(Record):
    """`preempting/<n>` (a gang's): YARN's n-th preemption notice naming containers of the
    gang, as the driver passes it on: when the RM gave it (epoch seconds), the tfyarn
    containers it names, and whether YARN will take them whatever the application does
    (strict) or asks them back (negotiable: taken unless as much is given back)."""

    at: float
    containers: tuple[str, ...]
    strict: bool = True

    @classmethod
    def from_am(cls, raw: str, ids: Mapping[str, str]) -> PreemptionNotice:
        """The RM's notice as skein's AM puts it (patch 0005: JSON with the RM's time in
        ms, "strict" and "negotiable" lists of skein container ids), with the containers
        of `ids` (skein id -> tfyarn container) it names; RecordError if unreadable."""
        try:
            told = json.loads(raw)
            strict, negotiable = list(told["strict"]), list(told["negotiable"])
            at = float(told["time"]) / 1000
        except (ValueError, KeyError, TypeError) as exc:
            raise RecordError(f"skein:preemption: not the AM's notice ({exc!r}): "
                              f"{raw[:200]!r}") from None
        named = sorted({ids[i] for i in strict + negotiable if i in ids})
        return cls(at, tuple(named), any(i in ids for i in strict))


@dataclass(frozen=True)
class TaskSeries(Record):
    """One task's reports in one attempt, down-sampled (`policy.StepLog`): when (the
    task's clock), its step, and each metric it reported, aligned with `times` (NaN where
    a report lacked it)."""

    times: tuple[float, ...] = ()
    steps: tuple[int, ...] = ()
    metrics: Mapping[str, tuple[float, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class StepSamples(Record):
    """An attempt's step log (`policy.StepLog`) as kept: when its highest step moved,
    each task's first step and when, each task's last rate, each task's series of
    reports, and the steps the tasks said training runs (`progress(total=)`)."""

    times: tuple[float, ...] = ()
    steps: tuple[int, ...] = ()
    first_steps: Mapping[str, int] = field(default_factory=dict)
    first_times: Mapping[str, float] = field(default_factory=dict)
    rates: Mapping[str, float] = field(default_factory=dict)
    series: Mapping[str, TaskSeries] = field(default_factory=dict)
    total: int | None = None
    LATER = frozenset({"series", "total"})


@dataclass(frozen=True)
class CourseSoFar(Record):
    """What one ApplicationMaster attempt leaves for the next: the job's course up to
    now (kept by the driver in the user's private HDFS dir while the job runs, read by
    the driver of a later AM attempt, which resumes the job as a restart). `attempt` is
    the task attempt then running (0-based), `spans` the attempts timed so far, each with
    its step log in `logs`, and `running` the running attempt's step log."""

    am_attempt: int  # the ApplicationMaster attempt that wrote it (1 first)
    am_host: str
    began: float  # the job's start, wall clock
    attempt: int
    attempt_began: float
    earlier: tuple[Attempt, ...] = ()
    spans: tuple[AttemptTime, ...] = ()
    logs: tuple[StepSamples, ...] = ()
    running: StepSamples = field(default_factory=StepSamples)
    memory: Mapping[str, int] = field(default_factory=dict)  # MB by role (--memory-growth)


@dataclass(frozen=True)
class Goodput(Record):
    """What failures cost a job: its wall time, the useful training time in it (the
    time its tasks' steps moved, less what was done again after a restart; None when no
    task reported steps), and each attempt's timing."""

    wall_s: float
    useful_s: float | None
    attempts: tuple[AttemptTime, ...] = ()

    @property
    def ratio(self) -> float | None:
        """Useful training time / wall time."""
        if self.useful_s is None or self.wall_s <= 0:
            return None
        return min(1.0, self.useful_s / self.wall_s)


@dataclass(frozen=True)
class Training(Record):
    """`training`: the job's training so far, put by the driver as its tasks' steps move
    and kept in its page: every attempt's timing (`goodput.attempts`, the running one
    last, its end `now`, its state RUNNING) and step log (`logs`, aligned). What the job
    page's plots, the history listing's final metric and `Job.metrics()` read."""

    goodput: Goodput
    logs: tuple[StepSamples, ...] = ()
    began: float = 0.0  # the job's start, wall clock



@dataclass(frozen=True)
class Outcome(Record):
    """How a job (or one attempt of it) ended and why (`status`, once final): `task`,
    `code`, `tail` name the task that decided it, `cause` whether that failure may be
    retried (None: no task failure decided it), `tasks` each task's end, `attempts` the
    earlier attempts (restarts), `goodput` the attempts' timing (final status only)."""

    state: str
    message: str
    task: str | None = None
    code: int | None = None
    tail: tuple[str, ...] = ()
    tasks: Mapping[str, TaskEnd] = field(default_factory=dict)
    cause: str | None = None
    attempt: int = 0
    attempts: tuple[Attempt, ...] = ()
    goodput: Goodput | None = None  # the final status's: each attempt timed

    def describe(self, job: str, state: str | None = None) -> list[str]:
        """`JOB STATE: message`, then the deciding task's stderr excerpt."""
        return [f"{job} {state or self.state}: {self.message}", *self.excerpt()]

    def excerpt(self) -> list[str]:
        """The deciding task's stderr excerpt, indented under its heading: the same
        words in a client's failure message and in YARN's diagnostics (what a client
        that never read the final status shows)."""
        if not self.tail:
            return []
        return [f"last stderr lines of {self.task}:", *(f"  {line}" for line in self.tail)]

    def summary(self) -> Attempt:
        """This attempt as an earlier one, once a restart follows it."""
        return Attempt(self.attempt, self.state, self.message, self.task, self.cause,
                       self.tasks)


# ---------------------------------------------------------------- the job's page, and its history


@dataclass(frozen=True)
class TaskRow:
    """One task on the job's page: where it ran, its state's words, its exit code and
    reason, its log's link and its last `tfyarn.progress` report (`step 1200 (35.2/s)`)."""

    task: str
    addr: str
    state: str
    detail: str
    log: str | None
    step: str = ""


@dataclass(frozen=True)
class Milestone:
    """A moment of a job's course on the driver's or a launcher's clock (epoch seconds):
    `driver`, `gang 0 asked`, `gang 0 user code`, `verdict`... (`scripts/bench.py --yarn`
    turns them into the time of each phase)."""

    name: str
    at: float


@dataclass(frozen=True)
class Milestones(Record):
    """`milestones`: the driver's moments so far, in order."""

    marks: tuple[Milestone, ...]


@dataclass(frozen=True)
class JobView(Record):
    """What a job's page shows: read from the store while the job runs, and saved when it
    has ended (its history: `tfyarn history`, `tfyarn status APP --tasks` afterwards).
    `started`/`ended` are epoch seconds (the driver's clock); `ended` is None while it
    runs."""

    name: str
    app_type: str
    job_id: str
    state: str
    elapsed: str
    attempt: int
    attempts: int
    rows: tuple[TaskRow, ...]
    message: str = ""
    failing: str | None = None
    tail: tuple[str, ...] = ()
    earlier: tuple[str, ...] = ()
    tensorboard: str | None = None
    refresh: bool = True
    goodput: tuple[str, ...] = ()  # the final status's goodput summary
    user: str = ""
    queue: str = ""
    started: float = 0.0
    ended: float | None = None
    view_acls: tuple[str, ...] = ()  # --view-acls: who else `tfyarn history` shows it to
    milestones: tuple[Milestone, ...] = ()  # where the job's time went, in order
    training: Training | None = None  # steps, metrics and attempts, for the plots

    LATER = frozenset({"view_acls", "milestones", "training"})
