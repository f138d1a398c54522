"""The job's pure decisions, shared by both backends: outcome, liveness, exit codes, messages.

Owns: how task ends combine into the job's outcome, when a silent launcher counts as
lost, which exit code each ending gets, how a failure is worded (stderr excerpt,
signal names, task table), and what failures cost (goodput, from reported steps).
Must not do I/O or read clocks: callers pass `now` (times are only formatted here).
Long because every rule reads the same records; each kind of decision is a section.
"""

from __future__ import annotations

import math
import re
import signal
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tfyarn.core.appreport import FinalStatus
from tfyarn.core.errors import SIGNAL_BASE
from tfyarn.core.records import (
    Attempt,
    AttemptTime,
    Cause,
    Goodput,
    Outcome,
    StepReport,
    StepSamples,
    TaskEnd,
    TaskSeries,
)
from tfyarn.core.tfconfig import Task, natural_name

if TYPE_CHECKING:
    from tfyarn.core.jobspec import JobSpec

# ---------------------------------------------------------------- stderr excerpts

LINE_MAX = 300  # characters of one stderr line kept in messages (logs keep everything)
EXCERPT_FRAMES = 12  # traceback lines kept before the exception line
EXCERPT_AFTER = 8  # lines kept from the exception line on
EXCERPT_PLAIN = 20  # without a traceback: the last lines
TRACEBACK = "Traceback (most recent call last)"


def cut_line(text: str) -> str:
    """One line, bounded: a 10 MB line becomes its start and a count."""
    text = text.rstrip("\r\n")
    if len(text) <= LINE_MAX:
        return text
    return f"{text[:LINE_MAX]} ... [{len(text) - LINE_MAX} more characters]"


def stderr_excerpt(lines: Sequence[str]) -> tuple[str, ...]:
    """What a failure message shows of a task's stderr: from the last Python traceback
    when there is one (its last frames and the exception), else the last lines."""
    lines = [cut_line(x) for x in lines]
    starts = [i for i, x in enumerate(lines) if x.startswith(TRACEBACK)]
    if not starts:
        return tuple(lines[-EXCERPT_PLAIN:])
    tb = lines[starts[-1]:]
    exc = next((i for i, x in enumerate(tb[1:], 1) if x and not x[0].isspace()), len(tb))
    frames = tb[1:exc]
    skipped = len(frames) - EXCERPT_FRAMES
    after = tb[exc:exc + EXCERPT_AFTER]
    more = len(tb) - exc - len(after)
    return (tb[0], *([f"  ... [{skipped} traceback lines]"] if skipped > 0 else []),
            *frames[-EXCERPT_FRAMES:], *after, *([f"... [{more} more lines]"] if more > 0 else []))


# What a failed task's stderr excerpt shows that tfyarn can explain: words that must all
# be on one line, and what the failure message adds. Keras 3 (tf.keras in TF >= 2.16)
# fails `model.fit` under MultiWorkerMirroredStrategy and ParameterServerStrategy, and
# Horovod's DistributedGradientTape on its variables; Keras 2 (tf-keras) runs them.
KERAS_2 = ("Keras 3 cannot run this under a distribution strategy (or Horovod); Keras 2 "
           "can: install tf-keras in the job's environment (pip install 'tfyarn[keras]') "
           "and pass --env TF_USE_LEGACY_KERAS=1")
HINTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("ValueError", "Attempt to convert a value (PerReplica"), KERAS_2),
    (("AttributeError", "object has no attribute 'ref'"), KERAS_2),
)


def hint(tail: Sequence[str]) -> str:
    """What to do about a failure whose stderr tfyarn recognizes (empty: none)."""
    return next((f" ({words})" for needles, words in HINTS
                 if any(all(n in line for n in needles) for line in tail)), "")


# ---------------------------------------------------------------- task ends


def signal_of(code: int | None) -> signal.Signals | None:
    """The signal that ended a task: negative codes (Popen) or a shell's 128 + N."""
    if code is None:
        return None
    n = -code if code < 0 else code - SIGNAL_BASE if SIGNAL_BASE < code < SIGNAL_BASE + 65 else 0
    try:
        return signal.Signals(n) if n else None
    except ValueError:
        return None


