"""Where the driver's gangs of launchers come from, one gang per attempt.

The driver decides that attempt k starts; this module carries it out on each backend and
reports what the backend knows about how a gang's containers ended:
  - local: the client process owns every process, so the driver only announces the
    attempt (the `attempt` key) and the client starts new launchers with `--attempt k`;
    it also reports dead launchers itself (`task/<t>/lost`);
  - YARN: skein starts attempt 0 from the application spec; later attempts are new
    containers asked from skein's ApplicationMaster (`add_container`, with
    TFYARN_ATTEMPT in their env), and skein's container states say which of them YARN
    ended (preempted, lost node, memory kill) before their launcher could report.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tfyarn.core.errors import StoreGone
from tfyarn.core.jobspec import JobSpec
from tfyarn.core.policy import yarn_end
from tfyarn.core.say import say
from tfyarn.core.tfconfig import Task
from tfyarn.core.timing import CONTAINER_POLL_S
from tfyarn.protocol import kv as kvmod
from tfyarn.protocol.skeinlink import App


class Gang:
    """The local backend's gangs: announced through the store, started by the client."""

    tells_ends = False  # whether ends() can say what ended a container

    def __init__(self, store: kvmod.KV) -> None:
        self.store = store

    def start(self, attempt: int, earlier: Sequence[Mapping]) -> None:
        """Ask for attempt `attempt`'s launchers (the client watches this key)."""
        self.store.put(kvmod.ATTEMPT, json.dumps({"attempt": attempt, "attempts": list(earlier)}))

    def request(self, attempt: int) -> bool:
        """Ask the cluster for `attempt`'s containers ahead of `start`, while the failed
        gang is still being stopped; whether it did (local: never, the client starts a
        gang in a moment)."""
        return False

    def ends(self, attempt: int) -> dict[Task, dict]:
        """Tasks whose container the cluster ended before their launcher reported."""
        return {}

    def finished(self, attempt: int) -> set[Task]:
        """Tasks whose container has ended (known only where `tells_ends`)."""
        return set()

    def clear(self, attempt: int) -> None:
        """Make sure nothing of `attempt` still runs (local: the client does it)."""


@dataclass
class _Poll:
    at: float = -1e9
    ends: dict[Task, dict] = field(default_factory=dict)  # containers that FAILED
    finished: set[Task] = field(default_factory=set)  # containers that ended, any state


class SkeinGang(Gang):
    """YARN: one skein container per tfyarn container, per attempt."""

    tells_ends = True

    def __init__(self, store: kvmod.KV, app: App, spec: JobSpec) -> None:
        super().__init__(store)
        self.app = app
        self.spec = spec
        self.containers = {c.name: c for c in spec.containers()}
        # attempt -> skein container id ("worker-1_0") -> its tfyarn container's name
        self.ids: dict[int, dict[str, str]] = {0: {f"{c.name}_0": c.name
                                                   for c in spec.containers()}}
        self.polls: dict[int, _Poll] = {}

    def start(self, attempt: int, earlier: Sequence[Mapping]) -> None:
        super().start(attempt, earlier)
        self.request(attempt)

    def request(self, attempt: int) -> bool:
        """New containers for `attempt` (0: the application spec's own instances). Asked
        for as soon as a failure looks restartable: skein's ApplicationMaster talks to
        the ResourceManager every 5 s while it wants nothing, every 1 s while it waits
        for containers, so asking early saves up to 5 s, and makes YARN's word on the
        failed container come sooner too."""
        if attempt in self.ids:
            return True
        env = {"TFYARN_ATTEMPT": str(attempt)}
        self.ids[attempt] = {self.app.add_container(c.name, env): c.name
                             for c in self.spec.containers()}
        return True

    def ends(self, attempt: int) -> dict[Task, dict]:
        return self._poll(attempt).ends

    def finished(self, attempt: int) -> set[Task]:
        return self._poll(attempt).finished

    def _poll(self, attempt: int) -> _Poll:
        """At most one skein call per CONTAINER_POLL_S; the AM itself learns of a
        finished container within its allocate heartbeat (1-5 s)."""
        poll = self.polls.setdefault(attempt, _Poll())
        if time.monotonic() - poll.at < CONTAINER_POLL_S:
            return poll
        poll.at = time.monotonic()
        mine = self.ids.get(attempt, {})
        try:
            ended = self.app.containers(states=["SUCCEEDED", "FAILED", "KILLED"])
        except StoreGone as exc:  # no news this time; a dead launcher still goes silent,
            # and the heartbeat timeout finds it
            say(f"could not read the containers' states: {exc!r}", "driver")
            return poll
        for c in ended:
            container = self.containers.get(mine.get(c.id, ""))
            if container is None:
                continue
            poll.finished.update(container.tasks)
            if str(c.state) == "FAILED":
                flag = "-pm" if container.tasks[0].type == "ps" else "-wm"
                node = (c.yarn_node_http_address or "").rsplit(":", 1)[0]
                rec = yarn_end(c.exit_message or "", container.resources.memory_mb, flag,
                               time.time(), node)
                for task in container.tasks:
                    poll.ends.setdefault(task, rec)
        return poll

    def clear(self, attempt: int) -> None:
        """Kill the attempt's containers still running (a frozen launcher never exits)."""
        mine = self.ids.get(attempt, {})
        if not mine:
            return  # none asked for (an attempt not started, nor requested early)
        for c in self.app.containers(states=["WAITING", "REQUESTED", "RUNNING"]):
            if c.id in mine:
                self.app.kill_container(c.id)


def for_store(store: kvmod.KV, spec: JobSpec) -> Gang:
    return SkeinGang(store, store.app, spec) if isinstance(store, kvmod.SkeinKV) else Gang(store)
