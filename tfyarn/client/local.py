"""Local backend (`el_submit --local`): the driver and one launcher per task as local processes.

Same driver, same launcher, same key-value protocol as on YARN, with a directory as the
store. Every process writes its own log file (a file never blocks a writer and outlives
the client); the client shows them on stderr, prefixed `[worker:1] `, while it can.
stdout carries only the job id. Whatever way the job ends (success, failure, Ctrl-C,
SIGTERM, SIGHUP, the client SIGKILLed), nothing carrying its TFYARN_JOB_ID survives:
the launchers contain their trees, the driver ends the job when the client dies, and the
client sweeps what is left when it can.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO

from tfyarn.client import common
from tfyarn.client import files as filesmod
from tfyarn.client.interrupts import Interrupts
from tfyarn.client.terminal import TerminalView
from tfyarn.core.errors import EXIT_TFYARN, EnvironmentMissing, JobFailed, SpecError
from tfyarn.core.jobspec import Container, JobSpec, ShippedFile
from tfyarn.core.policy import elapsed_words, plural, signal_of
from tfyarn.core.progress import Progress, Reading
from tfyarn.core.records import Outcome, TaskEnd
from tfyarn.core.say import say
from tfyarn.core.settings import Settings
from tfyarn.core.tfconfig import Task
from tfyarn.core.timing import (
    CLIENT_TICK_S,
    FOLLOW_S,
    LOCAL_DRIVER_SLACK_S,
    REAP_WAIT_S,
    RESTART_EXIT_WAIT_S,
    STOP_REPORT_S,
    TENSORBOARD_DONE_SLACK_S,
    TENSORBOARD_START_S,
)
from tfyarn.protocol import kv as kvmod
from tfyarn.runtime import docker as dockerrun
from tfyarn.system import forks, inotify, spawn, tree

JOB_DIR_PREFIX = "tfyarn-"
Process = subprocess.Popen | forks.Child | forks.Forked  # forked: the driver, the launchers


def new_job_id() -> str:
    return f"local_{time.strftime('%Y%m%d_%H%M%S')}_{uuid.uuid4().hex[:6]}"


# ---------------------------------------------------------------- pre-flight (no process yet)


def launcher_docker_options(spec: JobSpec, settings: Settings) -> list[str]:
    """-m docker: the launchers' options for the image and the site's docker network and
    mounts (tfyarn.yaml); locally the launchers always run `docker run` themselves."""
    if spec.runtime.mode != "docker":
        return []
    from tfyarn.client import staging  # its imports (tarfile, gzip) only for -m docker

    run = staging.load_defaults(settings).docker_run(spec, "tfyarn")
    return run.argv_options() if run else []


def count_gpus() -> int:
    """GPUs this machine has (NVIDIA driver view); 0 when there is no driver."""
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


def temp_root(settings: Settings) -> str:
    """Where job dirs go: TMPDIR, which must be a writable directory if it is set."""
    root = settings.tmpdir or tempfile.gettempdir()
    if not os.path.exists(root):
        problem = "does not exist"
    elif not os.path.isdir(root):
        problem = "is not a directory"
    elif not os.access(root, os.W_OK | os.X_OK):
        problem = "is not writable"
    else:
        return root
    raise EnvironmentMissing(f"TMPDIR={root!r} {problem}: local jobs keep their dirs there; "
                             "set TMPDIR to a writable directory (e.g. export TMPDIR=/tmp)")


def assign_gpus(spec: JobSpec, have: int) -> dict[str, str]:
    """Container name -> its GPU ids ("0,1") or "none": disjoint ranges of this machine's
    GPUs, in container order; if the job asks for more than there are, every container
    runs on CPU (with a warning), as a job that cannot have its GPUs should not half-run."""
    need = sum(c.resources.gpus for c in spec.containers())
    if need > have:
        if need:
            say(f"warning: the job asks for {need} GPUs (-wg per container) and this machine "
                f"has {have}; running every task on CPU")
        return {c.name: "none" for c in spec.containers()}
    out, start = {}, 0
    for c in spec.containers():
        n = c.resources.gpus
        out[c.name] = ",".join(str(i) for i in range(start, start + n)) or "none"
        start += n
    return out


def preflight(spec: JobSpec, settings: Settings) -> tuple[str, filesmod.Inventory]:
    """Everything that can refuse the job before a single process starts; returns the
    temp root and what -f ships."""
    root = temp_root(settings)
    if spec.runtime.mode == "docker":
        why = dockerrun.unusable()
        if why:
            raise EnvironmentMissing(f"-m docker needs a reachable docker daemon ({why}); "
                                     "start docker or use -m local / -m virtual-env")
    if spec.runtime.mode == "virtual-env" and "://" in (spec.runtime.arg or ""):
        raise SpecError("-m_arg: --local needs a local archive path, not a remote URL")
    inv = filesmod.inventory(spec.files, spec.yarn.max_upload_mb, skip=[root])
    return root, inv


# ---------------------------------------------------------------- job dir


def unpack_env(archive: str, dest: str) -> str:
    """Unpack a packed env once for all tasks; returns its bin dir."""
    import tarfile  # -m virtual-env only: kept off every other job's start

    try:
        progress = Progress(f"unpacking {os.path.basename(archive)}", os.path.getsize(archive))
        with open(archive, "rb") as raw, tarfile.open(
                fileobj=Reading(raw, progress), mode="r|*") as tar:  # a stream: read once
            tar.extractall(dest, filter="tar")
        progress.finish()
    except (tarfile.TarError, OSError) as exc:
        raise SpecError(f"-m_arg: cannot unpack {archive!r} as a .tar.gz env: {exc}") from None
    bin_dir = os.path.join(dest, "bin")
    if not os.path.isdir(bin_dir):
        raise SpecError(f"-m_arg: {archive!r} has no bin/ at its top; pack the env itself "
                        "(venv-pack / conda-pack)")
    conda_unpack = os.path.join(bin_dir, "conda-unpack")
    if os.path.exists(conda_unpack):
        subprocess.run([conda_unpack], check=False)
    return bin_dir


@dataclass(frozen=True)
class JobDir:
    """The on-disk layout of one local job."""

    root: str

    @property
    def kv_root(self) -> str:
        return os.path.join(self.root, "kv")

    @property
    def kv_url(self) -> str:
        return f"dir:{self.kv_root}"

    @property
    def job_json(self) -> str:
        return os.path.join(self.root, "job.json")

    @property
    def shared_files(self) -> str:
        return os.path.join(self.root, "files")

    def task_dir(self, container: Container) -> str:
        return os.path.join(self.root, "tasks", container.name)

    def log_path(self, label: str) -> str:
        return os.path.join(self.root, "logs", f"{label.replace(':', '_')}.log")


def find_job_dir(job_id: str, settings: Settings) -> str | None:
    """The dir of a local job, if it is still there (`tfyarn status local_...`)."""
    pattern = os.path.join(settings.tmpdir or tempfile.gettempdir(), f"{JOB_DIR_PREFIX}{job_id}-*")
    found = sorted(glob.glob(pattern))
    return found[-1] if found else None


def stage(spec: JobSpec, root: str, inv: filesmod.Inventory, job_id: str,
            settings: Settings) -> tuple[JobDir, str]:
    """Create the job dir and stage everything; returns (dir, PATH prefix). A failure or
    interrupt half-way leaves no job dir behind."""
    try:
        jd = JobDir(tempfile.mkdtemp(prefix=f"{JOB_DIR_PREFIX}{job_id}-", dir=root))
    except OSError as exc:
        raise EnvironmentMissing(f"cannot create the job dir in {root}: {exc.strerror}; set "
                                 "TMPDIR to a writable directory with free space") from None
    try:
        return jd, _fill(spec, jd, inv, settings)
    except OSError as exc:
        shutil.rmtree(jd.root, ignore_errors=True)
        raise EnvironmentMissing(f"cannot stage the job in {jd.root}: {exc}; check free space "
                                 "and permissions under TMPDIR") from None
    except BaseException:
        shutil.rmtree(jd.root, ignore_errors=True)
        raise


def _fill(spec: JobSpec, jd: JobDir, inv: filesmod.Inventory, settings: Settings) -> str:
    os.makedirs(os.path.join(jd.root, "logs"))
    os.makedirs(jd.shared_files)
    filesmod.copy_into(inv, jd.shared_files)
    remote = [f for f in spec.files if f.remote]
    if remote:
        _download(remote, jd.shared_files, settings)
    names = sorted({*inv.top_level(), *(f.dest for f in remote)})
    for container in spec.containers():
        os.makedirs(jd.task_dir(container))
        filesmod.link_into(names, jd.shared_files, jd.task_dir(container))
    ckpt = spec.checkpoint_dir or os.path.join(jd.root, "checkpoints")  # restarts resume here
    with open(jd.job_json, "w", encoding="utf-8") as f:
        f.write(dataclasses.replace(spec, checkpoint_dir=ckpt).to_json())
    if spec.runtime.mode == "virtual-env":
        return unpack_env(spec.runtime.arg or "", os.path.join(jd.root, "env"))
    return os.path.dirname(sys.executable)


def _download(remote: Iterable[ShippedFile], dest: str, settings: Settings) -> None:
    """`-f hdfs://...`: copied into the job dir over WebHDFS (no JVM here); imported only
    for such jobs, off every other job's start."""
    from tfyarn.hdfs import webhdfs

    for f in remote:
        try:
            webhdfs.download(f.source, os.path.join(dest, f.dest), settings.conf_dir(),
                             settings.user)
        except webhdfs.HdfsUnavailable as exc:
            raise EnvironmentMissing(f"-f: {exc}") from None