def describe_exit(task: Task | str, rec: TaskEnd) -> str:
    """`worker:1 exited with code 3`, `... was killed by SIGKILL`, `... launcher lost (...)`,
    `... was preempted by YARN (...)`."""
    code = rec.code
    if rec.rank is not None:
        task = f"{task} (rank {rec.rank})"
    if rec.explained:  # the launcher said what happened (docker's memory kill, a
        return f"{task}: {rec.reason}"  # node that cannot run the task's image)
    if rec.yarn:
        phrase = rec.reason
        return f"{task} {phrase}" if phrase.startswith("was ") else f"{task}: {phrase}"
    if rec.lost:
        return f"{task}: launcher lost ({rec.reason})"
    if rec.stopped:
        return f"{task} was stopped ({rec.reason})"
    sig = signal_of(code)
    if sig is not None:
        how = "" if code is not None and code < 0 else f" (exit code {code})"
        return f"{task} was killed by {sig.name}{how}"
    return f"{task} exited with code {code}"


def merge_records(exits: Mapping[Task, TaskEnd], lost: Mapping[Task, TaskEnd],
                  ends: Mapping[Task, TaskEnd]) -> dict[Task, TaskEnd]:
    """One record per task. A launcher's exit record wins over a lost record; YARN's word
    on a container it ended (`ends`) wins over both, unless the task's own exit code was
    reported: a launcher that reports "stopped by SIGTERM" was stopped by that very kill."""
    out = {**lost, **exits}
    for task, rec in ends.items():
        if task not in exits or needs_yarn_word(exits[task]):
            out[task] = replace(rec, time=out.get(task, rec).time)
    return out


def needs_yarn_word(rec: TaskEnd | None) -> bool:
    """A failure the launcher cannot explain (stopped from outside, lost, killed by a
    signal): on YARN the container's end says what happened (a memory kill, permanent,
    is a SIGTERM then SIGKILL to the container; a preemption is retryable). Not a task
    SIGKILLed while its launcher heard nothing: YARN's kills start with a SIGTERM to the
    whole container, which the launcher hears too, so that SIGKILL was not YARN's."""
    if rec is None or rec.yarn:
        return False
    if rec.stopped or rec.lost:
        return True
    sig = signal_of(rec.code)
    return sig is not None and sig != signal.SIGKILL


# ---------------------------------------------------------------- failure causes

# What YARN says, through skein's container exit message, about a container it ended
# (exit statuses -100 lost/aborted, -101 disks, -102 preempted, -103/-104 memory):
# words to find (lower case), the cause, and how the task's end is told. Captured on
# Hadoop 3.3.6 (tests/fixtures): a memory kill reaches skein as just "717.0 MB of 256 MB
# physical memory used"; a node lost, or decommissioned (gracefully, after its timeout),
# as "Container released on a *lost* node"; a preemption as "Container preempted by
# scheduler". Disks: NodeManager's ContainerLaunch wording ("Most of the disks failed.").
PREEMPTED = (("preempt",), Cause.RETRYABLE, "was preempted by YARN")
LOST_NODE = (("lost* node",), Cause.RETRYABLE, "was lost with its node")
DISKS = (("disks failed",), Cause.RETRYABLE, "was lost to a disk failure on its node")
# skein's words for a container its AM could not start (tfyarn's skein gives a NodeManager
# that does not answer 20 s, patch 0006, and keeps its node out after, patch 0009)
NOT_STARTED = (("failed to start",), Cause.RETRYABLE,
               "was never started: its node's NodeManager did not answer")
YARN_ENDS: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("physical memory used", "virtual memory used", "exceeding memory",
      "beyond physical memory", "beyond virtual memory", "exceeded memory", "memory limit"),
     Cause.PERMANENT, "memory"),
    PREEMPTED, LOST_NODE, DISKS, NOT_STARTED,
    (("failed during execution",), Cause.RETRYABLE,
     "was killed: its container's process died before reporting (kill -9, OOM killer)"),
)
TAKEN_BACK = (PREEMPTED, LOST_NODE, DISKS, NOT_STARTED)  # the cluster's doing, not the task's


MEMORY_KILLED = "container killed for exceeding its memory"


def memory_flag_for(role: str) -> str:
    """The flag that sizes `role`'s containers: -pm for ps, -wm for the rest."""
    return "-pm" if role == "ps" else "-wm"


def memory_phrase(flag: str, memory_mb: int) -> str:
    return f"{MEMORY_KILLED}: raise {flag} (now {memory_mb} MB)"


TOKEN_EXPIRED = ("SecretManager$InvalidToken)", "expired")  # Hadoop's client, in the task's
# stderr, when the NameNode refuses a delegation token past its max lifetime (captured:
# tests/fixtures/hadoop-3.3.6-secure/task-stderr-token-expired.txt)


def token_expired(line: str) -> bool:
    """Whether a task's stderr line is Hadoop's refusal of an expired delegation token."""
    return all(word in line for word in TOKEN_EXPIRED)


