"""Where the driver's gangs of launchers come from: gang g of attempt k.

The driver decides that gang g starts (a restart: a new attempt; on YARN also a gang
that gave its containers back and asks again, same attempt); this module carries it out
on each backend and reports what the backend knows about the gang's containers:
  - local: the client process owns every process, so the driver only announces the
    gang (the `attempts` key) and the client starts new launchers with `--gang g`;
    it also reports dead launchers itself (`task/<t>/lost`);
  - YARN: skein starts gang 0 from the application spec; later gangs are new
    containers asked from skein's ApplicationMaster (`add_container`, with
    TFYARN_GANG and TFYARN_ATTEMPT in their env), and skein's container states say how
    many YARN has given (a gang that waits) and which of them YARN ended (preempted,
    lost node, memory kill) before their launcher could report.
Must not decide whether a gang starts (the driver and `core.policy` do).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfyarn.core.errors import StoreGone
from tfyarn.core.jobspec import Container, JobSpec
from tfyarn.core.policy import GangWait, memory_flag_for, yarn_end
from tfyarn.core.records import Attempt, PreemptionNotice, RecordError, TaskEnd, Wanted
from tfyarn.core.say import say
from tfyarn.core.tfconfig import Task
from tfyarn.core.timing import CONTAINER_POLL_S, SYSTEM, Clock
from tfyarn.protocol import kv as kvmod
from tfyarn.protocol.skeinlink import App

STATES = ["WAITING", "REQUESTED", "RUNNING", "SUCCEEDED", "FAILED", "KILLED"]  # skein's


class Gang:
    """The local backend's gangs: announced through the store, started by the client."""

    tells_ends = False  # whether ends() can say what ended a container

    def __init__(self, store: kvmod.KV) -> None:
        self.store = store

    def start(self, gang: int, attempt: int, earlier: Sequence[Attempt],
              memory: Mapping[str, int]) -> None:
        """Ask for gang `gang` of attempt `attempt` (the client watches this key), its
        containers of `memory` MB by role (locally memory is not limited: unused)."""
        self.store.put(kvmod.ATTEMPT, Wanted(attempt, gang, tuple(earlier)).to_json())

    def request(self, gang: int, attempt: int, memory: Mapping[str, int]) -> bool:
        """Ask the cluster for `gang`'s containers ahead of `start`, while the failed
        gang is still being stopped; whether it did (local: never, the client starts a
        gang in a moment)."""
        return False

    def ends(self, gang: int) -> dict[Task, TaskEnd]:
        """Tasks whose container the cluster ended before their launcher reported."""
        return {}

    def finished(self, gang: int) -> set[Task]:
        """Tasks whose container has ended (known only where `tells_ends`)."""
        return set()

    def waiting(self, gang: int) -> GangWait | None:
        """What the cluster has given an incomplete gang (None: nothing to tell; local
        mode starts every process at once)."""
        return None

    def clear(self, gang: int) -> None:
        """Make sure nothing of `gang` still runs (local: the client does it)."""

    def notice(self, gang: int, raw: str) -> PreemptionNotice | None:
        """YARN's preemption notice (skein's `skein:preemption` value), with the containers
        of `gang` it names (none: an earlier gang's); None when it cannot be read
        (locally: no YARN, no notice)."""
        return None


@dataclass
class _Poll:
    at: float = -1e9
    ends: dict[Task, TaskEnd] = field(default_factory=dict)  # containers that FAILED
    finished: set[Task] = field(default_factory=set)  # containers that ended, any state
    held: int = 0  # containers YARN has given (running or ended)
    asked: int = 0  # containers asked for and not given yet
    given_at: float = 0.0  # when `held` last grew (at first: when the gang was asked for)


