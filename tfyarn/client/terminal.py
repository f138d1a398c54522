"""Local mode's terminal: every process's log file followed and shown, prefixed.

Owns `TerminalView`, the thread that copies the complete lines of growing log files to
the terminal (on inotify's word, at most every interval). Must not stop or start
processes, nor read the job's store.
"""

from __future__ import annotations

import os
import select
import threading
from typing import IO

from tfyarn.system import inotify
from tfyarn.system.streams import Sink


class TerminalView:
    """Follows growing log files and copies their complete lines, prefixed, to `out`.

    Local mode's terminal view: every process writes its own log file (a file never
    blocks a writer, and it outlives the client), and this thread shows them. It reads a
    file when inotify says it grew (at most every `interval`), so hundreds of quiet logs
    cost nothing; without inotify it looks at every file every `interval`. If `out`
    fails, showing stops; the files are untouched.
    """

    def __init__(self, out: IO[bytes] | None, interval: float) -> None:
        self.out = Sink(out)
        self.interval = interval
        self.files: dict[str, tuple[str, bytes]] = {}  # path -> (prefix, partial line)
        self.offsets: dict[str, int] = {}
        self.lock = threading.Lock()
        self.watch = inotify.DirWatch.open()
        self.watched: set[str] = set()
        self.stop_r, self.stop_w = os.pipe()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def add(self, path: str, prefix: str) -> None:
        """Follow `path` (again: a no-op, so a restarted process can append to its log)."""
        with self.lock:
            if path in self.files:
                return
            self.files[path] = (prefix, b"")
            self.offsets.setdefault(path, 0)
            folder = os.path.dirname(path)
            if self.watch is not None and folder not in self.watched:
                if not self.watch.add(folder, inotify.MODIFY | inotify.CLOSE_WRITE):
                    self.watch.close()
                    self.watch = None
                self.watched.add(folder)
        self._read({path})  # what it has already

    def start(self) -> TerminalView:
        self.thread.start()
        return self

    def poll(self, final: bool = False) -> None:
        """Show what every file has new (at the end: its last partial line too)."""
        with self.lock:
            paths = set(self.files)
        self._read(paths, final)

    def _read(self, paths: set[str], final: bool = False) -> None:
        with self.lock:
            for path in paths & set(self.files):
                prefix, partial = self.files[path]
                data = partial + self._read_new(path)
                *lines, rest = data.split(b"\n")
                if final and rest:
                    lines, rest = [*lines, rest], b""
                self.out.write(b"".join(prefix.encode() + line + b"\n" for line in lines))
                self.files[path] = (prefix, rest)

    def _read_new(self, path: str) -> bytes:
        try:
            if os.path.getsize(path) <= self.offsets[path]:
                return b""
            with open(path, "rb") as f:
                f.seek(self.offsets[path])
                data = f.read()
        except OSError:
            return b""
        self.offsets[path] += len(data)
        return data

    def _stopped(self, timeout: float | None) -> bool:
        ready, _, _ = select.select([self.stop_r], [], [], timeout)
        return bool(ready)

    def _run(self) -> None:
        while True:
            watch = self.watch
            if watch is None:
                if self._stopped(self.interval):
                    return
                self.poll()
                continue
            ready, _, _ = select.select([self.stop_r, watch.fd], [], [])
            if self.stop_r in ready:
                return
            changed = watch.drain()
            self._read(set(self.files) if changed is None else
                       {os.path.join(d, n) for d, n in changed})
            if self._stopped(self.interval):  # at most every `interval`
                return

    def release(self) -> None:
        """No more events wanted (the job is over): see inotify.DirWatch.release."""
        if self.watch is not None:
            self.watch.release()

    def stop(self) -> None:
        os.write(self.stop_w, b"!")
        if self.thread.is_alive():
            self.thread.join(timeout=2.0)
        self.poll(final=True)
        if self.watch is not None:
            self.watch.close()