def token_end(rec: TaskEnd) -> TaskEnd:
    """The exit record of a task that failed after its HDFS delegation token expired: not
    retried (a restart has the same tokens); the one line says what to pass."""
    return replace(rec, cause=Cause.PERMANENT, explained=True,
                   reason=f"exited with code {rec.code} after its HDFS delegation token "
                          "expired (the NameNode's dfs.namenode.delegation.token.max-lifetime "
                          "ends every token; a job that runs longer needs its own login): "
                          "resubmit with --principal YOU@REALM --keytab KEYTAB")


def memory_end(rec: TaskEnd, flag: str, memory_mb: int, limit_mb: int) -> TaskEnd:
    """The exit record of a task the kernel killed at its docker container's memory
    limit (`limit_mb`: its share of the YARN container): never retried, as YARN's own
    memory kill."""
    return replace(rec, cause=Cause.PERMANENT, explained=True, memory_mb=memory_mb,
                   reason=f"{memory_phrase(flag, memory_mb)} [docker: OOMKilled at "
                          f"{limit_mb} MB]")


DOCKER_NO_GPU = 'could not select device driver "" with capabilities: [[gpu]]'  # Docker
# Engine's refusal of `--gpus` without NVIDIA's container toolkit (captured in the test)


def docker_gpu_end(rec: TaskEnd, gpus: int, host: str) -> TaskEnd | None:
    """The exit record of a task whose `docker run --gpus` the node's engine refused (it
    cannot pass GPUs: no NVIDIA Container Toolkit), else None. Not retried: a restart
    asks the same engine."""
    if rec.code != 125 or not any(DOCKER_NO_GPU in line for line in rec.tail):
        return None
    return replace(rec, cause=Cause.PERMANENT, explained=True,
                   reason=f"-wg {gpus}: node {host}'s Docker Engine cannot give a container "
                          "GPUs (docker: could not select device driver for [[gpu]]: no "
                          "NVIDIA Container Toolkit there); ask the cluster's admins to "
                          "install it, or run with -wg 0")


def yarn_end(message: str, memory_mb: int, memory_flag: str, wall_time: float,
             node: str = "") -> TaskEnd:
    """The record of a task whose container YARN ended before its launcher reported,
    from skein's exit message: a memory kill says which flag to raise, a lost node is
    named (`node`: the container's host, where YARN said it)."""
    low = message.lower()
    cause, phrase = Cause.RETRYABLE, f"was lost: its container ended ({message.strip()})"
    found = next((end for end in YARN_ENDS if any(w in low for w in end[0])), None)
    if found is not None:
        _, cause, phrase = found
    if phrase == "memory":
        phrase = memory_phrase(memory_flag, memory_mb)
    if node:
        phrase = phrase.replace("its node", f"its node {node}")
    return TaskEnd(None, lost=True, yarn=message.strip(), cause=cause,
                   taken=found in TAKEN_BACK, time=wall_time,
                   memory_mb=memory_mb if phrase.startswith(MEMORY_KILLED) else 0,
                   reason=f"{phrase} [YARN: {cut_line(message.strip())}]")


def am_end(diagnostics: str, am_hosts: Sequence[str] = ()) -> str | None:
    """How the job ended when YARN ended its last ApplicationMaster's container (its node
    lost, decommissioned or preempted) and no AM attempt was left: the driver went with
    it, so no task outcome was written and YARN's application diagnostics are all there
    is. `am_hosts`: where each AM attempt ran, as the client saw them. None for other
    ends."""
    if "AM Container for" not in diagnostics:
        return None
    low = diagnostics.lower()
    how = next((how for words, _, how in (PREEMPTED, LOST_NODE)
                if any(w in low for w in words)), None)
    if how is None:
        return None
    hosts = list(am_hosts)
    where = f" {hosts[-1]}" if hosts else ""
    times = re.search(r"failed (\d+) times", diagnostics)
    n = int(times.group(1)) if times else 1
    before = ""
    if n > 1:
        earlier = ", ".join(hosts[:-1]) or "unknown"
        before = (f" (it was the application's attempt {n} of {n}; the one before was lost "
                  f"on {earlier} and the job resumed)")
    yarn = " ".join(diagnostics.split("For more detailed output")[0].split())
    return (f"the ApplicationMaster {how.replace('its node', f'its node{where}')}{before}, "
            "and every task ended with it, with no ApplicationMaster attempt left "
            "(--am-attempts, capped by the cluster's yarn.resourcemanager.am.max-attempts): "
            f"resubmit the job [YARN: {cut_line(yarn)}]")


