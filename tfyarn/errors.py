"""One exception family, so the CLI edge can turn any of them into a clean message."""

from __future__ import annotations


class TfYarnError(Exception):
    """Base of every error tfyarn raises on purpose; `exit_code` is what the CLI exits with."""

    exit_code = 1


class SpecError(TfYarnError):
    """Bad user input (a flag, a file, a value): nothing was started."""

    exit_code = 2


class EnvironmentMissing(TfYarnError):
    """Something the chosen backend needs (hadoop, docker, an archive) is not there."""

    exit_code = 2


INTERRUPT_EXIT = 130  # Ctrl-C (and SIGTERM to the client): every task stopped / app killed


class JobFailed(TfYarnError):
    """The job ran and did not succeed; the message names the task and what to run next."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code
