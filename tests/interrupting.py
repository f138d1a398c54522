"""Ctrl-C in `Job.wait()`, for the unit and the integration API tests: Python's own SIGINT
handler (as a Jupyter kernel has; and for the whole suite, as from a terminal), and a
thread that sends SIGINT once the job's tasks run, recording (not hiding) a failure of
its look at the tasks."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tfyarn.protocol.taskstate import State


def as_from_a_terminal() -> None:
    """The suite runs alike from a terminal, `nohup ... &` or cron. A shell that starts it
    in the background leaves SIGINT ignored, and every process a test starts (el_submit,
    a task, a kernel) would inherit that; with Python's own handler in the test process,
    they start with the default, as from a terminal."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


@contextmanager
def python_sigint() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt: a library an earlier test of this process loaded
    may have put a handler of its own there."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def interrupt_once_running(job: Any, tasks: int, deadline_s: float,
                           poll_s: float) -> list[BaseException]:
    """Start a thread that sends this process SIGINT once `tasks` tasks of `job` run (or
    after `deadline_s`, or at once when looking fails: the wait must not be left to the
    job's own end); the list gets what looking raised."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            deadline = time.monotonic() + deadline_s
            while [s.state for s in job.tasks()] != [State.RUNNING] * tasks \
                    and time.monotonic() < deadline:
                time.sleep(poll_s)
        except BaseException as exc:  # noqa: BLE001 - reported by the test's own thread
            failed.append(exc)
        finally:
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=run, daemon=True).start()
    return failed