def cause_of(rec: TaskEnd) -> str:
    """Retryable or permanent, as Kubeflow's ExitCode policy splits them: killed by a
    signal, lost, stopped from outside, or exit codes 128-255 are retryable; exit codes
    1-127 (the code's own failure) are permanent; YARN's word wins when there is one."""
    if rec.cause:
        return rec.cause
    code = rec.code
    if rec.lost or rec.stopped or code is None:
        return Cause.RETRYABLE
    return Cause.RETRYABLE if code < 0 or SIGNAL_BASE <= code <= 255 else Cause.PERMANENT


def decide(spec: JobSpec, records: Mapping[Task, TaskEnd]) -> Outcome | None:
    """The job's outcome given the task ends seen so far, or None while it must go on.

    `records` holds exit records and lost-launcher records. The earliest task that
    failed (non-zero, killed, lost, or stopped by someone other than the driver) fails
    the job; tensorflow-ps with `-x True` succeeds once the chief exits 0 before any
    failure; otherwise every task must have been seen to exit 0: a task whose exit was
    never observed never counts as a success.
    """
    failed = [(r.time, str(t), t) for t, r in records.items() if r.failed]
    chief = records.get(Task("chief", 0))
    x_true = spec.app_type == "tensorflow-ps" and spec.stop_ps_when_done
    if x_true and chief is not None and not chief.failed \
            and (not failed or chief.time <= min(failed)[0]):
        return Outcome(FinalStatus.SUCCEEDED,
                       "chief:0 finished; the other tasks were stopped (-x True)")
    if failed:
        _, _, task = min(failed)
        return failed_by(task, records[task])
    n = len(spec.tasks())
    if len(records) == n:
        return Outcome(FinalStatus.SUCCEEDED, f"all {plural(n, 'task')} exited with code 0")
    return None


def failed_by(task: Task, rec: TaskEnd) -> Outcome:
    """The job's failure, decided by `task`'s end."""
    return Outcome(FinalStatus.FAILED, describe_exit(task, rec) + hint(rec.tail), str(task),
                   rec.code,
                   rec.tail, cause=cause_of(rec))


# What a task's stderr says when it failed because a peer went away (TF's collectives and
# gRPC, gloo, torch.distributed): its failure follows from the peer's
PEER_GONE = ("UnavailableError", "Connection reset by peer", "Socket closed",
             "Connection closed by peer", "failed to connect to all addresses")


def lost_a_peer(rec: TaskEnd | None) -> bool:
    """Whether a task exited with an error that a peer's death causes (killed by the
    launcher's kill -9, a lost node): the peer's end, once known, decides instead."""
    return rec is not None and bool(rec.code) and not rec.lost and \
        any(needle in line for line in rec.tail for needle in PEER_GONE)


def blame_the_peer(task: Task, rec: TaskEnd, gone: Mapping[Task, TaskEnd]) -> Outcome | None:
    """A failure of `task` that followed a peer's death is decided by that peer (the first
    of `gone`, the other tasks YARN or the driver saw end abnormally); None when `task`'s
    failure is not one, or no peer is gone."""
    if not lost_a_peer(rec):
        return None
    peers = sorted((str(t), t) for t, r in gone.items() if t != task and r.failed)
    if not peers:
        return None
    peer = peers[0][1]
    blamed = failed_by(peer, gone[peer])
    return replace(blamed, message=f"{blamed.message} ({task} then failed on losing it)")


# ---------------------------------------------------------------- restarts


def restart_after(spec: JobSpec, outcome: Outcome, attempt: int) -> bool:
    """Whether the gang of `attempt` (0-based), ended by `outcome`, is followed by a new
    one: a task failure (never a kill, --timeout or -wait_time), attempts left, and a
    cause --restart-on accepts."""
    return (outcome.state == FinalStatus.FAILED and outcome.cause is not None
            and attempt < spec.max_restarts
            and (spec.restart_on == "any" or outcome.cause == Cause.RETRYABLE))


@dataclass(frozen=True)
class Growth:
    """A memory kill answered by --memory-growth: the role's next size, and the words."""

    role: str
    memory_mb: int
    words: str  # `worker memory 2048 -> 3072 MB after worker:1 was killed for memory`