# ---------------------------------------------------------------- processes


@dataclass
class Procs:
    """What this client started: the driver, the fork server and the launchers it forked
    (by container), the log view."""

    jd: JobDir
    follower: TerminalView | None = None  # started once nothing more is forked from here
    driver: forks.Child | None = None
    launchers: dict[Container, Process] = field(default_factory=dict)
    forks: forks.ForkServer | None = None  # every gang's launchers
    ended: set[int] = field(default_factory=set)  # launchers whose end was handled
    gang: int = 0  # the gang `launchers` belong to
    attempt: int = 0  # ... and its attempt (locally always the same number)
    tensorboard: subprocess.Popen | None = None  # the side task, with -enable_tensorboard
    docker: list[str] = field(default_factory=list)  # -m docker: the launchers' options

    def all(self) -> list[Process]:
        return [p for p in (self.driver, self.tensorboard, *self.launchers.values(),
                            self.forks.proc if self.forks else None) if p is not None]

    def show(self, path: str, prefix: str) -> None:
        if self.follower is not None:
            self.follower.add(path, prefix)

    def spawn(self, label: str, prefix: str | None, argv: list[str], cwd: str,
              env: dict[str, str]) -> subprocess.Popen:
        """One process in its own session (the terminal's Ctrl-C and hang-up reach only
        the client), logging to its own file, told by SIGTERM if the client dies; its
        lines are shown on the terminal after `prefix` (None: only in its file)."""
        path = self.jd.log_path(label)
        with open(path, "ab") as log:
            p = spawn.start(argv, env, cwd=cwd, stdout=log, stderr=log, new_session=True,
                           parent_death=signal.SIGTERM)
        if prefix is not None:
            self.show(path, prefix)
        return p


