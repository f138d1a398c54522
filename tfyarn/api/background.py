"""A local job's client in the background (`python -m tfyarn.api.background JOB.json`).

Owns running one `--local` job for a `Job` handle: the same client as `el_submit
--local` (`client.local.LocalJob`), in a process of its own, so the handle's process
never forks (a notebook's kernel has threads). Its stdout carries the job id, its stderr
el_submit's progress; SIGTERM is the handle's orderly stop. Must not be imported: it is
an entry point.
"""

from __future__ import annotations

import sys

from tfyarn.client.interrupts import Interrupted, Interrupts
from tfyarn.client.local import LocalJob
from tfyarn.core.errors import JobFailed, TfYarnError
from tfyarn.core.jobspec import JobSpec
from tfyarn.core.settings import Settings


def main(argv: list[str]) -> int:
    interrupts = Interrupts().install()
    try:
        with open(argv[0], encoding="utf-8") as f:
            spec = JobSpec.from_json(f.read())
        LocalJob(spec, Settings.from_environ(), interrupts).run()
    except JobFailed as exc:  # the handle says it, from the outcome
        return exc.exit_code
    except TfYarnError as exc:
        print(f"Error: {exc}" if exc.exit_code == 2 else str(exc), file=sys.stderr)
        return exc.exit_code
    except Interrupted as exc:
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