def grow_memory(spec: JobSpec, outcome: Outcome, rec: TaskEnd | None,
                sizes: Mapping[str, int]) -> tuple[Outcome, Growth | None]:
    """After a memory kill, with --memory-growth: the role's next size on its ladder,
    and the outcome made retryable (restarts still bound it). At the ladder's top (the
    queue's largest container) the kill stays permanent and the message names the size."""
    if spec.memory_growth is None or rec is None or not rec.memory_mb or not outcome.task:
        return outcome, None
    role = spec.container_of(Task.parse(outcome.task)).role
    ladder = spec.memory_sizes(role)
    now = sizes.get(role, ladder[0])
    larger = [mb for mb in ladder if mb > now]
    if not larger:
        ceiling = spec.yarn.max_memory_mb
        why = (f"the queue's largest container is {ceiling} MB" if ceiling
               else "no queue limit is known to grow under: memory grows on YARN only, "
                    "where the ResourceManager says the queue's largest container")
        return replace(outcome, message=f"{outcome.message} (--memory-growth {spec.memory_growth:g}"
                       f" grew it as far as it could: {now} MB; {why})"
                       ), None
    words = (f"{role} memory {now} \u2192 {larger[0]} MB after "
             f"{outcome.task} was killed for memory ({memory_flag_for(role)} x --memory-growth "
             f"{spec.memory_growth:g})")
    return replace(outcome, cause=Cause.RETRYABLE), Growth(role, larger[0], words)


def am_lost(am_attempt: int, host: str, attempt: int) -> Outcome:
    """The task attempt a lost ApplicationMaster was running, as a later AM attempt's
    driver sees it: failed, retryable (as a task lost with its node), so --max-restarts
    decides whether the job resumes; `host` is where the lost AM ran ("" unknown)."""
    where = f" on {host}" if host else ""
    return Outcome(FinalStatus.FAILED,
                   f"the ApplicationMaster was lost (application attempt {am_attempt}{where}; "
                   "its node died, or YARN ended its container)",
                   cause=Cause.RETRYABLE, attempt=attempt)


def restart_words(spec: JobSpec, attempt: int, why: str, grown: str = "") -> str:
    """`attempt 2/3: restarting after worker:1 was preempted by YARN`, or after a memory
    kill `attempt 2/3: worker memory 2048 \u2192 3072 MB after worker:1 was killed for
    memory (...)` (`grown`: Growth.words); `attempt` is the new gang's 0-based number
    (TFYARN_ATTEMPT), `why` how the previous one ended."""
    if grown:
        return f"attempt {attempt + 1}/{spec.attempts}: {grown}"
    return f"attempt {attempt + 1}/{spec.attempts}: restarting after {why}"


def final_message(spec: JobSpec, outcome: Outcome, earlier: Sequence[Attempt]) -> str:
    """The last attempt's message, naming every earlier attempt's failure, and why a
    failure was not retried when restarts were allowed."""
    msg = outcome.message
    if outcome.state == FinalStatus.FAILED and outcome.cause == Cause.PERMANENT \
            and spec.max_restarts \
            and spec.restart_on != "any" and outcome.attempt < spec.max_restarts:
        msg += (" (not restarted: exit codes 1-127 and memory kills are permanent; "
                "--restart-on any retries them)")
    if earlier:
        before = "; ".join(f"attempt {a.attempt + 1}: {a.message}" for a in earlier)
        msg += f" [attempt {outcome.attempt + 1}/{spec.attempts}; earlier: {before}]"
    return msg


# ---------------------------------------------------------------- gangs that wait


@dataclass(frozen=True)
class GangWait:
    """What YARN has given a gang that is not complete: containers held (allocated),
    containers asked for and not given, and seconds since the last one was given."""

    held: int
    asked: int
    idle_s: float


def patience_s(base_s: float, preempted: bool, jitter: float) -> float:
    """How long a partial gang waits for the rest before giving back what it holds.
    A job YARN preempted knows another queue is owed what it holds, so it gives back
    first (half the patience); `jitter` (0.8-1.2, random) keeps two jobs from giving
    back in step."""
    return base_s * (0.5 if preempted else 1.0) * jitter


def give_back(wait: GangWait | None, patience: float) -> Outcome | None:
    """A gang holding part of its containers, given nothing more for `patience`
    seconds, gives them back: two jobs each holding part of what the other needs (or a
    queue owed its share, but no more than its share) would otherwise wait for ever."""
    if wait is None or not wait.held or not wait.asked or wait.idle_s < patience:
        return None
    total = wait.held + wait.asked
    return Outcome(FinalStatus.FAILED,
                   f"the gang was given {wait.held} of {plural(total, 'container')} "
                   f"and nothing more for {wait.idle_s:.0f} s (another job or queue holds the "
                   "rest): giving them back", cause=Cause.REGROUP)


def regroups(outcome: Outcome, rec: TaskEnd | None, published: bool) -> bool:
    """Whether a gang that ended with `outcome` is asked for again without spending a
    restart: it gave its containers back, or YARN took one back (preempted, node lost
    or decommissioned, disk) before the cluster spec was out, so no user code ran."""
    if outcome.cause == Cause.REGROUP:
        return True
    return not published and rec is not None and rec.taken