def base_env(settings: Settings, job_id: str, path_prefix: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(TFYARN_JOB_ID=job_id, TFYARN_ADVERTISE_HOST="127.0.0.1",
               PATH=path_prefix + os.pathsep + settings.path)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def start_all(spec: JobSpec, procs: Procs, env: dict[str, str], interrupts: Interrupts,
              gpus: dict[str, str], terminal: IO[bytes] | None) -> None:
    """The driver and the launchers' fork server, forked while this process has no other
    thread (each a millisecond: no interpreter start, nothing imported twice); then the
    log view's thread, TensorBoard, and attempt 0's launchers."""
    jd, py = procs.jd, sys.executable
    argv = ["--job", jd.job_json, "--kv", jd.kv_url, "--logs", os.path.join(jd.root, "logs")]
    try:
        procs.driver = forks.fork_call(lambda: _driver(argv), jd.root, env,
                                      log=jd.log_path("driver"), name="tfyarn-driver")
        procs.forks = forks.ForkServer(_launcher, env, jd.root)
    except OSError as exc:
        raise EnvironmentMissing(f"could not start tfyarn's driver: {exc}; raise the limits "
                                 "(ulimit -n, ulimit -u)") from None
    procs.follower = TerminalView(terminal, FOLLOW_S).start()
    procs.show(jd.log_path("driver"), "")
    try:
        if spec.tensorboard_dir:
            procs.tensorboard = procs.spawn(  # its chatter stays in logs/tensorboard.log
                "tensorboard", None,
                [py, "-m", "tfyarn.runtime.tensorboard", "--job", jd.job_json, "--kv", jd.kv_url,
                 "--python", job_python(env)], jd.root, env)
    except OSError as exc:
        raise EnvironmentMissing(f"could not start tfyarn's driver: {exc}; raise the limits "
                                 "(ulimit -n, ulimit -u)") from None
    start_launchers(spec, procs, env, interrupts, gpus)


def _driver(argv: list[str]) -> int:
    """The forked driver's life (its import happens in it, not in the client)."""
    from tfyarn.runtime import driver

    return driver.main(argv)


def _launcher() -> Callable[[list[str]], int]:
    """The launchers' entry point, imported in the fork server."""
    from tfyarn.runtime import launcher

    return launcher.main


def job_python(env: Mapping[str, str]) -> str:
    """The `python` the tasks' command lines get: first on the job's PATH."""
    return shutil.which("python", path=env.get("PATH")) or \
        shutil.which("python3", path=env.get("PATH")) or sys.executable


def check_tensorboard(spec: JobSpec, env: Mapping[str, str]) -> None:
    """-enable_tensorboard: the job's python must have tensorboard, said before anything
    starts (an image, -m docker, is not looked into)."""
    if not spec.tensorboard_dir or spec.runtime.mode == "docker":
        return
    python = job_python(env)
    found = subprocess.run([python, "-c", "import importlib.util as u, sys; "
                            "sys.exit(u.find_spec('tensorboard') is None)"],
                           env=dict(env), capture_output=True).returncode == 0
    if not found:
        from tfyarn.runtime import tensorboard

        raise EnvironmentMissing(f"-enable_tensorboard: {python} has no tensorboard; "
                                 f"{tensorboard.MISSING_HINT}, or drop -enable_tensorboard")


def start_launchers(spec: JobSpec, procs: Procs, env: dict[str, str], interrupts: Interrupts,
                    gpus: dict[str, str]) -> None:
    """One launcher per container for the gang in `procs.gang`, forked by the
    job's fork server (all asked for at once; none waits for another's start); stops
    asking as soon as a signal came. A one-task container's lines are prefixed `[task] `
    here; a launcher of several prefixes each process's lines itself. A restarted
    container appends to the same log file."""
    jd, forks = procs.jd, procs.forks
    assert forks is not None
    procs.launchers = {}
    for c in spec.containers():
        if interrupts.count:
            break
        tasks = ",".join(str(t) for t in c.tasks)
        log = jd.log_path(c.name)
        procs.launchers[c] = forks.spawn(
            ["--job", jd.job_json, "--tasks", tasks, "--kv", jd.kv_url, "--gpus",
             gpus[c.name], "--attempt", str(procs.attempt), "--gang", str(procs.gang),
             # -m docker: a task's container is the docker daemon's child, which only a
             # watchdog outliving a SIGKILLed el_submit and launcher can remove
             *(procs.docker or ["--no-watchdog"])],
            jd.task_dir(c), log, name="tfyarn-launcher")
        procs.show(log, f"[{c.tasks[0]}] " if len(c.tasks) == 1 else "")
    for child in procs.launchers.values():
        child.started()


def end_launchers(launchers: Mapping[Container, Process], job_id: str, gang: int,
                  timeout: float, docker: bool) -> None:
    """An earlier gang's launchers: they exit by themselves once they reported; one that
    did not in time is killed with its group, and what its tree left with it."""
    wait_procs(launchers.values(), timeout)
    left = {c: p for c, p in launchers.items() if p.poll() is None}
    kill_groups(left.values())
    for container, p in left.items():
        p.wait()
        end_leftovers(job_id, container, gang, docker)


def end_leftovers(job_id: str, container: Container, gang: int, docker: bool) -> None:
    """What the launcher of `container` started and left running when it died or was
    killed (a daemon that left its group; -m docker: its tasks' containers, the docker
    daemon's children): locally no watchdog forks to do it."""
    from tfyarn.runtime.launcher import TAG_VAR, container_tag  # rarely needed: its import

    tag = container_tag(job_id, container.tasks[0], gang)
    tree.kill_rounds(lambda: tree.tagged(TAG_VAR, f"{tag}.", prefix=True))
    if docker:
        tree.remove_containers(f"label={dockerrun.LABEL_LAUNCHER}={tag}")


class Wake:
    """What the client's loop blocks on instead of polling: a top-level key of the store
    put (inotify), a signal (Python's wakeup fd), a process of the job ending (pidfds).
    Where one is missing, `wait` says "look at everything" (None) at each tick."""

    def __init__(self, store_root: str) -> None:
        self.sel = selectors.DefaultSelector()
        self.watch = inotify.DirWatch.open()
        if self.watch is not None and self.watch.add(store_root, inotify.MOVED_TO):
            self.sel.register(self.watch.fd, selectors.EVENT_READ, "store")
        self.sig_r, self.sig_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.old_wakeup = signal.set_wakeup_fd(self.sig_w, warn_on_full_buffer=False)
        self.sel.register(self.sig_r, selectors.EVENT_READ, "signal")
        self.old_chld = signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select
        self.pidfds: dict[int, Process] = {}
        self.blind = False  # no pidfds here: every wake looks at every process

    def close(self) -> None:
        signal.set_wakeup_fd(self.old_wakeup)
        signal.signal(signal.SIGCHLD, self.old_chld)
        for fd in [*self.pidfds, self.sig_r, self.sig_w]:
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.watch is not None:
            self.watch.close()
        self.sel.close()

    def release(self) -> None:
        if self.watch is not None:
            self.watch.release()

    def add(self, procs: Iterable[Process]) -> None:
        for p in procs:
            try:
                fd = os.pidfd_open(p.pid)
            except (OSError, AttributeError):  # too old a kernel, or out of descriptors
                self.blind = True
                continue
            self.pidfds[fd] = p
            self.sel.register(fd, selectors.EVENT_READ, "pid")

    def wait(self, timeout: float) -> list[Process] | None:
        """Block until something happened or `timeout`; the processes that ended (None:
        unknown, look at all)."""
        ended = []
        for key, _ in self.sel.select(timeout):
            if key.data == "pid":
                self.sel.unregister(key.fd)
                os.close(key.fd)
                p = self.pidfds.pop(key.fd)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=REAP_WAIT_S)  # a forked one's code comes from its server
                ended.append(p)
            elif key.data == "signal":
                with contextlib.suppress(OSError):
                    os.read(self.sig_r, 4096)
            elif self.watch is not None:
                self.watch.drain()
        return None if self.blind else ended


