"""A child's output stream read line by line as it comes, by a thread of the test: so a
check can wait on what the child has said so far, or for its next line, while the child
runs (a pipe read only at its end says nothing until then, and a full pipe would stall
the child). Shared by tests and integration tests."""

from __future__ import annotations

import queue
import threading
from typing import IO


class LinesRead:
    """`stream`'s lines, read from now on: `lines` so far, `said(words)`, `next_line`, and
    `text()`, the whole once the stream has ended."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._fresh: queue.Queue[str | None] = queue.Queue()  # for next_line; None: ended
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[str]) -> None:
        for line in iter(stream.readline, ""):
            self.lines.append(line)
            self._fresh.put(line)
        self._fresh.put(None)

    def said(self, words: str) -> bool:
        """Whether a line so far holds `words`."""
        return any(words in line for line in self.lines)

    def next_line(self, words: str, timeout: float = 30) -> list[str]:
        """The lines not yet taken by next_line, until (and with) the first holding
        `words`; waiting at most `timeout` seconds for each line."""
        taken: list[str] = []
        while True:
            line = self._fresh.get(timeout=timeout)
            assert line is not None, f"ended before {words!r}: {''.join(taken)}"
            taken.append(line)
            if words in line:
                return taken

    def text(self, timeout: float = 60) -> str:
        """Every line, once the stream has ended (its writer gone)."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the stream still open after {timeout} s"
        return "".join(self.lines)
