"""Live task output from a running YARN application (`-interact True`, `tfyarn logs
--follow`), read from each container's log on its NodeManager, then from the aggregated
logs once the application has ended.

skein starts every container as `bash .skein.sh > <LOG_DIR>/<service>.log 2>&1`, so one
file per container holds its launcher's and its tasks' output. A Hadoop 3.3 NodeManager
serves it at /ws/v1/node/containerlogs/<container id>/<service>.log, framed: a header
(`Container:`, `LogType:`, `LogLength:` of the whole file, `LogContents:`) and a footer
glued to the last byte (`End of LogType:...`); `?size=-N` gives the file's last N bytes
inside the same frame. So the bytes are cut out by length, never by the footer's text, and
each poll asks only for the tail not shown yet. A few seconds after the application ends
the NodeManager forgets its containers (404 "Unknown container"); what was not shown by
then is taken from `yarn logs` (the same frame, per file). Lines get a `[task] ` prefix, as
in local mode (a container of several tasks prefixes its lines itself).
Must not change the application: it reads logs only.
"""

from __future__ import annotations

import re
import urllib.error
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from tfyarn.core.jobspec import container_name
from tfyarn.core.timing import REST_TIMEOUT_S
from tfyarn.hdfs import spnego
from tfyarn.hdfs.spnego import Negotiator
from tfyarn.protocol.skeinlink import App
from tfyarn.system.streams import Sink

ONE_TASK = re.compile(r"^(ps|chief|worker)-(\d+)$")  # appspec's name of a one-task container
GROUP = re.compile(r"^workers-\d+$")  # several tasks (-ppn, -wnpg): lines already prefixed

ENDED = ("SUCCEEDED", "FAILED", "KILLED")
STATES = ["RUNNING", *ENDED]
TAIL_ASK = 64 * 1024  # bytes asked for first; more when more is new
CATCH_UP_TRIES = 4  # a file growing faster than we ask: ask again for what is missing

# One file's frame, in a NodeManager answer or in `yarn logs` output.
FRAME = re.compile(rb"Container: (\S+) on \S+\n(?:[^\n]*\n)*?LogType:([^\n]*)\n"
                   rb"(?:[^\n]*\n)*?LogLength:(\d+)\nLogContents:\n")


@dataclass(frozen=True)
class Framed:
    container: str
    file: str
    length: int  # the whole file's length
    data: bytes  # the bytes of the file this frame holds: its last len(data) bytes


def frames(text: bytes, asked: int | None = None) -> Iterator[Framed]:
    """Every file's frame in `text`, in order. A frame holds the whole file, or with
    `asked` (the N of `?size=-N`) its last min(N, length) bytes; the bytes are skipped by
    length, so a log that prints `LogType:` or `Container:` cannot confuse the parse."""
    pos = 0
    while (m := FRAME.search(text, pos)) is not None:
        length = int(m[3])
        n = length if asked is None else min(asked, length)
        yield Framed(m[1].decode(), m[2].decode(), length, text[m.end():m.end() + n])
        pos = m.end() + n


def http_get(url: str, login: Negotiator | None = None) -> bytes | None:
    """A NodeManager answer, or None where it cannot serve it (yet, or any more); on a
    Kerberized cluster, as `login` (SPNEGO)."""
    try:
        with spnego.urlopen(url, {}, login, REST_TIMEOUT_S) as resp:
            return resp.read()
    except (urllib.error.URLError, OSError, ValueError, spnego.NegotiateRefused,
            spnego.NegotiateUnavailable):  # a ticket that expired mid-run: `yarn logs` at the end
        return None


@dataclass
class _Log:
    container: str  # YARN's container id
    file: str  # <service>.log
    url: str
    prefix: bytes
    task: str | None  # a line filter for a container of several tasks (--task)
    printed: int = 0  # bytes of the file already shown (complete lines)
    done: bool = False  # ended and shown to its last byte


@dataclass
class LiveLogs:
    """Follows the log of every container of the job (or of one task's) as it grows."""

    app: App  # the application (skeinlink)
    out: IO[bytes] | None
    task: str | None = None  # `--task worker:1`: only its lines
    get: Callable[[str], bytes | None] = http_get
    logs: dict[str, _Log] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.sink = Sink(self.out)

    def poll(self) -> None:
        """Print what every container wrote since the last poll; a container that ended is
        read one last time, its unfinished last line included."""
        for c in self.app.containers(states=STATES):
            log = self.logs.get(c.id) or self._add(c)
            if log is None or log.done:
                continue
            new = self._new_bytes(log)
            if new is None:
                continue  # the NodeManager cannot serve it now: later, or from `yarn logs`
            ended = str(c.state) in ENDED
            self._show(log, new, final=ended)
            log.done = ended

    def pending(self) -> list[str]:
        """Containers whose output may not all be shown yet."""
        return [log.container for log in self.logs.values() if not log.done]

    def finish(self, aggregated: bytes) -> None:
        """The application ended: what `yarn logs` holds of each container's log past what
        was shown, its unfinished last line included."""
        for framed in frames(aggregated):
            for log in self.logs.values():
                if (not log.done and log.container == framed.container
                        and log.file == framed.file):
                    self._show(log, framed.data[log.printed:], final=True)
                    log.done = True

    def _add(self, c: Any) -> _Log | None:
        """A container to follow, known by its service's name (no job spec needed: this
        also serves `tfyarn logs --follow` from any gateway)."""
        name = container_name(c.service_name)  # a grown container's too (worker-1-mem3072)
        one = ONE_TASK.match(name)
        if one is None and not GROUP.match(name):
            return None  # tfyarn's own side services (TensorBoard)
        task = f"{one[1]}:{one[2]}" if one else None
        if one and self.task is not None and task != self.task:
            return None
        file = f"{c.service_name}.log"
        url = (f"http://{c.yarn_node_http_address}/ws/v1/node/containerlogs/"
               f"{c.yarn_container_id}/{file}")
        log = _Log(c.yarn_container_id, file, url, f"[{task}] ".encode() if one else b"",
                   None if one else self.task)
        self.logs[c.id] = log
        return log

    def _new_bytes(self, log: _Log) -> bytes | None:
        """The file's bytes past what was shown, asking only for the file's tail."""
        ask = TAIL_ASK
        for _ in range(CATCH_UP_TRIES):
            body = self.get(f"{log.url}?size=-{ask}")
            framed = next(frames(body, ask), None) if body is not None else None
            if framed is None:
                return None
            start = framed.length - len(framed.data)  # where in the file these bytes start
            if start <= log.printed:
                return framed.data[log.printed - start:]
            ask = framed.length - log.printed
        return None

    def _show(self, log: _Log, new: bytes, final: bool) -> None:
        end = len(new) if final else new.rfind(b"\n") + 1
        lines = new[:end].splitlines()
        log.printed += end
        if log.task is not None:
            lines = [x for x in lines if x.startswith(f"[{log.task}] ".encode())]
        self.sink.write(b"".join(log.prefix + x + b"\n" for x in lines))
