"""What a YARN cluster can give one container, and why a gang waits: pure functions of
the ResourceManager's REST answers (`/ws/v1/cluster/nodes`, `/ws/v1/cluster/scheduler`,
`/ws/v1/cluster/apps`; their shapes are in tests/fixtures/hadoop-3.3.6-gpus/).

YARN itself refuses a container over the queue's maximum allocation only when the
ApplicationMaster asks for it (the app then dies with skein's "Failure in container
allocator"), and waits for ever for more GPUs than any node has. So el_submit reads what
the cluster can give before it submits and refuses, naming the flag and the largest value
that could run (`unfit`); and a gang whose containers YARN has not given says which
resource is short and who holds it (`waiting_for`).
Must not do I/O: the client fetches the answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfyarn.core.appreport import AppReport, YarnState
from tfyarn.core.jobspec import JobSpec
from tfyarn.core.policy import memory_flag_for

GPU = "yarn.io/gpu"
UNBOUNDED = 2**63 - 1  # YARN's Long.MAX_VALUE: no maximum allocation for a resource


@dataclass(frozen=True)
class Amount:
    """Memory (MB), vcores and GPUs: one container's ask, or a node's or queue's size."""

    memory_mb: int
    vcores: int
    gpus: int = 0

    def covers(self, other: Amount) -> bool:
        return (self.memory_mb >= other.memory_mb and self.vcores >= other.vcores
                and self.gpus >= other.gpus)

    def minus(self, other: Amount) -> Amount:
        return Amount(self.memory_mb - other.memory_mb, self.vcores - other.vcores,
                      self.gpus - other.gpus)


@dataclass(frozen=True)
class Node:
    id: str
    labels: tuple[str, ...]
    total: Amount
    used: Amount


@dataclass(frozen=True)
class Ask:
    """One container a job asks for, with the flags that size it (el_submit's)."""

    name: str  # `worker:2`, `ps:0`, a packed container's first task
    amount: Amount
    memory_flag: str
    vcores_flag: str
    gpus_flag: str


def asks_of(spec: JobSpec, names: Iterable[str] | None = None) -> list[Ask]:
    """The containers `spec` asks YARN for (those named; else all, its ApplicationMaster
    first), as asks with the el_submit flags that size them (-pm/-pc for ps,
    -wm/-wc/-wg for the rest, --am-memory/--am-vcores)."""
    wanted = None if names is None else set(names)
    out = [] if wanted is not None else [
        Ask("the ApplicationMaster", Amount(spec.yarn.am_memory_mb, spec.yarn.am_vcores),
            "--am-memory", "--am-vcores", "-wg")]
    for c in spec.containers():
        if wanted is not None and c.name not in wanted:
            continue
        role, res = c.role, c.resources
        out.append(Ask(str(c.tasks[0]), Amount(res.memory_mb, res.vcores, res.gpus),
                       memory_flag_for(role), "-pc" if role == "ps" else "-wc", "-wg"))
    return out


def amount_of(res: Mapping[str, Any] | None) -> Amount:
    """A `ResourceInfo` of YARN's REST answers (memory, vCores, and each resource type in
    resourceInformations); a resource the answer does not name counts 0."""
    res = res or {}
    values = {r.get("name"): r.get("value") for r in
              ((res.get("resourceInformations") or {}).get("resourceInformation") or [])}
    return Amount(int(values.get("memory-mb", res.get("memory")) or 0),
                  int(values.get("vcores", res.get("vCores")) or 0),
                  int(values.get(GPU) or 0))


def nodes_of(answer: Mapping[str, Any]) -> list[Node]:
    """The RUNNING nodes of a `/ws/v1/cluster/nodes` answer: the ones that can take work."""
    out = []
    for n in ((answer.get("nodes") or {}).get("node") or []):
        if n.get("state") != "RUNNING":
            continue
        out.append(Node(str(n.get("id")), tuple(n.get("nodeLabels") or ()),
                        amount_of(n.get("totalResource")), amount_of(n.get("usedResource"))))
    return out


def queue_maximum(answer: Mapping[str, Any], queue: str) -> Amount | None:
    """A leaf queue's maximum allocation (the largest container it grants) in a
    `/ws/v1/cluster/scheduler` answer, found by name or path; None where the scheduler
    does not say (another scheduler, no such queue)."""
    info = (answer.get("scheduler") or {}).get("schedulerInfo") or {}
    stack = [info]
    while stack:
        q = stack.pop()
        if (q.get("queueName") or "") == queue.rsplit(".", 1)[-1] and q.get("maximumAllocation"):
            return amount_of(q["maximumAllocation"])
        stack.extend(((q.get("queues") or {}).get("queue")) or [])
    return None


def eligible(nodes: Iterable[Node], label: str | None) -> list[Node]:
    """The nodes a container of this job may land on: those of its node label, else the
    unlabelled ones (YARN's default partition)."""
    return [n for n in nodes if (label in n.labels if label else not n.labels)]


