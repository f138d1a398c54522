"""The job model: frozen dataclasses, validated when built, with a JSON/YAML round trip.

The same JSON the client writes is what the driver and every launcher read, so a job
means exactly one thing everywhere. Stdlib only: this module is imported by the CLI,
the driver, the launchers and the YARN spec builder.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from tfyarn import tfconfig, timing
from tfyarn.errors import SpecError

APP_TYPES = ("tensorflow-ps", "tensorflow-worker", "tensorflow-mpi", "standalone", "pytorch")
REMOTE_SCHEMES = ("hdfs://", "viewfs://")  # -f entries YARN localizes itself
ALLREDUCE = ("tensorflow-mpi", "pytorch")  # ranks instead of a TF cluster: -ppn applies
SHARED_GPU = ("tensorflow-ps", "tensorflow-worker")  # -wnpg applies
MODES = ("local", "virtual-env", "docker")
ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$", re.ASCII)
_INT = re.compile(r"^\s*-?[0-9]+\s*$", re.ASCII)
_MEMORY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([mMgGtT]?)[bB]?\s*$", re.ASCII)
_TRUE = {"true", "1", "yes", "y", "on"}
_FALSE = {"false", "0", "no", "n", "off"}

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
}
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


@dataclass(frozen=True)
class YarnOptions:
    """Knobs that only the YARN backend reads."""

    queue: str | None = None
    node_label: str | None = None
    am_memory_mb: int = 1024
    am_vcores: int = 1
    tags: tuple[str, ...] = ()
    max_upload_mb: int | None = 1024  # None: --force, no limit


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
    tensorboard_dir: str | None = None  # -log_tensorboard, when -enable_tensorboard True
    tensorboard_linger_s: float = 0.0  # TensorBoard stays this long after the job ended
    yarn: YarnOptions = field(default_factory=YarnOptions)

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
        if self.heartbeat_timeout_s <= timing.HEARTBEAT_S:
            raise SpecError(f"--heartbeat-timeout must be over {timing.HEARTBEAT_S:g} s")
        if not 1 <= self.tasks_per_container <= MAX["per_container"]:
            raise SpecError(f"tasks per container must be 1..{MAX['per_container']}")
        for key, _ in self.env:
            if not ENV_KEY.match(key):
                raise SpecError(f"--env: {key!r} is not a valid variable name")
        if not 0 <= self.max_restarts <= MAX["restarts"]:
            raise SpecError(f"--max-restarts must be 0..{MAX['restarts']}")
        if self.restart_on not in RESTART_ON:
            raise SpecError(f"--restart-on: use {' or '.join(RESTART_ON)}, not {self.restart_on!r}")

    @property
    def attempts(self) -> int:
        """How many gangs the job may run: the first plus --max-restarts."""
        return self.max_restarts + 1

    def role(self, name: str) -> Role | None:
        return next((r for r in self.roles if r.name == name), None)

    def tasks(self) -> tuple[tfconfig.Task, ...]:
        """Every task of the job, ps first, in a stable order."""
        return tuple(tfconfig.Task(r.name, i) for r in self.roles for i in range(r.instances))

    @property
    def allreduce(self) -> bool:
        return self.app_type in ALLREDUCE

    def containers(self) -> tuple[Container, ...]:
        """The containers, in order: one per ps, then the worker-side tasks (chief first)
        in groups of `tasks_per_container`. A one-task container is named after its task
        (`ps-0`, `chief-0`, `worker-1`); a group `workers-0`, `workers-1`, ..."""
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
        return next(c for c in self.containers() if task in c.tasks)

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

    def to_yaml(self) -> str:
        import yaml  # pyyaml is a runtime dependency, loaded only when YAML is asked for

        return yaml.safe_dump(self.describe(), sort_keys=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobSpec:
        d = {k: v for k, v in data.items() if k != "containers"}  # derived, see describe()
        d["roles"] = tuple(
            Role(r["name"], r["instances"], Resources(**r["resources"])) for r in d["roles"]
        )
        d["files"] = tuple(ShippedFile(**f) for f in d.get("files", ()))
        d["env"] = tuple((k, v) for k, v in d.get("env", ()))
        d["runtime"] = Runtime(**d.get("runtime", {}))
        yarn = dict(d.get("yarn", {}))
        yarn["tags"] = tuple(yarn.get("tags", ()))
        d["yarn"] = YarnOptions(**yarn)
        return cls(**d)

    @classmethod
    def from_json(cls, text: str) -> JobSpec:
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_yaml(cls, text: str) -> JobSpec:
        import yaml

        return cls.from_dict(yaml.safe_load(text))


# ---------------------------------------------------------------- value parsing


def parse_bool(flag: str, value: str | None, default: bool = False) -> bool:
    """el_submit booleans take a value (`-x True`); accept the usual spellings."""
    if value is None:
        return default
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise SpecError(f"{flag}: expected True or False, got {value!r}")


def _shown(value: str) -> str:
    return repr(value if len(value) <= 40 else value[:40] + "...")


def parse_int(flag: str, value: str | None, default: int, minimum: int = 0,
              maximum: int | None = None) -> int:
    """A whole number in ASCII digits, within [minimum, maximum]."""
    if value is None:
        return default
    if not _INT.match(value) or len(value.strip()) > 18:
        raise SpecError(f"{flag}: expected a whole number (digits 0-9), got {_shown(value)}")
    n = int(value)
    if n < minimum:
        raise SpecError(f"{flag}: must be at least {minimum}, got {n}")
    if maximum is not None and n > maximum:
        raise SpecError(f"{flag}: at most {maximum} (tfyarn's limit), got {n}")
    return n


def parse_memory(flag: str, value: str | None, default: int) -> int:
    """Megabytes as el_submit takes them (`2000`), plus `2g`, `512m`, `1.5g`."""
    if value is None:
        return default
    m = _MEMORY.match(value)
    if not m or len(m.group(1)) > 18:
        raise SpecError(f"{flag}: {_shown(value)} is not a memory size; give MB (2000) or "
                        "2g / 512m")
    scale = {"": 1, "m": 1, "g": 1024, "t": 1024 * 1024}[m.group(2).lower()]
    mb = float(m.group(1)) * scale
    if mb > MAX["memory_mb"]:
        raise SpecError(f"{flag}: at most {MAX['memory_mb'] // (1024 * 1024)} TB per container "
                        f"(tfyarn's limit), got {_shown(value)}")
    if int(mb) <= 0:
        raise SpecError(f"{flag}: memory must be greater than 0, got {value!r}")
    return int(mb)


def parse_text(flag: str, value: str | None, what: str) -> str | None:
    """An optional text value: absent is fine, empty or with control characters is not."""
    if value is None:
        return None
    if not value.strip():
        raise SpecError(f"{flag}: empty value; give {what} or leave {flag} out")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise SpecError(f"{flag}: {value!r} contains a control character (newline, tab...); "
                        f"give {what} on one line")
    return value


def parse_env(pairs: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    out = []
    for pair in pairs:
        key, sep, val = pair.partition("=")
        if not sep or not key:
            raise SpecError(f"--env: expected KEY=VALUE, got {pair!r}")
        if not ENV_KEY.match(key):
            raise SpecError(f"--env: {key!r} is not a valid variable name")
        out.append((key, val))
    return tuple(out)


def parse_files(value: str | None, cwd: str) -> tuple[ShippedFile, ...]:
    """`-f a.py,data,./`: check each path exists and decide where it lands.

    A directory named as `.`/`..` (e.g. `-f ./`) ships its contents into the working
    dir, as el_submit users expect; any other directory keeps its name.
    """
    if value is None:
        return ()
    out: list[ShippedFile] = []
    for raw in (p.strip() for p in value.split(",")):
        if not raw:
            raise SpecError(f"-f: empty entry in {value!r}; give a comma list of paths, "
                            "e.g. -f ./ or -f train.py,data")
        if raw.startswith(REMOTE_SCHEMES):
            name = raw.rstrip("/").rsplit("/", 1)[-1]
            if not name or raw.rstrip("/").endswith(":/"):
                raise SpecError(f"-f: {raw!r} names no file or dir; give hdfs://NN/path/name")
            out.append(ShippedFile(raw, name))
            continue
        path = os.path.abspath(os.path.join(cwd, os.path.expanduser(raw)))
        if not os.path.exists(path):
            raise SpecError(f"-f: {raw!r} does not exist (looked in {cwd})")
        base = os.path.basename(os.path.normpath(raw))
        dest = "" if os.path.isdir(path) and base in (".", "..", "") else os.path.basename(path)
        out.append(ShippedFile(path, dest))
    return tuple(out)


# ---------------------------------------------------------------- el_submit flags -> JobSpec


@dataclass(frozen=True)
class ElSubmitArgs:
    """The raw el_submit flag values (strings as typed), before any interpretation."""

    app_type: str | None = None
    app_name: str | None = None
    mode: str | None = None
    mode_arg: str | None = None
    interact: str | None = None
    exit_ps: str | None = None
    enable_tensorboard: str | None = None
    log_tensorboard: str | None = None
    conf: str | None = None
    files: str | None = None
    ps_num: str | None = None
    ps_cores: str | None = None
    ps_memory: str | None = None
    worker_num: str | None = None
    worker_cores: str | None = None
    worker_gpus: str | None = None
    worker_memory: str | None = None
    workers_per_gpu: str | None = None
    procs_per_node: str | None = None
    wait_time: str | None = None
    command: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: str | None = None
    queue: str | None = None
    python: str | None = None
    node_label: str | None = None
    am_memory: str | None = None
    am_vcores: str | None = None
    heartbeat_timeout: str | None = None
    max_restarts: str | None = None
    restart_on: str | None = None
    checkpoint_dir: str | None = None
    tensorboard_linger: str | None = None
    tags: tuple[str, ...] = ()
    force: bool = False


DEFAULTS = {"ps_memory": 1024, "worker_memory": 1024, "cores": 1,
            "wait_minutes": timing.REGISTER_TIMEOUT_MIN}


def join_command(tokens: tuple[str, ...]) -> str:
    """`-c` takes the rest of the line, and el_submit's rule makes it one shell command
    line: the words joined by single spaces, run by bash in the task's working dir, the
    same locally and on YARN. So `$VAR`, `;`, `&&` and quotes mean what bash says, on the
    node; an argument with spaces needs quotes inside the command line."""
    return " ".join(tokens)


def _local_path(value: str | None, cwd: str) -> str | None:
    """A dir flag: URLs as given, a local path made absolute (tasks run in dirs of their own)."""
    if value is None or "://" in value:
        return value
    return os.path.abspath(os.path.join(cwd, os.path.expanduser(value)))


def _tensorboard(a: ElSubmitArgs, cwd: str) -> dict[str, Any]:
    """-enable_tensorboard True needs -log_tensorboard DIR, as el_submit documents; a DIR
    without it would silently start nothing, so it is refused too."""
    enabled = parse_bool("-enable_tensorboard", a.enable_tensorboard)
    if enabled and a.log_tensorboard is None:
        raise SpecError("-enable_tensorboard True needs -log_tensorboard DIR (the dir your code "
                        "writes summaries to, e.g. hdfs:///user/me/tb)")
    if not enabled and a.log_tensorboard is not None:
        raise SpecError("-log_tensorboard: TensorBoard is off; add -enable_tensorboard True, or "
                        "drop -log_tensorboard")
    if not enabled and a.tensorboard_linger is not None:
        raise SpecError("--tensorboard-linger: TensorBoard is off; add -enable_tensorboard True "
                        "-log_tensorboard DIR, or drop --tensorboard-linger")
    linger = parse_int("--tensorboard-linger", a.tensorboard_linger, 0,
                       maximum=MAX["linger_minutes"])
    return {"tensorboard_dir": _local_path(a.log_tensorboard, cwd) if enabled else None,
            "tensorboard_linger_s": float(linger * 60)}


def _roles(a: ElSubmitArgs, app_type: str) -> tuple[Role, ...]:
    wn = parse_int("-wn", a.worker_num, 1, minimum=1, maximum=MAX["tasks"])
    worker = Resources(
        parse_memory("-wm", a.worker_memory, DEFAULTS["worker_memory"]),
        parse_int("-wc", a.worker_cores, DEFAULTS["cores"], minimum=1, maximum=MAX["vcores"]),
        parse_int("-wg", a.worker_gpus, 0, maximum=MAX["gpus"]),
    )
    ps = Resources(
        parse_memory("-pm", a.ps_memory, DEFAULTS["ps_memory"]),
        parse_int("-pc", a.ps_cores, DEFAULTS["cores"], minimum=1, maximum=MAX["vcores"]),
    )
    pn = parse_int("-pn", a.ps_num, 1 if app_type == "tensorflow-ps" else 0, maximum=MAX["ps"])
    if app_type == "tensorflow-ps" and pn < 1:
        raise SpecError("-pn: tensorflow-ps needs at least 1 ps; use -t tensorflow-worker for none")
    if app_type != "tensorflow-ps" and pn:
        raise SpecError(f"-pn: -t {app_type} has no parameter servers; "
                        "drop -pn or use -t tensorflow-ps")
    if app_type == "standalone" and wn != 1:
        raise SpecError(f"-wn: -t standalone runs exactly one task; use -wn 1 (got {wn})")
    ppn = parse_int("-ppn", a.procs_per_node, 1, minimum=1, maximum=MAX["per_container"])
    counts = tfconfig.topology(app_type, pn, wn * ppn)
    return tuple(Role(name, n, ps if name == "ps" else worker) for name, n in counts if n)


def _per_container(a: ElSubmitArgs, app_type: str, gpus: int) -> int:
    """-ppn (allreduce types: ranks per container) or -wnpg (TF types: workers sharing a
    container and its GPU); each refused where it has no meaning."""
    if a.procs_per_node is not None and app_type not in ALLREDUCE:
        raise SpecError(f"-ppn: applies to -t {' or -t '.join(ALLREDUCE)} (ranks per node), "
                        f"not -t {app_type}; drop -ppn (for GPU sharing see -wnpg)")
    if a.workers_per_gpu is not None and app_type not in SHARED_GPU:
        raise SpecError(f"-wnpg: applies to -t {' or -t '.join(SHARED_GPU)} (workers sharing a "
                        f"GPU), not -t {app_type}; drop -wnpg (for ranks per node see -ppn)")
    if a.procs_per_node is not None:
        return parse_int("-ppn", a.procs_per_node, 1, minimum=1, maximum=MAX["per_container"])
    k = parse_int("-wnpg", a.workers_per_gpu, 1, minimum=1, maximum=MAX["per_container"])
    wn = parse_int("-wn", a.worker_num, 1, minimum=1, maximum=MAX["tasks"])
    if k > 1 and gpus < 1:
        raise SpecError(f"-wnpg {k}: workers share a container's GPU, so it needs -wg 1 or more")
    if wn % k:
        raise SpecError(f"-wnpg {k}: -wn {wn} is not a multiple of it; use -wn {wn - wn % k or k}"
                        f" or -wn {wn - wn % k + k}")
    return k


def _check_texts(a: ElSubmitArgs) -> None:
    """Empty or multi-line values are refused, never read as "not given"."""
    for flag, value, what in (
        ("-t", a.app_type, f"one of {', '.join(APP_TYPES)}"), ("-a", a.app_name, "a name"),
        ("-m", a.mode, f"one of {', '.join(MODES)}"), ("-m_arg", a.mode_arg, "an archive or image"),
        ("-conf", a.conf, "a Hadoop configuration dir"), ("--queue", a.queue, "a YARN queue"),
        ("--node-label", a.node_label, "a node label expression"),
        ("--python", a.python, "an interpreter"), ("-log_tensorboard", a.log_tensorboard, "a dir"),
        ("--restart-on", a.restart_on, " or ".join(RESTART_ON)),
        ("--checkpoint-dir", a.checkpoint_dir, "a dir or hdfs:// URL"),
        *(("--tag", t, "a tag") for t in a.tags),
    ):
        parse_text(flag, value, what)
    for flag, value in (("--timeout", a.timeout), ("-wait_time", a.wait_time),
                        ("--heartbeat-timeout", a.heartbeat_timeout),
                        ("--max-restarts", a.max_restarts),
                        ("--tensorboard-linger", a.tensorboard_linger)):
        if value is not None and not value.strip():
            raise SpecError(f"{flag}: empty value; give a number or leave {flag} out")
    if a.app_name is not None and len(a.app_name) > MAX["name_chars"]:
        raise SpecError(f"-a: the name is {len(a.app_name)} characters; at most "
                        f"{MAX['name_chars']}")


def _restarts(a: ElSubmitArgs, cwd: str) -> dict[str, Any]:
    """--max-restarts, --restart-on and --checkpoint-dir (a local path made absolute:
    every task runs in a dir of its own)."""
    restart_on = (a.restart_on or "retryable").strip().lower()
    if restart_on not in RESTART_ON:
        raise SpecError(f"--restart-on: use {' or '.join(RESTART_ON)}, not {a.restart_on!r}")
    ckpt = _local_path(a.checkpoint_dir, cwd)
    return {"max_restarts": parse_int("--max-restarts", a.max_restarts, 0,
                                      maximum=MAX["restarts"]),
            "restart_on": restart_on, "checkpoint_dir": ckpt}


def from_el_submit(a: ElSubmitArgs, cwd: str) -> JobSpec:
    """Turn el_submit flags into a validated JobSpec; every error names its flag."""
    _check_texts(a)
    app_type = a.app_type or "tensorflow-ps"
    if app_type not in APP_TYPES:
        raise SpecError(f"-t: unknown app type {app_type!r}; use one of {', '.join(APP_TYPES)}")
    parse_bool("-interact", a.interact)  # a client option (follow the job live): checked here
    if not a.command or not "".join(a.command).strip():
        raise SpecError("-c is missing: end the line with -c and the command to run")
    mode = {"virtualenv": "virtual-env"}.get(a.mode or "local", a.mode or "local")
    if mode == "local" and a.mode_arg is not None:
        raise SpecError("-m_arg: has no use with -m local; drop it, or use -m virtual-env "
                        "(a packed env) or -m docker (an image)")
    runtime = Runtime(mode, a.mode_arg, a.python or "python3")
    if mode == "virtual-env" and "://" not in (a.mode_arg or ""):
        archive = os.path.abspath(os.path.join(cwd, a.mode_arg or ""))
        if not os.path.isfile(archive):
            raise SpecError(f"-m_arg: virtual-env archive {a.mode_arg!r} does not exist")
        runtime = Runtime(mode, archive, runtime.python)
    if a.conf is not None and not os.path.isdir(os.path.join(cwd, a.conf)):
        raise SpecError(f"-conf: {a.conf!r} is not a directory of Hadoop configuration")
    wait = parse_int("-wait_time", a.wait_time, DEFAULTS["wait_minutes"], minimum=1,
                     maximum=MAX["wait_minutes"])
    timeout = (None if a.timeout is None
               else parse_int("--timeout", a.timeout, 0, minimum=1, maximum=MAX["timeout_s"]))
    heartbeat = parse_int("--heartbeat-timeout", a.heartbeat_timeout,
                          int(timing.HEARTBEAT_TIMEOUT_S), minimum=5, maximum=MAX["heartbeat_s"])
    return JobSpec(
        tasks_per_container=_per_container(a, app_type, parse_int(
            "-wg", a.worker_gpus, 0, maximum=MAX["gpus"])),
        name=a.app_name or "tfyarn",
        app_type=app_type,
        roles=_roles(a, app_type),
        command=join_command(a.command),
        files=parse_files(a.files, cwd),
        env=parse_env(a.env),
        runtime=runtime,
        stop_ps_when_done=parse_bool("-x", a.exit_ps),
        register_timeout_s=float(wait * 60),
        timeout_s=float(timeout) if timeout else None,
        heartbeat_timeout_s=float(heartbeat),
        **_restarts(a, cwd),
        **_tensorboard(a, cwd),
        yarn=YarnOptions(
            queue=a.queue,
            node_label=a.node_label,
            am_memory_mb=parse_memory("--am-memory", a.am_memory, 1024),
            am_vcores=parse_int("--am-vcores", a.am_vcores, 1, minimum=1, maximum=MAX["vcores"]),
            tags=tuple(a.tags),
            max_upload_mb=None if a.force else 1024,
        ),
    )
