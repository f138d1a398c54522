"""JobSpec -> skein ApplicationSpec, as a pure function of the job and what was staged.

The ApplicationMaster runs the driver (`master.script`); every container gets its own
skein service (`ps-0`, `chief-0`, `worker-1`, ...) with one instance, so the launcher is
told its tasks explicitly in its script, and its attempt through TFYARN_ATTEMPT (set by
the driver when it adds a restarted gang's containers): skein renumbers added
containers, and an identity derived from the container would silently change.
Must not do I/O: staging has done it, and the spec is a function of what it gave.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfyarn.client import skeinclient
from tfyarn.core.jobspec import Container, JobSpec
from tfyarn.core.tfconfig import Task
from tfyarn.runtime import docker

JOB_FILE = "tfyarn-job.json"
ENV_DIR = "env"
APP_TAG = "tfyarn"


@dataclass(frozen=True)
class Staged:
    """What the client prepared locally: the job JSON and each `-f` entry as a resource.

    `resources` maps a container-local name to (source, "file" | "archive");
    `link_contents` names archives whose contents belong in the working dir itself
    (`-f ./`), which YARN localization cannot do on its own.
    """

    job_json: str
    resources: tuple[tuple[str, str, str], ...] = ()
    link_contents: tuple[str, ...] = ()
    env_archive: str | None = None  # -m virtual-env: local path, or hdfs:// (given, or cached)


@dataclass(frozen=True)
class ClusterDefaults:
    """Site settings from conf/tfyarn.yaml that the job flags do not carry."""

    docker_network: str = "host"
    docker_mounts: tuple[str, ...] = ()
    docker_runtime: str = "auto"  # resolved by the YARN client from the site's yarn-site.xml
    extra_env: Mapping[str, str] = field(default_factory=dict)
    history_dir: str | None = None  # `history: dir:`: where YARN jobs' pages are saved
    redact: tuple[str, ...] = ()  # `redact:`: more names of secret settings (regexes)
    view_acls: tuple[str, ...] = ()  # `acls: view:`: who else views every job
    modify_acls: tuple[str, ...] = ()  # `acls: modify:`: who else may kill every job

    def docker_run(self, spec: JobSpec, runtime: str | None = None) -> docker.DockerRun | None:
        """How the launchers run -m docker tasks (None for other modes)."""
        if spec.runtime.mode != "docker":
            return None
        return docker.DockerRun(spec.runtime.arg or "", self.docker_network, self.docker_mounts,
                                runtime or self.docker_runtime)


def service_name(task: Task, spec: JobSpec | None = None) -> str:
    """The skein service (container) that runs `task`: its own (`worker-1`) unless the
    job packs several tasks per container (`workers-0`)."""
    return spec.container_of(task).name if spec is not None else f"{task.type}-{task.index}"


def python_for(spec: JobSpec) -> str:
    if spec.runtime.mode == "virtual-env":
        return f"./{ENV_DIR}/bin/python"
    return spec.runtime.python


def runtime_setup(spec: JobSpec) -> str:
    """Activate a shipped env before anything runs (-m virtual-env); with -m local and an
    absolute --python, put its dir first on PATH, so `-c python ...` is that interpreter
    (the node's own PATH may name another python first, or none)."""
    if spec.runtime.mode == "local" and os.path.isabs(spec.runtime.python):
        return f'export PATH={shlex.quote(os.path.dirname(spec.runtime.python))}:"$PATH"\n'
    if spec.runtime.mode != "virtual-env":
        return ""
    return (f'export VIRTUAL_ENV="$PWD/{ENV_DIR}" PATH="$PWD/{ENV_DIR}/bin:$PATH"\n'
            f'[ -x "{ENV_DIR}/bin/conda-unpack" ] && "{ENV_DIR}/bin/conda-unpack"\n'
            "unset PYTHONHOME\n")


def link_contents(names: tuple[str, ...]) -> str:
    """`-f ./`: put each unpacked archive's top-level entries into the working dir."""
    lines = []
    for name in names:
        q = shlex.quote(name)
        lines.append(f'for p in {q}/* {q}/.[!.]*; do [ -e "$p" ] && [ ! -e "$(basename "$p")" ]'
                     ' && ln -s "$p" .; done')
    return "\n".join(lines) + ("\n" if lines else "")


def run_module(py: str, module: str, what: str) -> str:
    """`exec PY -c BOOT`, run as `PY -m module` would, once tfyarn and skein are found
    (not imported: the module imports both anyway); else the container fails at once,
    saying why. One interpreter: a check of its own before it cost every container's start
    (the driver's and each launcher's) an interpreter, about 20 ms of CPU (#46). Arguments
    follow it."""
    missing = (f"tfyarn: {what}: cannot import tfyarn and skein with {py} on ",
               ": install tfyarn on every node (-m local, see --python), pack it into the env"
               " (-m virtual-env) or, under YARN's Docker runtime, the image (-m docker)")
    text = json.dumps  # a Python string literal in double quotes: shlex.quote's are single
    boot = ("import importlib.util as u, sys\n"
            'if not (u.find_spec("tfyarn") and u.find_spec("skein")):\n'
            "    import socket\n"
            f"    sys.exit({text(missing[0])} + socket.gethostname() + {text(missing[1])})\n"
            "import runpy\n"
            f'runpy.run_module({text(module)}, run_name="__main__", alter_sys=True)\n')
    return f"exec {shlex.quote(py)} -c {shlex.quote(boot)}"


def task_script(spec: JobSpec, container: Container, staged: Staged,
                defaults: ClusterDefaults = ClusterDefaults()) -> str:
    py = python_for(spec)
    tasks = ",".join(str(t) for t in container.tasks)
    run = defaults.docker_run(spec)
    in_image = " ".join(shlex.quote(a) for a in run.argv_options()) + " " if run else ""
    return ("set -u\n" + runtime_setup(spec) + link_contents(staged.link_contents)
            + run_module(py, "tfyarn.runtime.launcher", container.name)
            + f" --job {JOB_FILE} --hadoop-env "
              f'--tasks {tasks} --gpus auto --kv skein: {in_image}'
              '--attempt "${TFYARN_ATTEMPT:-0}" --gang "${TFYARN_GANG:-0}" '
              '--memory-mb "${TFYARN_MEMORY_MB:-0}"\n')


TENSORBOARD_SERVICE = "tensorboard"
TENSORBOARD_MEMORY_MB = 1024  # TensorBoard with TF loaded; not user-sized in el_submit


def tensorboard_script(spec: JobSpec) -> str:
    py = python_for(spec)
    return ("set -u\n" + runtime_setup(spec)
            + run_module(py, "tfyarn.runtime.tensorboard", "tensorboard")
            + f" --job {JOB_FILE} --kv skein: --python {shlex.quote(py)} --hadoop-env\n")


# skein's ApplicationMaster renders its overview page (the tracking URL) with mustache,
# which reads the registered pages' Map.Entry objects by reflection: on Java 16 and later
# that needs java.util opened, else every app with a page (tfyarn's job page) answers 500
# there. JDK_JAVA_OPTIONS reaches the AM's own `java` (Java 9+; Java 8 ignores it).
AM_JAVA_OPENS = ("--add-opens=java.base/java.util=ALL-UNNAMED "
                 "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED")


def driver_script(spec: JobSpec, watched: bool = False) -> str:
    """`watched`: the submitting client follows the job (its final status waits for the
    client's acknowledgement, bounded)."""
    py = spec.runtime.python if spec.runtime.mode == "docker" else python_for(spec)
    return ("set -u\nunset JDK_JAVA_OPTIONS  # the AM's, not the driver's\n"
            + runtime_setup(spec) + run_module(py, "tfyarn.runtime.driver", "driver")
            + f" --job {JOB_FILE} --kv skein:{' --watched' if watched else ''}\n")


def files_dict(staged: Staged, with_env: str | None) -> dict[str, dict[str, str]]:
    files = {JOB_FILE: {"source": staged.job_json, "type": "file"}}
    for name, source, kind in staged.resources:
        files[name] = {"source": source, "type": kind}
    if with_env:
        files[ENV_DIR] = {"source": with_env, "type": "archive"}
    return files


def container_env(spec: JobSpec, defaults: ClusterDefaults) -> dict[str, str]:
    """The environment YARN gives each task container. Not the user's --env: YARN writes
    it as `export K="V"` into launch_container.sh, unescaped, so a `"`, a backtick or `$(`
    would break or expand; the launcher applies --env from the job JSON byte for byte."""
    env = {**defaults.extra_env, "PYTHONUNBUFFERED": "1"}
    if spec.runtime.mode == "docker" and defaults.docker_runtime == "yarn":
        env["YARN_CONTAINER_RUNTIME_TYPE"] = "docker"
        env["YARN_CONTAINER_RUNTIME_DOCKER_IMAGE"] = spec.runtime.arg or ""
        env["YARN_CONTAINER_RUNTIME_DOCKER_CONTAINER_NETWORK"] = defaults.docker_network
        if defaults.docker_mounts:
            env["YARN_CONTAINER_RUNTIME_DOCKER_MOUNTS"] = ",".join(defaults.docker_mounts)
    return env


def application_dict(spec: JobSpec, staged: Staged, defaults: ClusterDefaults,
                     watched: bool = False) -> dict[str, Any]:
    """The skein ApplicationSpec as a plain dict (pure: no I/O, no skein import);
    `watched`: the submitting client follows the job to its end."""
    env_archive = staged.env_archive or (
        spec.runtime.arg if spec.runtime.mode == "virtual-env" else None)
    files = files_dict(staged, env_archive)
    env = container_env(spec, defaults)
    label = {"node_label": spec.yarn.node_label} if spec.yarn.node_label else {}
    services = {}
    for container in spec.containers():
        res = container.resources
        # the grown sizes (--memory-growth) are services of no instance, which the driver
        # adds a container to after a memory kill: skein sizes containers by service
        for i, mb in enumerate(spec.memory_sizes(container.role)):
            services[container.service(mb)] = {
                "instances": 0 if i else 1,
                # the driver decides about failures and restarts whole gangs itself
                # (add_container); with skein's default a failed container would end the app
                "max_restarts": 0,
                "allow_failures": True,
                "resources": {"memory": mb, "vcores": res.vcores, "gpus": res.gpus},
                "files": files,
                "env": env,
                "script": task_script(spec, container, staged, defaults),
                **label,
            }
    master_files = files_dict(Staged(staged.job_json), env_archive)
    if spec.tensorboard_dir:  # a side task: never in TF_CONFIG, never decides the outcome
        services[TENSORBOARD_SERVICE] = {
            "instances": 1, "max_restarts": 0, "allow_failures": True,
            "resources": {"memory": TENSORBOARD_MEMORY_MB, "vcores": 1, "gpus": 0},
            "files": master_files, "env": env, "script": tensorboard_script(spec), **label}
    app: dict[str, Any] = {
        "name": spec.name,
        "tags": sorted({APP_TAG, *spec.yarn.tags}),
        "max_attempts": spec.yarn.am_attempts,  # a lost AM resumes the job
        "master": {
            "resources": {"memory": spec.yarn.am_memory_mb, "vcores": spec.yarn.am_vcores},
            "files": master_files,
            "env": {**defaults.extra_env, "PYTHONUNBUFFERED": "1",
                    "JDK_JAVA_OPTIONS": AM_JAVA_OPENS},
            "script": driver_script(spec, watched),
        },
        "services": services,
    }
    if spec.yarn.queue:
        app["queue"] = spec.yarn.queue
    app["acls"] = spec.yarn.acls()  # the owner alone unless the job or the site adds others
    return app


def application_spec(spec: JobSpec, staged: Staged, defaults: ClusterDefaults,
                     watched: bool = False) -> Any:
    """The same, as a validated skein.ApplicationSpec."""
    return skeinclient.application_spec(application_dict(spec, staged, defaults, watched))
