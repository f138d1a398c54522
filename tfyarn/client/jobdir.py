"""Local mode before any process: pre-flight checks and the job's dir.

Owns what `el_submit --local` checks and lays out before it starts anything: the temp
root (room, file descriptors), GPUs to hand out, docker's options, the job dir (its
store, the job's JSON, the shipped files, a dir per container, the logs) and a packed
env unpacked into it. Job dirs live in the user's own 0700 dir of the temp root
(`$TMPDIR/tfyarn-UID/JOB_ID`): a job id names exactly one path, found by name, never by a
glob over a dir other users write to (docs/security.md). Must not start processes
(`localprocs`) nor follow the job (`local`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from tfyarn.client import files as filesmod
from tfyarn.core.errors import EnvironmentMissing, SpecError
from tfyarn.core.jobspec import Container, JobSpec, ShippedFile
from tfyarn.core.progress import Progress, Reading
from tfyarn.core.say import say
from tfyarn.core.settings import Settings
from tfyarn.runtime import docker as dockerrun
from tfyarn.system import private

JOB_DIR_PREFIX = "tfyarn-"  # the user's dir of job dirs in the temp root: tfyarn-UID
JOB_ID = re.compile(r"local_[A-Za-z0-9_]{1,64}")


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


def written_dir(path: str) -> str | None:
    """`path` if the tasks wrote something there (a local dir; a URL is not looked at)."""
    return path if "://" not in path and os.path.isdir(path) and os.listdir(path) else None


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
    def model_dir(self) -> str:
        """TFYARN_MODEL_DIR when --model-dir is not given: kept when the job succeeds."""
        return os.path.join(self.root, "model")

    def remove(self) -> None:
        """The job dir, all of it but its model/ when a task wrote something there (a job
        given --model-dir has none: its model lives elsewhere)."""
        keep = written_dir(self.model_dir)
        if keep is None:
            self.discard()
            return
        for name in os.listdir(self.root):
            path = os.path.join(self.root, name)
            if path == keep:
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)

    def discard(self) -> None:
        """The whole job dir, and this user's dir of job dirs if that is now empty (a
        job leaves nothing in the temp root)."""
        shutil.rmtree(self.root, ignore_errors=True)
        with contextlib.suppress(OSError):  # another job's dir is in it
            os.rmdir(os.path.dirname(self.root))

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


def jobs_root(tmp_root: str | None) -> str:
    """This user's dir of local job dirs in the temp root (made 0700, or checked: a
    symlink, another user's or a dir open to others is refused, `private.NotPrivate`)."""
    return private.private_dir(os.path.join(tmp_root or tempfile.gettempdir(),
                                            f"{JOB_DIR_PREFIX}{os.geteuid()}"))


def find_job_dir(job_id: str, settings: Settings) -> str | None:
    """The dir of a local job of this user's, if it is still there (`tfyarn status
    local_...`): the one path its id names, a real dir of this user's."""
    if not JOB_ID.fullmatch(job_id):
        return None
    path = os.path.join(jobs_root(settings.tmpdir), job_id)
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return path if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() else None


def stage(spec: JobSpec, root: str, inv: filesmod.Inventory, job_id: str,
            settings: Settings) -> tuple[JobDir, str]:
    """Create the job dir and stage everything; returns (dir, PATH prefix). A failure or
    interrupt half-way leaves no job dir behind."""
    try:
        jd = JobDir(_made(root, job_id))
    except private.NotPrivate:
        raise
    except OSError as exc:
        raise EnvironmentMissing(f"cannot create the job dir in {root}: {exc.strerror}; set "
                                 "TMPDIR to a writable directory with free space") from None
    try:
        return jd, _fill(spec, jd, inv, settings)
    except OSError as exc:
        jd.discard()
        raise EnvironmentMissing(f"cannot stage the job in {jd.root}: {exc}; check free space "
                                 "and permissions under TMPDIR") from None
    except BaseException:
        jd.discard()
        raise


def _made(root: str, job_id: str) -> str:
    """The job's dir, made exclusively (never a dir found there) in this user's dir of job
    dirs; made again if another job of this user's just removed that (it was empty)."""
    for _ in range(3):
        path = os.path.join(jobs_root(root), job_id)
        try:
            os.mkdir(path, 0o700)
            return path
        except FileNotFoundError:
            continue
    os.mkdir(path, 0o700)
    return path


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
    model = spec.model_dir or jd.model_dir
    if "://" not in model:
        os.makedirs(model, exist_ok=True)
    with open(jd.job_json, "w", encoding="utf-8") as f:
        f.write(dataclasses.replace(spec, checkpoint_dir=ckpt, model_dir=model,
                                    history_dir=settings.local_history(),
                                    redact=site_redact(settings)).to_json())
    if spec.runtime.mode == "virtual-env":
        return unpack_env(spec.runtime.arg or "", os.path.join(jd.root, "env"))
    return os.path.dirname(sys.executable)


def site_redact(settings: Settings) -> tuple[str, ...]:
    """tfyarn.yaml's `redact:` names (the staging module, yaml's reader, only where a
    site defaults file is)."""
    if not any(os.path.isfile(p) for p in settings.conf_files()):
        return ()
    from tfyarn.client import staging

    return staging.load_defaults(settings).redact


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
