"""Waiting for files to change without polling: Linux inotify, through ctypes.

A process that must react to files others write (the local driver to its store, the
local client to the job's log files) blocks on one inotify descriptor instead of
re-reading every file on a timer: at 512 tasks a 0.1 s rescan was most of a job's idle
CPU. One descriptor per process: the kernel allows few (fs.inotify.max_user_instances,
often 128), so launchers, of which there can be hundreds, never take one. Where inotify is
missing or refused, `DirWatch.open` returns None and the caller polls instead.
Must not know what the files mean; a caller without inotify polls.
"""

from __future__ import annotations

import ctypes
import os
import select
import struct
from collections.abc import Iterable

MOVED_TO = 0x80  # a file renamed into the dir: how the store's puts land
CLOSE_WRITE = 0x08  # a file opened for writing was closed
MODIFY = 0x02  # a file was written to (log files)
CREATE = 0x100
OVERFLOW = 0x4000  # the kernel's queue overflowed: events were lost, rescan
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len


class DirWatch:
    """One inotify descriptor and its watched dirs; `wait` gives the changed names."""

    def __init__(self, fd: int, libc: ctypes.CDLL) -> None:
        self.fd, self.libc = fd, libc
        self.dirs: dict[int, str] = {}  # watch descriptor -> dir

    @classmethod
    def open(cls) -> DirWatch | None:
        """A new watcher, or None where inotify is unavailable (not Linux, the limit of
        instances reached): callers then poll."""
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError):
            return None
        return cls(fd, libc) if fd >= 0 else None

    def add(self, path: str, mask: int) -> bool:
        """Watch `path` (a dir) for `mask` events; False if it cannot be watched."""
        wd = self.libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            return False
        self.dirs[wd] = path
        return True

    def wait(self, timeout: float | None) -> set[tuple[str, str]] | None:
        """(dir, name) of every change within `timeout` (an empty set if none came); None
        when events were lost (the caller rescans)."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        return self.drain() if ready else set()

    def drain(self) -> set[tuple[str, str]] | None:
        changed: set[tuple[str, str]] = set()
        lost = False
        while True:
            try:
                data = os.read(self.fd, 64 * 1024)
            except BlockingIOError:
                break
            for wd, mask, name in _events(data):
                if mask & OVERFLOW:
                    lost = True
                elif wd in self.dirs and name:
                    changed.add((self.dirs[wd], name))
        return None if lost else changed

    def release(self, paths: Iterable[str] | None = None) -> None:
        """Drop the watches of `paths` (None: every one) once no more events are wanted.
        The kernel frees watches after a grace period (5-15 ms here), and closing a
        descriptor that still has some waits that long: released early, the wait is off
        the path of whatever comes between (a job's last milliseconds)."""
        drop = set(self.dirs.values()) if paths is None else set(paths)
        for wd, path in list(self.dirs.items()):
            if path in drop:
                self.libc.inotify_rm_watch(self.fd, wd)
                del self.dirs[wd]

    def close(self) -> None:
        os.close(self.fd)


def available() -> bool:
    """Whether this process can have a watcher (one is opened and closed to know)."""
    watch = DirWatch.open()
    if watch is None:
        return False
    watch.close()
    return True


def _events(data: bytes) -> Iterable[tuple[int, int, str]]:
    i = 0
    while i + _HEADER.size <= len(data):
        wd, mask, _, length = _HEADER.unpack_from(data, i)
        raw = data[i + _HEADER.size:i + _HEADER.size + length]
        i += _HEADER.size + length
        yield wd, mask, os.fsdecode(raw.rstrip(b"\0"))