# ---------------------------------------------------------------- teardown


def job_pids(job_id: str) -> list[int]:
    """Every process whose environment carries this job's id: the whole tree, however deep."""
    return tree.tagged("TFYARN_JOB_ID", job_id)


def kill_groups(procs: Iterable[Process]) -> None:
    """SIGKILL the process group of each process we started (each leads its own)."""
    for p in procs:
        if p.pid <= 1:  # a fork that never happened
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)


def kill_all(procs: Iterable[Process], job_id: str, docker: bool) -> None:
    """SIGKILL every process group we started, then anything else that carries the job id."""
    procs = list(procs)
    kill_groups(procs)
    tree.kill_rounds(lambda: job_pids(job_id))
    for p in procs:
        p.wait()
    if docker:
        tree.remove_containers(f"label={dockerrun.LABEL_JOB}={job_id}")




def wait_procs(procs: Iterable[Process], timeout: float,
               cut: Callable[[], bool] = lambda: False) -> bool:
    """Wait (bounded) for processes to end by themselves; `cut` ends the wait early."""
    deadline = time.monotonic() + timeout
    for p in procs:
        while p.poll() is None:
            if cut() or time.monotonic() > deadline:
                return False
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=FOLLOW_S)
    return True


# ---------------------------------------------------------------- the job