def backoff_s(base_s: float, given_back: int, jitter: float) -> float:
    """How long a gang that gave its containers back waits before asking again: half
    the patience, doubling with each give-back up to twice it (the job that keeps
    giving back leaves the cluster to the one that runs); `jitter` 0.5-1.0."""
    return min(base_s * 2.0 ** (given_back - 2), 2.0 * base_s) * jitter


# ---------------------------------------------------------------- liveness


@dataclass
class Liveness:
    """When each registered task's heartbeat last changed, on the driver's own clock
    (so clocks of other hosts never matter); a task silent past the timeout is lost."""

    timeout_s: float
    seen: dict[Task, tuple[str | None, float]] = field(default_factory=dict)

    def observe(self, task: Task, beat: str | None, now: float) -> None:
        last = self.seen.get(task)
        if last is None or last[0] != beat:
            self.seen[task] = (beat, now)

    def silent(self, now: float, ended: Iterable[Task]) -> dict[Task, float]:
        """Tasks without an exit record whose heartbeat is older than the timeout."""
        done = set(ended)
        return {t: now - at for t, (_, at) in self.seen.items()
                if t not in done and now - at > self.timeout_s}


@dataclass
class Stalls:
    """When each reporting task's step last moved, on the driver's clock (`tfyarn.progress`
    reports); one whose step stood still past --stall-timeout is stalled. A task that
    never reported is never judged here (heartbeats and exits judge it, as before)."""

    timeout_s: float | None
    seen: dict[Task, tuple[int, float]] = field(default_factory=dict)

    def observe(self, task: Task, step: int, now: float) -> None:
        last = self.seen.get(task)
        if last is None or last[0] != step:
            self.seen[task] = (step, now)

    def stalled(self, now: float, ended: Iterable[Task]) -> dict[Task, tuple[int, float]]:
        """Still-running reporting tasks whose step stood still past the timeout: their
        last step and for how long."""
        if self.timeout_s is None:
            return {}
        done = set(ended)
        return {t: (step, now - at) for t, (step, at) in self.seen.items()
                if t not in done and now - at > self.timeout_s}


def stall_outcome(stalled: Mapping[Task, tuple[int, float]], timeout_s: float) -> Outcome:
    """The failure of a job whose training stopped moving while its processes lived (a
    hung collective, a deadlocked input pipeline, a ps that stopped answering): retryable,
    so --max-restarts resumes it from its checkpoint."""
    tasks = sorted(stalled, key=lambda t: natural_name(str(t)))
    where = ", ".join(f"{t} at step {stalled[t][0]}" for t in tasks)
    idle = min(s for _, s in stalled.values())
    return Outcome(FinalStatus.FAILED, f"training stalled: {where}: no progress for {idle:.0f} s "
                   f"(--stall-timeout {timeout_s:g}) while the processes lived (a hung "
                   "collective, input pipeline or ps?): see the tasks' logs",
                   str(tasks[0]), cause=Cause.RETRYABLE)


# ---------------------------------------------------------------- goodput

STEP_SAMPLES = 4096  # an attempt's step samples kept (halved when full: a week-long job)
SERIES_POINTS = 2048  # an attempt's reports kept, all tasks together (halved per task)
SERIES_TASKS = 16  # tasks whose reports are kept, the first in task order (a 2,000-task
# job's page stays small; each task's last step and rate are kept for all)
SERIES_TASK_MAX = 512  # a task's share of SERIES_POINTS, at most
SHOWN_SAMPLES = 600  # an attempt's highest-step samples in the job's Training (its plots)
SHOWN_ATTEMPTS = 8  # the last attempts whose series the Training holds (a page's bound)


@dataclass
class Series:
    """One task's reports in one attempt, as they came (a heartbeat's), down-sampled:
    when a task holds more than its share, every other one is dropped (the last kept),
    so a week-long job's series stays as long as a minute's, evenly spread."""

    times: list[float] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    metrics: dict[str, list[float]] = field(default_factory=dict)

    def add(self, r: StepReport, cap: int) -> bool:
        """Whether `r` was new (not the same report read again)."""
        at = round(r.time, 2)
        if self.times and (r.step, at) == (self.steps[-1], self.times[-1]):
            return False
        n = len(self.times)
        self.times.append(at)
        self.steps.append(r.step)
        for name in r.metrics.keys() - self.metrics.keys():
            self.metrics[name] = [math.nan] * n
        for name, values in self.metrics.items():
            values.append(float(f"{r.metrics.get(name, math.nan):.6g}"))
        if len(self.times) > cap:
            self.times, self.steps = _halved(self.times), _halved(self.steps)
            self.metrics = {k: _halved(v) for k, v in self.metrics.items()}
        return True

    def kept(self) -> TaskSeries:
        return TaskSeries(tuple(self.times), tuple(self.steps),
                          {k: tuple(v) for k, v in self.metrics.items()})

    @classmethod
    def of(cls, kept: TaskSeries) -> Series:
        return cls(list(kept.times), list(kept.steps),
                   {k: list(v) for k, v in kept.metrics.items()})


