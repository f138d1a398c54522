"""Topology (which TF task types a job has) and cluster spec -> TF_CONFIG. Stdlib only."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import NamedTuple

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


def topology(app_type: str, ps_num: int, worker_num: int) -> tuple[tuple[str, int], ...]:
    """Role counts for an app type.

    tensorflow-ps: ps x pn, worker 0 becomes `chief`, the rest `worker` 0..wn-2 (what
    EMR does: `-pn 1 -wn 1` shows `/job:chief`). tensorflow-worker: `worker` x wn for
    MultiWorkerMirroredStrategy. standalone: one `worker`.
    """
    if app_type == "tensorflow-ps":
        return (("ps", ps_num), ("chief", 1), ("worker", worker_num - 1))
    if app_type == "tensorflow-worker":
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


def tf_config(cluster: Mapping[str, list[str]], task: Task) -> str:
    """The TF_CONFIG JSON string for one task."""
    if task.type not in cluster or task.index >= len(cluster[task.type]):
        raise ValueError(f"task {task} is not in the cluster {dict(cluster)}")
    return json.dumps({"cluster": dict(cluster), "task": {"type": task.type, "index": task.index}})


def task_env(cluster: Mapping[str, list[str]], task: Task, job_id: str) -> dict[str, str]:
    """Everything a task's user process learns about its place in the job."""
    return {
        "TF_CONFIG": tf_config(cluster, task),
        "TFYARN_TASK_TYPE": task.type,
        "TFYARN_TASK_INDEX": str(task.index),
        "TFYARN_JOB_ID": job_id,
        "TFYARN_NUM_TASKS": str(sum(len(v) for v in cluster.values())),
    }
