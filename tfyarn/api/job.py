"""A job handle: `Job` (what `tfyarn.submit` returns) and `attach` (a job submitted
elsewhere: el_submit, cron, another notebook).

Owns following one job from Python: its status, its tasks (typed rows, natural order),
waiting for its outcome (`JobFailed` naming the task and its stderr when it failed), its
logs as an iterator of lines, killing it, and its links. A YARN job is followed as
el_submit follows it (the same watcher, the same words on stderr); a local job runs as
a background `--local` client of its own (`python -m tfyarn.api.background`), so the
caller's process never forks (a notebook's kernel has threads). Must not install signal
handlers, exit the process or write its environment: Ctrl-C in `wait()` arrives as
KeyboardInterrupt, stops the job as el_submit's Ctrl-C does, and is raised again.
"""

from __future__ import annotations

import contextlib
import html
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tfyarn.core.appreport import FinalStatus
from tfyarn.core.errors import (
    EXIT_BAD_INPUT,
    EXIT_TFYARN,
    EnvironmentMissing,
    JobFailed,
    SpecError,
    TfYarnError,
)
from tfyarn.core.jobspec import JobSpec
from tfyarn.core.records import Outcome, RecordError, TensorBoard, Training
from tfyarn.core.settings import Settings
from tfyarn.core.tfconfig import Task
from tfyarn.core.timing import ATTACHED_POLL_S, ATTACHED_STOP_WAIT_S
from tfyarn.protocol import kv as kvmod
from tfyarn.protocol import taskstate

if TYPE_CHECKING:
    from tfyarn.client.jobdir import JobDir
    from tfyarn.client.liveline import LiveLine

LOCAL_PREFIX = "local_"
GONE = Outcome(FinalStatus.SUCCEEDED, "ended: its client removed the job dir, as it does after a "
               "success")


@dataclass(frozen=True)
class JobStatus:
    """Where a job stands: `state` (YARN's: ACCEPTED, RUNNING, FINISHED, FAILED, KILLED;
    a local job: RUNNING or its final status), `final_status` (SUCCEEDED, FAILED, KILLED,
    or UNDEFINED while it runs), the diagnostics (a running local job: its phase), and
    for a YARN job its name and tracking URL."""

    state: str
    final_status: str
    diagnostics: str = ""
    name: str = ""
    tracking_url: str = ""

    @property
    def done(self) -> bool:
        return self.final_status != FinalStatus.UNDEFINED


