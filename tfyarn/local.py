"""Local backend (`el_submit --local`): the driver and one launcher per task as local processes.

Same driver, same launcher, same key-value protocol as on YARN, with a directory as the
store. Task output is prefixed (`[worker:1] ...`) on stderr and kept in per-task log
files; stdout carries only the job id. Whatever way the job ends, every process that
carries its TFYARN_JOB_ID is gone afterwards.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO

from tfyarn import files as filesmod
from tfyarn import kv as kvmod
from tfyarn.driver import KILL, Outcome
from tfyarn.errors import INTERRUPT_EXIT, EnvironmentMissing, JobFailed, SpecError
from tfyarn.jobspec import JobSpec
from tfyarn.settings import Settings
from tfyarn.tfconfig import Task


def say(msg: str) -> None:
    print(f"tfyarn: {msg}", file=sys.stderr, flush=True)


def new_job_id() -> str:
    return f"local_{time.strftime('%Y%m%d_%H%M%S')}_{uuid.uuid4().hex[:6]}"


# ---------------------------------------------------------------- pre-flight (no process yet)


def docker_reachable() -> str | None:
    """None if a docker daemon answers, else why not."""
    if shutil.which("docker") is None:
        return "no docker command on PATH"
    try:
        r = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                           capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return "docker info timed out"
    return None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["no daemon"])[-1]


def count_gpus() -> int:
    """GPUs this machine has (NVIDIA driver view); 0 when there is no driver."""
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


def preflight(spec: JobSpec) -> None:
    """Everything that can refuse the job before a single process starts."""
    if spec.runtime.mode == "docker":
        why = docker_reachable()
        if why:
            raise EnvironmentMissing(f"-m docker needs a reachable docker daemon ({why}); "
                                     "start docker or use -m local / -m virtual-env")
    if spec.runtime.mode == "virtual-env" and "://" in (spec.runtime.arg or ""):
        raise SpecError("-m_arg: --local needs a local archive path, not a remote URL")
    gpus = max((r.resources.gpus for r in spec.roles), default=0)
    have = count_gpus()
    if gpus and have < sum(r.resources.gpus * r.instances for r in spec.roles):
        say(f"warning: -wg {gpus} asks for GPUs this machine does not have ({have}); "
            "running on CPU")


# ---------------------------------------------------------------- job dir


def unpack_env(archive: str, dest: str) -> str:
    """Unpack a packed env once for all tasks; returns its bin dir."""
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="tar")
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
    def kv_url(self) -> str:
        return f"dir:{os.path.join(self.root, 'kv')}"

    @property
    def job_json(self) -> str:
        return os.path.join(self.root, "job.json")

    def task_dir(self, task: Task) -> str:
        return os.path.join(self.root, "tasks", f"{task.type}_{task.index}")

    def log_path(self, label: str) -> str:
        return os.path.join(self.root, "logs", f"{label.replace(':', '_')}.log")


def prepare(spec: JobSpec, settings: Settings, job_id: str) -> tuple[JobDir, str]:
    """Create the job dir and stage everything; returns (dir, PATH prefix). A failure or
    Ctrl-C half-way leaves no job dir behind."""
    filesmod.check_size(spec.files, spec.yarn.max_upload_mb)
    jd = JobDir(tempfile.mkdtemp(prefix=f"tfyarn-{job_id}-", dir=settings.tmpdir))
    try:
        return jd, _fill(spec, jd)
    except BaseException:
        shutil.rmtree(jd.root, ignore_errors=True)
        raise


def _fill(spec: JobSpec, jd: JobDir) -> str:
    os.makedirs(os.path.join(jd.root, "logs"))
    for task in spec.tasks():
        os.makedirs(jd.task_dir(task))
        filesmod.stage(spec.files, jd.task_dir(task), skip=[jd.root])
    with open(jd.job_json, "w", encoding="utf-8") as f:
        f.write(spec.to_json())
    if spec.runtime.mode == "virtual-env":
        return unpack_env(spec.runtime.arg or "", os.path.join(jd.root, "env"))
    return os.path.dirname(sys.executable)


# ---------------------------------------------------------------- processes


@dataclass
class Proc:
    label: str
    popen: subprocess.Popen
    pumps: list[threading.Thread] = field(default_factory=list)


def _pump(stream: IO[bytes], label: str, log: IO[bytes], lock: threading.Lock) -> threading.Thread:
    prefix = f"[{label}] ".encode() if label != "driver" else b""

    def run() -> None:
        for line in iter(stream.readline, b""):
            with lock:
                sys.stderr.buffer.write(prefix + line)
                sys.stderr.flush()
                log.write(line)
                log.flush()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def spawn(label: str, argv: list[str], cwd: str, env: Mapping[str, str], jd: JobDir,
          lock: threading.Lock) -> Proc:
    """Start one process in its own session (Ctrl-C reaches only the client)."""
    p = subprocess.Popen(argv, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    log = open(jd.log_path(label), "ab")  # noqa: SIM115 - closed with the process
    assert p.stdout is not None and p.stderr is not None
    return Proc(label, p, [_pump(p.stdout, label, log, lock), _pump(p.stderr, label, log, lock)])


def base_env(settings: Settings, job_id: str, path_prefix: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(TFYARN_JOB_ID=job_id, TFYARN_ADVERTISE_HOST="127.0.0.1",
               PATH=path_prefix + os.pathsep + settings.path)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def start_all(spec: JobSpec, jd: JobDir, env: Mapping[str, str]) -> tuple[Proc, list[Proc]]:
    lock = threading.Lock()
    py = sys.executable
    driver = spawn("driver", [py, "-m", "tfyarn.driver", "--job", jd.job_json, "--kv", jd.kv_url],
                   jd.root, env, jd, lock)
    docker = ["--docker-image", spec.runtime.arg or ""] if spec.runtime.mode == "docker" else []
    launchers = [
        spawn(str(t), [py, "-m", "tfyarn.launcher", "--job", jd.job_json, "--task", str(t),
                       "--kv", jd.kv_url, *docker], jd.task_dir(t), env, jd, lock)
        for t in spec.tasks()
    ]
    return driver, launchers


# ---------------------------------------------------------------- teardown


def job_pids(job_id: str) -> list[int]:
    """Every process whose environment carries this job's id: the whole tree, however deep."""
    needle = f"TFYARN_JOB_ID={job_id}".encode()
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    pids.append(int(name))
        except OSError:
            continue
    return pids


