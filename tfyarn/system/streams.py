"""A child's output streams: drained to their end, copied to a sink that may fail.

Owns: `Sink` (a writer that drops a failed stream instead of dying), `LinePump`
(copies a child's pipe line by line, keeping its last lines for failure messages) and
`PumpHub` (one thread pumping many pipes: a local launcher serves hundreds of tasks).
Must not know about jobs, tasks or stores.
"""

from __future__ import annotations

import collections
import contextlib
import os
import selectors
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
    line without a newline gets one, so the next writer starts a line of its own. It
    reads on a thread of its own, or on `hub`'s (shared by many pumps).
    """

    def __init__(self, stream: IO[bytes], sink: IO[bytes] | None, keep: int = TAIL_KEEP,
                 prefix: bytes = b"", notice: Callable[[str], bool] | None = None,
                 hub: PumpHub | None = None) -> None:
        self.stream = stream
        self.sink = Sink(sink)
        self.prefix = prefix  # each line's, when several processes share one log
        self.tail: collections.deque[str] = collections.deque(maxlen=keep)
        self.notice = notice  # a line worth knowing of, however far from the tail
        self.noticed = False
        self.partial = False  # the last piece fed did not end its line
        self.held = b""  # on a hub: the start of a line whose end has not come yet
        self.ended = threading.Event()
        if hub is None:
            threading.Thread(target=self._run, daemon=True).start()
        else:
            hub.add(self)

    def _run(self) -> None:
        for chunk in iter(lambda: self.stream.readline(CHUNK), b""):
            self.feed(chunk)
        self.finish()

    def feed(self, chunk: bytes) -> None:
        """One line, or a piece of one (at most CHUNK bytes, or the rest of a read)."""
        self.sink.write(chunk if self.partial else self.prefix + chunk)
        if not self.partial:
            line = chunk.decode("utf-8", "replace")
            self.tail.append(cut_line(line))
            if self.notice is not None and not self.noticed:
                self.noticed = self.notice(line)
        self.partial = not chunk.endswith(b"\n")

    def finish(self) -> None:
        if self.partial:
            self.sink.write(b"\n")
        self.stream.close()
        self.ended.set()

    def join(self, timeout: float | None = None) -> None:
        self.ended.wait(timeout)


class PumpHub:
    """One thread that drains every pump added to it (a selector over their pipes), so
    a process pumping hundreds of children does not hold a thread for each: a thread
    costs its start, and every scan of the process's children reads a file per thread."""

    def __init__(self) -> None:
        self.sel = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.sel.register(self.wake_r, selectors.EVENT_READ, None)
        self.lock = threading.Lock()
        self.pending: list[LinePump] = []
        self.thread: threading.Thread | None = None

    def add(self, pump: LinePump) -> None:
        os.set_blocking(pump.stream.fileno(), False)
        with self.lock:
            self.pending.append(pump)
            first = len(self.pending) == 1  # else the wake-up for those before is pending
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, daemon=True)
                self.thread.start()
        if first:
            with contextlib.suppress(BlockingIOError):  # a full pipe: a wake-up is pending
                os.write(self.wake_w, b"!")

    def _run(self) -> None:
        while True:
            for key, _ in self.sel.select():
                if key.data is None:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_r, 4096)
                    with self.lock:
                        adding, self.pending = self.pending, []
                    for pump in adding:
                        self.sel.register(pump.stream.fileno(), selectors.EVENT_READ, pump)
                else:
                    self._drain(key.data)

    def _drain(self, pump: LinePump) -> None:
        try:
            data = os.read(pump.stream.fileno(), CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.sel.unregister(pump.stream.fileno())
            if pump.held:
                pump.feed(pump.held)
            pump.finish()
            return
        # whole lines, as a thread's readline gives them: a line's start is held until
        # its end comes (a writer of its text, then its newline, shares the log with
        # others), or until CHUNK of it is
        data, start = pump.held + data, 0
        while (end := data.find(b"\n", start)) >= 0 or len(data) - start >= CHUNK:
            end = start + CHUNK if end < 0 or end + 1 - start > CHUNK else end + 1
            pump.feed(data[start:end])
            start = end
        pump.held = data[start:]
