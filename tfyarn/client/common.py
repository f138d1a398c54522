"""What both client backends do alike while they watch a job (gateway side).

`local` and `yarn` differ in how they start and observe a job; what they tell the user
and how they react to signals is one code path: the one `say`, the id on stdout, the
news read from the job's store (job page, TensorBoard, a restart), the escalation from
an orderly stop to a forced one (one grace period, `timing.STOP_ASK_WAIT_S`), and the
JobFailed an ending becomes.
Must not know which backend it serves beyond the store both share.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass

from tfyarn.client.interrupts import Interrupts
from tfyarn.core.errors import JobFailed, StoreGone, exit_code
from tfyarn.core.jobspec import JobSpec
from tfyarn.core.records import Outcome, TensorBoard
from tfyarn.core.say import say
from tfyarn.core.timing import STOP_ASK_WAIT_S
from tfyarn.protocol import kv as kvmod
from tfyarn.protocol import taskstate


def emit_id(job_id: str, what: str = "job id") -> None:
    """stdout carries the id alone; a closed stdout is said, not a silent failure."""
    try:
        if sys.stdout is None:
            raise OSError("stdout is closed")
        print(job_id, flush=True)
    except (OSError, ValueError, AttributeError):
        say(f"warning: stdout is closed, so the {what} is not printed there: {job_id}")
        with contextlib.suppress(OSError):  # no error again when Python flushes at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)


@dataclass
class News:
    """What the job's store says that the user should hear once: the job page's URL,
    TensorBoard's (or why it did not start), and each restart of the gang."""

    spec: JobSpec
    attempt: int = 0
    gang: int = 0
    page_said: bool = False
    tensorboard_said: bool = False

    def read(self, store: kvmod.KV) -> None:
        """Say the page and TensorBoard once they are published."""
        if not self.page_said and (url := store.get(kvmod.PAGE)):
            say(f"job page: {url}", secret_ok=True)  # the owner's ?token=: theirs to see
            self.page_said = True
        self.tensorboard(store)

    def tensorboard(self, store: kvmod.KV) -> TensorBoard | None:
        """TensorBoard's published record (said once), or None before it is out."""
        raw = store.get(kvmod.TENSORBOARD) if self.spec.tensorboard_dir else None
        info = None if raw is None else TensorBoard.from_json(raw, kvmod.TENSORBOARD)
        if info is not None and not self.tensorboard_said:
            say(info.announce(), secret_ok=True)  # its ?token=: the owner's to see
            self.tensorboard_said = True
        return info

    def restart(self, store: kvmod.KV) -> tuple[int, str, str] | None:
        """A new attempt the driver started since the last call, how the previous one
        ended and the memory it grew (once per attempt); `gang` follows the gang now
        wanted."""
        wanted = kvmod.wanted(store)
        self.gang = wanted.gang
        if wanted.attempt <= self.attempt:
            return None
        self.attempt = wanted.attempt
        last = wanted.earlier[-1] if wanted.earlier else None
        return wanted.attempt, last.message if last else "", last.grown if last else ""


@dataclass
class Escalation:
    """Signals while the job runs: the first asks the driver for an orderly stop (final
    status KILLED); a second signal, or no end within the job's stop grace plus
    STOP_ASK_WAIT_S, forces it (kill every process / the application)."""

    interrupts: Interrupts
    grace_s: float
    asked_at: float | None = None

    def ask(self, store: kvmod.KV | None, reason: str) -> bool:
        """Put the stop request once; False when the store is gone (force at once)."""
        if self.asked_at is not None:
            return True
        self.asked_at = time.monotonic()
        if store is None:
            return False
        try:
            store.put(kvmod.KILL, reason)
        except StoreGone:
            return False
        return True

    def forced(self) -> str | None:
        """Why the stop must be forced now, or None while the orderly one may finish."""
        if self.interrupts.count >= 2:
            return "second signal"
        if self.asked_at is not None and \
                time.monotonic() - self.asked_at > self.grace_s + STOP_ASK_WAIT_S:
            return "no orderly stop in time"
        return None


def interrupted(job: str, interrupts: Interrupts, where: str) -> JobFailed:
    """The JobFailed of a job a signal to the client ended; its exit code is 128 + N."""
    return JobFailed(f"{job} killed: el_submit was {interrupts.words()}; {where}",
                     interrupts.exit_code())


def failed(outcome: Outcome, job: str, state: str, where: str) -> JobFailed:
    """The JobFailed of a job that did not succeed: how it ended, the deciding task's
    stderr excerpt, and where to read more."""
    return JobFailed("\n".join([*outcome.describe(job, state), where]), exit_code(state),
                     outcome)


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
