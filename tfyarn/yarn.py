"""YARN backend: stage files, submit through skein, watch, and the lifecycle commands.

Thin on purpose: what runs the job is the same driver (in the ApplicationMaster) and
launchers (in the containers) as local mode; this module only talks to YARN.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tfyarn import appspec
from tfyarn import files as filesmod
from tfyarn import kv as kvmod
from tfyarn.driver import EXIT_CODES, KILL, Outcome, format_tasks
from tfyarn.errors import (
    INTERRUPT_EXIT,
    EnvironmentMissing,
    JobFailed,
    SpecError,
    TfYarnError,
)
from tfyarn.jobspec import JobSpec
from tfyarn.settings import Settings
from tfyarn.tfconfig import Task

TERMINAL = {"FINISHED", "FAILED", "KILLED"}
POLL_S = 1.0
NO_HADOOP = ("no Hadoop client here: skein needs the `yarn` command on PATH ($HADOOP_HOME/bin) "
             "and HADOOP_CONF_DIR (or -conf) pointing at the cluster; or run with --local")


def say(msg: str) -> None:
    print(f"tfyarn: {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class ClientOptions:
    conf_dir: str | None = None
    principal: str | None = None
    keytab: str | None = None
    detach: bool = False


# ---------------------------------------------------------------- staging (local I/O only)


def _archive(src: str, dest: str, skip: list[str]) -> None:
    with tarfile.open(dest, "w:gz") as tar:
        for rel in filesmod.walk(src, skip):
            tar.add(os.path.join(src, rel), arcname=rel)


def stage(spec: JobSpec, tmp: str) -> appspec.Staged:
    """Write the job JSON and pack each `-f` directory as an archive YARN will unpack."""
    filesmod.check_size(spec.files, spec.yarn.max_upload_mb, skip=[tmp])
    job_json = os.path.join(tmp, appspec.JOB_FILE)
    with open(job_json, "w", encoding="utf-8") as f:
        f.write(spec.to_json())
    resources, contents = [], []
    for i, f in enumerate(spec.files):
        if not f.is_dir:
            resources.append((f.dest, f.source, "file"))
            continue
        name = f.dest or f".tfyarn-files-{i}"
        archive = os.path.join(tmp, f"files-{i}.tar.gz")
        _archive(f.source, archive, [tmp])
        resources.append((name, archive, "archive"))
        if not f.dest:
            contents.append(name)
    return appspec.Staged(job_json, tuple(resources), tuple(contents))


def load_defaults(settings: Settings) -> appspec.ClusterDefaults:
    """Site defaults from TFYARN_CONF, ~/.config/tfyarn/tfyarn.yaml or /etc/tfyarn/tfyarn.yaml."""
    import yaml

    for path in settings.conf_files():
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                data = yaml.safe_load(f) or {}
            docker = data.get("docker", {}) or {}
            return appspec.ClusterDefaults(
                docker_network=docker.get("network", "host"),
                docker_mounts=tuple(docker.get("mounts", ()) or ()),
                extra_env={str(k): str(v) for k, v in (data.get("env", {}) or {}).items()})
    return appspec.ClusterDefaults()


# ---------------------------------------------------------------- skein client


def require_client(opts: ClientOptions) -> None:
    """Refuse early, before staging anything or touching ~/.skein, if YARN can't be reached."""
    if opts.keytab and not os.path.isfile(opts.keytab):
        raise SpecError(f"--keytab: {opts.keytab!r} does not exist")
    if shutil.which("yarn") is None:
        raise EnvironmentMissing(f"{NO_HADOOP} (missing: yarn)")


@contextmanager
def yarn_client(opts: ClientOptions) -> Iterator[Any]:
    """A skein client, with what is missing said in one line instead of a traceback."""
    require_client(opts)
    if opts.conf_dir:
        os.environ["HADOOP_CONF_DIR"] = os.path.abspath(opts.conf_dir)  # read by skein's driver
    import skein

    client = _start_client(skein, opts)
    with client:
        yield client