class SkeinGang(Gang):
    """YARN: one skein container per tfyarn container, per attempt."""

    tells_ends = True

    def __init__(self, store: kvmod.KV, app: App, spec: JobSpec,
                 clock: Clock = SYSTEM) -> None:
        super().__init__(store)
        self.app = app
        self.spec = spec
        self.clock = clock
        self.containers = {c.name: c for c in spec.containers()}
        # gang -> skein container id ("worker-1_0") -> its tfyarn container's name
        self.ids: dict[int, dict[str, str]] = {0: {f"{c.name}_0": c.name
                                                   for c in spec.containers()}}
        self.memory: dict[int, Mapping[str, int]] = {}  # gang -> MB by role, where grown
        self.polls: dict[int, _Poll] = {}

    def start(self, gang: int, attempt: int, earlier: Sequence[Attempt],
              memory: Mapping[str, int]) -> None:
        super().start(gang, attempt, earlier, memory)
        self.request(gang, attempt, memory)

    def request(self, gang: int, attempt: int, memory: Mapping[str, int]) -> bool:
        """New containers for `gang` (0: the application spec's own instances). Asked
        for as soon as a failure looks restartable: skein's ApplicationMaster talks to
        the ResourceManager every 5 s while it wants nothing, every 1 s while it waits
        for containers, so asking early saves up to 5 s, and makes YARN's word on the
        failed container come sooner too."""
        self.polls.setdefault(gang, _Poll(given_at=self.clock.now()))
        if gang in self.ids:
            return True
        self.memory[gang] = dict(memory)
        self.ids[gang] = {}
        for c in self.spec.containers():
            mb = memory.get(c.role, c.resources.memory_mb)
            env = {"TFYARN_ATTEMPT": str(attempt), "TFYARN_GANG": str(gang),
                   "TFYARN_MEMORY_MB": str(mb)}
            self.ids[gang][self.app.add_container(c.service(mb), env)] = c.name
        return True

    def ends(self, gang: int) -> dict[Task, TaskEnd]:
        return self._poll(gang).ends

    def finished(self, gang: int) -> set[Task]:
        return self._poll(gang).finished

    def waiting(self, gang: int) -> GangWait | None:
        poll = self._poll(gang)
        if poll.at < 0:
            return None  # never read
        return GangWait(poll.held, poll.asked, self.clock.now() - poll.given_at)

    def _poll(self, gang: int) -> _Poll:
        """At most one skein call per CONTAINER_POLL_S; the AM itself learns of a
        finished container within its allocate heartbeat (1-5 s)."""
        poll = self.polls.setdefault(gang, _Poll(given_at=self.clock.now()))
        if self.clock.now() - poll.at < CONTAINER_POLL_S:
            return poll
        mine = self.ids.get(gang, {})
        try:
            every = self.app.containers(states=STATES)
        except StoreGone as exc:  # no news this time; a dead launcher still goes silent,
            # and the heartbeat timeout finds it
            say(f"could not read the containers' states: {exc!r}", "driver")
            return poll
        poll.at = self.clock.now()
        held = asked = 0
        for c in every:
            container = self.containers.get(mine.get(c.id, ""))
            if container is None:
                continue
            state = str(c.state)
            if state in ("WAITING", "REQUESTED"):
                asked += 1
                continue
            held += 1
            if state == "RUNNING":
                continue
            poll.finished.update(container.tasks)
            if state == "FAILED":
                self._note_end(poll, container, c, gang)
        if held > poll.held:
            poll.given_at = poll.at
        poll.held, poll.asked = held, asked
        return poll

    def _note_end(self, poll: _Poll, container: Container, c: Any, gang: int) -> None:
        """YARN's word on a container it ended, for each of its tasks."""
        flag = memory_flag_for(container.tasks[0].type)
        node = (c.yarn_node_http_address or "").rsplit(":", 1)[0]
        mb = self.memory.get(gang, {}).get(container.role, container.resources.memory_mb)
        rec = yarn_end(c.exit_message or "", mb, flag, self.clock.wall(), node)
        for task in container.tasks:
            poll.ends.setdefault(task, rec)

    def notice(self, gang: int, raw: str) -> PreemptionNotice | None:
        try:
            return PreemptionNotice.from_am(raw, self.ids.get(gang, {}))
        except RecordError as exc:
            say(f"an unreadable preemption notice in the store: {exc}", "driver")
            return None

    def clear(self, gang: int) -> None:
        """Kill the gang's containers still running or asked for (a frozen launcher
        never exits; an ask left open would be given later)."""
        mine = self.ids.get(gang, {})
        if not mine:
            return  # none asked for (a gang not started, nor requested early)
        for c in self.app.containers(states=["WAITING", "REQUESTED", "RUNNING"]):
            if c.id in mine:
                self.app.kill_container(c.id)
