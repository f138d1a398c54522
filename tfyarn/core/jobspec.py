"""The job model: frozen dataclasses, validated when built, with a JSON round trip.

The same JSON the client writes is what the driver and every launcher read, so a job
means exactly one thing everywhere. Stdlib only: the CLI reads flags (api/options.py)
and job files (api/jobfile.py) into it; the driver, the launchers and the YARN spec
builder read its JSON.
Must not do I/O: paths are checked where flags are parsed.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from tfyarn.core import tfconfig, timing
from tfyarn.core.errors import SpecError
from tfyarn.core.redact import SHOWN, Redactor, site_rule

APP_TYPES = ("tensorflow-ps", "tensorflow-worker", "tensorflow-mpi", "standalone", "pytorch")
REMOTE_SCHEMES = ("hdfs://", "viewfs://")  # -f entries YARN localizes itself
ALLREDUCE = ("tensorflow-mpi", "pytorch")  # ranks instead of a TF cluster: -ppn applies
SHARED_GPU = ("tensorflow-ps", "tensorflow-worker")  # -wnpg applies
MODES = ("local", "virtual-env", "docker")
ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$", re.ASCII)

# Documented upper bounds: far above any real job, low enough that a typo (an extra
# zero, a pasted number) is refused at once instead of exhausting memory or the queue.
MAX = {
    "tasks": 1024,  # -wn (and -pn below)
    "ps": 256,
    "vcores": 256,
    "gpus": 64,
    "memory_mb": 4 * 1024 * 1024,  # 4 TB
    "wait_minutes": 7 * 24 * 60,  # a week in a queue
    "timeout_s": 31 * 24 * 3600,  # a month of training
    "heartbeat_s": 3600,
    "name_chars": 1024,
    "per_container": 64,  # -ppn, -wnpg
    "restarts": 100,  # --max-restarts
    "linger_minutes": 24 * 60,  # --tensorboard-linger
    "patience_s": 24 * 3600,  # --gang-patience
    "am_attempts": 10,  # --am-attempts (YARN's own cap, am.max-attempts, is the site's)
    "memory_growth": 8.0,  # --memory-growth
    "stall_s": 7 * 24 * 3600,  # --stall-timeout
}
MEMORY_STEP_MB = 128  # a grown container's memory is rounded up to this (YARN rounds too)
GROWN = re.compile(r"^(.+)-mem(\d+)$")  # a grown container's skein service: worker-1-mem3072
RESTART_ON = ("retryable", "any")  # --restart-on


@dataclass(frozen=True)
class Resources:
    """What one container of a role asks YARN for."""

    memory_mb: int
    vcores: int
    gpus: int = 0

    def __post_init__(self) -> None:
        if self.memory_mb <= 0 or self.vcores <= 0 or self.gpus < 0:
            raise SpecError(f"invalid resources {self}: memory and vcores must be > 0")
        if (self.memory_mb > MAX["memory_mb"] or self.vcores > MAX["vcores"]
                or self.gpus > MAX["gpus"]):
            raise SpecError(f"invalid resources {self}: over the maxima {MAX}")


@dataclass(frozen=True)
class Role:
    """A TF task type (ps, chief, worker) with its instance count and per-task resources."""

    name: str
    instances: int
    resources: Resources

    def __post_init__(self) -> None:
        if self.name not in tfconfig.TASK_TYPES:
            raise SpecError(f"unknown role {self.name!r}; expected one of {tfconfig.TASK_TYPES}")
        if self.instances < 1:
            raise SpecError(f"role {self.name} needs at least one instance")


@dataclass(frozen=True)
class Container:
    """One YARN container (a local launcher process) and the tasks it hosts.

    `-wm/-wc/-wg` size a container, shared by its processes: `-ppn k` puts k ranks in
    each, `-wnpg k` k workers (sharing its GPU).
    """

    name: str
    tasks: tuple[tfconfig.Task, ...]
    resources: Resources

    @property
    def role(self) -> str:
        """The role whose resources size it (a packed group's chief uses the workers')."""
        return self.tasks[-1].type

    def service(self, memory_mb: int) -> str:
        """Its skein service at `memory_mb`: its own name at the asked size, else a
        service of the grown size (`worker-1-mem3072`, declared with no instance)."""
        return self.name if memory_mb == self.resources.memory_mb \
            else f"{self.name}-mem{memory_mb}"


def container_name(service: str) -> str:
    """The container a skein service runs, grown or not (`worker-1-mem3072` -> `worker-1`)."""
    grown = GROWN.match(service)
    return grown.group(1) if grown else service


def memory_ladder(base_mb: int, factor: float | None, ceiling_mb: int | None,
                  steps: int) -> tuple[int, ...]:
    """The sizes a role's containers may be given, smallest first: the asked size, then
    x factor per memory kill (rounded up to MEMORY_STEP_MB), never past the ceiling (the
    queue's largest container) and at most `steps` growths (--max-restarts)."""
    sizes = [base_mb]
    if not factor or not ceiling_mb:
        return tuple(sizes)
    while len(sizes) <= steps and sizes[-1] < ceiling_mb:
        grown = -(-int(sizes[-1] * factor + 0.999) // MEMORY_STEP_MB) * MEMORY_STEP_MB
        sizes.append(min(max(grown, sizes[-1] + MEMORY_STEP_MB), ceiling_mb))
    return tuple(sizes)


@dataclass(frozen=True)
class ShippedFile:
    """One `-f` entry: a local path and where it lands in each task's working dir.

    `dest == ""` means "the directory's contents go straight into the working dir"
    (what `-f ./` asks for); otherwise the file or directory appears under `dest`.
    """

    source: str
    dest: str

    @property
    def remote(self) -> bool:
        """On HDFS: YARN localizes it in place; local mode fetches it (WebHDFS)."""
        return self.source.startswith(REMOTE_SCHEMES)

    @property
    def is_dir(self) -> bool:
        return not self.remote and os.path.isdir(self.source)


@dataclass(frozen=True)
class Runtime:
    """Where the user command runs: `-m local`, `virtual-env` (packed archive) or `docker`."""

    mode: str = "local"
    arg: str | None = None
    python: str = "python3"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise SpecError(f"-m: unknown mode {self.mode!r}; use one of {', '.join(MODES)}")
        if self.mode != "local" and not self.arg:
            what = "an image name" if self.mode == "docker" else "a packed env (.tar.gz)"
            raise SpecError(f"-m {self.mode} needs -m_arg with {what}")


GROUP = "group:"  # an ACL entry naming a group, not a user
ACL_ENTRY = re.compile(r"\*|(?:group:)?[A-Za-z0-9_.][A-Za-z0-9_.@$-]{0,254}")


def acl_admits(entries: Iterable[str], user: str, groups: Iterable[str]) -> bool:
    """Whether an ACL (users, group:NAME, *: --view-acls' form) names `user` or one of
    `groups`. No one is named by an empty name."""
    if not user:
        return False
    theirs = set(groups)
    return any(e == "*" or e == user or (e.startswith(GROUP) and e[len(GROUP):] in theirs)
               for e in entries)


def yarn_acl(value: str) -> tuple[str, ...]:
    """A Hadoop ACL value (yarn.admin.acl: `users groups`, comma-separated each; `*`:
    everyone; blank: no one) in --view-acls' form."""
    if value.strip() == "*":
        return ("*",)
    users, _, groups = value.partition(" ")  # " admins": groups only
    return (tuple(u for u in users.split(",") if u.strip())
            + tuple(GROUP + g.strip() for g in groups.split(",") if g.strip()))


@dataclass(frozen=True)
class YarnOptions:
    """Knobs that only the YARN backend reads."""

    queue: str | None = None
    node_label: str | None = None
    am_memory_mb: int = 1024
    am_vcores: int = 1
    tags: tuple[str, ...] = ()
    max_upload_mb: int | None = 1024  # None: --force, no limit
    gang_patience_s: float = timing.GANG_PATIENCE_S  # --gang-patience
    am_attempts: int = 2  # --am-attempts: YARN starts a lost ApplicationMaster again
    max_memory_mb: int | None = None  # the queue's largest container (RM, at submit)
    view_acls: tuple[str, ...] = ()  # --view-acls: who else may view it (users, group:G, *)
    modify_acls: tuple[str, ...] = ()  # --modify-acls: who else may kill or move it

    def __post_init__(self) -> None:
        if not 0 < self.gang_patience_s <= MAX["patience_s"]:
            raise SpecError(f"--gang-patience must be 1..{MAX['patience_s']} seconds")
        if not 1 <= self.am_attempts <= MAX["am_attempts"]:
            raise SpecError(f"--am-attempts must be 1..{MAX['am_attempts']}")
        for flag, entries in (("--view-acls", self.view_acls),
                              ("--modify-acls", self.modify_acls)):
            for entry in entries:
                if not ACL_ENTRY.fullmatch(entry):
                    raise SpecError(f"{flag}: {entry!r} is not a user name, group:NAME or *; "
                                    f"e.g. {flag} alice,group:analysts")

    def acls(self) -> dict[str, Any]:
        """skein's ACLs: on, the owner alone unless --view-acls/--modify-acls add others
        (a view user also sees skein's web UI, so the job page; groups cannot: skein
        checks UI users only)."""
        def split(entries: tuple[str, ...]) -> tuple[list[str], list[str]]:
            groups = [e.removeprefix(GROUP) for e in entries if e.startswith(GROUP)]
            return [e for e in entries if not e.startswith(GROUP)], groups

        view_users, view_groups = split(self.view_acls)
        modify_users, modify_groups = split(self.modify_acls)
        return {"enable": True, "view_users": view_users, "view_groups": view_groups,
                "modify_users": modify_users, "modify_groups": modify_groups,
                "ui_users": view_users}


@dataclass(frozen=True)
class JobSpec:
    """A whole job: topology, resources, environment, files and the user command."""

    name: str
    app_type: str
    roles: tuple[Role, ...]
    command: str
    files: tuple[ShippedFile, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    runtime: Runtime = field(default_factory=Runtime)
    stop_ps_when_done: bool = False
    register_timeout_s: float = timing.REGISTER_TIMEOUT_MIN * 60.0
    timeout_s: float | None = None
    stop_grace_s: float = timing.STOP_GRACE_S
    heartbeat_timeout_s: float = timing.HEARTBEAT_TIMEOUT_S
    tasks_per_container: int = 1  # worker-side tasks per container (-ppn / -wnpg)
    max_restarts: int = 0  # gang restarts after a task failure (--max-restarts)
    restart_on: str = "retryable"  # which failures restart: retryable | any (--restart-on)
    checkpoint_dir: str | None = None  # TFYARN_CHECKPOINT_DIR; None: the backend's default
    model_dir: str | None = None  # TFYARN_MODEL_DIR, where the trained model goes; likewise
    tensorboard_dir: str | None = None  # -log_tensorboard, when -enable_tensorboard True
    tensorboard_linger_s: float = 0.0  # TensorBoard stays this long after the job ended
    yarn: YarnOptions = field(default_factory=YarnOptions)
    data: tuple[str, ...] = ()  # --data: committed datasets the tasks read (TFYARN_DATA)
    memory_growth: float | None = None  # --memory-growth: x memory after a memory kill
    stall_timeout_s: float | None = None  # --stall-timeout: no progress this long fails
    gpu_memory_fraction: float | None = None  # --gpu-memory-fraction; None: 0.9/k (-wnpg k)
    history_dir: str | None = None  # where the page is saved at the end; None: the default
    redact: tuple[str, ...] = ()  # tfyarn.yaml's `redact:`: more secret names (regexes)

    def __post_init__(self) -> None:
        if self.app_type not in APP_TYPES:
            raise SpecError(f"-t: unknown app type {self.app_type!r}")
        if not self.command.strip():
            raise SpecError("-c: the command is empty; put the command to run after -c")
        if not self.roles:
            raise SpecError("a job needs at least one role")
        if self.register_timeout_s <= 0:
            raise SpecError("-wait_time must be greater than 0")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise SpecError("--timeout must be greater than 0 seconds")
        if self.heartbeat_timeout_s < timing.HEARTBEAT_MIN_TIMEOUT_S:
            raise SpecError("--heartbeat-timeout must be at least "
                            f"{timing.HEARTBEAT_MIN_TIMEOUT_S:g} s")
        if not 1 <= self.tasks_per_container <= MAX["per_container"]:
            raise SpecError(f"tasks per container must be 1..{MAX['per_container']}")
        for key, _ in self.env:
            if not ENV_KEY.match(key):
                raise SpecError(f"--env: {key!r} is not a valid variable name")
        if not 0 <= self.max_restarts <= MAX["restarts"]:
            raise SpecError(f"--max-restarts must be 0..{MAX['restarts']}")
        if self.restart_on not in RESTART_ON:
            raise SpecError(f"--restart-on: use {' or '.join(RESTART_ON)}, not {self.restart_on!r}")
        if self.memory_growth is not None and not 1 < self.memory_growth <= MAX["memory_growth"]:
            raise SpecError(f"--memory-growth must be over 1 and at most "
                            f"{MAX['memory_growth']:g} (e.g. 1.5), not {self.memory_growth:g}")
        if self.stall_timeout_s is not None and not 0 < self.stall_timeout_s <= MAX["stall_s"]:
            raise SpecError(f"--stall-timeout must be 1..{MAX['stall_s']} seconds")
        if self.gpu_memory_fraction is not None and not 0 < self.gpu_memory_fraction <= 1:
            raise SpecError("--gpu-memory-fraction must be over 0 and at most 1")
        for name in self.redact:
            try:
                re.compile(name)
            except re.error as exc:
                raise SpecError(f"tfyarn.yaml redact: {name!r} is not a regular expression "
                                f"({exc}); fix it in the site defaults") from None

    def shown(self) -> JobSpec:
        """This job as tfyarn shows or stores it where others may read it (`--dry-run`,
        the store, whose skein page the view ACL's users see): its secret-named --env
        values redacted."""
        hide = self.redactor()
        return replace(self, env=tuple((k, SHOWN if hide.secret_name(k) else v)
                                       for k, v in self.env))

    def redactor(self) -> Redactor:
        """What this job's output, pages and kept pages hide (core/redact.py): the rule,
        the site's names, and the values of its secret-named --env settings."""
        return site_rule(self.redact).with_env(self.env)

    @property
    def attempts(self) -> int:
        """How many gangs the job may run: the first plus --max-restarts."""
        return self.max_restarts + 1

    def role(self, name: str) -> Role | None:
        return next((r for r in self.roles if r.name == name), None)

    def tasks(self) -> tuple[tfconfig.Task, ...]:
        """Every task of the job, ps first, in a stable order."""
        return self._tasks

    # Derived once per spec (frozen: it cannot change), not per call: a local launcher
    # of 64 tasks looked each one's container up, and the driver listed every task at
    # each event, rebuilding all 256 of them each time (#46).
    @functools.cached_property
    def _tasks(self) -> tuple[tfconfig.Task, ...]:
        return tuple(tfconfig.Task(r.name, i) for r in self.roles for i in range(r.instances))

    @property
    def readers(self) -> int:
        """Tasks that read --data: every task but the ps (chief and workers, or ranks)."""
        return sum(1 for t in self.tasks() if t.type != "ps")

    @property
    def allreduce(self) -> bool:
        return self.app_type in ALLREDUCE

    def containers(self) -> tuple[Container, ...]:
        """The containers, in order: one per ps, then the worker-side tasks (chief first)
        in groups of `tasks_per_container`. A one-task container is named after its task
        (`ps-0`, `chief-0`, `worker-1`); a group `workers-0`, `workers-1`, ..."""
        return self._containers

    @functools.cached_property
    def _containers(self) -> tuple[Container, ...]:
        ps = [t for t in self.tasks() if t.type == "ps"]
        rest = [t for t in self.tasks() if t.type != "ps"]
        k = self.tasks_per_container
        groups = [tuple(rest[i:i + k]) for i in range(0, len(rest), k)]
        out = [Container(f"ps-{t.index}", (t,), self.role("ps").resources) for t in ps]
        for i, group in enumerate(groups):
            name = f"{group[0].type}-{group[0].index}" if k == 1 else f"workers-{i}"
            out.append(Container(name, group, self.role(group[-1].type).resources))
        return tuple(out)

    def container_of(self, task: tfconfig.Task) -> Container:
        return self._container_of[task]

    @functools.cached_property
    def _container_of(self) -> dict[tfconfig.Task, Container]:
        return {t: c for c in self.containers() for t in c.tasks}

    def memory_sizes(self, role: str) -> tuple[int, ...]:
        """What `role`'s containers may be given: the asked size, then the grown ones
        (--memory-growth, up to the queue's largest container)."""
        r = self.role(role)
        assert r is not None
        return memory_ladder(r.resources.memory_mb, self.memory_growth,
                             self.yarn.max_memory_mb, self.max_restarts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> dict[str, Any]:
        """`--dry-run`'s view: the job, plus the containers it asks YARN for (derived,
        ignored when read back)."""
        containers = [{"name": c.name, "tasks": [str(t) for t in c.tasks],
                       **asdict(c.resources)} for c in self.containers()]
        return {**self.to_dict(), "containers": containers}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobSpec:
        d = {k: v for k, v in data.items() if k != "containers"}  # derived, see describe()
        d["roles"] = tuple(
            Role(r["name"], r["instances"], Resources(**r["resources"])) for r in d["roles"]
        )
        d["files"] = tuple(ShippedFile(**f) for f in d.get("files", ()))
        d["env"] = tuple((k, v) for k, v in d.get("env", ()))
        d["data"] = tuple(d.get("data", ()))
        d["redact"] = tuple(d.get("redact", ()))
        d["runtime"] = Runtime(**d.get("runtime", {}))
        yarn = dict(d.get("yarn", {}))
        yarn["tags"] = tuple(yarn.get("tags", ()))
        for key in ("view_acls", "modify_acls"):
            yarn[key] = tuple(yarn.get(key, ()))
        d["yarn"] = YarnOptions(**yarn)
        return cls(**d)

    @classmethod
    def from_json(cls, text: str) -> JobSpec:
        return cls.from_dict(json.loads(text))