@dataclass
class LocalJob:
    spec: JobSpec
    settings: Settings
    interrupts: Interrupts = field(default_factory=Interrupts)
    job_id: str = field(default_factory=new_job_id)
    started: float = field(default_factory=time.monotonic)
    signals_before_linger: int | None = None  # a signal during the linger only ends it
    news: common.News = field(init=False)

    def __post_init__(self) -> None:
        self.news = common.News(self.spec)

    def run(self) -> Outcome:
        """Run the job to its end; returns the outcome, raises JobFailed when it did not
        succeed (with the exit code of the ending)."""
        root, inv = preflight(self.spec, self.settings)
        docker_options = launcher_docker_options(self.spec, self.settings)
        gpus = assign_gpus(self.spec, self.settings.gpu_count if self.settings.gpu_count
                           is not None else count_gpus())
        jd, prefix = stage(self.spec, root, inv, self.job_id, self.settings)
        env = base_env(self.settings, self.job_id, prefix)
        try:
            check_tensorboard(self.spec, env)
        except BaseException:
            shutil.rmtree(jd.root, ignore_errors=True)
            raise
        with self.interrupts.deferred():
            common.emit_id(self.job_id)
            say(f"job {self.job_id}: {plural(len(self.spec.tasks()), 'task')}, dir {jd.root}")
            terminal = getattr(sys.stderr, "buffer", None)  # None when stderr is closed
            procs, wake = Procs(jd, docker=docker_options), None
            try:
                start_all(self.spec, procs, env, self.interrupts, gpus, terminal)
                wake = Wake(jd.kv_root)  # after the forks: no child inherits its descriptors
                self._supervise(procs, wake, lambda: start_launchers(self.spec, procs, env,
                                                                     self.interrupts, gpus))
            finally:
                for watching in (wake, procs.follower):  # freed in the background from now
                    if watching is not None:
                        watching.release()
                wait_procs(reported(procs), STOP_REPORT_S, cut=lambda: self.interrupts.count >= 2)
                self._linger(procs)
                if procs.forks is not None:
                    procs.forks.close()
                kill_all(procs.all(), self.job_id, self.spec.runtime.mode == "docker")
                if procs.follower is not None:
                    procs.follower.stop()
                if wake is not None:
                    wake.close()
        return self._finish(jd)

    def _supervise(self, procs: Procs, wake: Wake, relaunch: Callable[[], None]) -> None:
        """Until the driver ends: act on signals and deadlines, start the gang of each new
        attempt, say the job's news, report dead launchers."""
        store = kvmod.open_kv(procs.jd.kv_url)
        escalation = common.Escalation(self.interrupts, self.spec.stop_grace_s)
        wake.add([p for p in (procs.driver, *procs.launchers.values()) if p is not None])
        while procs.driver is not None and procs.driver.poll() is None:
            why = self._must_force(store, escalation)
            if why is not None:
                say(why)
                return
            if escalation.asked_at is None and self._next_attempt(procs, store, relaunch):
                wake.add(list(procs.launchers.values()))
            self.news.read(store)
            report_dead_launchers(procs, kvmod.Scoped(store, procs.gang), self.job_id,
                                  wake.wait(CLIENT_TICK_S))
        if procs.driver is not None and store.get(kvmod.STATUS) is None:
            say(f"the driver ended without a final status ({describe_rc(procs.driver)}); "
                "stopping every task")
            kvmod.Scoped(store, procs.gang).put(kvmod.STOP, "the driver died")

    def _must_force(self, store: kvmod.KV, escalation: common.Escalation) -> str | None:
        """The first signal asks the driver for an orderly stop; why every task must be
        killed now (a second signal, no stop in time, --timeout overrun), or None."""
        if self.interrupts.count and escalation.asked_at is None:
            say(f"{self.interrupts.words()}: stopping every task (send it again to kill "
                "at once)")
            escalation.ask(store, self.interrupts.words())
        why = escalation.forced()
        if why == "second signal":
            return "killing every task now"
        if why is not None:
            return "the driver did not stop the job in time; killing every task"
        limit = self.spec.timeout_s
        if limit is not None and time.monotonic() - self.started > limit + LOCAL_DRIVER_SLACK_S:
            return "the driver did not end the job after --timeout; killing every task"
        return None

    def _next_attempt(self, procs: Procs, store: kvmod.KV,
                      relaunch: Callable[[], None]) -> bool:
        """The driver restarts the gang (its log, on the terminal, says why): end the old
        launchers, start new ones. Whether it did."""
        wanted = kvmod.wanted(store)
        attempt, gang = wanted.attempt, wanted.gang
        if gang <= procs.gang:
            return False
        end_launchers(procs.launchers, self.job_id, procs.gang, RESTART_EXIT_WAIT_S,
                      bool(procs.docker))
        procs.gang, procs.attempt = gang, attempt
        relaunch()
        return True

    def _linger(self, procs: Procs) -> None:
        """--tensorboard-linger: a job that ended by itself keeps TensorBoard up (it
        lingers on its own, once it answers) until then, or until a signal cuts it short."""
        tb, store = procs.tensorboard, kvmod.open_kv(procs.jd.kv_url)
        if tb is None or tb.poll() is not None or self.interrupts.count \
                or not self.spec.tensorboard_linger_s or store.get(kvmod.STATUS) is None:
            return
        deadline = time.monotonic() + TENSORBOARD_START_S  # a short job ends before it is up
        while (info := self.news.tensorboard(store)) is None and tb.poll() is None \
                and not self.interrupts.count and time.monotonic() < deadline:
            time.sleep(FOLLOW_S)
        if info is None or not info.url or self.interrupts.count:
            return
        self.signals_before_linger = self.interrupts.count
        say(f"TensorBoard stays up {self.spec.tensorboard_linger_s / 60:g} min at "
            f"{info.url} (--tensorboard-linger; Ctrl-C ends it)")
        wait_procs([tb], self.spec.tensorboard_linger_s + TENSORBOARD_DONE_SLACK_S,
                   cut=lambda: self.interrupts.count > 0)

    def _finish(self, jd: JobDir) -> Outcome:
        raw = kvmod.open_kv(jd.kv_url).get(kvmod.STATUS)
        took = elapsed_words(time.monotonic() - self.started)
        if self.interrupts.count and self.signals_before_linger is None:
            raise common.interrupted(f"job {self.job_id}", self.interrupts,
                                     f"every task was stopped after {took} (logs: "
                                     f"{jd.root}/logs)")
        if raw is None:
            raise JobFailed(f"job {self.job_id}: tfyarn's driver ended without a final status "
                            f"after {took}; every task was stopped. Read "
                            f"{jd.log_path('driver')}", EXIT_TFYARN)
        outcome = Outcome.from_json(raw, kvmod.STATUS)
        if outcome.state != "SUCCEEDED":
            where = task_log(self.spec, jd, outcome.task) if outcome.task else \
                os.path.join(jd.root, "logs")
            raise common.failed(outcome, f"job {self.job_id}", outcome.state,
                                f"ran {took}; full log: less {where}")
        if self.settings.keep_job_dir:
            say(f"logs kept (TFYARN_KEEP_JOB_DIR): {jd.root}/logs")
        else:
            shutil.rmtree(jd.root, ignore_errors=True)
        say(f"job {self.job_id} SUCCEEDED in {took}: {outcome.message}")
        return outcome


