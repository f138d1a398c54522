"""YARN backend: stage files, submit through skein, watch, and the lifecycle commands.

Thin on purpose: what runs the job is the same driver (in the ApplicationMaster) and
launchers (in the containers) as local mode; this module only talks to YARN. Reading
reports goes through the RM's REST API where it can (no JVM), through skein otherwise.
Every YARN or skein failure becomes one TfYarnError line saying what to run next.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from tfyarn import appspec, rm
from tfyarn import files as filesmod
from tfyarn import kv as kvmod
from tfyarn.errors import EnvironmentMissing, JobFailed, SpecError, TfYarnError
from tfyarn.follow import LiveLogs
from tfyarn.interrupts import Interrupts
from tfyarn.jobspec import JobSpec
from tfyarn.policy import (
    STATE_EXIT,
    Outcome,
    attempt_tables,
    elapsed_words,
    exit_code,
    restart_words,
)
from tfyarn.progress import Progress
from tfyarn.settings import Settings
from tfyarn.tensorboard import announce
from tfyarn.tfconfig import Task
from tfyarn.timing import AGGREGATION_WAIT_S, LIVE_LOG_POLL_S, YARN_KILL_WAIT_S, YARN_POLL_S

TERMINAL = {"FINISHED", "FAILED", "KILLED"}
REPORT_RETRIES = 5  # consecutive failed report calls before the watcher gives up
NO_HADOOP = ("no Hadoop client here: skein needs the `yarn` command on PATH ($HADOOP_HOME/bin) "
             "and HADOOP_CONF_DIR (or -conf) pointing at the cluster; or run with --local")


def say(msg: str) -> None:
    with suppress(OSError, ValueError):
        print(f"tfyarn: {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class ClientOptions:
    conf_dir: str | None = None
    principal: str | None = None
    keytab: str | None = None
    detach: bool = False
    follow: bool = False  # -interact True: stream every task's output while watching


# ---------------------------------------------------------------- staging (local I/O only)


def _archive(entries: list[tuple[str, str]], dest: str, what: str) -> None:
    """A dir's files as a .tar.gz: links already followed by the walk, stored as files.
    Deterministic (sorted, no gzip timestamp), so an unchanged dir hashes the same and
    the HDFS cache finds it."""
    sizes = {src: os.path.getsize(src) for src, _ in entries if os.path.isfile(src)}
    progress = Progress(f"packing {what}", sum(sizes.values()))
    with open(dest, "wb") as raw, gzip.GzipFile("", "wb", fileobj=raw, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", dereference=True) as tar:
        for src, rel in sorted(entries, key=lambda e: e[1]):
            tar.add(src, arcname=rel, recursive=False)
            progress.add(sizes.get(src, 0))
    progress.finish()


def stage(spec: JobSpec, tmp: str) -> appspec.Staged:
    """Write the job JSON and pack each `-f` directory as an archive YARN will unpack."""
    filesmod.inventory(spec.files, spec.yarn.max_upload_mb, skip=[tmp])
    job_json = os.path.join(tmp, appspec.JOB_FILE)
    with open(job_json, "w", encoding="utf-8") as f:
        f.write(spec.to_json())
    resources, contents = [], []
    for i, f in enumerate(spec.files):
        if f.remote:  # YARN localizes it from HDFS itself: nothing through the client
            resources.append((f.dest, f.source, "file"))
            continue
        if not f.is_dir:
            resources.append((f.dest, os.path.realpath(f.source), "file"))
            continue
        name = f.dest or f".tfyarn-files-{i}"
        archive = os.path.join(tmp, f"files-{i}.tar.gz")
        _archive([(os.path.join(f.source, rel), rel)
                  for rel, _ in filesmod.walk(f.source, [tmp])], archive, f"-f {f.source}")
        resources.append((name, archive, "archive"))
        if not f.dest:
            contents.append(name)
    env = spec.runtime.arg if spec.runtime.mode == "virtual-env" else None
    return appspec.Staged(job_json, tuple(resources), tuple(contents), env)


def use_cache(staged: appspec.Staged, settings: Settings, opts: ClientOptions) -> appspec.Staged:
    """Swap the env archive and big -f archives for their copies in the HDFS cache,
    uploading each once; where the cache cannot serve, skein uploads them as before."""
    from tfyarn.hdfscache import MIN_DIR_BYTES, HdfsCache

    big = [r for r in staged.resources
           if r[2] == "archive" and os.path.getsize(r[1]) >= MIN_DIR_BYTES]
    env = staged.env_archive if staged.env_archive and "://" not in staged.env_archive else None
    if env is None and not big:
        return staged
    try:
        cache = HdfsCache.open(settings.conf_dir(opts.conf_dir), settings.user)
        if cache is None:
            say("HDFS cache not usable here (no HADOOP_CONF_DIR, or Kerberos): uploading")
            return staged
        if env is not None:
            env = _cached(cache, env, "-m_arg")
        swapped = {r[1]: _cached(cache, r[1], f"-f {r[0]}") for r in big}
    except Exception as exc:  # WebHDFS down, permissions: the submit itself must go on
        say(f"HDFS cache failed ({exc}); uploading instead")
        return staged
    resources = tuple((n, swapped.get(src, src), kind) for n, src, kind in staged.resources)
    return dataclasses.replace(staged, resources=resources,
                               env_archive=env or staged.env_archive)


def _cached(cache: Any, local: str, what: str) -> str:
    uri, hit = cache.put(local)
    size = os.path.getsize(local) / 2**20
    say(f"{what}: cached on HDFS, nothing uploaded ({uri})" if hit
        else f"{what}: uploaded {size:.0f} MB to the HDFS cache ({uri}); later submits reuse it")
    return uri


def load_defaults(settings: Settings) -> appspec.ClusterDefaults:
    """Site defaults from TFYARN_CONF, ~/.config/tfyarn/tfyarn.yaml or /etc/tfyarn/tfyarn.yaml."""
    for path in settings.conf_files():
        if os.path.isfile(path):
            return _parse_defaults(path)
    return appspec.ClusterDefaults()


def _parse_defaults(path: str) -> appspec.ClusterDefaults:
    import yaml

    fix = f"fix {path} (see conf/tfyarn.yaml in tfyarn for the format) or point TFYARN_CONF " \
          "elsewhere"
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SpecError(f"site defaults {path}: cannot read them ({exc}); {fix}") from None
    docker, env = (data.get("docker") or {}, data.get("env") or {}) if isinstance(data, dict) \
        else (None, None)
    if not isinstance(docker, dict) or not isinstance(env, dict) \
            or not isinstance(docker.get("mounts") or [], list):
        raise SpecError(f"site defaults {path}: expected a mapping with `docker:` (network, "
                        f"mounts list) and `env:` mappings; {fix}")
    return appspec.ClusterDefaults(
        docker_network=str(docker.get("network", "host")),
        docker_mounts=tuple(str(m) for m in docker.get("mounts") or ()),
        extra_env={str(k): str(v) for k, v in env.items()})


# ---------------------------------------------------------------- skein client


def require_client(opts: ClientOptions) -> None:
    """Refuse early, before staging anything or touching ~/.skein, if YARN can't be reached."""
    if opts.keytab and not os.path.isfile(opts.keytab):
        raise SpecError(f"--keytab: {opts.keytab!r} does not exist")
    if shutil.which("yarn") is None:
        raise EnvironmentMissing(f"{NO_HADOOP} (missing: yarn)")