def _start_client(skein: Any, opts: ClientOptions) -> Any:
    # skein.Client.__del__ raises on a client whose start failed: keep that noise quiet
    # while the half-built client is freed, and say what is wrong in one line instead.
    hook, message = sys.unraisablehook, None
    sys.unraisablehook = lambda _info: None
    try:
        try:
            return skein.Client(principal=opts.principal, keytab=opts.keytab)
        except (OSError, subprocess.CalledProcessError, skein.exceptions.DriverError) as exc:
            message = _client_failure(exc)
    finally:
        sys.unraisablehook = hook
    raise EnvironmentMissing(message)


def _client_failure(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"{NO_HADOOP} (missing: {exc.filename or exc})"
    if isinstance(exc, subprocess.CalledProcessError):
        return (f"`{' '.join(exc.cmd)}` failed with exit code {exc.returncode}: the Hadoop client "
                "is not working here; check HADOOP_HOME, JAVA_HOME and HADOOP_CONF_DIR (-conf)")
    return f"cannot start skein's YARN client: {exc}; check HADOOP_CONF_DIR (-conf) and Kerberos"



def report(client: Any, app_id: str) -> Any:
    import skein

    try:
        return client.application_report(app_id)
    except (skein.exceptions.SkeinError, ValueError) as exc:
        raise TfYarnError(f"no application {app_id}: {exc} (list them: tfyarn ls --all)") from None


def app_store(client: Any, app_id: str) -> kvmod.SkeinKV | None:
    """The running application's key-value store, or None once it is gone."""
    try:
        return kvmod.SkeinKV(client.connect(app_id, wait=False))
    except Exception:  # not running (any more): callers fall back to the YARN report
        return None


def log_url(container: Any) -> str:
    url = container.yarn_container_logs
    return url if not url or "://" in url else f"http://{url}"


def next_steps(app_id: str, task: str | None = None) -> str:
    only = f" --task {task}" if task else ""
    return f"logs: tfyarn logs {app_id}{only}   (or: yarn logs -applicationId {app_id})"


# ---------------------------------------------------------------- submit and watch


def submit_and_watch(spec: JobSpec, settings: Settings, opts: ClientOptions) -> int:
    require_client(opts)
    defaults = load_defaults(settings)
    with tempfile.TemporaryDirectory(prefix="tfyarn-stage-") as tmp:
        staged = stage(spec, tmp)
        app_spec = appspec.application_spec(spec, staged, defaults)
        with yarn_client(opts) as client:
            app_id = client.submit(app_spec)
            print(app_id, flush=True)
            return _after_submit(client, app_id, spec, opts)


def _after_submit(client: Any, app_id: str, spec: JobSpec, opts: ClientOptions) -> int:
    if opts.detach:
        say(f"submitted {app_id}; follow it with: tfyarn status {app_id} | tfyarn logs {app_id} "
            f"| tfyarn kill {app_id}")
        return 0
    watcher = Watcher(client, app_id, spec)
    try:
        return watcher.run()
    except KeyboardInterrupt:
        say(f"interrupted: killing {app_id}")
        stop_application(client, app_id, "interrupted by the user (Ctrl-C)", spec.stop_grace_s)
        raise JobFailed(f"{app_id} killed on Ctrl-C; {next_steps(app_id)}",
                        INTERRUPT_EXIT) from None


def stop_application(client: Any, app_id: str, reason: str, grace: float = 3.0) -> str:
    """Ask the driver to stop every task (orderly, final status KILLED); force if it can't."""
    store = app_store(client, app_id)
    if store is not None:
        store.put(KILL, reason)
        deadline = time.monotonic() + grace + 30.0
        while time.monotonic() < deadline:
            state = str(report(client, app_id).state)
            if state in TERMINAL:
                return state
            time.sleep(POLL_S)
    client.kill_application(app_id)
    return "KILLED"


@dataclass
class Watcher:
    """Follows one application, printing progress to stderr; returns its exit code."""

    client: Any
    app_id: str
    spec: JobSpec
    state: str = ""
    store: kvmod.SkeinKV | None = None
    tracking_shown: bool = False
    registered: int = -1
    phase: str | None = None
    started: set[str] = field(default_factory=set)
    outcome: Outcome | None = None

    def run(self) -> int:
        start = time.monotonic()
        while True:
            rep = report(self.client, self.app_id)
            self._state(rep)
            if str(rep.state) in TERMINAL:
                return self._final(rep)
            if str(rep.state) == "RUNNING":
                self._progress()
            elif time.monotonic() - start > self.spec.register_timeout_s:
                self._never_started()
            time.sleep(POLL_S)

    def _never_started(self) -> None:
        """The AM never ran, so no driver enforces -wait_time: the client does."""
        self.client.kill_application(self.app_id)
        minutes = self.spec.register_timeout_s / 60
        raise JobFailed(f"{self.app_id} was still {self.state} after -wait_time {minutes:g} min: "
                        "YARN never started its ApplicationMaster (queue full or AM resources too "
                        f"large?); it was killed. See: yarn application -status {self.app_id}")

    def _state(self, rep: Any) -> None:
        state = str(rep.state)
        if state != self.state:
            self.state = state
            say(f"{self.app_id}: {state}")
        if rep.tracking_url and not self.tracking_shown:
            self.tracking_shown = True
            say(f"tracking URL: {rep.tracking_url}")

    def _progress(self) -> None:
        if self.store is None:
            self.store = app_store(self.client, self.app_id)
            if self.store is None:
                return
            self.store.put(kvmod.CLIENT, "watching")
        try:
            self._read_store(self.store)
        except Exception:  # the AM is going away; the final report says how it ended
            self.store = None

    def _read_store(self, store: kvmod.SkeinKV) -> None:
        keys = store.scan("task/")
        n = len(self.spec.tasks())
        registered = sum(k.endswith("/addr") for k in keys)
        if registered != self.registered:
            self.registered = registered
            say(f"tasks registered {registered}/{n}")
        phase = store.get(kvmod.PHASE)
        if phase and phase != self.phase:
            self.phase = phase
            say({"running": "training", "stopping": "finishing"}.get(phase, phase))
        started = {k.split("/")[1] for k in keys if k.endswith("/started")}
        for task in sorted(started - self.started):
            self._print_log_url(task)
        self.started |= started
        raw = store.get(kvmod.STATUS)
        if raw and self.outcome is None:
            self.outcome = Outcome.from_json(raw)
            store.put(kvmod.ACK, "1")

    def _print_log_url(self, task: str) -> None:
        name = appspec.service_name(Task.parse(task))
        try:
            containers = self.store.app.get_containers(services=[name]) if self.store else []
        except Exception:
            containers = []
        for c in containers:
            say(f"{task} started: logs {log_url(c)}")

    def _final(self, rep: Any) -> int:
        final = str(rep.final_status)
        if self.outcome is not None:
            say("tasks:")
            for line in format_tasks(self.outcome.tasks):
                say(f"  {line}")
        state = final if final in EXIT_CODES else ("KILLED" if self.state == "KILLED" else "FAILED")
        if state == "SUCCEEDED":
            say(f"{self.app_id} SUCCEEDED")
            return 0
        raise JobFailed(failure_text(self.app_id, state, self.outcome, rep.diagnostics),
                        EXIT_CODES[state])


def failure_text(app_id: str, state: str, outcome: Outcome | None, diagnostics: str) -> str:
    if outcome is None:
        return (f"{app_id} {state}: {(diagnostics or 'no diagnostics').strip()}\n"
                f"{next_steps(app_id)}")
    return "\n".join([*outcome.describe(app_id, state), next_steps(app_id, outcome.task)])


# ---------------------------------------------------------------- lifecycle commands


def status(app_id: str) -> int:
    with yarn_client(ClientOptions()) as client:
        rep = report(client, app_id)
        print(f"application: {app_id}\nname: {rep.name}\nstate: {rep.state}\n"
              f"final status: {rep.final_status}\ntracking URL: {rep.tracking_url}")
        if str(rep.state) == "RUNNING" and (store := app_store(client, app_id)):
            print("tasks:")
            for line in live_tasks(store):
                print(f"  {line}")
        if rep.diagnostics:
            print(f"diagnostics:\n{rep.diagnostics.strip()}")
    return 0


def live_tasks(store: kvmod.KV) -> list[str]:
    """Per-task lines while the job runs: address, and exit code once it has one."""
    keys = store.scan("task/")
    tasks = sorted({k.split("/")[1] for k in keys})
    out = []
    for task in tasks:
        addr = keys.get(f"task/{task}/addr", "-")
        ended = keys.get(f"task/{task}/exit")
        code = json.loads(ended).get("code") if ended else None
        state = f"exit {code}" if ended else ("running" if f"task/{task}/started" in keys
                                               else "registered")
        out.append(f"{task:<12} {addr:<30} {state}")
    return out


def select_task_logs(text: str, task: str) -> str:
    """From `yarn logs` output, the sections of the container that ran `task`."""
    blocks, current = [], []
    for line in text.splitlines(keepends=True):
        if line.startswith("Container: ") and current:
            blocks.append("".join(current))
            current = []
        current.append(line)
    if current:
        blocks.append("".join(current))
    marker = f"tfyarn: {task}: "
    return "".join(b for b in blocks if marker in b)


def logs(app_id: str, task: str | None) -> int:
    if task:
        try:
            Task.parse(task)
        except ValueError as exc:
            raise SpecError(f"--task: {exc}") from None
    with yarn_client(ClientOptions()) as client:
        rep = report(client, app_id)
        if str(rep.state) not in TERMINAL:
            return _live_log_urls(client, app_id, task)
    return _aggregated_logs(app_id, task)


def _live_log_urls(client: Any, app_id: str, task: str | None) -> int:
    store = app_store(client, app_id)
    if store is None:
        raise TfYarnError(f"{app_id} is not running yet; try again: tfyarn logs {app_id}")
    services = [appspec.service_name(Task.parse(task))] if task else None
    print(f"{app_id} is running; container logs:")
    for c in store.app.get_containers(services=services):
        print(f"  {c.service_name:<12} {log_url(c)}")
    return 0


def _aggregated_logs(app_id: str, task: str | None) -> int:
    """`yarn logs` (skein's own reader fails on Hadoop 3.3's bucket-logs-tfile layout)."""
    if shutil.which("yarn") is None:
        raise EnvironmentMissing(f"`yarn` is not on PATH: {NO_HADOOP}")
    r = subprocess.run(["yarn", "logs", "-applicationId", app_id], capture_output=True, text=True)
    if r.returncode != 0:
        raise TfYarnError(f"yarn logs failed for {app_id}: {r.stderr.strip()[-500:]} "
                          "(is log aggregation enabled, yarn.log-aggregation-enable?)")
    text = select_task_logs(r.stdout, task) if task else r.stdout
    if task and not text:
        raise TfYarnError(f"no container of {app_id} ran {task}; see all: tfyarn logs {app_id}")
    sys.stdout.write(text)
    return 0


def kill(app_id: str) -> int:
    with yarn_client(ClientOptions()) as client:
        rep = report(client, app_id)
        if str(rep.state) in TERMINAL:
            say(f"{app_id} already ended: {rep.state} / {rep.final_status}")
            return 0
        state = stop_application(client, app_id, "killed with tfyarn kill")
        say(f"{app_id}: {state}")
    return 0


def ls(show_all: bool) -> int:
    states = None if not show_all else ["SUBMITTED", "ACCEPTED", "RUNNING", "FINISHED",
                                        "FAILED", "KILLED"]
    with yarn_client(ClientOptions()) as client:
        apps = [a for a in client.get_applications(states=states)
                if appspec.APP_TAG in set(a.tags or ())]
    apps.sort(key=lambda a: a.start_time or 0, reverse=True)
    print(f"{'APPLICATION':<32} {'NAME':<20} {'STATE':<10} {'FINAL':<10} STARTED")
    for a in apps:
        print(f"{a.id:<32} {a.name[:20]:<20} {str(a.state):<10} {str(a.final_status):<10} "
              f"{a.start_time}")
    return 0
