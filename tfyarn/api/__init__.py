"""tfyarn's Python API: `submit` a job, follow it through its `Job`, `attach` to one
submitted elsewhere.

    job = tfyarn.submit(kind="tensorflow-ps", ps=1, workers=2,
                        worker_memory="2g", files=["./"], command="python train.py",
                        local=True)
    for line in job.logs(follow=True): print(line)
    outcome = job.wait()

Every el_submit option is a keyword named as its field in the flag table
(`api/options.py`, listed in the README); values are checked by the same parser with the
same words, raised as `SpecError` (a ValueError). The CLI is a layer over this.
Must not import TensorFlow, skein or a JVM at import time, install signal handlers, exit
the process, fork it, or write its environment: a notebook's kernel runs it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tfyarn.api.options import parse_bool
from tfyarn.api.submit import client_options, job_spec, ready
from tfyarn.core.errors import JobFailed, SpecError
from tfyarn.core.jobspec import JobSpec
from tfyarn.core.settings import Settings

if TYPE_CHECKING:
    from tfyarn.api.job import Job, JobStatus
    from tfyarn.core.appreport import AppReport

__all__ = ["AppReport", "Job", "JobFailed", "JobStatus", "SpecError", "attach", "jobs", "run",
           "submit"]
# loaded on first use: el_submit's --help needs this package's flag table, not the Job
# machinery (tfyarn.api.job and what it pulls in cost most of the CLI's start)
LAZY = {"Job": "tfyarn.api.job", "JobStatus": "tfyarn.api.job", "run": "tfyarn.api.runfn",
        "AppReport": "tfyarn.core.appreport"}


def __getattr__(name: str) -> Any:
    if name in LAZY:
        import importlib

        value = getattr(importlib.import_module(LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tfyarn.api' has no attribute {name!r}")


def submit(spec: JobSpec | str | os.PathLike | None = None, *, local: bool = False,
           command: str | Sequence[str] | None = None, settings: Settings | None = None,
           **options: Any) -> Job:
    """Start a job and return its handle at once (follow it with `wait`, `logs`).

    `spec`: a job file (what `el_submit ... --dry-run` prints; keywords override it) or
    a JobSpec; `local`: every task as a local process (el_submit's `--local`);
    `command`: what every task runs (`-c`); `options`: el_submit's other options by
    their Python names (`kind`, `workers`, `worker_memory`, `files`, `env`, ...);
    `settings`: the caller's, read once (default: this process's environment, now).
    """
    settings = settings or Settings.from_environ()
    args, parsed = job_spec(spec, command=command, **options)
    checked = ready(args, parsed, settings)
    if parse_bool("-interact", args.interact):
        raise SpecError("interact: a Job follows its output with job.logs(follow=True)")
    from tfyarn.api.job import Job, start_local

    if local:
        return start_local(checked, settings)
    from tfyarn.api import yarnjob
    from tfyarn.client.cluster import ClientOptions

    opts = ClientOptions(args.conf, args.principal, args.keytab, settings=settings)
    return Job(yarnjob.submit(checked, opts))


def attach(job_id: str, *, conf_dir: str | None = None, principal: str | None = None,
           keytab: str | None = None, settings: Settings | None = None) -> Job:
    """A handle on a job submitted elsewhere (el_submit, cron, another notebook): a YARN
    application id, or a local job's id (`local_...`, while its job dir is there).
    `settings`: the caller's, read once (default: this process's environment, now)."""
    from tfyarn.api.job import LOCAL_PREFIX, Job, attach_local

    settings = settings or Settings.from_environ()
    if job_id.startswith(LOCAL_PREFIX):
        return attach_local(job_id, settings)
    if not job_id.startswith("application_"):
        raise SpecError(f"attach: {job_id!r} is neither a YARN application id "
                        "(application_...) nor a local job id (local_...)")
    from tfyarn.api import yarnjob

    return Job(yarnjob.YarnBackend(job_id, client_options(conf_dir, principal, keytab, settings)))


def jobs(*, finished: bool = False, conf_dir: str | None = None, principal: str | None = None,
         keytab: str | None = None, settings: Settings | None = None) -> list[AppReport]:
    """tfyarn's applications on the cluster, newest first: those that run (with
    `finished`, the ended ones too), each as YARN reports it."""
    from tfyarn.api import yarnjob

    opts = client_options(conf_dir, principal, keytab, settings or Settings.from_environ())
    return yarnjob.applications(finished, opts)