def driver_log_path() -> str:
    """Where skein's driver JVM logs: a file per client process, not el_submit's stderr
    (which stays tfyarn's own: progress, task lines, the verdict)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    for folder in (os.path.join(base, "tfyarn", "logs"),
                   os.path.join(tempfile.gettempdir(), f"tfyarn-logs-{os.getuid()}")):
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError:
            continue
        if os.access(folder, os.W_OK):
            return os.path.join(folder, f"skein-driver-{os.getpid()}.log")
    return os.devnull


@contextmanager
def yarn_client(opts: ClientOptions) -> Iterator[Any]:
    """A skein client, with what is missing said in one line instead of a traceback. Its
    driver's log goes to a file, named when the client fails and removed otherwise."""
    require_client(opts)
    if opts.conf_dir:
        os.environ["HADOOP_CONF_DIR"] = os.path.abspath(opts.conf_dir)  # read by skein's driver
    import skein

    log = driver_log_path()
    client = _start_client(skein, opts, log)
    keep = False
    try:
        with client:
            yield client
    except (skein.exceptions.SkeinError, ConnectionError) as exc:  # any call inside
        keep = True
        raise TfYarnError(f"a YARN call failed: {exc}; check the cluster (yarn node -list) "
                          f"and try again (skein's driver log: {log})") from None
    finally:
        if not keep and log != os.devnull:
            with suppress(FileNotFoundError):
                os.unlink(log)


