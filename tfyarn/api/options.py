"""el_submit's flags, parsed and checked, into a JobSpec (the job model lives in core).

Every value is checked before anything is started: a bad one is one SpecError naming
the flag and the fix (the CLI edge prints `Error: ...` and exits 2).
Must not do I/O beyond checking that named paths exist: nothing is started here.
Long because it is the one table of the submit flags, each with its parser and its
inverse (a job file's flags): a new flag is one declaration here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

from tfyarn.core import tfconfig, timing
from tfyarn.core.errors import SpecError
from tfyarn.core.jobspec import (
    ALLREDUCE,
    APP_TYPES,
    ENV_KEY,
    MAX,
    MODES,
    REMOTE_SCHEMES,
    RESTART_ON,
    SHARED_GPU,
    JobSpec,
    Resources,
    Role,
    Runtime,
    ShippedFile,
    YarnOptions,
)

_FALSE = {"false", "0", "no", "n", "off"}
_TRUE = {"true", "1", "yes", "y", "on"}
_MEMORY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([mMgGtT]?)[bB]?\s*$", re.ASCII)
_INT = re.compile(r"^\s*-?[0-9]+\s*$", re.ASCII)
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


_FACTOR = re.compile(r"^\s*(\d{1,3}(?:\.\d{1,3})?)\s*$", re.ASCII)


def parse_growth(value: str | None) -> float | None:
    """--memory-growth: a factor over 1 (1.5), at most MAX; None when not given."""
    if value is None:
        return None
    m = _FACTOR.match(value)
    factor = float(m.group(1)) if m else 0.0
    if not 1 < factor <= MAX["memory_growth"]:
        raise SpecError(f"--memory-growth: give a factor over 1 and at most "
                        f"{MAX['memory_growth']:g}, e.g. --memory-growth 1.5 (got "
                        f"{_shown(value)})")
    return factor


def parse_fraction(value: str | None, gpus: int) -> float | None:
    """--gpu-memory-fraction: a share of a card, over 0 and at most 1; None when not given.
    Refused without GPUs (-wg 0), where it would cap nothing."""
    if value is None:
        return None
    m = _FACTOR.match(value)
    fraction = float(m.group(1)) if m else 0.0
    if not 0 < fraction <= 1:
        raise SpecError(f"--gpu-memory-fraction: give a share of the card over 0 and at most "
                        f"1, e.g. --gpu-memory-fraction 0.5 (got {_shown(value)})")
    if gpus < 1:
        raise SpecError("--gpu-memory-fraction: caps the workers' GPU memory, and -wg is 0; "
                        "add -wg 1 (or more), or drop --gpu-memory-fraction")
    return fraction


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


def parse_list(flag: str, values: tuple[str, ...]) -> tuple[str, ...]:
    """A repeatable flag of comma-separated entries, each once, in the order given."""
    out: list[str] = []
    for value in values:
        for entry in (e.strip() for e in (parse_text(flag, value, "names") or "").split(",")):
            if not entry:
                raise SpecError(f"{flag}: an empty entry in {value!r}; give names separated "
                                "by single commas")
            if entry not in out:
                out.append(entry)
    return tuple(out)


def parse_pairs(flag: str, pairs: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """`flag`'s KEY=VALUE words, split at the first `=`."""
    out = []
    for pair in pairs:
        key, sep, val = pair.partition("=")
        if not sep or not key:
            raise SpecError(f"{flag}: expected KEY=VALUE, got {pair!r}")
        out.append((key, val))
    return tuple(out)