def kill_all(procs: Iterable[Proc], job_id: str, docker: bool) -> None:
    """SIGKILL every process group we started, then anything else that carries the job id."""
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.popen.pid, signal.SIGKILL)
        p.popen.poll()
    for _ in range(3):
        pids = job_pids(job_id)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not pids:
            break
        time.sleep(0.05)
    for p in procs:
        p.popen.wait()
        for t in p.pumps:
            t.join(timeout=1.0)
    if docker:
        _remove_containers(job_id)


def _remove_containers(job_id: str) -> None:
    ids = subprocess.run(["docker", "ps", "-q", "--filter", f"label=tfyarn.job={job_id}"],
                         capture_output=True, text=True, check=False).stdout.split()
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, check=False)


def wait_procs(procs: Iterable[Proc], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return False
    return True


# ---------------------------------------------------------------- the job


@dataclass
class LocalJob:
    spec: JobSpec
    settings: Settings
    job_id: str = field(default_factory=new_job_id)

    def run(self) -> Outcome:
        """Run the job to its end; returns the outcome, raises JobFailed when it failed."""
        preflight(self.spec)
        jd, prefix = prepare(self.spec, self.settings, self.job_id)
        print(self.job_id, flush=True)
        say(f"job {self.job_id}: {len(self.spec.tasks())} tasks, dir {jd.root}")
        driver, launchers = start_all(self.spec, jd, base_env(self.settings, self.job_id, prefix))
        everyone = [driver, *launchers]
        try:
            interrupted = self._wait(driver, jd)
        finally:
            wait_procs(launchers, self.spec.stop_grace_s + 5.0)
            kill_all(everyone, self.job_id, self.spec.runtime.mode == "docker")
        return self._finish(jd, interrupted)

    def _wait(self, driver: Proc, jd: JobDir) -> bool:
        """Wait for the driver; on Ctrl-C ask it to stop the job. True if interrupted."""
        limit = None if self.spec.timeout_s is None else self.spec.timeout_s + 30.0
        try:
            driver.popen.wait(timeout=limit)
            return False
        except subprocess.TimeoutExpired:
            say("the driver did not end the job after --timeout; killing it")
            return False
        except KeyboardInterrupt:
            say("interrupted: stopping every task (Ctrl-C again to kill at once)")
            kvmod.open_kv(jd.kv_url).put(KILL, "interrupted by the user (Ctrl-C)")
            with contextlib.suppress(subprocess.TimeoutExpired):  # then everything is killed
                driver.popen.wait(timeout=self.spec.stop_grace_s + 15.0)
            return True

    def _finish(self, jd: JobDir, interrupted: bool) -> Outcome:
        raw = kvmod.open_kv(jd.kv_url).get(kvmod.STATUS)
        if interrupted:
            raise JobFailed(f"job {self.job_id} interrupted; every task was stopped "
                            f"(logs: {jd.root}/logs)", INTERRUPT_EXIT)
        if raw is None:
            raise JobFailed(f"job {self.job_id}: the driver ended without a final status; "
                            f"read {jd.log_path('driver')}")
        outcome = Outcome.from_json(raw)
        if outcome.state != "SUCCEEDED":
            raise JobFailed(failure_message(self.job_id, outcome, jd))
        if not self.settings.keep_job_dir:
            shutil.rmtree(jd.root, ignore_errors=True)
        return outcome


def failure_message(job_id: str, outcome: Outcome, jd: JobDir) -> str:
    lines = outcome.describe(f"job {job_id}")
    where = jd.log_path(outcome.task) if outcome.task else os.path.join(jd.root, "logs")
    lines.append(f"full log: less {where}")
    return "\n".join(lines)
