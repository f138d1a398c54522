"""The job's brain, one per job (`python -m tfyarn.driver`).

It waits for every task to register (deadline: -wait_time), publishes the cluster spec,
watches the exits, stops the servers when training is done (`-x True`), fails fast
naming the failing task, and publishes the final status. On YARN it runs as skein's
`master.script` in the ApplicationMaster container, so a job ends right even when the
client that submitted it is gone.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from tfyarn import kv as kvmod
from tfyarn.jobspec import JobSpec
from tfyarn.tfconfig import Task, cluster_spec

KILL = "kill"  # reason text; put by a client (Ctrl-C, `tfyarn kill`) to ask the driver to stop
EXIT_CODES = {"SUCCEEDED": 0, "FAILED": 1, "KILLED": 3}


@dataclass(frozen=True)
class Outcome:
    """How a job ended and why; `task`/`code`/`tail` name the task that decided it."""

    state: str
    message: str
    task: str | None = None
    code: int | None = None
    tail: tuple[str, ...] = ()
    tasks: Mapping[str, dict] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def describe(self, job: str, state: str | None = None) -> list[str]:
        """`JOB STATE: message`, then the deciding task's last stderr lines."""
        lines = [f"{job} {state or self.state}: {self.message}"]
        if self.tail:
            lines.append(f"last stderr lines of {self.task}:")
            lines += [f"  {line}" for line in self.tail[-10:]]
        return lines

    @classmethod
    def from_json(cls, text: str) -> Outcome:
        d = json.loads(text)
        d["tail"] = tuple(d.get("tail", ()))
        return cls(**d)


def log(msg: str) -> None:
    print(f"tfyarn: driver: {msg}", file=sys.stderr, flush=True)


def describe_exit(task: Task, rec: Mapping) -> str:
    code = rec.get("code")
    if rec.get("stopped"):
        return f"{task} was stopped ({rec.get('reason')})"
    if code is not None and code < 0:
        return f"{task} was killed by {signal.Signals(-code).name}"
    return f"{task} exited with code {code}"


def decide(spec: JobSpec, exits: Mapping[Task, Mapping]) -> Outcome | None:
    """The job's outcome given the exits seen so far, or None while it must go on.

    Pure, so every rule is testable: the earliest task that failed (non-zero, killed,
    or stopped by someone other than this driver) fails the job; tensorflow-ps with
    `-x True` succeeds once the chief exits 0; otherwise every task must exit 0.
    """
    failed = [(r.get("time", 0), t) for t, r in exits.items()
              if r.get("code") != 0 or r.get("stopped")]
    chief = exits.get(Task("chief", 0))
    chief_ok = chief is not None and chief.get("code") == 0 and not chief.get("stopped")
    x_true = spec.app_type == "tensorflow-ps" and spec.stop_ps_when_done
    if x_true and chief_ok and (not failed or chief.get("time", 0) <= min(failed)[0]):
        return Outcome("SUCCEEDED", "chief:0 finished; the other tasks were stopped (-x True)")
    if failed:
        _, task = min(failed)
        rec = exits[task]
        return Outcome("FAILED", describe_exit(task, rec), str(task), rec.get("code"),
                       tuple(rec.get("tail", ())))
    if len(exits) == len(spec.tasks()):
        return Outcome("SUCCEEDED", f"all {len(exits)} tasks exited with code 0")
    return None


def read_tasks(store: kvmod.KV) -> tuple[dict[Task, str], dict[Task, dict]]:
    """(addresses, exit records) published so far, by task."""
    addrs: dict[Task, str] = {}
    exits: dict[Task, dict] = {}
    for key, value in store.scan("task/").items():
        _, name, what = key.split("/")
        if what == "addr":
            addrs[Task.parse(name)] = value
        elif what == "exit":
            exits[Task.parse(name)] = json.loads(value)
    return addrs, exits


@dataclass
class Watch:
    """The driver's loop state: deadlines, whether the cluster spec is out, why to stop."""

    spec: JobSpec
    store: kvmod.KV
    start: float = field(default_factory=time.monotonic)
    published: bool = False
    interrupted: str | None = None
    parent: int = field(default_factory=os.getppid)

    def external_stop(self) -> Outcome | None:
        if self.interrupted is None and os.getppid() != self.parent:
            self.interrupted = "the driver's parent process died"
        reason = self.interrupted or self.store.get(KILL)
        return None if reason is None else Outcome("KILLED", f"killed: {reason}")

    def deadline_passed(self, addrs: Mapping[Task, str]) -> Outcome | None:
        elapsed = time.monotonic() - self.start
        if self.spec.timeout_s is not None and elapsed > self.spec.timeout_s:
            return Outcome("FAILED", f"the job ran past --timeout {self.spec.timeout_s:g} s")
        if not self.published and elapsed > self.spec.register_timeout_s:
            missing = [str(t) for t in self.spec.tasks() if t not in addrs]
            minutes = self.spec.register_timeout_s / 60
            return Outcome("FAILED", f"tasks never registered within -wait_time {minutes:g} min: "
                           f"{', '.join(missing)} (not enough free resources, or they failed to "
                           "start: see their logs)")
        return None

    def publish_if_ready(self, addrs: Mapping[Task, str]) -> None:
        if self.published or len(addrs) < len(self.spec.tasks()):
            return
        cluster = cluster_spec(addrs)
        self.store.put(kvmod.CLUSTER, json.dumps(cluster))
        self.store.put(kvmod.PHASE, "running")
        self.published = True
        log(f"all {len(addrs)} tasks registered; cluster spec published: {json.dumps(cluster)}")

    def step(self) -> Outcome | None:
        addrs, exits = read_tasks(self.store)
        outcome = self.external_stop() or decide(self.spec, exits) or self.deadline_passed(addrs)
        if outcome is None:
            self.publish_if_ready(addrs)
        return outcome