def parse_env(pairs: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    out = parse_pairs("--env", pairs)
    for key, _ in out:
        if not ENV_KEY.match(key):
            raise SpecError(f"--env: {key!r} is not a valid variable name")
    return out


def parse_files(value: str | None, cwd: str) -> tuple[ShippedFile, ...]:
    """`-f a.py,data,./`: check each path exists and decide where it lands.

    A directory named as `.`/`..` (e.g. `-f ./`, or `DIR/.`) ships its contents into the
    working dir, as el_submit users expect; any other directory keeps its name.
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
        base = os.path.basename(raw.rstrip("/"))  # `./`, `..`, `DIR/.`: its contents
        dest = "" if os.path.isdir(path) and base in (".", "..", "") else os.path.basename(path)
        out.append(ShippedFile(path, dest))
    return tuple(out)


# ---------------------------------------------------------------- el_submit flags -> JobSpec


def _flag(flag: str, metavar: str, text: str, default: Any = None,
          of: Callable[[JobSpec], Any] | None = None) -> Any:
    """A field of ElSubmitArgs and its command-line option, declared together; `of`: the
    flag's value that gives a JobSpec back (what a job file is read as), None for a flag
    no job keeps (the client's own: -interact, -conf, the login)."""
    return field(default=default, metadata={"flag": flag, "metavar": metavar, "help": text,
                                            "of": of})


@dataclass(frozen=True)
class ElSubmitArgs:
    """The raw el_submit flag values (strings as typed), before any interpretation: the
    one table of the submit options. Each field names its flag, metavar and help, and
    the command line's options are made from it (`OPTIONS`); single-dash flags are
    el_submit's own, double-dash ones tfyarn's extensions (they never collide)."""

    kind: str | None = _flag("-t", "TYPE", "tensorflow-ps | tensorflow-worker | "
                                 "tensorflow-mpi | standalone | pytorch (default tensorflow-ps)",
        of=lambda s: s.app_type)
    name: str | None = _flag("-a", "NAME", "application name (default tfyarn)",
        of=lambda s: s.name)
    mode: str | None = _flag("-m", "MODE", "local | virtual-env (virtualenv) | docker "
                             "(default local)",
        of=lambda s: s.runtime.mode)
    mode_arg: str | None = _flag("-m_arg", "ARG", "virtual-env: packed env .tar.gz (local path "
                                 "or hdfs://); docker: image",
        of=lambda s: s.runtime.arg)
    interact: str | None = _flag("-interact", "BOOL", "YARN: follow every task's output live "
                                 "on stderr, [task]-prefixed, until the job ends (default False)")
    exit_ps: str | None = _flag("-x", "BOOL", "tensorflow-ps: stop ps and workers once the "
                                "chief exits 0 (default False)",
        of=lambda s: str(s.stop_ps_when_done))
    enable_tensorboard: str | None = _flag("-enable_tensorboard", "BOOL", "run TensorBoard "
                                           "beside the job (default False; needs "
                                           "-log_tensorboard)",
        of=lambda s: str(s.tensorboard_dir is not None))
    log_tensorboard: str | None = _flag("-log_tensorboard", "PATH", "TensorBoard's log dir "
                                        "(local or hdfs://); every task gets it as "
                                        "TFYARN_TENSORBOARD_DIR",
        of=lambda s: s.tensorboard_dir)
    conf: str | None = _flag("-conf", "DIR", "Hadoop configuration dir (default: "
                             "HADOOP_CONF_DIR)")
    files: str | None = _flag("-f", "PATHS", "comma list of files/dirs shipped to every task's "
                              "working dir; -f ./ ships the current dir's contents",
        of=lambda s: _files_flag(s) or None)
    ps: str | None = _flag("-pn", "N", "number of ps (tensorflow-ps; default 1)",
        of=lambda s: _ps(s, lambda r: r.instances))
    ps_cores: str | None = _flag("-pc", "N", "vcores per ps (default 1)",
        of=lambda s: _ps(s, lambda r: r.resources.vcores))
    ps_memory: str | None = _flag("-pm", "MB", "memory per ps in MB, or 2g / 512m "
                                  "(default 1024)",
        of=lambda s: _ps(s, lambda r: r.resources.memory_mb))
    workers: str | None = _flag("-wn", "N", "number of workers; tensorflow-ps makes worker 0 "
                                   "the chief (default 1)",
        of=lambda s: _workers_flag(s))
    worker_cores: str | None = _flag("-wc", "N", "vcores per worker (default 1)",
        of=lambda s: str(_worker(s).vcores))
    worker_gpus: str | None = _flag("-wg", "N", "GPUs per worker (default 0)",
        of=lambda s: str(_worker(s).gpus))
    worker_memory: str | None = _flag("-wm", "MB", "memory per worker in MB, or 2g / 512m "
                                      "(default 1024)",
        of=lambda s: str(_worker(s).memory_mb))
    workers_per_gpu: str | None = _flag("-wnpg", "N", "tensorflow-ps/-worker: workers per "
                                        "container, sharing its GPU",
        of=lambda s: _packed(s, SHARED_GPU))
    gpu_memory_fraction: str | None = _flag("--gpu-memory-fraction", "F", "each worker's "
                                            "cap on its card's memory, a fraction (default "
                                            "with -wnpg N: 0.9/N, so no worker of a card "
                                            "starves the others; 1: no cap)",
        of=lambda s: _opt(s.gpu_memory_fraction, '{:g}'))
    procs_per_node: str | None = _flag("-ppn", "N", "tensorflow-mpi/pytorch: ranks per "
                                       "container (world size = wn x ppn)",
        of=lambda s: _packed(s, ALLREDUCE))
    wait_time: str | None = _flag("-wait_time", "MIN", "minutes to wait for every task to "
                                  "start (default 10)",
        of=lambda s: _whole(s.register_timeout_s / 60))
    timeout: str | None = _flag("--timeout", "SECONDS", "fail and stop the whole job after "
                                "this long",
        of=lambda s: _opt(s.timeout_s, _whole))
    queue: str | None = _flag("--queue", "QUEUE", "YARN queue",
        of=lambda s: s.yarn.queue)
    python: str | None = _flag("--python", "PYTHON", "-m local on YARN: the nodes' interpreter "
                               "(default python3)",
        of=lambda s: s.runtime.python)
    node_label: str | None = _flag("--node-label", "LABEL", "YARN node label expression for "
                                   "the tasks",
        of=lambda s: s.yarn.node_label)
    am_memory: str | None = _flag("--am-memory", "MB", "ApplicationMaster memory (default 1024)",
        of=lambda s: str(s.yarn.am_memory_mb))
    am_vcores: str | None = _flag("--am-vcores", "N", "ApplicationMaster vcores (default 1)",
        of=lambda s: str(s.yarn.am_vcores))
    principal: str | None = _flag("--principal", "USER@REALM", "Kerberos principal (with "
                                  "--keytab; default: the ticket cache's)")
    keytab: str | None = _flag("--keytab", "FILE", "Kerberos keytab (with --principal)")
    heartbeat_timeout: str | None = _flag("--heartbeat-timeout", "SECONDS", "fail the job when "
                                          "a task's launcher is silent this long (default 30)",
        of=lambda s: _whole(s.heartbeat_timeout_s))
    max_restarts: str | None = _flag("--max-restarts", "N", "after a task failure, restart "
                                     "every task in the same application up to N times "
                                     "(default 0)",
        of=lambda s: str(s.max_restarts))
    restart_on: str | None = _flag("--restart-on", "WHICH", "retryable (signals, preemption, "
                                   "lost nodes or launchers, exit codes 128-255; default) | "
                                   "any (every task failure)",
        of=lambda s: s.restart_on)
    memory_growth: str | None = _flag("--memory-growth", "F", "YARN: after a container is "
                                      "killed for its memory, restart with that role's "
                                      "memory x F (up to the queue's largest container; "
                                      "needs --max-restarts; off by default)",
        of=lambda s: _opt(s.memory_growth or None, '{:g}'))
    stall_timeout: str | None = _flag("--stall-timeout", "SECONDS", "fail (and with "
                                      "restarts left, restart) a job whose tasks report "
                                      "progress (tfyarn.progress) but made none this long",
        of=lambda s: _opt(s.stall_timeout_s, _whole))
    gang_patience: str | None = _flag("--gang-patience", "SECONDS", "YARN: a job given only "
                                      "part of its containers for this long gives them back, "
                                      "waits and asks again, so two jobs never hold each "
                                      "other's share (default 60)",
        of=lambda s: _whole(s.yarn.gang_patience_s))
    am_attempts: str | None = _flag("--am-attempts", "N", "YARN: ApplicationMaster attempts: "
                                    "when the AM's node is lost, YARN starts it again and "
                                    "the job resumes as a restart (counted by "
                                    "--max-restarts); default 2, capped by the cluster's "
                                    "yarn.resourcemanager.am.max-attempts",
        of=lambda s: str(s.yarn.am_attempts))
    tensorboard_linger: str | None = _flag("--tensorboard-linger", "MIN", "keep TensorBoard up "
                                           "this many minutes after the job ends (default 0)",
        of=lambda s: _opt(s.tensorboard_linger_s / 60 if s.tensorboard_dir else None, _whole))
    checkpoint_dir: str | None = _flag("--checkpoint-dir", "DIR", "TFYARN_CHECKPOINT_DIR for "
                                       "every task (default: the job dir locally, "
                                       "hdfs:///user/$USER/.tfyarn/checkpoints/APP_ID on YARN)",
        of=lambda s: s.checkpoint_dir)
    model_dir: str | None = _flag("--model-dir", "DIR", "TFYARN_MODEL_DIR for every task: "
                                  "where the trained model goes (default: the job dir's "
                                  "model/ locally, hdfs:///user/$USER/.tfyarn/models/APP_ID "
                                  "on YARN)",
        of=lambda s: s.model_dir)
    command: tuple[str, ...] = ()  # -c: the rest of the line (see main.split_command)
    data: tuple[str, ...] = _flag("--data", "PATH", "a committed dataset "
                                  "(tfyarn.data.spark.write) every task reads (repeatable): "
                                  "checked before submitting, given to tasks as TFYARN_DATA",
                                  (),
        of=lambda s: s.data)
    env: tuple[str, ...] = _flag("--env", "KEY=VALUE", "environment variable for every task "
                                 "(repeatable)", (),
        of=lambda s: tuple(f'{k}={v}' for k, v in s.env))
    tags: tuple[str, ...] = _flag("--tag", "TAG", "YARN application tag", (),
        of=lambda s: s.yarn.tags)
    view_acls: tuple[str, ...] = _flag("--view-acls", "WHO", "YARN: users (group:NAME for a "
                                       "group, * for all) who may also view the job: its "
                                       "status, logs and page (repeatable, comma-separated; "
                                       "default: you alone, plus tfyarn.yaml's acls: view:)",
                                       (),
        of=lambda s: _acl_flag(s.yarn.view_acls))
    modify_acls: tuple[str, ...] = _flag("--modify-acls", "WHO", "YARN: users or group:NAME "
                                         "who may also kill or move the job (repeatable, "
                                         "comma-separated; default: you alone, plus "
                                         "tfyarn.yaml's acls: modify:)", (),
        of=lambda s: _acl_flag(s.yarn.modify_acls))
    force: bool = _flag("--force", "", "ship -f files even if over 1 GB", False,
        of=lambda s: s.yarn.max_upload_mb is None)


def spec_args(spec: JobSpec) -> ElSubmitArgs:
    """The el_submit flags that give `spec` (paths absolute): the parser's inverse, each
    flag's own (its `of` in the table), so a new flag is one declaration."""
    return ElSubmitArgs(command=(spec.command,), **{
        f.name: f.metadata["of"](spec) for f in fields(ElSubmitArgs)
        if f.metadata.get("of") is not None})


def _ps(spec: JobSpec, value: Callable[[Role], int]) -> str | None:
    ps = spec.role("ps")
    return str(value(ps)) if ps else None


def _worker(spec: JobSpec) -> Resources:
    return next(r for r in spec.roles if r.name != "ps").resources


def _workers_flag(spec: JobSpec) -> str:
    """-wn: workers (containers, where -ppn packs ranks)."""
    n = sum(r.instances for r in spec.roles if r.name != "ps")
    return str(n // spec.tasks_per_container if spec.app_type in ALLREDUCE else n)


def _packed(spec: JobSpec, kinds: frozenset[str] | tuple[str, ...]) -> str | None:
    """-wnpg / -ppn: tasks per container, for the kinds that pack them."""
    k = spec.tasks_per_container
    return str(k) if spec.app_type in kinds and k > 1 else None


def _opt(value: Any, shown: str | Callable[[Any], str]) -> str | None:
    if value is None:
        return None
    return shown.format(value) if isinstance(shown, str) else shown(value)


def _acl_flag(entries: tuple[str, ...]) -> tuple[str, ...]:
    return (",".join(entries),) if entries else ()


def _files_flag(spec: JobSpec) -> str:
    """`-f` for the shipped files: a dir whose contents go to the working dir is `DIR/.`."""
    return ",".join(f.source if f.remote or f.dest else os.path.join(f.source, ".")
                    for f in spec.files)


def _whole(value: float) -> str:
    """A flag that takes whole numbers; a fraction in the file is refused by the parser."""
    return str(int(value)) if float(value).is_integer() else str(value)


class Option(NamedTuple):
    """One submit option as the command line declares it (from ElSubmitArgs)."""

    flag: str
    field: str
    metavar: str
    help: str
    multiple: bool  # repeatable: the field is a tuple
    is_flag: bool  # takes no value: the field is a bool


OPTIONS: tuple[Option, ...] = tuple(
    Option(f.metadata["flag"], f.name, f.metadata["metavar"], f.metadata["help"],
           isinstance(f.default, tuple), isinstance(f.default, bool))
    for f in fields(ElSubmitArgs) if "flag" in f.metadata)


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
    wn = parse_int("-wn", a.workers, 1, minimum=1, maximum=MAX["tasks"])
    worker = Resources(
        parse_memory("-wm", a.worker_memory, DEFAULTS["worker_memory"]),
        parse_int("-wc", a.worker_cores, DEFAULTS["cores"], minimum=1, maximum=MAX["vcores"]),
        parse_int("-wg", a.worker_gpus, 0, maximum=MAX["gpus"]),
    )
    ps = Resources(
        parse_memory("-pm", a.ps_memory, DEFAULTS["ps_memory"]),
        parse_int("-pc", a.ps_cores, DEFAULTS["cores"], minimum=1, maximum=MAX["vcores"]),
    )
    pn = parse_int("-pn", a.ps, 1 if app_type == "tensorflow-ps" else 0, maximum=MAX["ps"])
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
    wn = parse_int("-wn", a.workers, 1, minimum=1, maximum=MAX["tasks"])
    if k > 1 and gpus < 1:
        raise SpecError(f"-wnpg {k}: workers share a container's GPU, so it needs -wg 1 or more")
    if wn % k:
        raise SpecError(f"-wnpg {k}: -wn {wn} is not a multiple of it; use -wn {wn - wn % k or k}"
                        f" or -wn {wn - wn % k + k}")
    return k


def _check_texts(a: ElSubmitArgs) -> None:
    """Empty or multi-line values are refused, never read as "not given"."""
    for flag, value, what in (
        ("-t", a.kind, f"one of {', '.join(APP_TYPES)}"), ("-a", a.name, "a name"),
        ("-m", a.mode, f"one of {', '.join(MODES)}"), ("-m_arg", a.mode_arg, "an archive or image"),
        ("-conf", a.conf, "a Hadoop configuration dir"), ("--queue", a.queue, "a YARN queue"),
        ("--node-label", a.node_label, "a node label expression"),
        ("--python", a.python, "an interpreter"), ("-log_tensorboard", a.log_tensorboard, "a dir"),
        ("--restart-on", a.restart_on, " or ".join(RESTART_ON)),
        ("--checkpoint-dir", a.checkpoint_dir, "a dir or hdfs:// URL"),
        ("--model-dir", a.model_dir, "a dir or hdfs:// URL"),
        *(("--tag", t, "a tag") for t in a.tags),
    ):
        parse_text(flag, value, what)
    for flag, value in (("--timeout", a.timeout), ("-wait_time", a.wait_time),
                        ("--heartbeat-timeout", a.heartbeat_timeout),
                        ("--max-restarts", a.max_restarts),
                        ("--gang-patience", a.gang_patience),
                        ("--am-attempts", a.am_attempts),
                        ("--memory-growth", a.memory_growth),
                        ("--stall-timeout", a.stall_timeout),
                        ("--gpu-memory-fraction", a.gpu_memory_fraction),
                        ("--tensorboard-linger", a.tensorboard_linger)):
        if value is not None and not value.strip():
            raise SpecError(f"{flag}: empty value; give a number or leave {flag} out")
    if a.name is not None and len(a.name) > MAX["name_chars"]:
        raise SpecError(f"-a: the name is {len(a.name)} characters; at most "
                        f"{MAX['name_chars']}")


def _restarts(a: ElSubmitArgs, cwd: str) -> dict[str, Any]:
    """--max-restarts, --restart-on and --checkpoint-dir (a local path made absolute:
    every task runs in a dir of its own)."""
    restart_on = (a.restart_on or "retryable").strip().lower()
    if restart_on not in RESTART_ON:
        raise SpecError(f"--restart-on: use {' or '.join(RESTART_ON)}, not {a.restart_on!r}")
    ckpt = _local_path(a.checkpoint_dir, cwd)
    restarts = parse_int("--max-restarts", a.max_restarts, 0, maximum=MAX["restarts"])
    growth = parse_growth(a.memory_growth)
    if growth is not None and not restarts:
        raise SpecError("--memory-growth: grows memory on a restart, and --max-restarts is 0; "
                        "add --max-restarts N (e.g. 2)")
    stall = (None if a.stall_timeout is None else float(parse_int(
        "--stall-timeout", a.stall_timeout, 0, minimum=1, maximum=MAX["stall_s"])))
    return {"max_restarts": restarts, "restart_on": restart_on, "checkpoint_dir": ckpt,
            "memory_growth": growth, "stall_timeout_s": stall}


def from_el_submit(a: ElSubmitArgs, cwd: str) -> JobSpec:
    """Turn el_submit flags into a validated JobSpec; every error names its flag."""
    _check_texts(a)
    app_type = a.kind or "tensorflow-ps"
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
    gpus = parse_int("-wg", a.worker_gpus, 0, maximum=MAX["gpus"])
    return JobSpec(
        tasks_per_container=_per_container(a, app_type, gpus),
        gpu_memory_fraction=parse_fraction(a.gpu_memory_fraction, gpus),
        name=a.name or "tfyarn",
        app_type=app_type,
        roles=_roles(a, app_type),
        command=join_command(a.command),
        files=parse_files(a.files, cwd),
        env=parse_env(a.env),
        data=tuple(_local_path(parse_text("--data", p, "a dataset dir"), cwd) or p
                   for p in a.data),
        runtime=runtime,
        stop_ps_when_done=parse_bool("-x", a.exit_ps),
        register_timeout_s=float(wait * 60),
        timeout_s=float(timeout) if timeout else None,
        heartbeat_timeout_s=float(heartbeat),
        **_restarts(a, cwd),
        model_dir=_local_path(a.model_dir, cwd),
        **_tensorboard(a, cwd),
        yarn=YarnOptions(
            queue=a.queue,
            node_label=a.node_label,
            am_memory_mb=parse_memory("--am-memory", a.am_memory, 1024),
            am_vcores=parse_int("--am-vcores", a.am_vcores, 1, minimum=1, maximum=MAX["vcores"]),
            tags=tuple(a.tags),
            max_upload_mb=None if a.force else 1024,
            gang_patience_s=float(parse_int("--gang-patience", a.gang_patience,
                                            int(timing.GANG_PATIENCE_S), minimum=1,
                                            maximum=MAX["patience_s"])),
            am_attempts=parse_int("--am-attempts", a.am_attempts, 2, minimum=1,
                                  maximum=MAX["am_attempts"]),
            view_acls=parse_list("--view-acls", a.view_acls),
            modify_acls=parse_list("--modify-acls", a.modify_acls),
        ),
    )
