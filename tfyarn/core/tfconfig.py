"""Topology (which TF task types a job has) and cluster spec -> TF_CONFIG. Stdlib only.

Must not do I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from tfyarn.core.timing import HOROVOD_GLOO_TIMEOUT_S

if TYPE_CHECKING:  # records' dataclasses cost el_submit --help a quarter of its imports
    from tfyarn.core.records import Rank

TASK_TYPES = ("ps", "chief", "worker")


class Task(NamedTuple):
    """One TF task, e.g. `worker:1`. The index is always explicit, never derived."""

    type: str
    index: int

    def __str__(self) -> str:
        return f"{self.type}:{self.index}"

    @classmethod
    def parse(cls, text: str) -> Task:
        kind, sep, idx = text.partition(":")
        if not sep or kind not in TASK_TYPES or not idx.isdigit():
            raise ValueError(f"{text!r} is not a task name like worker:1")
        return cls(kind, int(idx))


def natural(task: Task) -> tuple[int, int]:
    """ps, chief, worker:0, worker:2, worker:10: by type, then by number."""
    rank = TASK_TYPES.index(task.type) if task.type in TASK_TYPES else len(TASK_TYPES)
    return rank, task.index


def natural_name(name: str) -> tuple[int, int, str]:
    """`natural` for a task's name; a name that is no task sorts last, as it is."""
    try:
        return (*natural(Task.parse(name)), "")
    except ValueError:
        return len(TASK_TYPES) + 1, 0, name


def topology(app_type: str, ps_num: int, worker_num: int) -> tuple[tuple[str, int], ...]:
    """Role counts for an app type.

    tensorflow-ps: ps x pn, worker 0 becomes `chief`, the rest `worker` 0..wn-2 (what
    EMR does: `-pn 1 -wn 1` shows `/job:chief`). tensorflow-worker: `worker` x wn for
    MultiWorkerMirroredStrategy. standalone: one `worker`.
    """
    if app_type == "tensorflow-ps":
        return (("ps", ps_num), ("chief", 1), ("worker", worker_num - 1))
    if app_type in ("tensorflow-worker", "tensorflow-mpi", "pytorch"):
        return (("worker", worker_num),)
    if app_type == "standalone":
        return (("worker", 1),)
    raise ValueError(f"no topology for app type {app_type!r}")


def cluster_spec(addresses: Mapping[Task, str]) -> dict[str, list[str]]:
    """{type: [host:port by index]}; refuses gaps so TF never waits on a missing peer."""
    cluster: dict[str, list[str]] = {}
    for kind in TASK_TYPES:
        idx = sorted(t.index for t in addresses if t.type == kind)
        if idx and idx != list(range(len(idx))):
            raise ValueError(f"{kind} task indices {idx} are not 0..{len(idx) - 1}")
        if idx:
            cluster[kind] = [addresses[Task(kind, i)] for i in idx]
    return cluster


def tf_config(cluster: Mapping[str, Sequence[str]], task: Task) -> str:
    """The TF_CONFIG JSON string for one task."""
    if task.type not in cluster or task.index >= len(cluster[task.type]):
        raise ValueError(f"task {task} is not in the cluster {dict(cluster)}")
    return json.dumps({"cluster": dict(cluster), "task": {"type": task.type, "index": task.index}})


def parse_tf_config(text: str | None) -> tuple[dict[str, list[str]], Task | None]:
    """`tf_config`'s inverse: the cluster and this task of a TF_CONFIG value (empty and
    None where it is unset or has no task); ValueError where it is not TF_CONFIG."""
    config = json.loads(text) if text else {}
    if not isinstance(config, dict):
        raise ValueError(f"TF_CONFIG is not a JSON object: {text!r}")
    cluster = {str(k): [str(a) for a in v] for k, v in (config.get("cluster") or {}).items()}
    task = config.get("task") or {}
    if not task.get("type"):
        return cluster, None
    return cluster, Task(str(task["type"]), int(task.get("index", 0)))


def identity_env(task: Task, job_id: str, num_tasks: int) -> dict[str, str]:
    """What every task's process learns about itself, whatever the app type."""
    return {"TFYARN_TASK_TYPE": task.type, "TFYARN_TASK_INDEX": str(task.index),
            "TFYARN_JOB_ID": job_id, "TFYARN_NUM_TASKS": str(num_tasks)}


def tfyarn_home(user: str) -> str:
    """tfyarn's own dir in the user's HDFS home: the default checkpoints, models, kept
    pages and cache live under it; made 0700 (`YarnSite.prepare`, the HDFS cache)."""
    return f"hdfs:///user/{user}/.tfyarn"


