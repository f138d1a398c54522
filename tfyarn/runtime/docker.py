"""`-m docker` on a node: each task's command runs in its image through `docker run`.

Two runtimes (`docker: runtime:` in tfyarn.yaml; the client resolves `auto`):
- `tfyarn`: the launcher stays on the node (the nodes' `--python`) and starts each task
  with `docker run`. Works wherever the NodeManager's user may run docker, with no
  LinuxContainerExecutor. The image needs only what the command needs (no tfyarn).
- `yarn`: YARN's own Docker runtime starts the whole container, launcher included, in
  the image; the launcher only checks that it really is inside one (a NodeManager
  without that runtime silently runs the container on the node's own OS).

Owns: the `docker run` argv (a pure function), whether this node can run docker (and
what to ask its admins for), the mounts a task's working dir needs, and the memory-kill
check of an ended container. Removing containers is containment: `system/tree.py`.
Must not decide a job's outcome, nor remove containers itself (containment: `system/tree.py`).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tfyarn.core.timing import DOCKER_PROBE_TIMEOUT_S

RUNTIMES = ("auto", "tfyarn", "yarn")
LABEL_JOB = "tfyarn.job"  # the job id (application id on YARN): `docker ps --filter`
LABEL_LAUNCHER = "tfyarn.launcher"  # one launcher's containers, for its watchdog
LABEL_HOST = "tfyarn.host"  # the node that started it (the sandbox kills a node's)
# `-c` is run by bash, as on the node, where the image has one (bash execs a lone command,
# so tini's signals reach it); else by the image's sh.
BASH_IF_THERE = 'command -v bash >/dev/null 2>&1 && exec bash -c "$1"; exec /bin/sh -c "$1"'
ADMINS = ("ask the cluster's admins to install Docker on every NodeManager and let the "
          "NodeManager's user run it (the docker group), or to enable YARN's Docker runtime "
          "(LinuxContainerExecutor, docker in yarn.nodemanager.runtime.linux.allowed-runtimes; "
          "then `docker: runtime: yarn` in tfyarn.yaml)")


@dataclass(frozen=True)
class DockerRun:
    """What a launcher needs to run its tasks in an image: the image and the site's
    network and mounts (conf/tfyarn.yaml `docker:`), and which runtime applies."""

    image: str
    network: str = "host"
    mounts: tuple[str, ...] = ()
    runtime: str = "tfyarn"

    def argv_options(self) -> list[str]:
        """The launcher's command-line options that carry this (the inverse of `parse`)."""
        out = ["--docker-image", self.image, "--docker-runtime", self.runtime,
               "--docker-network", self.network]
        for m in self.mounts:
            out += ["--docker-mount", m]
        return out


def runtime_for(yarn_site: Mapping[str, str]) -> str:
    """`auto` resolved from the cluster's yarn-site.xml: YARN's runtime where its
    NodeManagers can run docker themselves (LinuxContainerExecutor with docker among the
    allowed runtimes), else tfyarn's own `docker run` from the launcher."""
    executor = yarn_site.get("yarn.nodemanager.container-executor.class", "")
    allowed = yarn_site.get("yarn.nodemanager.runtime.linux.allowed-runtimes", "")
    has_docker = "docker" in [r.strip().lower() for r in allowed.split(",")]
    return "yarn" if executor.endswith("LinuxContainerExecutor") and has_docker else "tfyarn"


def container_name(job_id: str, gang: int, task: str) -> str:
    """Unique per daemon across gangs (a restarted gang may start before the last one's
    containers are gone); docker names allow [a-zA-Z0-9_.-]."""
    safe = "".join(c if c.isalnum() or c in "_.-" else "-" for c in f"{job_id}-g{gang}-{task}")
    return f"tfyarn-{safe}"