def _start_client(skein: Any, opts: ClientOptions, log: str) -> Any:
    # skein.Client.__del__ raises on a client whose start failed: keep that noise quiet
    # while the half-built client is freed, and say what is wrong in one line instead.
    hook, message = sys.unraisablehook, None
    sys.unraisablehook = lambda _info: None
    try:
        try:
            return skein.Client(principal=opts.principal, keytab=opts.keytab, log=log,
                                log_level="INFO")
        except (OSError, subprocess.CalledProcessError, skein.exceptions.DriverError) as exc:
            message = _client_failure(exc)
    finally:
        sys.unraisablehook = hook
    raise EnvironmentMissing(f"{message} (skein's driver log: {log})")


def _client_failure(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"{NO_HADOOP} (missing: {exc.filename or exc})"
    if isinstance(exc, subprocess.CalledProcessError):
        return (f"`{' '.join(exc.cmd)}` failed with exit code {exc.returncode}: the Hadoop client "
                "is not working here; check HADOOP_HOME, JAVA_HOME and HADOOP_CONF_DIR (-conf)")
    return f"cannot start skein's YARN client: {exc}; check HADOOP_CONF_DIR (-conf) and Kerberos"


def report(client: Any, app_id: str) -> Any:
    """skein's application report; any failure is one line saying what to run next."""
    import skein

    try:
        return client.application_report(app_id)
    except ValueError as exc:
        raise TfYarnError(f"no application {app_id}: {exc} (list them: tfyarn ls --all)") from None
    except (skein.exceptions.SkeinError, ConnectionError, OSError) as exc:
        raise TfYarnError(f"cannot reach YARN for {app_id}: {exc}; try again: "
                          f"tfyarn status {app_id}") from None


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


def submit(client: Any, app_spec: Any, spec: JobSpec) -> str:
    """Submit; a cluster that refuses the request says so in one line."""
    import skein

    try:
        return client.submit(app_spec)
    except ValueError as exc:
        gpus = max(r.resources.gpus for r in spec.roles)
        if gpus and "gpu" in str(exc).lower():
            raise SpecError(f"-wg {gpus}: this cluster has no GPU resource (yarn.io/gpu) "
                            f"configured ({exc}); use -wg 0, or a cluster/queue with GPU "
                            "scheduling enabled") from None
        raise SpecError(f"YARN refused the application: {exc}") from None
    except (skein.exceptions.SkeinError, ConnectionError) as exc:
        raise TfYarnError(f"submission failed: {exc}; check the cluster with: yarn node -list")\
            from None


# ---------------------------------------------------------------- submit and watch


def submit_and_watch(spec: JobSpec, settings: Settings, opts: ClientOptions,
                     interrupts: Interrupts | None = None) -> int:
    interrupts = interrupts or Interrupts()
    require_client(opts)
    defaults = load_defaults(settings)
    with tempfile.TemporaryDirectory(prefix="tfyarn-stage-") as tmp:
        staged = use_cache(stage(spec, tmp), settings, opts)
        app_spec = appspec.application_spec(spec, staged, defaults)
        with yarn_client(opts) as client, interrupts.deferred():
            # deferred from before the submit: a signal during it must not lose the app id
            # (the watcher's first step kills the application then)
            upload = Progress("submitting; skein uploads what YARN localizes",
                              _local_bytes(staged))
            app_id = submit(client, app_spec, spec)
            upload.finish(done=upload.total)
            try:
                print(app_id, flush=True)
            except (OSError, ValueError, AttributeError):
                say(f"warning: stdout is closed, so the application id is not printed there: "
                    f"{app_id}")
            return _after_submit(client, app_id, spec, opts, interrupts)


def _local_bytes(staged: appspec.Staged) -> int:
    """What skein uploads at submit: the staged files that are still local (once each)."""
    paths = {staged.job_json, staged.env_archive or "", *(r[1] for r in staged.resources)}
    return sum(os.path.getsize(p) for p in paths if "://" not in p and os.path.isfile(p))


def _after_submit(client: Any, app_id: str, spec: JobSpec, opts: ClientOptions,
                  interrupts: Interrupts) -> int:
    if opts.detach and not interrupts.count:  # interrupted while submitting: the watcher kills
        say(f"submitted {app_id}; follow it with: tfyarn status {app_id} | tfyarn logs {app_id} "
            f"| tfyarn kill {app_id}")
        return 0
    return Watcher(client, app_id, spec, interrupts, follow=opts.follow).run()


def stop_application(client: Any, app_id: str, reason: str, grace: float = 3.0,
                     interrupts: Interrupts | None = None) -> str:
    """Ask the driver to stop every task (orderly, final status KILLED); force it when
    the driver cannot (no AM yet, no answer in time) or a second signal says so."""
    store = app_store(client, app_id)
    if store is not None:
        try:
            store.put(kvmod.KILL, reason)
        except kvmod.StoreGone:
            store = None
    deadline = time.monotonic() + grace + YARN_KILL_WAIT_S
    while store is not None and time.monotonic() < deadline:
        if interrupts is not None and interrupts.count >= 2:
            say("second signal: killing the application now")
            break
        state = str(report(client, app_id).state)
        if state in TERMINAL:
            return state
        time.sleep(YARN_POLL_S)
    client.kill_application(app_id)
    return "KILLED"


@dataclass
class Watcher:
    """Follows one application, printing progress to stderr; returns its exit code."""

    client: Any
    app_id: str
    spec: JobSpec
    interrupts: Interrupts = field(default_factory=Interrupts)
    state: str = ""
    store: kvmod.SkeinKV | None = None
    tracking_shown: bool = False
    registered: int = -1
    phase: str | None = None
    started: set[str] = field(default_factory=set)
    outcome: Outcome | None = None
    failures: int = 0
    begun: float = field(default_factory=time.monotonic)
    attempt: int = 0
    tensorboard_said: bool = False
    page_said: bool = False
    follow: bool = False
    live: LiveLogs | None = None
    followed: float = -1e9

    def run(self) -> int:
        while True:
            if self.interrupts.count:
                return self._interrupted()
            rep = self._report()
            if rep is not None:
                self._state(rep)
                if str(rep.state) in TERMINAL:
                    return self._final(rep)
                if str(rep.state) == "RUNNING":
                    self._progress()
                    if self.outcome is not None and self.spec.tensorboard_linger_s:
                        return self._lingering()
                elif time.monotonic() - self.begun > self.spec.register_timeout_s:
                    self._never_started()
            time.sleep(YARN_POLL_S)

    def _report(self) -> Any:
        """The report, or None after a passing failure; gives up after a few in a row."""
        try:
            rep = report(self.client, self.app_id)
        except TfYarnError:
            self.failures += 1
            if self.failures >= REPORT_RETRIES:
                raise
            return None
        self.failures = 0
        return rep

    def _interrupted(self) -> int:
        words = self.interrupts.words()
        say(f"{words}: killing {self.app_id} (send it again to kill at once)")
        stop_application(self.client, self.app_id, f"{words} (el_submit)",
                         self.spec.stop_grace_s, self.interrupts)
        raise JobFailed(f"{self.app_id} killed: el_submit was {words}; {next_steps(self.app_id)}",
                        self.interrupts.exit_code())

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
        """Read the job's store; an AM that went away is not an error here: the next
        report says how the application ended."""
        try:
            if self.store is None:
                self.store = app_store(self.client, self.app_id)
                if self.store is None:
                    return
                self.store.put(kvmod.CLIENT, "watching")
            self._read_store(self.store)
        except Exception:  # skein raises its own family and grpc's; the report decides
            self.store = None

    def _read_store(self, store: kvmod.SkeinKV) -> None:
        keys = kvmod.Scoped(store, self._attempt(store)).scan("task/")
        n = len(self.spec.tasks())
        registered = sum(k.endswith("/addr") for k in keys)
        if registered != self.registered:
            self.registered = registered
            say(f"tasks registered {registered}/{n}")
        phase = store.get(kvmod.PHASE)
        if phase and phase != self.phase:
            self.phase = phase
            say({"running": "training", "stopping": "finishing"}.get(phase, phase))
        if not self.page_said and (page := store.get(kvmod.PAGE)):
            say(f"job page: {page}")
            self.page_said = True
        if not self.tensorboard_said:
            line = announce(store.get(kvmod.TENSORBOARD))
            if line:
                say(line)
                self.tensorboard_said = True
        started = {k.split("/")[1] for k in keys if k.endswith("/started")}
        for task in sorted(started - self.started):
            self._print_log_url(store, task)
        self.started |= started
        raw = store.get(kvmod.STATUS)
        self._follow(store, final=bool(raw))
        if raw and self.outcome is None:
            self.outcome = Outcome.from_json(raw)
            store.put(kvmod.ACK, "1")

    def _follow(self, store: kvmod.SkeinKV, final: bool) -> None:
        """-interact: the tasks' new output; at most every LIVE_LOG_POLL_S, and once more
        when the final status is out (before the ApplicationMaster may go)."""
        if not self.follow or (not final and time.monotonic() - self.followed < LIVE_LOG_POLL_S):
            return
        self.followed = time.monotonic()
        self.live = self.live or LiveLogs(store.app, getattr(sys.stderr, "buffer", None))
        self.live.poll()

    def _attempt(self, store: kvmod.SkeinKV) -> int:
        """The gang now running; a restart is said once, with why."""
        attempt, earlier = kvmod.attempts(store)
        if attempt > self.attempt:
            self.attempt = attempt
            say(restart_words(self.spec, attempt, earlier[-1]["message"]))
            self.registered, self.started = -1, set()
        return self.attempt

    def _print_log_url(self, store: kvmod.SkeinKV, task: str) -> None:
        name = appspec.service_name(Task.parse(task), self.spec)
        try:
            containers = store.app.get_containers(services=[name])
        except Exception:
            containers = []
        for c in containers:
            say(f"{task} started: logs {log_url(c)}")

    def _lingering(self) -> int:
        """The job ended but its application stays up for TensorBoard: the outcome is
        final already, so el_submit returns it now."""
        assert self.outcome is not None
        say(f"the job ended; TensorBoard stays up {self.spec.tensorboard_linger_s / 60:g} min "
            f"(--tensorboard-linger); end it sooner with: tfyarn kill {self.app_id}")
        return self._final(SimpleNamespace(final_status=self.outcome.state, diagnostics=""))

    def _final(self, rep: Any) -> int:
        final = str(rep.final_status)
        if self.live is not None:
            finish_live_logs(self.live, self.app_id)
        if self.outcome is not None:
            say("tasks:")
            for line in attempt_tables(self.outcome):
                say(f"  {line}")
        state = final if final in STATE_EXIT else ("KILLED" if self.state == "KILLED" else "FAILED")
        if state == "SUCCEEDED":
            say(f"{self.app_id} SUCCEEDED in {elapsed_words(time.monotonic() - self.begun)}")
            return 0
        raise JobFailed(failure_text(self.app_id, state, self.outcome, rep.diagnostics),
                        exit_code(state))


def failure_text(app_id: str, state: str, outcome: Outcome | None, diagnostics: str) -> str:
    if outcome is None:
        return (f"{app_id} {state}: {(diagnostics or 'no diagnostics').strip()}\n"
                f"{next_steps(app_id)}")
    return "\n".join([*outcome.describe(app_id, state), next_steps(app_id, outcome.task)])


# ---------------------------------------------------------------- lifecycle commands


def rest_client(opts: ClientOptions) -> rm.RestClient:
    settings = Settings.from_environ()
    return rm.RestClient.from_conf_dir(settings.conf_dir(opts.conf_dir), settings.user)


def rest_report(app_id: str, opts: ClientOptions) -> dict | None:
    """The RM's report as a dict (state, finalStatus, ...), or None where REST can't serve."""
    try:
        return rest_client(opts).app(app_id)
    except rm.NotFound:
        raise TfYarnError(f"no application {app_id} (list them: tfyarn ls --all)") from None
    except rm.Unavailable:
        return None


def _print_report(app_id: str, name: str, state: str, final: str, url: str, diag: str) -> None:
    print(f"application: {app_id}\nname: {name}\nstate: {state}\nfinal status: {final}\n"
          f"tracking URL: {url}")
    if diag:
        print(f"diagnostics:\n{diag.strip()}")


def status(app_id: str, opts: ClientOptions | None = None, tasks: bool = False) -> int:
    opts = opts or ClientOptions()
    rep = rest_report(app_id, opts)
    if rep is not None and not (tasks and rep.get("state") == "RUNNING"):
        _print_report(app_id, rep.get("name", ""), rep.get("state", ""),
                      rep.get("finalStatus", ""), rep.get("trackingUrl", ""),
                      rep.get("diagnostics", ""))
        if rep.get("state") == "RUNNING":
            print(f"(per-task table: tfyarn status {app_id} --tasks)")
        return 0
    with yarn_client(opts) as client:
        r = report(client, app_id)
        _print_report(app_id, r.name, str(r.state), str(r.final_status), r.tracking_url or "",
                      r.diagnostics or "")
        if str(r.state) == "RUNNING" and (store := app_store(client, app_id)):
            print("tasks:")
            for line in live_tasks(store):
                print(f"  {line}")
    return 0


def live_tasks(store: kvmod.KV) -> list[str]:
    """Per-task lines while the job runs (address, exit code once it has one), for the
    current attempt, after one line per earlier attempt saying how it ended."""
    attempt, earlier = kvmod.attempts(store)
    out = [f"attempt {a['attempt'] + 1}: {a['state']}: {a['message']}" for a in earlier]
    if out:
        out.append(f"attempt {attempt + 1}: running")
    keys = kvmod.Scoped(store, attempt).scan("task/")
    for task in sorted({k.split("/")[1] for k in keys}):
        addr = keys.get(f"task/{task}/addr", "-")
        ended = keys.get(f"task/{task}/exit")
        code = json.loads(ended).get("code") if ended else None
        state = f"exit {code}" if ended else ("running" if f"task/{task}/started" in keys
                                               else "registered")
        out.append(f"{'  ' if earlier else ''}{task:<12} {addr:<30} {state}")
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


def logs(app_id: str, task: str | None, opts: ClientOptions | None = None,
         follow: bool = False) -> int:
    opts = opts or ClientOptions()
    if task:
        try:
            Task.parse(task)
        except ValueError as exc:
            raise SpecError(f"--task: {exc}") from None
    rep = rest_report(app_id, opts)
    if rep is not None and rep.get("state") in TERMINAL:
        return _aggregated_logs(app_id, task, opts)
    with yarn_client(opts) as client:
        if str(report(client, app_id).state) not in TERMINAL:
            if follow:
                return _follow_logs(client, app_id, task)
            return _live_log_urls(client, app_id, task)
    return _aggregated_logs(app_id, task, opts)


def _follow_logs(client: Any, app_id: str, task: str | None) -> int:
    """`tfyarn logs APP --follow`: the output as it comes (once the application master
    runs: right after a --detach it may still be queued), until the application ends."""
    live = None
    while True:
        if live is None and (store := app_store(client, app_id)) is not None:
            live = LiveLogs(store.app, getattr(sys.stdout, "buffer", None), task)
        with suppress(Exception):  # the AM is gone (or not there yet): the report says
            if live is not None:
                live.poll()
        state = str(report(client, app_id).state)
        if state in TERMINAL:
            if live is not None:
                finish_live_logs(live, app_id)
            say(f"{app_id} ended: {state}; all of it: tfyarn logs {app_id}")
            return 0
        time.sleep(LIVE_LOG_POLL_S)


def finish_live_logs(live: LiveLogs, app_id: str) -> None:
    """After the end: the rest of each followed container's output, from the aggregated
    logs (the NodeManager forgets an ended application's containers within seconds; YARN
    aggregates their logs within seconds too). Bounded: says what to run when it gives up."""
    deadline = time.monotonic() + AGGREGATION_WAIT_S
    while live.pending():
        r = subprocess.run(["yarn", "logs", "-applicationId", app_id], capture_output=True,
                           timeout=AGGREGATION_WAIT_S)
        live.finish(r.stdout)
        if not live.pending() or time.monotonic() > deadline:
            break
        time.sleep(LIVE_LOG_POLL_S)
    if live.pending():
        say(f"some output is not aggregated yet; all of it later: tfyarn logs {app_id}")


def _live_log_urls(client: Any, app_id: str, task: str | None) -> int:
    store = app_store(client, app_id)
    if store is None:
        raise TfYarnError(f"{app_id} is not running yet; try again: tfyarn logs {app_id}")
    print(f"{app_id} is running; container logs:")
    try:
        containers = store.app.get_containers()
    except Exception as exc:  # the AM ended between the report and this call
        raise TfYarnError(f"{app_id} ended just now ({exc}); try again: tfyarn logs "
                          f"{app_id}") from None
    if task:  # its own container, else (-ppn/-wnpg packing) every container: one has it
        own = [c for c in containers if c.service_name == appspec.service_name(Task.parse(task))]
        containers = own or containers
    for c in containers:
        print(f"  {c.service_name:<12} {log_url(c)}")
    return 0


def _aggregated_logs(app_id: str, task: str | None, opts: ClientOptions) -> int:
    """`yarn logs` (skein's own reader fails on Hadoop 3.3's bucket-logs-tfile layout)."""
    if shutil.which("yarn") is None:
        raise EnvironmentMissing(f"`yarn` is not on PATH: {NO_HADOOP}")
    env = dict(os.environ)
    if opts.conf_dir:
        env["HADOOP_CONF_DIR"] = os.path.abspath(opts.conf_dir)
    r = subprocess.run(["yarn", "logs", "-applicationId", app_id], capture_output=True,
                       text=True, env=env)
    if r.returncode != 0:
        raise TfYarnError(f"yarn logs failed for {app_id}: {r.stderr.strip()[-500:]} "
                          "(is log aggregation enabled, yarn.log-aggregation-enable?)")
    text = select_task_logs(r.stdout, task) if task else r.stdout
    if task and not text:
        raise TfYarnError(f"no container of {app_id} ran {task}; see all: tfyarn logs {app_id}")
    sys.stdout.write(text)
    return 0


def kill(app_id: str, opts: ClientOptions | None = None) -> int:
    opts = opts or ClientOptions()
    rep = rest_report(app_id, opts)
    if rep is not None and rep.get("state") in TERMINAL:
        say(f"{app_id} already ended: {rep.get('state')} / {rep.get('finalStatus')}")
        return 0
    with yarn_client(opts) as client:
        r = report(client, app_id)
        if str(r.state) in TERMINAL:
            say(f"{app_id} already ended: {r.state} / {r.final_status}")
            return 0
        state = stop_application(client, app_id, "killed with tfyarn kill")
        say(f"{app_id}: {state}")
    return 0


def ls(show_all: bool, opts: ClientOptions | None = None) -> int:
    opts = opts or ClientOptions()
    states = rm.ALL_STATES if show_all else rm.ACTIVE_STATES
    try:
        rows = [(a["id"], a.get("name", ""), a.get("state", ""), a.get("finalStatus", ""),
                 a.get("startedTime", 0)) for a in rest_client(opts).apps(appspec.APP_TAG, states)]
    except rm.Unavailable:
        rows = _ls_skein(show_all, opts)
    rows.sort(key=lambda r: r[4] or 0, reverse=True)
    print(f"{'APPLICATION':<32} {'NAME':<20} {'STATE':<10} {'FINAL':<10} STARTED")
    for app_id, name, state, final, started in rows:
        print(f"{app_id:<32} {str(name)[:20]:<20} {state:<10} {final:<10} {_when(started)}")
    return 0


def _when(millis: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(int(millis) / 1000))
    except (TypeError, ValueError, OverflowError, OSError):
        return str(millis)


def _ls_skein(show_all: bool, opts: ClientOptions) -> list[tuple]:
    states = list(rm.ALL_STATES[2:]) if show_all else None
    with yarn_client(opts) as client:
        apps = [a for a in client.get_applications(states=states)
                if appspec.APP_TAG in set(a.tags or ())]
    return [(a.id, a.name, str(a.state), str(a.final_status),
             int(a.start_time.timestamp() * 1000) if hasattr(a.start_time, "timestamp")
             else a.start_time) for a in apps]