class Job:
    """One tfyarn job. `with tfyarn.submit(...) as job:` kills it on leaving the block
    unless it ended or `job.detach()` was called."""

    def __init__(self, backend: _Backend) -> None:
        self._backend = backend
        self._detached = False
        self._training: Training | None = None  # the last read (the store goes with the job)

    @property
    def id(self) -> str:
        return self._backend.id

    def status(self) -> JobStatus:
        return self._backend.status()

    def tasks(self) -> list[taskstate.TaskState]:
        """Each task's state, ps, chief, worker:0 ... in natural order (empty before the
        job's driver runs; after the end, as the outcome has them, once this handle
        waited for it)."""
        return self._backend.tasks()

    def task_lines(self) -> list[str]:
        """The task table as `tfyarn status --tasks` prints it: while the job runs, each
        task's address, state and progress (earlier attempts first; a YARN gang that
        waits says why); once it ended, every attempt's table (a YARN job's from the
        page its driver kept)."""
        return self._backend.task_lines()

    def log_urls(self, task: str | None = None) -> list[tuple[str, str]]:
        """Where each container's output is while the job runs: (container, URL of its
        NodeManager's log page) on YARN, (container, log file) for a local job; with
        `task`, the container that runs it (on YARN, where none is its own: every one)."""
        if task is not None:
            _task(task)
        return self._backend.log_urls(task)

    def wait(self, timeout: float | None = None, progress: bool = False) -> Outcome:
        """The outcome once the job ended successfully; JobFailed (with the exit code the
        CLI would give) when it failed or was killed; TimeoutError after `timeout` s.
        `progress`: show el_submit's live line on training meanwhile (in a notebook, one
        output updated in place; on a terminal, in place on stderr; else plain lines)."""
        line = None
        if progress:
            from tfyarn.client.liveline import LiveLine

            line = LiveLine.in_cell() or LiveLine.on(sys.stderr, Settings.from_environ())
        try:
            return self._backend.wait(timeout, line)
        except KeyboardInterrupt:
            self._backend.stop("interrupted (KeyboardInterrupt in Job.wait)")
            raise

    def logs(self, task: str | None = None, follow: bool = False) -> Iterator[str]:
        """Lines of output, one task's or every task's (a container of several tasks
        prefixes each line `[task] `): an ended YARN job's as `yarn logs` gives them, a
        local job's each container's file after a `===== FILE` line; with `follow`, as
        they come until the job ends, each line once."""
        if task is not None:
            _task(task)
        return self._backend.logs(task, follow)

    def training(self) -> Training | None:
        """The job's training as the driver last put it (each attempt's timing, each
        task's down-sampled steps and metrics): from the job's store while it is there,
        then from the page kept for `tfyarn history`; None before any."""
        raw = self._backend.key(kvmod.TRAINING)
        if raw is not None:
            self._training = Training.from_json(raw, kvmod.TRAINING)
        elif self._backend.status().done:
            self._training = self._backend.kept_training() or self._training
        return self._training

    def metrics(self) -> list[dict[str, Any]]:
        """The tasks' reported steps and metrics (`tfyarn.progress(step, loss=...)`) as
        rows for your own plots: task, attempt (0-based), step, time (epoch seconds,
        the task's clock) and each metric it reported, e.g.
        `pandas.DataFrame(job.metrics())`. Down-sampled evenly over a long job (at most
        policy.SERIES_TASK_MAX rows per task and attempt); the first 16 tasks."""
        from tfyarn.core.training import metric_rows

        t = self.training()
        return metric_rows(t) if t is not None else []

    def kill(self, reason: str = "killed through the Python API (Job.kill)") -> str:
        """Stop every task (orderly first, as el_submit's Ctrl-C) and wait for the end;
        the state it ended in (a job that had ended already: that state)."""
        return self._backend.stop(reason)

    def close(self) -> None:
        """Let go of what the handle holds (a YARN job: its client's JVM); the job runs on."""
        self._backend.close()

    @property
    def model_dir(self) -> str:
        """Where the tasks were told to put the trained model (TFYARN_MODEL_DIR): a local
        job's stays when it succeeds; `tf.saved_model.load` reads an hdfs:// one through
        tfyarn's plugin (see the README's HDFS section)."""
        return self._backend.model_dir()

    def detach(self) -> Job:
        """Leave the job running when a `with` block ends."""
        self._detached = True
        return self

    @property
    def page_url(self) -> str | None:
        return self._backend.key(kvmod.PAGE)

    @property
    def tensorboard_url(self) -> str | None:
        raw = self._backend.key(kvmod.TENSORBOARD)
        return None if raw is None else TensorBoard.from_json(raw, kvmod.TENSORBOARD).url

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._detached and not self._backend.status().done:
            self.kill()
        self.close()

    def __repr__(self) -> str:
        return f"<tfyarn.Job {self.id}>"

    def _repr_html_(self) -> str:
        """Jupyter's view: the id, status, links and the task table."""
        e = html.escape
        st = self.status()
        links = "".join(f' <a href="{e(u)}" target="_blank">{e(n)}</a>'
                        for n, u in (("job page", self.page_url),
                                     ("TensorBoard", self.tensorboard_url)) if u)
        rows = "".join(f"<tr><td>{e(str(s.task))}</td><td>{e(s.addr or '-')}</td>"
                       f"<td>{e(s.state.value)}</td><td>{e(s.detail())}</td></tr>"
                       for s in self.tasks())
        table = f"<table><tr><th>task</th><th>address</th><th>state</th><th></th></tr>{rows}" \
                "</table>" if rows else ""
        from tfyarn.core.training import plots

        t = self.training()
        return (f"<div><b>{e(self.id)}</b>: {e(st.state)} / {e(st.final_status)}{links}"
                f"{table}{plots(t) if t is not None else ''}</div>")


