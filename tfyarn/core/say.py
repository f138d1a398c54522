"""tfyarn's one way to tell the user something: a `tfyarn: ` line on stderr.

stdout is reserved for the job/application id; every process of a job (client, driver,
launchers, TensorBoard side task) speaks through this, naming itself (`who`) when it is
not the client. A closed or broken stderr is never an error.
Must not write to stdout: it carries ids only.
"""

from __future__ import annotations

import contextlib
import sys


def say(msg: str, who: object = None) -> None:
    """`tfyarn: msg`, or `tfyarn: WHO: msg` (the driver, a task, tensorboard)."""
    line = f"tfyarn: {msg}" if who is None else f"tfyarn: {who}: {msg}"
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)