def _halved(xs: list[Any]) -> list[Any]:
    return [*xs[:-1:2], xs[-1]]


@dataclass
class StepLog:
    """An attempt's training steps over time, on the tasks' clocks: when its highest
    reported step moved (samples, from the first step any task reported), each task's
    first reported step (where it resumed from), its last rate, its series of reports
    (down-sampled: `Series`), and the steps the tasks said training runs."""

    samples: list[tuple[float, int]] = field(default_factory=list)
    firsts: dict[str, tuple[int, float]] = field(default_factory=dict)  # step, time
    rates: dict[str, float] = field(default_factory=dict)
    series: dict[str, Series] = field(default_factory=dict)
    total: int | None = None
    news: int = 0  # new reports seen (whoever shows the log knows it changed)
    # the tasks whose series are kept, for this many firsts: sorted again only when a task
    # reports for the first time, not at every tick (2,000 tasks: half a tick's time)
    _kept: tuple[int, list[str]] = field(default_factory=lambda: (0, []), repr=False,
                                         compare=False)

    def observe(self, reports: Mapping[Task, StepReport]) -> None:
        """The tasks' latest reports; times are the tasks' own (the reports')."""
        if not reports:
            return
        named = {str(task): r for task, r in reports.items()}
        for name, r in named.items():
            self.firsts.setdefault(name, (r.first, r.first_time))
            self.rates[name] = r.rate
            self.total = r.total if r.total is not None else self.total
        if self._kept[0] != len(self.firsts):  # firsts only grow
            self._kept = (len(self.firsts), sorted(self.firsts, key=natural_name)[:SERIES_TASKS])
        kept = self._kept[1]
        cap = min(SERIES_POINTS // len(kept), SERIES_TASK_MAX)
        for task in kept:
            if (r := named.get(task)) is not None:
                self.news += self.series.setdefault(task, Series()).add(r, cap)
        for task in set(self.series) - set(kept):
            del self.series[task]
        if not self.samples:
            self.samples.append(min(((at, step) for step, at in self.firsts.values())))
        top = max(reports.values(), key=lambda r: r.step)
        if top.step > self.samples[-1][1]:
            self.samples.append((top.time, top.step))
            if len(self.samples) > STEP_SAMPLES:
                self.samples = _halved(self.samples)

    def shown(self, series: bool) -> StepSamples:
        """As the job's `Training` holds it: the highest step's samples thinned to
        SHOWN_SAMPLES (what a plot draws), each task's series only where `series`."""
        kept = self.kept()
        stride = max(1, math.ceil(len(kept.times) / SHOWN_SAMPLES))
        last = len(kept.times) - 1
        picked = [i for i in range(len(kept.times)) if i % stride == 0 or i == last]
        return replace(kept, times=tuple(kept.times[i] for i in picked),
                       steps=tuple(kept.steps[i] for i in picked),
                       series=kept.series if series else {})

    def reached(self, step: int) -> float | None:
        """When the attempt first reached `step` (None: it never did)."""
        return next((t for t, s in self.samples if s >= step), None)

    def kept(self) -> StepSamples:
        """As kept for a later ApplicationMaster attempt (`CourseSoFar`) and in the
        job's `Training`."""
        samples, firsts = list(self.samples), dict(self.firsts)  # copies: the loop adds
        return StepSamples(tuple(t for t, _ in samples), tuple(s for _, s in samples),
                           {k: s for k, (s, _) in firsts.items()},
                           {k: t for k, (_, t) in firsts.items()}, dict(self.rates),
                           {k: v.kept() for k, v in list(self.series.items())}, self.total)

    @classmethod
    def of(cls, kept: StepSamples) -> StepLog:
        return cls(list(zip(kept.times, kept.steps, strict=True)),
                   {k: (s, kept.first_times.get(k, 0.0)) for k, s in kept.first_steps.items()},
                   dict(kept.rates), {k: Series.of(v) for k, v in kept.series.items()},
                   kept.total)


def attempt_time(attempt: int, start: float, end: float, outcome: Outcome | None,
                 log: StepLog) -> AttemptTime:
    """One attempt's timing (its lost time is known once the next one resumed); without
    an outcome, the running attempt's so far (state RUNNING)."""
    state, cause = (outcome.state, outcome.cause) if outcome is not None else ("RUNNING", None)
    if not log.samples:
        return AttemptTime(attempt, start, end, state, cause)
    first = min(step for step, _ in log.firsts.values())
    (first_at, _), (last_at, last) = log.samples[0], log.samples[-1]
    return AttemptTime(attempt, start, end, state, cause, first, last,
                       first_at, last_at, 0.0, dict(log.rates))


def goodput(spans: Sequence[tuple[AttemptTime, StepLog]], wall_s: float) -> Goodput:
    """Each attempt's time lost, and the job's useful training time: an attempt that a
    restart followed lost the time from the step the next one resumed from (its tasks'
    lowest first step) to its end; what it did before that was useful. None when no
    task reported steps."""
    times: list[AttemptTime] = []
    useful, reported = 0.0, False
    for i, (t, log) in enumerate(spans):
        if t.first_at is None:
            times.append(t)
            continue
        reported = True
        nxt = spans[i + 1][0] if i + 1 < len(spans) else None
        if nxt is None:
            useful += (t.last_at or t.first_at) - t.first_at
            times.append(t)
            continue
        resumed = nxt.first_step if nxt.first_step is not None else 0
        reached = log.reached(resumed)
        if reached is None:  # resumed past what was seen: only its idle tail was lost
            reached = t.last_at or t.first_at
        lost = max(0.0, t.end - reached)
        useful += max(0.0, t.end - t.first_at - lost)
        times.append(replace(t, lost_s=round(lost, 3)))
    return Goodput(round(wall_s, 3), round(useful, 3) if reported else None, tuple(times))


def goodput_lines(g: Goodput) -> list[str]:
    """The goodput summary: the ratio, then one line per attempt, numbered (the task
    tables head theirs `attempt N:`); times are the driver's wall clock, in the reader's
    local time. Nothing for a job whose tasks never reported steps: it reads as before."""
    if g.ratio is None:
        return []
    lines = [f"goodput {g.ratio:.0%}: {elapsed_words(g.useful_s or 0.0)} of useful training "
             f"in {elapsed_words(g.wall_s)}, by attempt:"]
    for a in g.attempts:
        how = f"{a.state} ({a.cause})" if a.cause else a.state
        steps = (f"steps {a.first_step}-{a.last_step}" if a.first_step is not None
                 else "no steps reported")
        lost = f", lost {elapsed_words(a.lost_s)}" if a.lost_s else ""
        rates = ", ".join(f"{t} {r:.1f}/s" for t, r in sorted(
            a.rates.items(), key=lambda item: natural_name(item[0])))
        lines.append(f"  {a.attempt + 1}. {_clock(a.start)}-{_clock(a.end)} {how}: "
                     f"{steps}{lost}" + (f"; steps/s {rates}" if rates else ""))
    return lines


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def lost_record(silent_s: float, wall_time: float) -> TaskEnd:
    why = (f"no heartbeat for {silent_s:.0f} s: its container or process died, froze or lost "
           "the network")
    return TaskEnd(None, why, lost=True, time=wall_time)


# ---------------------------------------------------------------- wording


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def elapsed_words(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def attempt_tables(outcome: Outcome) -> list[str]:
    """The task table; after restarts, one per attempt, each headed by how it ended;
    then the goodput summary (the final status's)."""
    more = goodput_lines(outcome.goodput) if outcome.goodput is not None else []
    if not outcome.attempts:
        return format_tasks(outcome.tasks) + more
    lines = []
    for a in outcome.attempts:
        lines.append(a.words())
        lines += [f"  {line}" for line in format_tasks(a.tasks)]
    lines.append(f"attempt {outcome.attempt + 1}: {outcome.state}")
    return lines + [f"  {line}" for line in format_tasks(outcome.tasks)] + more


def tasks_section(outcome: Outcome) -> list[str]:
    """`tasks:` and the attempt tables under it, indented: as a client prints them at
    the end and as YARN's diagnostics carry them (the same words either way)."""
    return ["tasks:", *(f"  {line}" for line in attempt_tables(outcome))]


def format_tasks(tasks: Mapping[str, TaskEnd]) -> list[str]:
    """One line per task, in natural order (the outcome's JSON keeps them sorted as
    text: worker:10 before worker:2): name, host, exit code and why it ended."""
    lines = []
    for name, t in sorted(tasks.items(), key=lambda item: natural_name(item[0])):
        code = "-" if t.code is None else str(t.code)
        note = f"lost: {t.reason}" if t.lost else f"stopped: {t.reason}" if t.stopped \
            else t.reason
        lines.append(f"{name:<12} {t.host or '-':<30} exit {code:<5} {note}".rstrip())
    return lines