class _Backend:
    """What a Job asks of where it runs."""

    id: str

    def status(self) -> JobStatus: ...

    def tasks(self) -> list[taskstate.TaskState]: ...

    def task_lines(self) -> list[str]: ...

    def log_urls(self, task: str | None) -> list[tuple[str, str]]: ...

    def wait(self, timeout: float | None, line: LiveLine | None = None) -> Outcome: ...

    def kept_training(self) -> Training | None:
        """The training in the job's kept page (`tfyarn history`), once it ended."""
        return None

    def logs(self, task: str | None, follow: bool) -> Iterator[str]: ...

    def stop(self, reason: str) -> str: ...

    def key(self, key: str) -> str | None: ...

    def model_dir(self) -> str: ...

    def close(self) -> None:
        """Let go of what the handle holds (a YARN client's JVM)."""


def _task(task: str) -> Task:
    try:
        return Task.parse(task)
    except ValueError as exc:
        raise SpecError(f"task: {exc}") from None


def _ended(outcome: Outcome, job_id: str, where: str) -> Outcome:
    """The outcome, or the JobFailed that el_submit would end with."""
    if outcome.state == FinalStatus.SUCCEEDED:
        return outcome
    from tfyarn.client import common

    raise common.failed(outcome, job_id, outcome.state, where)


# ---------------------------------------------------------------- local jobs