def gpu_options(devices: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """`--gpus` for a slot's host GPU ids, and its env inside the container: docker
    renumbers the devices it passes from 0, so CUDA_VISIBLE_DEVICES counts from 0 there
    while NVIDIA_VISIBLE_DEVICES names the host's ids. No devices: none, none visible."""
    if not devices:
        return [], {"CUDA_VISIBLE_DEVICES": ""}
    ids = ",".join(devices)
    return (["--gpus", f'"device={ids}"'],
            {"NVIDIA_VISIBLE_DEVICES": ids,
             "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(len(devices)))})


def workdir_mounts(cwd: str, extra: Sequence[str] = ()) -> list[str]:
    """`-v` specs so the task sees its working dir as on the node: the dir itself
    (read-write, same path) and what its links point to outside it (YARN's localized
    `-f` files and job JSON live in the NodeManager's filecache; local mode links to the
    job's one copy), read-only, plus `extra` dirs (a local checkpoint or TensorBoard dir)
    read-write. A target inside another mounted one is not mounted again."""
    targets = set()
    for entry in os.scandir(cwd):
        if entry.is_symlink():
            real = os.path.realpath(entry.path)
            if os.path.exists(real) and not _under(real, cwd):
                targets.add(real)
    rw = [cwd, *(os.path.abspath(d) for d in extra if os.path.isabs(d))]
    mounts, taken = [], []
    for path, mode in sorted([(p, "rw") for p in rw] + [(p, "ro") for p in targets],
                             key=lambda pm: (len(pm[0]), pm[0])):
        if not any(_under(path, t) for t in taken):
            taken.append(path)
            mounts.append(f"{path}:{path}:{mode}")
    return mounts


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def run_argv(run: DockerRun, command: str, *, name: str, labels: Mapping[str, str],
             env_keys: Sequence[str], mounts: Sequence[str], cwd: str, user: str,
             memory_mb: int | None, gpus: Sequence[str]) -> list[str]:
    """`docker run` for one task: the site's network, the working dir at its own path,
    the task's env passed by name (values stay out of the argv), the node user's uid
    (files it writes are the container's, as YARN's runtime does), YARN's memory as the
    container's hard limit (its processes are not the launcher's, so the NodeManager
    cannot measure them), labels for clean-up, and tini as PID 1 so signals reach the
    command. Not `--rm`: the launcher reads whether the kernel killed it for memory."""
    argv = ["docker", "run", "--init", "--name", name, "--network", run.network,
            "--user", user, "-w", cwd]
    for key, value in sorted(labels.items()):
        argv += ["--label", f"{key}={value}"]
    if memory_mb:
        argv += ["--memory", f"{memory_mb}m", "--memory-swap", f"{memory_mb}m"]
    gpu_argv, _ = gpu_options(gpus)
    argv += gpu_argv
    for m in (*mounts, *run.mounts):
        argv += ["-v", m]
    for key in env_keys:
        argv += ["-e", key]
    return [*argv, run.image, "/bin/sh", "-c", BASH_IF_THERE, "tfyarn-task", command]


def unusable(env: Mapping[str, str] | None = None) -> str | None:
    """None if this node's docker daemon answers this user, else why not (its words)."""
    try:
        r = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                           capture_output=True, text=True, timeout=DOCKER_PROBE_TIMEOUT_S,
                           env=None if env is None else dict(env), check=False)
    except FileNotFoundError:
        return "no docker command on its PATH"
    except subprocess.TimeoutExpired:
        return f"`docker info` did not answer in {DOCKER_PROBE_TIMEOUT_S:.0f} s"
    if r.returncode == 0:
        return None
    lines = [x.strip() for x in r.stderr.splitlines() if x.strip()]
    return lines[-1] if lines else f"`docker info` exited with code {r.returncode}"


def node_problem(host: str, user: str, why: str) -> str:
    """The one line a task's failure says when its node cannot run docker."""
    return (f"-m docker: node {host} cannot run docker as user {user} ({why}): {ADMINS}")


def outside_image(host: str, image: str) -> str:
    """The one line when YARN's Docker runtime was asked for and did not apply."""
    return (f"-m docker: this container runs on node {host}'s own OS, not in the image "
            f"{image}: the NodeManager ignored YARN's Docker runtime (it needs the "
            "LinuxContainerExecutor with docker allowed); ask the cluster's admins to enable "
            "it, or set `docker: runtime: tfyarn` in tfyarn.yaml to have tfyarn run docker "
            "on the nodes itself")


NODEMANAGER_CLASS = "org.apache.hadoop.yarn.server.nodemanager.NodeManager"


def started_in_image(ancestry: Sequence[tuple[int, str]]) -> bool:
    """Whether YARN's Docker runtime started this process, given its ancestors' command
    lines: a NodeManager that ignored the runtime started it as its own descendant, on
    the node's OS; one that applied it, through the docker daemon, in another pid
    namespace. (Not /.dockerenv: a node that is itself a container has one.)"""
    return not any(NODEMANAGER_CLASS in cmdline for _, cmdline in ancestry)


def oom_killed(name: str) -> bool:
    """Whether the kernel killed container `name` for going over its memory limit."""
    r = subprocess.run(["docker", "inspect", "--format", "{{.State.OOMKilled}}", name],
                       capture_output=True, text=True, check=False)
    return r.stdout.strip() == "true"
