"""Live task output from a running YARN application (`-interact True`, `tfyarn logs
--follow`), read from each container's log on its NodeManager.

skein starts every container as `bash .skein.sh > <LOG_DIR>/<service>.log 2>&1`, so one
file per container holds its launcher's and its tasks' output; the NodeManager serves it
at /ws/v1/node/containerlogs/<container id>/<service>.log while the container's logs are
on the node. That endpoint has no offset, so each poll reads the file whole and prints
what is new: fine for training logs, costly for containers writing hundreds of MB (use
`tfyarn logs` after the job for those). Lines get a `[task] ` prefix, as in local mode
(a container of several tasks prefixes its lines itself).
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from tfyarn.proc import Sink
from tfyarn.timing import REST_TIMEOUT_S

ONE_TASK = re.compile(r"^(ps|chief|worker)-(\d+)$")  # appspec's name of a one-task container
GROUP = re.compile(r"^workers-\d+$")  # several tasks (-ppn, -wnpg): lines already prefixed

ENDED = ("SUCCEEDED", "FAILED", "KILLED")
STATES = ["RUNNING", *ENDED]


def fetch(url: str) -> bytes | None:
    """The whole log file, or None where the NodeManager cannot serve it (yet, or any more)."""
    try:
        with urllib.request.urlopen(url, timeout=REST_TIMEOUT_S) as resp:
            return resp.read()
    except (urllib.error.URLError, OSError, ValueError):
        return None


@dataclass
class _Log:
    url: str
    prefix: bytes
    task: str | None  # a line filter for a container of several tasks (--task)
    printed: int = 0  # bytes of the file already shown (complete lines)
    done: bool = False


@dataclass
class LiveLogs:
    """Follows the log of every container of the job (or of one task's) as it grows."""

    app: Any  # skein.ApplicationClient
    out: IO[bytes] | None
    task: str | None = None  # `--task worker:1`: only its lines
    get: Callable[[str], bytes | None] = fetch
    logs: dict[str, _Log] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.sink = Sink(self.out)

    def poll(self) -> None:
        """Print what every container wrote since the last poll; a container that ended is
        read one last time, its unfinished last line included."""
        for c in self.app.get_containers(states=STATES):
            log = self.logs.get(c.id) or self._add(c)
            if log is None or log.done:
                continue
            data = self.get(log.url)
            ended = str(c.state) in ENDED
            if data is not None:
                self._show(log, data, final=ended)
            log.done = ended

    def _add(self, c: Any) -> _Log | None:
        """A container to follow, known by its service's name (no job spec needed: this
        also serves `tfyarn logs --follow` from any gateway)."""
        one = ONE_TASK.match(c.service_name)
        if one is None and not GROUP.match(c.service_name):
            return None  # tfyarn's own side services (TensorBoard)
        task = f"{one[1]}:{one[2]}" if one else None
        if one and self.task is not None and task != self.task:
            return None
        url = (f"http://{c.yarn_node_http_address}/ws/v1/node/containerlogs/"
               f"{c.yarn_container_id}/{c.service_name}.log")
        log = _Log(url, f"[{task}] ".encode() if one else b"", None if one else self.task)
        self.logs[c.id] = log
        return log

    def _show(self, log: _Log, data: bytes, final: bool) -> None:
        new = data[log.printed:]
        end = len(new) if final else new.rfind(b"\n") + 1
        lines = new[:end].splitlines()
        log.printed += end
        if log.task is not None:
            lines = [x for x in lines if x.startswith(f"[{log.task}] ".encode())]
        self.sink.write(b"".join(log.prefix + x + b"\n" for x in lines))
