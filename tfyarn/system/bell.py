"""A bell for a local store: its ringer wakes every process waiting on it, none polling.

Hundreds of local launchers wait for the driver's few keys (the cluster spec, a stop
request). Each polling the store every 20 ms was most of a big job's start-up CPU; inotify
would need a kernel instance each (often limited to 128 per user). Instead the driver
serves a unix socket (abstract namespace: no file, no path-length limit) and writes a
byte to every connected listener after each of its puts; a listener blocks in select
until then. A ring only says "look again": the store stays the truth. A listener that
connects is rung at once, so a put between its last look and its connection is not
missed. The driver's end closes every connection: listeners wake, and fall back to
polling. It keeps at most half the process's descriptors for listeners (the driver must
still open the store's files); waiters beyond that poll.
Abstract sockets have no permissions, so both ends check the other's uid (SO_PEERCRED):
another user can neither take a ringer's room nor pose as a bell (docs/security.md).
Must not carry data: a ring says only "look again", the store holds the values.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import select
import socket
import struct
import threading


def name_for(root: str) -> str:
    """The bell's abstract socket name for the store at `root` (its dir must exist): the
    dir's device and inode, unique on the machine while it exists, cheaper to learn than
    a hash of its path (hashlib loads OpenSSL: milliseconds of every process's start)."""
    st = os.stat(root)
    return f"\0tfyarn-store-{st.st_dev:x}-{st.st_ino:x}"


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of a unix socket (SO_PEERCRED)."""
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    return struct.unpack("3i", creds)[1]


class Bell:
    """The ringer's side: accepts listeners, rings them all."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.listeners: list[socket.socket] = []
        self.lock = threading.Lock()
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.room = max(0, soft // 2 - 16) if soft != resource.RLIM_INFINITY else 1 << 20

    def start(self) -> Bell:
        self.sock.bind(self.name)
        self.sock.listen(4096)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except (InterruptedError, ConnectionAbortedError):
                continue
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):  # out of descriptors: the
                    self._refuse_one()  # waiter polls instead; the store's own files first
                    continue
                return  # closed
            if peer_uid(conn) != os.geteuid():  # another user's process: never rung
                conn.close()
                continue
            conn.setblocking(False)
            with self.lock:
                full = len(self.listeners) >= self.room
                if not full:
                    self.listeners.append(conn)
            if full:  # keep descriptors for the store's files: this waiter polls
                conn.close()
            else:
                self._ring_one(conn)

    def _refuse_one(self) -> None:
        """Out of descriptors: wait for one to free (a listener hanging up) rather than
        spin; the backlog's waiters keep polling meanwhile."""
        select.select([], [], [], 0.05)

    def ring(self) -> None:
        with self.lock:
            listeners = list(self.listeners)
        for conn in listeners:
            self._ring_one(conn)

    def _ring_one(self, conn: socket.socket) -> None:
        try:
            conn.send(b"!")
        except BlockingIOError:
            pass  # its buffer is full of rings it has not read yet: it will look anyway
        except OSError:  # it hung up
            with self.lock:
                if conn in self.listeners:
                    self.listeners.remove(conn)
            conn.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        with self.lock:
            for conn in self.listeners:
                conn.close()
            self.listeners.clear()


class Listener:
    """A waiter's side: connected while the bell is up."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sock: socket.socket | None = None
        self.connect()

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.connect(self.name)
        except OSError:
            sock.close()
            return
        if peer_uid(sock) != os.geteuid():  # a name squatted by another user: poll
            sock.close()
            return
        self.sock = sock

    def wait(self, timeout: float | None) -> bool:
        """Block until a ring or `timeout`; False (at once) when no bell is connected:
        the caller polls, and the next wait tries to connect again."""
        if self.sock is None:
            self.connect()
            if self.sock is None:
                return False
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if ready:
            try:
                data = self.sock.recv(4096)
            except OSError:
                data = b""
            if not data:  # the ringer is gone
                self.close()
        return True

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