def checkpoint_dir(given: str | None, job_id: str, user: str) -> str:
    """--checkpoint-dir, else (on YARN: the local client always gives one) a dir per
    application under the user's HDFS home, which every container can reach."""
    return given or f"{tfyarn_home(user)}/checkpoints/{job_id}"


def model_dir(given: str | None, job_id: str, user: str) -> str:
    """--model-dir, else (on YARN: the local client always gives one) a dir per
    application under the user's HDFS home, which outlives the containers."""
    return given or f"{tfyarn_home(user)}/models/{job_id}"


def course_path(user: str, job_id: str) -> str:
    """Where a YARN job's driver keeps its course so far while the job runs
    (`records.CourseSoFar`), for the driver of a later ApplicationMaster attempt."""
    return f"{tfyarn_home(user)}/running/{job_id}.json"


def history_dir(given: str | None, user: str) -> str:
    """Where a YARN job's page is saved when it ends (`tfyarn history` serves it): the
    site's `history: dir:` (tfyarn.yaml), else the user's HDFS home."""
    return given or f"{tfyarn_home(user)}/history"


def run_env(attempt: int, checkpoints: str, model: str,
            tensorboard: str | None) -> dict[str, str]:
    """Where this run of the task stands: which gang (0 first, restarts count up), where
    to save and resume from, where the trained model goes, and where TensorBoard reads
    summaries (when it runs)."""
    env = {"TFYARN_ATTEMPT": str(attempt), "TFYARN_CHECKPOINT_DIR": checkpoints,
           "TFYARN_MODEL_DIR": model}
    if tensorboard:
        env["TFYARN_TENSORBOARD_DIR"] = tensorboard
    return env


def tf_env(cluster: Mapping[str, Sequence[str]], task: Task, job_id: str) -> dict[str, str]:
    """A TF task's place in the job: TF_CONFIG and its identity."""
    num = sum(len(v) for v in cluster.values())
    return {"TF_CONFIG": tf_config(cluster, task), **identity_env(task, job_id, num)}


# -------------------------------------------------------- allreduce (tensorflow-mpi, pytorch)


def allreduce_ranks(addresses: Mapping[Task, str]) -> dict[Task, Rank]:
    """Ranks grouped by host: hosts in the order of their lowest task index, tasks in index
    order within a host (so on one host, rank == task index). `cross` is Horovod's: the
    ranks of equal local rank across hosts."""
    from tfyarn.core.records import Rank

    by_host: dict[str, list[Task]] = {}
    for task in sorted(addresses, key=lambda t: t.index):
        by_host.setdefault(addresses[task].rsplit(":", 1)[0], []).append(task)
    order = [t for tasks in by_host.values() for t in tasks]
    ranks = {}
    for host, tasks in by_host.items():
        for local, task in enumerate(tasks):
            peers = [h for h, ts in by_host.items() if len(ts) > local]
            ranks[task] = Rank(order.index(task), len(order), local, len(tasks),
                               peers.index(host), len(peers), host)
    return ranks


def allreduce_env(rank: Rank, master: str, rendezvous: str | None) -> dict[str, str]:
    """torch.distributed's env:// variables (MASTER_* = rank 0's reserved port), and with a
    rendezvous server Horovod's gloo variables too."""
    master_host, master_port = master.rsplit(":", 1)
    env = {"RANK": str(rank.rank), "WORLD_SIZE": str(rank.size),
           "LOCAL_RANK": str(rank.local_rank), "LOCAL_WORLD_SIZE": str(rank.local_size),
           "GROUP_RANK": str(rank.cross_rank), "MASTER_ADDR": master_host,
           "MASTER_PORT": master_port}
    if rendezvous:
        host, port = rendezvous.rsplit(":", 1)
        env.update(
            HOROVOD_CONTROLLER="gloo", HOROVOD_CPU_OPERATIONS="gloo",
            HOROVOD_GLOO_RENDEZVOUS_ADDR=host, HOROVOD_GLOO_RENDEZVOUS_PORT=port,
            HOROVOD_GLOO_TIMEOUT_SECONDS=str(HOROVOD_GLOO_TIMEOUT_S), HOROVOD_HOSTNAME=rank.host,
            HOROVOD_RANK=str(rank.rank), HOROVOD_SIZE=str(rank.size),
            HOROVOD_LOCAL_RANK=str(rank.local_rank), HOROVOD_LOCAL_SIZE=str(rank.local_size),
            HOROVOD_CROSS_RANK=str(rank.cross_rank), HOROVOD_CROSS_SIZE=str(rank.cross_size))
        if rank.host.startswith("127.") or rank.host == "localhost":  # local mode, or
            # the sandbox's nodes (127.0.0.i): gloo's peers are on lo
            env["HOROVOD_GLOO_IFACE"] = "lo"
    return env