def reported(procs: Procs) -> list[Process]:
    """Launchers that published their exit record, so are about to exit by themselves;
    the others (frozen, or never told) are killed without waiting."""
    store = kvmod.Scoped(kvmod.open_kv(procs.jd.kv_url), procs.gang)
    return [p for c, p in procs.launchers.items()
            if all(store.get(kvmod.exit_key(t)) is not None for t in c.tasks)]


def describe_rc(p: Process) -> str:
    sig = signal_of(p.poll())
    return f"killed by {sig.name}" if sig is not None else f"exit code {p.returncode}"


def report_dead_launchers(procs: Procs, store: kvmod.KV, job_id: str,
                          ended: Iterable[Process] | None) -> None:
    """A launcher process that ended without an exit record died (SIGKILL, OOM killer):
    tell the driver now rather than after the heartbeat timeout, and end what it left
    running (launchers fork no watchdog locally). `ended`: the processes that ended
    (None: not known, look at every launcher). Each ending is handled once."""
    ended = None if ended is None else {p.pid for p in ended}
    for container, p in procs.launchers.items():
        if (ended is not None and p.pid not in ended) or p.pid in procs.ended \
                or p.poll() is None:
            continue
        procs.ended.add(p.pid)
        if p.returncode != 0:
            end_leftovers(job_id, container, procs.gang, bool(procs.docker))
        for task in container.tasks:
            if store.get(kvmod.exit_key(task)) is None and store.get(kvmod.lost_key(task)) is None:
                store.put(kvmod.lost_key(task), TaskEnd(
                    None, f"its launcher process died ({describe_rc(p)}) before reporting",
                    lost=True, time=time.time()).to_json())


def task_log(spec: JobSpec, jd: JobDir, task: str) -> str:
    """The log file holding a task's output: its container's."""
    return jd.log_path(spec.container_of(Task.parse(task)).name)
