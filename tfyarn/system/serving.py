"""An HTTP server in a daemon thread that stops at once.

`serve_forever` wakes every 0.5 s to look for a shutdown request, and `shutdown()` waits
for that wake-up: a third of a second at the end of every job, for nothing. Here the
serving loop also watches a pipe, and `stop` writes to it. `http_server` and `send` are
the HTTP part the job page and `tfyarn history` share (quiet GET handlers), and the
owner's secret a local server asks every request for (docs/security.md).
Must not know what it serves.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socketserver
import threading
from collections.abc import Callable
from typing import Any

from tfyarn.core.timing import PEER_REQUEST_TIMEOUT_S

COOKIE = f"tfyarn-token-{os.geteuid()}"  # one per user: two users' pages in one browser
FORBIDDEN = (b"403: this page is its owner's alone. Locally, open it with the URL tfyarn "
             b"printed (it ends in ?token=...; the token is in the owner's "
             b"~/.tfyarn/web-token); on YARN, through the application's tracking URL.\n")


class Serving:
    """Serves `server` until `stop` (which returns once the loop has ended)."""

    def __init__(self, server: socketserver.BaseServer) -> None:
        self.server = server
        self.wake_r, self.wake_w = os.pipe()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Serving:
        self.thread.start()
        return self

    def _run(self) -> None:
        self.server.timeout = 0  # handle_request: the socket is readable already
        with selectors.DefaultSelector() as sel:
            sel.register(self.server, selectors.EVENT_READ)
            sel.register(self.wake_r, selectors.EVENT_READ)
            while True:
                for key, _ in sel.select():
                    if key.fileobj == self.wake_r:
                        return
                    self.server.handle_request()

    def stop(self) -> None:
        os.write(self.wake_w, b"!")
        if self.thread.is_alive():
            self.thread.join(timeout=1.0)
        self.server.server_close()
        os.close(self.wake_r)
        os.close(self.wake_w)


def http_server(host: str, port: int, answer: Callable[[Any], None],
                secret: str | None = None, admit: Callable[[Any], bool] | None = None) -> Any:
    """A threading HTTP server (port 0: any free one) whose every GET `answer(request)`
    answers, logging nothing; not serving yet (`Serving(server).start()`). With a
    `secret`, only a request that carries it (`?token=`, or the cookie a first such
    request set) is answered; any other gets 403 and nothing of the page. `admit(request)`
    may refuse more (`same_user_peer`)."""
    import http.server  # ~15 ms: where a server is wanted, not where this is imported

    class Handler(http.server.BaseHTTPRequestHandler):
        timeout = PEER_REQUEST_TIMEOUT_S  # a client that sends half a request is dropped
        extra_headers: tuple[tuple[str, str], ...] = ()

        def do_GET(self) -> None:  # noqa: N802
            if (secret is not None and not admitted(self, secret)) or \
                    (admit is not None and not admit(self)):
                return send(self, 403, FORBIDDEN, "text/plain; charset=utf-8")
            answer(self)

        def log_message(self, *_args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def admitted(req: Any, secret: str) -> bool:
    """Whether `req` carries `secret`: as `?token=` (then a cookie is set for the page's
    relative links) or as that cookie."""
    import urllib.parse

    ok, cookie = carries(urllib.parse.urlsplit(req.path).query, req.headers.get("Cookie"),
                         secret, COOKIE)
    if cookie:
        req.extra_headers = (("Set-Cookie", cookie),)
    return ok


def carries(query: str, cookies: str | None, secret: str, name: str) -> tuple[bool, str]:
    """Whether a request with this query string and Cookie header carries `secret`, as
    `?token=` or as the cookie `name`; and, for a token, the Set-Cookie value that lets
    the page's relative links carry it on, else ""."""
    import urllib.parse

    from tfyarn.system.private import same_secret

    if same_secret((urllib.parse.parse_qs(query).get("token") or [None])[0], secret):
        return True, set_cookie(name, secret)
    return same_secret(cookie_value(cookies, name), secret), ""


def cookie_value(cookies: str | None, name: str) -> str | None:
    """The cookie `name` in a Cookie header; None where it has none or is malformed."""
    import http.cookies

    try:
        jar = http.cookies.SimpleCookie(cookies or "")
    except http.cookies.CookieError:
        return None
    return jar[name].value if name in jar else None


def set_cookie(name: str, value: str) -> str:
    """A Set-Cookie value for this server's pages: no script reads it, no other site
    sends it (`HttpOnly; SameSite=Strict`)."""
    return f"{name}={value}; Path=/; HttpOnly; SameSite=Strict"


def send_file(req: Any, path: str, kind: str) -> bool:
    """A file of this user's (a log) to `req`, streamed, opened without following a
    symlink; False (nothing sent) when there is no such file."""
    from tfyarn.system.private import open_owned

    found = open_owned(path)
    if found is None:
        return False
    f, size = found
    with f, contextlib.suppress(OSError):
        _head(req, 200, kind, size)
        left = size
        while left > 0:
            chunk = f.read(min(left, 1 << 20))
            if not chunk:
                break
            req.wfile.write(chunk)
            left -= len(chunk)
    return True


def same_user_peer(req: Any) -> bool:
    """Whether `req` came over loopback from a process of this server's own user (its
    socket's owner in /proc/net/tcp): on YARN the job page admits skein's web UI in the
    same container, which applies YARN's proxy filter and view ACL, and no other user of
    the node."""
    client, server = req.client_address, req.connection.getsockname()
    return tcp_peer_uid(client, server) == os.geteuid()


def tcp_peer_uid(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The uid owning the TCP socket at `client` connected to `server` on this host
    (IPv4, or IPv4-mapped IPv6: /proc/net/tcp, tcp6), None where there is none."""
    import socket
    import struct

    def hexaddr(addr: tuple[str, int]) -> str:
        ip = struct.unpack("<I", socket.inet_aton(addr[0]))[0]
        return f"{ip:08X}:{addr[1]:04X}"

    def mapped(addr: tuple[str, int]) -> str:  # ::ffff:a.b.c.d, as /proc/net/tcp6 has it
        ip = struct.unpack("<I", socket.inet_aton(addr[0]))[0]
        return f"0000000000000000FFFF0000{ip:08X}:{addr[1]:04X}"

    # a JVM's sockets (skein's web UI) are IPv6 ones even to 127.0.0.1: v4-mapped in tcp6
    for table, want in (("/proc/net/tcp", (hexaddr(client), hexaddr(server))),
                        ("/proc/net/tcp6", (mapped(client), mapped(server)))):
        try:
            with open(table, encoding="ascii") as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if (fields[1], fields[2]) == want:
                        return int(fields[7])
        except (OSError, ValueError, IndexError, StopIteration):
            continue
    return None


def with_secret(url: str, secret: str | None) -> str:
    """`url` as its owner opens it: with `?token=` where the server asks for one."""
    return f"{url}?token={secret}" if secret else url


def send(req: Any, code: int, body: bytes, kind: str) -> None:
    """One answer to `req` (a BaseHTTPRequestHandler); a client gone meanwhile is fine."""
    with contextlib.suppress(OSError):
        _head(req, code, kind, len(body))
        req.wfile.write(body)


def _head(req: Any, code: int, kind: str, length: int) -> None:
    """The status line and headers (a cookie `admitted` set among them)."""
    req.send_response(code)
    for name, value in getattr(req, "extra_headers", ()):
        req.send_header(name, value)
    req.send_header("Content-Type", kind)
    req.send_header("Content-Length", str(length))
    req.end_headers()
