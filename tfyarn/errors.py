"""One exception family, so the CLI edge can turn any of them into a clean message.

Exit codes come from the one table in `tfyarn.policy`.
"""

from __future__ import annotations

from tfyarn.policy import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_TFYARN


class TfYarnError(Exception):
    """Base of every error tfyarn raises on purpose; `exit_code` is what the CLI exits with."""

    exit_code = EXIT_FAILED


class SpecError(TfYarnError):
    """Bad user input (a flag, a file, a value): nothing was started."""

    exit_code = EXIT_BAD_INPUT


class EnvironmentMissing(TfYarnError):
    """tfyarn itself cannot run the job here: no Hadoop client, no docker daemon, no
    writable temp dir, too few file descriptors. Nothing of the job is left running."""

    exit_code = EXIT_TFYARN


class JobFailed(TfYarnError):
    """The job ran and did not succeed; the message names the task and what to run next."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code