def stop_everything(spec: JobSpec, store: kvmod.KV, outcome: Outcome) -> dict[str, dict]:
    """Tell every launcher to stop and wait (bounded) until the registered ones reported."""
    store.put(kvmod.STOP, outcome.message)
    store.put(kvmod.PHASE, "stopping")
    deadline = time.monotonic() + spec.stop_grace_s + 5.0
    while True:
        addrs, exits = read_tasks(store)
        pending = [t for t in addrs if t not in exits]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(store.poll_s)
    for task in pending:
        log(f"{task} did not report after the stop request; its container/process is killed")
    return {str(t): {"host": addrs.get(t, "").rsplit(":", 1)[0], **_brief(exits.get(t))}
            for t in spec.tasks()}


def _brief(rec: Mapping | None) -> dict:
    if rec is None:
        return {"code": None, "stopped": False, "reason": "never reported"}
    return {"code": rec.get("code"), "stopped": bool(rec.get("stopped")),
            "reason": rec.get("reason")}


def run(spec: JobSpec, store: kvmod.KV) -> Outcome:
    """Drive one job to its end and publish the final status."""
    watch = Watch(spec, store)
    if threading.current_thread() is threading.main_thread():
        _trap_signals(watch)
    store.put(kvmod.PHASE, "registering")
    log(f"waiting for {len(spec.tasks())} tasks to register "
        f"(-wait_time {spec.register_timeout_s / 60:g} min)")
    while (outcome := watch.step()) is None:
        time.sleep(store.poll_s)
    log(f"{outcome.state}: {outcome.message}")
    tasks = stop_everything(spec, store, outcome)
    final = Outcome(outcome.state, outcome.message, outcome.task, outcome.code, outcome.tail, tasks)
    store.put(kvmod.STATUS, final.to_json())
    if store.get(kvmod.CLIENT) is not None:  # let a watching client read it before we go
        store.wait(kvmod.ACK, timeout=5.0)
    return final


def format_tasks(tasks: Mapping[str, Mapping]) -> list[str]:
    """One line per task: name, host, exit code and why it ended."""
    lines = []
    for name, t in tasks.items():
        code = "-" if t.get("code") is None else str(t.get("code"))
        note = f"stopped: {t.get('reason')}" if t.get("stopped") else (t.get("reason") or "")
        lines.append(f"{name:<12} {t.get('host') or '-':<30} exit {code:<5} {note}".rstrip())
    return lines


def _trap_signals(watch: Watch) -> None:
    def handler(signum: int, _frame: object) -> None:
        watch.interrupted = f"the driver received {signal.Signals(signum).name}"

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, handler)


def finish_yarn(store: kvmod.SkeinKV, outcome: Outcome) -> None:
    """On YARN, hand the final status and a diagnostics line naming the task to the AM."""
    app = store.app
    diagnostics = outcome.message
    if outcome.tail:
        diagnostics += f"\nlast stderr lines of {outcome.task}:\n" + "\n".join(outcome.tail[-10:])
    diagnostics += "\ntasks:\n" + "\n".join(format_tasks(outcome.tasks))
    try:
        app.shutdown(outcome.state, diagnostics)
    except Exception as exc:  # the master script's exit code still carries the status
        log(f"could not set the final status through skein: {exc!r}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tfyarn.driver")
    p.add_argument("--job", required=True, help="path of the job JSON")
    p.add_argument("--kv", required=True, help="dir:/path or skein:")
    ns = p.parse_args(argv)
    with open(ns.job, encoding="utf-8") as f:
        spec = JobSpec.from_json(f.read())
    store = kvmod.open_kv(ns.kv)
    outcome = run(spec, store)
    if isinstance(store, kvmod.SkeinKV):
        finish_yarn(store, outcome)  # the AM's shutdown ends the lingering launchers
    else:
        store.put(kvmod.RELEASE, outcome.state)
    return EXIT_CODES[outcome.state]


if __name__ == "__main__":
    sys.exit(main())