class _Local(_Backend):
    """A local job: its client runs in the background (`tfyarn.api.background`), the
    handle reads its job dir (store, logs) and its client's stderr (progress)."""

    def __init__(self, job_id: str, root: str, client: subprocess.Popen | None,
                 progress: str | None, keep: bool, model: str | None = None,
                 history: str = "") -> None:
        self.id, self.root, self.client = job_id, root, client
        self.progress, self.keep = progress, keep
        self.history = history  # where its page is kept (Settings.local_history)
        self.attempts: int | None = None  # the spec's (read once, for the live line)
        self.model = model  # --model-dir, if given (else the job dir's model/)
        self.shown = 0  # bytes of the client's progress already shown
        self.outcome: Outcome | None = None

    @classmethod
    def start(cls, spec: JobSpec, settings: Settings) -> _Local:
        """Start the background client on `spec`; returns once its job id is known."""
        from tfyarn.client.jobdir import find_job_dir
        from tfyarn.system import spawn

        work = tempfile.mkdtemp(prefix="tfyarn-api-", dir=settings.tmpdir)
        job_json, progress = os.path.join(work, "job.json"), os.path.join(work, "client.log")
        with open(job_json, "w", encoding="utf-8") as f:
            f.write(spec.to_json())
        env = {**os.environ, "TFYARN_KEEP_JOB_DIR": "1"}  # the handle reads the outcome
        with open(progress, "wb") as err:
            client = spawn.start([sys.executable, "-m", "tfyarn.api.background", job_json],
                                 env, stdout=subprocess.PIPE, stderr=err, new_session=True)
        assert client.stdout is not None
        job_id = client.stdout.readline().decode().strip()
        client.stdout.close()
        root = find_job_dir(job_id, settings) if job_id else None
        if root is None:
            client.wait()
            with open(progress, encoding="utf-8", errors="replace") as f:
                said = f.read().strip()
            shutil.rmtree(work, ignore_errors=True)
            error = {EXIT_BAD_INPUT: SpecError, EXIT_TFYARN: EnvironmentMissing}.get(
                client.returncode, TfYarnError)
            raise error(said.removeprefix("Error: ") or
                        f"the local job did not start (exit code {client.returncode})")
        return cls(job_id, root, client, progress, settings.keep_job_dir, spec.model_dir,
                   settings.local_history())

    @classmethod
    def attach(cls, job_id: str, settings: Settings) -> _Local:
        from tfyarn.client.jobdir import find_job_dir

        root = find_job_dir(job_id, settings)
        if root is None:
            raise TfYarnError(f"{job_id}: its job dir is gone (removed when a local job "
                              "succeeds; keep it with TFYARN_KEEP_JOB_DIR=1)")
        from tfyarn.client.jobdir import JobDir

        model = None
        with contextlib.suppress(OSError), open(JobDir(root).job_json, encoding="utf-8") as f:
            model = JobSpec.from_json(f.read()).model_dir  # gone: the default dir
        return cls(job_id, root, None, None, True, model, settings.local_history())

    def model_dir(self) -> str:
        from tfyarn.client.jobdir import JobDir

        return self.model or JobDir(self.root).model_dir

    @property
    def store(self) -> kvmod.KV:
        from tfyarn.client.jobdir import JobDir

        return kvmod.DirKV(JobDir(self.root).kv_root)

    def key(self, key: str) -> str | None:
        return self.store.get(key) if os.path.isdir(self.root) else None

    def _outcome(self) -> Outcome | None:
        if self.outcome is None and (raw := self.key(kvmod.STATUS)) is not None:
            self.outcome = Outcome.from_json(raw, kvmod.STATUS)
        if self.outcome is None and self.client is None and not os.path.isdir(self.root):
            self.outcome = GONE  # another client's job: it removes the dir after a success
        return self.outcome

    def _client_ended(self) -> bool:
        return self.client is None or self.client.poll() is not None

    def status(self) -> JobStatus:
        out = self._outcome()
        page = self.key(kvmod.PAGE) or ""
        if out is not None and self._client_ended():
            return JobStatus(out.state, out.state, out.message, tracking_url=page)
        return JobStatus("RUNNING", "UNDEFINED", self.key(kvmod.PHASE) or "starting",
                         tracking_url=page)

    def task_lines(self) -> list[str]:
        from tfyarn.client.common import live_tasks
        from tfyarn.core.policy import attempt_tables

        out = self._outcome()
        if out is not None and out is not GONE:
            return attempt_tables(out)
        with contextlib.suppress(OSError):
            return live_tasks(self.store) if os.path.isdir(self.root) else []
        return []

    def log_urls(self, task: str | None) -> list[tuple[str, str]]:
        jd, spec = self._job_files()
        return [(name, jd.log_path(name)) for name in _containers(spec, task)]

    def _job_files(self) -> tuple[JobDir, JobSpec]:
        """The job dir and the job as its client wrote it there."""
        from tfyarn.client.jobdir import JobDir

        if not os.path.isdir(self.root):
            raise TfYarnError(f"{self.id}: its logs went with its job dir, removed after a "
                              "success as el_submit --local does; keep them with "
                              "TFYARN_KEEP_JOB_DIR=1")
        jd = JobDir(self.root)
        with open(jd.job_json, encoding="utf-8") as f:
            return jd, JobSpec.from_json(f.read())

    def tasks(self) -> list[taskstate.TaskState]:
        if self.outcome is not None and not os.path.isdir(self.root):
            return taskstate.ended(self.outcome.tasks)
        with contextlib.suppress(OSError):
            return taskstate.current(self.store)[2]
        return []

    def wait(self, timeout: float | None, line: LiveLine | None = None) -> Outcome:
        try:
            return self._wait(timeout, line)
        finally:
            if line is not None:
                line.end()

    def _wait(self, timeout: float | None, line: LiveLine | None) -> Outcome:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._client_ended() or (self.client is None and self._outcome() is None):
            self._show_progress(line)
            if line is not None and os.path.isdir(self.root):
                with contextlib.suppress(OSError, RecordError):
                    wanted = kvmod.wanted(self.store)
                    line.look(self.store, wanted.gang, wanted.attempt, self._attempts())
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"{self.id} still runs after {timeout:g} s")
            with contextlib.suppress(subprocess.TimeoutExpired):
                if self.client is not None:
                    self.client.wait(ATTACHED_POLL_S)
                else:
                    time.sleep(ATTACHED_POLL_S)
        self._show_progress(line)
        self.close()  # the client's progress is all shown
        return self._result()

    def _attempts(self) -> int:
        if self.attempts is None:
            self.attempts = self._job_files()[1].attempts
        return self.attempts

    def kept_training(self) -> Training | None:
        from tfyarn.client.history import LocalShelf

        with contextlib.suppress(RecordError, OSError):
            view = LocalShelf(self.history, mine=True).read(self.id)
            return view.training if view is not None else None
        return None

    def _result(self) -> Outcome:
        out = self._outcome()
        if out is None:
            code = self.client.returncode if self.client is not None else None
            raise JobFailed(f"job {self.id}: tfyarn's local client ended without a final "
                            f"status (exit code {code}); its job dir: {self.root}")
        logs = os.path.join(self.root, "logs")
        if out.state == FinalStatus.SUCCEEDED and not self.keep:
            from tfyarn.client.jobdir import JobDir

            JobDir(self.root).remove()
        return _ended(out, f"job {self.id}", f"full logs: {logs}")

    def _show_progress(self, line: LiveLine | None = None) -> None:
        """The background client's progress lines, on this process's stderr (above the
        live line, if one is shown)."""
        if self.progress is None:
            return
        with contextlib.suppress(OSError), open(self.progress, "rb") as f:
            f.seek(self.shown)
            data = f.read()
            self.shown += len(data)
            if data:
                def show() -> None:
                    sys.stderr.write(data.decode(errors="replace"))
                    sys.stderr.flush()

                if line is not None:
                    line.around(show)
                else:
                    show()

    def logs(self, task: str | None, follow: bool) -> Iterator[str]:
        jd, spec = self._job_files()
        names = _containers(spec, task)
        offsets = dict.fromkeys(names, 0)
        partial = dict.fromkeys(names, "")
        while True:
            ended = self._client_ended() and self._outcome() is not None or \
                not os.path.isdir(self.root)
            for name in names:
                path = jd.log_path(name)
                if not follow:  # one file after another: each under its name
                    yield f"===== {path}"
                with contextlib.suppress(OSError), open(path, "rb") as f:
                    f.seek(offsets[name])
                    data = f.read()
                    offsets[name] += len(data)
                    *lines, partial[name] = (partial[name] + data.decode(errors="replace")
                                             ).split("\n")
                    yield from (line for line in lines
                                if task is None or _is_task_line(line, task, spec))
            if not follow or ended:
                yield from (p for p in partial.values() if p)
                return
            time.sleep(ATTACHED_POLL_S)

    def stop(self, reason: str) -> str:
        if self.client is not None and self.client.poll() is None:
            self.client.send_signal(signal.SIGTERM)  # the client's orderly stop
            self.client.wait()
        elif self.client is None and self._outcome() is None:
            self.store.put(kvmod.KILL, reason)  # the driver stops every task
            deadline = time.monotonic() + ATTACHED_STOP_WAIT_S
            while self._outcome() is None and time.monotonic() < deadline:
                time.sleep(ATTACHED_POLL_S)
        self._show_progress()
        out = self._outcome()
        return out.state if out is not None else "RUNNING"

    def close(self) -> None:
        if self.progress is not None:
            shutil.rmtree(os.path.dirname(self.progress), ignore_errors=True)
            self.progress = None


def _containers(spec: JobSpec, task: str | None) -> list[str]:
    """The containers that ran `task` (None: every container), by name."""
    return [c.name for c in spec.containers() if task is None or Task.parse(task) in c.tasks]


def _is_task_line(line: str, task: str, spec: JobSpec) -> bool:
    """A container of several tasks prefixes each line with its task."""
    group = spec.container_of(Task.parse(task))
    return len(group.tasks) == 1 or line.startswith(f"[{task}] ")


def start_local(spec: JobSpec, settings: Settings) -> Job:
    return Job(_Local.start(spec, settings))


def attach_local(job_id: str, settings: Settings) -> Job:
    return Job(_Local.attach(job_id, settings))