THREAD_VARS = ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")


def thread_env(vcores: int, k: int, env: Mapping[str, str]) -> dict[str, str]:
    """Thread pools sized to one of k processes' share of a container's vcores, for every
    task type: OpenMP's (PyTorch, MKL, as torchrun sets it) and TensorFlow's intra-op pool
    get the share, its inter-op pool the share but at least 2 (one thread can deadlock on
    ops that wait on each other). Otherwise each process sizes them to the node's every
    core: on a shared node, a task that asked for 1 core competes with its neighbours'
    (YARN's default executor does not confine CPUs), and its spinning threads burn CPU.
    Where the user set any of THREAD_VARS, they chose: none is set."""
    if any(name in env for name in THREAD_VARS):
        return {}
    share = max(1, vcores // k)
    return {"OMP_NUM_THREADS": str(share), "TF_NUM_INTRAOP_THREADS": str(share),
            "TF_NUM_INTEROP_THREADS": str(max(2, share))}


# ---------------------------------------------------------------- GPU placement


def container_devices(gpus: int, env: Mapping[str, str],
                      assigned: Sequence[str] | None = None) -> tuple[list[str], str | None]:
    """The GPU ids CUDA inside a YARN container must use, and a line for the task's log
    where they are a guess.

    YARN's docker runtime (NVIDIA_VISIBLE_DEVICES: the host's ids it passed) shows the
    container only those cards, numbered from 0. Otherwise the ids the NodeManager
    assigned (`assigned`, its GPU page; cgroups isolation leaves the others unusable),
    else what the site set (CUDA_VISIBLE_DEVICES), else 0..gpus-1, said as a guess. No
    GPUs asked: none."""
    if gpus <= 0:
        return [], None
    ids = [d.strip() for d in env.get("NVIDIA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if ids and ids[0] not in ("all", "none", "void"):
        return [str(i) for i in range(min(gpus, len(ids)))], None
    if assigned:
        return list(assigned)[:gpus], None
    site = [d.strip() for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if site:
        return site[:gpus], None
    guess = [str(i) for i in range(gpus)]
    why = ("its NodeManager assigned it none" if assigned is not None
           else "YARN did not say which")
    return guess, (f"{gpus} GPU{'s' if gpus != 1 else ''} asked, {why}: using "
                   f"CUDA_VISIBLE_DEVICES={','.join(guess)}")


def device_env(devices: list[str], k: int, j: int, shared: bool,
               fraction: float | None = None, card_mib: int | None = None) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES for process j of the k in a container holding `devices`, and
    its memory cap on them.

    No devices: none visible (ps and -wg 0 run on CPU, never grab a card). `shared`
    (-wnpg) or fewer devices than processes: all share all, each capped at `fraction` of
    a card (--gpu-memory-fraction; default 0.9/k, the rest for CUDA's own contexts), so
    no one takes the whole card. Otherwise (-ppn) each gets its own slice, one per local
    rank, capped only where `fraction` is given. The cap goes to the task's hook
    (hdfs/hook/sitecustomize.py) as TFYARN_GPU_MEMORY_FRACTION (PyTorch's per-process
    fraction) and, where the card's size is known, TFYARN_GPU_MEMORY_MB (TensorFlow's
    logical device limit); TF_FORCE_GPU_ALLOW_GROWTH where no cap applies.
    """
    if not devices:
        return {"CUDA_VISIBLE_DEVICES": ""}
    sharing = k > 1 and (shared or len(devices) < k)
    if k == 1 or sharing:
        env = {"CUDA_VISIBLE_DEVICES": ",".join(devices)}
    else:
        per = len(devices) // k
        env = {"CUDA_VISIBLE_DEVICES": ",".join(devices[j * per:(j + 1) * per])}
    share = fraction if fraction is not None else (int(900 / k) / 1000 if sharing else None)
    if share is not None and share < 1:
        env["TFYARN_GPU_MEMORY_FRACTION"] = f"{share:g}"
        if card_mib:
            env["TFYARN_GPU_MEMORY_MB"] = str(int(card_mib * share))
    elif sharing:
        env["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
    return env
