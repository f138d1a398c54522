"""A child's output streams: drained to their end, copied to a sink that may fail.

Owns: `Sink` (a writer that drops a failed stream instead of dying) and `LinePump`
(copies a child's pipe line by line, keeping its last lines for failure messages). Must
not know about jobs, tasks or stores.
Must not know about jobs, tasks or stores.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import IO

from tfyarn.core.policy import cut_line

CHUNK = 64 * 1024  # longest piece of one line a pump reads at once
TAIL_KEEP = 200  # lines of a stream kept for the failure message


# ---------------------------------------------------------------- output


class Sink:
    """A stream written to until it fails (a closed terminal, `| head`): then dropped,
    so the writer goes on (draining a child, following files) instead of dying."""

    def __init__(self, out: IO[bytes] | None) -> None:
        self.out = out

    def write(self, data: bytes) -> None:
        if self.out is None or not data:
            return
        try:
            self.out.write(data)
            self.out.flush()
        except (OSError, ValueError):
            self.out = None


class LinePump:
    """Copies a child's output stream line by line into `sink`, keeping its last lines.

    The stream is always drained to its end, so the child never blocks on a full pipe:
    a sink that fails (a closed terminal, `| head`) is dropped, not the stream. A last
    line without a newline gets one, so the next writer starts a line of its own.
    """

    def __init__(self, stream: IO[bytes], sink: IO[bytes] | None, keep: int = TAIL_KEEP,
                 prefix: bytes = b"", notice: Callable[[str], bool] | None = None) -> None:
        self.stream = stream
        self.sink = Sink(sink)
        self.prefix = prefix  # each line's, when several processes share one log
        self.tail: collections.deque[str] = collections.deque(maxlen=keep)
        self.notice = notice  # a line worth knowing of, however far from the tail
        self.noticed = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        partial = False
        for chunk in iter(lambda: self.stream.readline(CHUNK), b""):
            self.sink.write(chunk if partial else self.prefix + chunk)
            if not partial:
                line = chunk.decode("utf-8", "replace")
                self.tail.append(cut_line(line))
                if self.notice is not None and not self.noticed:
                    self.noticed = self.notice(line)
            partial = not chunk.endswith(b"\n")
        if partial:
            self.sink.write(b"\n")
        self.stream.close()

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)
