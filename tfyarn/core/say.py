"""tfyarn's one way to tell the user something: a `tfyarn: ` line on stderr.

stdout is reserved for the job/application id; every process of a job (client, driver,
launchers, TensorBoard side task) speaks through this, naming itself (`who`) when it is
not the client. A closed or broken stderr is never an error.
On a terminal each line first clears the one it is written on: el_submit's live line on
training (client/liveline.py) stays there between lines.
Every line passes the default redaction rule (core/redact.py): a URL with a delegation
token or a `password=` in an exception's words is never shown.
Must not write to stdout: it carries ids only.
"""

from __future__ import annotations

import contextlib
import sys
from typing import IO

from tfyarn.core.redact import redact

CLEAR_LINE = "\r\x1b[K"  # back to the line's start, cleared: el_submit's live line goes


def say(msg: str, who: object = None, secret_ok: bool = False,
        to: IO[str] | None = None) -> None:
    """`tfyarn: msg`, or `tfyarn: WHO: msg` (the driver, a task, tensorboard).
    `secret_ok`: the line is the URL of the user's own page (the local job page,
    TensorBoard) with its `?token=`, which the user needs to open it (as Jupyter prints
    its own): not redacted. `to`: instead of stderr (a local launcher serving several
    containers writes each one's lines to that container's log)."""
    line = f"tfyarn: {msg}" if who is None else f"tfyarn: {who}: {msg}"
    line = line if secret_ok else redact(line)
    with contextlib.suppress(OSError, ValueError):
        err = sys.stderr if to is None else to
        if err is not None:
            print((CLEAR_LINE + line) if err.isatty() else line, file=err, flush=True)