def unfit(asks: Sequence[Ask], nodes: Sequence[Node], maximum: Amount | None,
          queue: str, label: str | None = None) -> str | None:
    """Why some container of the job can never be granted (one line naming the flag and
    the largest value that could be), else None. Nothing known about the nodes (none
    RUNNING, as while a ResourceManager restarts): None, YARN decides."""
    pool = eligible(nodes, label)
    if not pool:
        return None
    where = f"node label {label}" if label else "this cluster"
    for ask in asks:
        a = ask.amount
        most = Amount(max(n.total.memory_mb for n in pool), max(n.total.vcores for n in pool),
                      max(n.total.gpus for n in pool))
        if maximum is not None:
            most = Amount(min(most.memory_mb, maximum.memory_mb),
                          min(most.vcores, maximum.vcores), min(most.gpus, maximum.gpus))
        if a.gpus > most.gpus:
            if most.gpus == 0:
                return (f"{ask.gpus_flag} {a.gpus}: no node of {where} has a GPU "
                        f"({GPU}) that queue {queue} may use; use {ask.gpus_flag} 0, or a "
                        f"cluster or queue with GPUs")
            return (f"{ask.gpus_flag} {a.gpus}: no node of {where} has more than {most.gpus} "
                    f"GPU{'s' if most.gpus != 1 else ''} for queue {queue} ({ask.name}'s "
                    f"container); use {ask.gpus_flag} {most.gpus} or less")
        if a.memory_mb > most.memory_mb:
            return (f"{ask.memory_flag} {a.memory_mb}: the largest container queue {queue} "
                    f"can have on {where} is {most.memory_mb} MB ({ask.name}'s container); "
                    f"use {ask.memory_flag} {most.memory_mb} or less")
        if a.vcores > most.vcores:
            return (f"{ask.vcores_flag} {a.vcores}: the largest container queue {queue} "
                    f"can have on {where} has {most.vcores} vcores ({ask.name}'s "
                    f"container); use {ask.vcores_flag} {most.vcores} or less")
        if not any(n.total.covers(a) for n in pool):
            holders = [n for n in pool if n.total.gpus >= a.gpus]
            best = max(holders, key=lambda n: (n.total.memory_mb, n.total.vcores))
            return (f"{ask.gpus_flag} {a.gpus} {ask.memory_flag} {a.memory_mb} "
                    f"{ask.vcores_flag} {a.vcores}: no node of {where} has all of that at "
                    f"once; the largest with {a.gpus} GPU{'s' if a.gpus != 1 else ''} has "
                    f"{best.total.memory_mb} MB and {best.total.vcores} vcores")
    return None


@dataclass(frozen=True)
class Holder:
    """An application holding resources (from `/ws/v1/cluster/apps`)."""

    app_id: str
    held: Amount


def holders_of(answer: Mapping[str, Any]) -> list[Holder]:
    """The running applications of an `/ws/v1/cluster/apps` answer and what each holds."""
    out = []
    for app in ((answer.get("apps") or {}).get("app") or []):
        if AppReport.from_rest(app).state is not YarnState.RUNNING:
            continue
        # 3.3.6 answers allocatedMB 0 for a running app; its partitions' `used` are right
        parts = (app.get("resourceInfo") or {}).get("resourceUsagesByPartition") or []
        used = [amount_of(p.get("used")) for p in parts]
        held = Amount(sum(u.memory_mb for u in used), sum(u.vcores for u in used),
                      sum(u.gpus for u in used))
        out.append(Holder(str(app.get("id")), held))
    return out


def waiting_for(missing: Sequence[Ask], nodes: Sequence[Node], holders: Sequence[Holder],
                own_app: str, label: str | None = None) -> str | None:
    """Why containers YARN has not given yet wait, in one line: the first short resource,
    what the cluster has of it, what is free, and who holds the rest ("worker:2 waits for
    1 GPU: the cluster has 3, 0 free, 3 held by application_1 (2), application_2 (1)").
    None when some node has room for each (YARN is about to give them)."""
    pool = eligible(nodes, label)
    if not missing or not pool:
        return None
    ask = missing[0]
    if any(n.total.minus(n.used).covers(ask.amount) for n in pool):
        return None
    a = ask.amount
    kinds = [("GPU", "gpus", a.gpus), ("MB", "memory_mb", a.memory_mb),
             ("vcores", "vcores", a.vcores)]
    for unit, attr, want in kinds:
        if want <= 0:
            continue
        if any(getattr(n.total.minus(n.used), attr) >= want for n in pool):
            continue
        total = sum(getattr(n.total, attr) for n in pool)
        free = sum(max(0, getattr(n.total.minus(n.used), attr)) for n in pool)
        by = sorted(((getattr(h.held, attr), h.app_id) for h in holders
                     if getattr(h.held, attr) > 0), key=lambda t: (-t[0], t[1]))
        held = sum(n for n, _ in by)
        who = ", ".join(f"{app} ({n}{', this job' if app == own_app else ''})"
                        for n, app in by)
        name = unit if unit != "GPU" else ("GPU" if want == 1 else "GPUs")
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        return (f"{ask.name}{more} wait{'s' if not more else ''} for {want} {name}: the "
                f"cluster has {total}, {free} free, {held} held"
                f"{' by ' + who if who else ''}")
    return (f"{ask.name} waits for room: no node has {a.memory_mb} MB, {a.vcores} vcores"
            f"{f' and {a.gpus} GPUs' if a.gpus else ''} free at once")
