"""Progress of the client's long steps on stderr: copying or packing `-f`, uploading to
HDFS or through skein, unpacking an env. Small steps stay quiet; a big one says what it
does, then bytes done and the rate every PROGRESS_S, then how long it took.

Must not say anything when stderr is not a terminal beyond its final line.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import IO

from tfyarn.core.say import say
from tfyarn.core.timing import PROGRESS_MIN_BYTES, PROGRESS_S

MB = 2**20


@dataclass
class Progress:
    """`what` over `total` bytes (None: unknown); shown only when total is big enough."""

    what: str
    total: int | None
    done_bytes: int = 0
    begun: float = field(default_factory=time.monotonic)
    last: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.shown = self.total is None or self.total >= PROGRESS_MIN_BYTES
        if self.shown:
            size = f" ({self.total / MB:.0f} MB)" if self.total is not None else ""
            say(f"{self.what}{size} ...")

    def add(self, n: int) -> None:
        self.done_bytes += n
        now = time.monotonic()
        if self.shown and now - self.last >= PROGRESS_S:
            self.last = now
            of = f" of {self.total / MB:.0f}" if self.total else ""
            say(f"{self.what}: {self.done_bytes / MB:.0f}{of} MB, {self._rate(now)}")

    def finish(self, done: int | None = None) -> None:
        """The last line; `done`: bytes done, for a step that could not count as it went."""
        if done is not None:
            self.done_bytes = done
        if self.shown:
            now = time.monotonic()
            say(f"{self.what}: done, {self.done_bytes / MB:.0f} MB in {now - self.begun:.1f} s "
                f"({self._rate(now)})")

    def _rate(self, now: float) -> str:
        return f"{self.done_bytes / MB / max(now - self.begun, 1e-3):.0f} MB/s"


class Reading:
    """A file object whose reads count into a Progress (for uploads that read a file)."""

    def __init__(self, f: IO[bytes], progress: Progress) -> None:
        self.f, self.progress = f, progress

    def __len__(self) -> int:  # a Content-Length, as the plain file would give
        return os.fstat(self.f.fileno()).st_size - self.f.tell()

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.progress.add(len(data))
        return data

