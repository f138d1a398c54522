"""One exception family, so the CLI edge can turn any of them into a clean message.

Exit codes live here too, in the one table both backends use: an error carries the code
the CLI exits with, so the table sits with the errors (nothing here imports the rest).
Must not import the rest of tfyarn.
"""

from __future__ import annotations

import signal

EXIT_SUCCEEDED = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2  # nothing was started or submitted
EXIT_KILLED = 3  # the job was killed (tfyarn kill, yarn application -kill, driver stopped)
EXIT_TFYARN = 4  # tfyarn itself could not run the job (no Hadoop client, no docker, ...)
SIGNAL_BASE = 128  # the client interrupted by signal N exits 128 + N (Ctrl-C: 130)
STATE_EXIT = {"SUCCEEDED": EXIT_SUCCEEDED, "FAILED": EXIT_FAILED, "KILLED": EXIT_KILLED}
SIGNAL_WORDS = {
    signal.SIGINT: "interrupted (Ctrl-C)",
    signal.SIGTERM: "terminated (SIGTERM)",
    signal.SIGHUP: "hung up (SIGHUP: the terminal closed)",
}


def exit_code(state: str) -> int:
    """The exit code of a job that ended in `state` (SUCCEEDED, FAILED or KILLED)."""
    return STATE_EXIT.get(state, EXIT_FAILED)


def interrupt_exit(signum: int) -> int:
    return SIGNAL_BASE + signum


def interrupt_words(signum: int) -> str:
    return SIGNAL_WORDS.get(signum, f"stopped by {signal.Signals(signum).name}")


class TfYarnError(Exception):
    """Base of every error tfyarn raises on purpose; `exit_code` is what the CLI exits with."""

    exit_code = EXIT_FAILED


class SpecError(TfYarnError, ValueError):
    """Bad user input (a flag, a file, a value): nothing was started. A ValueError too,
    as Python callers of the API expect of a bad argument."""

    exit_code = EXIT_BAD_INPUT


class EnvironmentMissing(TfYarnError):
    """tfyarn itself cannot run the job here: no Hadoop client, no docker daemon, no
    writable temp dir, too few file descriptors. Nothing of the job is left running."""

    exit_code = EXIT_TFYARN


class JobFailed(TfYarnError):
    """The job ran and did not succeed; the message names the task and what to run next;
    `outcome` is the job's final record where its driver wrote one (a Python caller reads
    the failing task from it)."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED,
                 outcome: object = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.outcome = outcome


class StoreGone(TfYarnError):
    """The job's store cannot be reached any more (on YARN: its ApplicationMaster is gone,
    or the network): callers fall back to what YARN reports."""
