"""Horovod's gloo rendezvous store, served by the driver (on YARN: in the AM container).

`hvd.init()` with HOROVOD_CONTROLLER=gloo talks HTTP to it at
HOROVOD_GLOO_RENDEZVOUS_ADDR:PORT: PUT /SCOPE/KEY stores the body, GET returns it (404
while absent: Horovod polls), DELETE removes it. One server per job attempt, so every
attempt starts from an empty store (a fresh key scope). It answers the job's hosts only
and bounds what it stores (docs/security.md). Owns the store and its HTTP server.
Must not know about tasks, ranks or the job.
"""

from __future__ import annotations

import http.server
import os
import socket
import threading
from collections.abc import Iterable

from tfyarn.core.timing import PEER_REQUEST_TIMEOUT_S
from tfyarn.system.serving import Serving, tcp_peer_uid

MAX_VALUE = 1 << 20  # one PUT's body: gloo's values are addresses and rank tables (~KB)
MAX_KEYS = 65536  # keys held at once (a 512-rank job stores a few thousand)
MAX_BYTES = 64 << 20  # all values together


def addresses(hosts: Iterable[str]) -> frozenset[str]:
    """Every IP address `hosts` resolve to (a host that does not resolve adds none)."""
    out: set[str] = set()
    for host in hosts:
        try:
            out.update(str(info[4][0]) for info in socket.getaddrinfo(host, None))
        except OSError:
            continue
    return frozenset(out)


class RendezvousServer:
    """A thread-safe key-value store over HTTP, on an ephemeral port of the advertised
    host's address, answering only the job's own hosts (`allowed`: host names or
    addresses; the advertised host always), with bounded values and key counts: anyone
    else on the cluster's network gets 403, a huge or malformed request 4xx."""

    def __init__(self, advertise_host: str, allowed: Iterable[str] = ()) -> None:
        self.advertise_host = advertise_host
        self.allowed = addresses([advertise_host, *allowed])
        self.store: dict[str, bytes] = {}
        self.size = 0
        self.lock = threading.Lock()
        self.httpd = http.server.ThreadingHTTPServer((advertise_host, 0), self._handler())
        self.httpd.daemon_threads = True
        self.serving = Serving(self.httpd)

    @property
    def address(self) -> str:
        return f"{self.advertise_host}:{self.httpd.server_address[1]}"

    def start(self) -> RendezvousServer:
        self.serving.start()
        return self

    def stop(self) -> None:
        self.serving.stop()

    def admits(self, address: str) -> bool:
        """Whether a peer at `address` is one of the job's hosts. Where the job's hosts are
        loopback addresses (one machine: local mode, a one-machine sandbox), the kernel
        picks 127.0.0.1 as every peer's source, so any loopback address is one of them."""
        if address in self.allowed:
            return True
        return address.startswith("127.") and any(a.startswith("127.") for a in self.allowed)

    @staticmethod
    def same_user_here(client: tuple[str, int], local: tuple[str, int]) -> bool:
        """A peer on this machine (its socket in this kernel's tables: locally every
        task, and any other user's process) must be the job's user; a peer on another
        host cannot be told apart by user (HTTP without a login: Horovod's gloo client
        has none), only by `admits`."""
        uid = tcp_peer_uid(client, local)
        return uid is None or uid == os.geteuid()

    def put(self, key: str, body: bytes) -> int:
        """Store `body` under `key`: 200, or 507 when the store is full."""
        with self.lock:
            old = self.store.get(key)
            grown = self.size + len(body) - (len(old) if old is not None else 0)
            if (old is None and len(self.store) >= MAX_KEYS) or grown > MAX_BYTES:
                return 507
            self.store[key] = body
            self.size = grown
        return 200

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            timeout = PEER_REQUEST_TIMEOUT_S

            def _reply(self, code: int, body: bytes = b"") -> None:
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _stranger(self) -> bool:
                if server.admits(self.client_address[0]) and server.same_user_here(
                        self.client_address, self.connection.getsockname()):
                    return False
                self.close_connection = True
                self._reply(403, b"not a host of this job\n")
                return True

            def do_PUT(self) -> None:  # noqa: N802 - http.server's naming
                if self._stranger():
                    return
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    length = -1
                if not 0 <= length <= MAX_VALUE:
                    self.close_connection = True  # its body is never read
                    return self._reply(413 if length > MAX_VALUE else 400,
                                       f"a value of 0..{MAX_VALUE} bytes\n".encode())
                body = self.rfile.read(length)
                if len(body) != length:
                    return self._reply(400, b"body shorter than its Content-Length\n")
                self._reply(server.put(self.path, body))

            def do_GET(self) -> None:  # noqa: N802
                if self._stranger():
                    return
                with server.lock:
                    body = server.store.get(self.path)
                self._reply(404) if body is None else self._reply(200, body)

            def do_DELETE(self) -> None:  # noqa: N802
                if self._stranger():
                    return
                with server.lock:
                    old = server.store.pop(self.path, None)
                    server.size -= len(old) if old is not None else 0
                self._reply(200)

            def log_message(self, *_args: object) -> None:  # Horovod polls: stay quiet
                pass

        return Handler
