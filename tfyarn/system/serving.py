"""An HTTP server in a daemon thread that stops at once.

`serve_forever` wakes every 0.5 s to look for a shutdown request, and `shutdown()` waits
for that wake-up: a third of a second at the end of every job, for nothing. Here the
serving loop also watches a pipe, and `stop` writes to it. `http_server` and `send` are
the HTTP part the job page and `tfyarn history` share (quiet GET handlers).
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


def http_server(host: str, port: int, answer: Callable[[Any], None]) -> Any:
    """A threading HTTP server (port 0: any free one) whose every GET `answer(request)`
    answers, logging nothing; not serving yet (`Serving(server).start()`)."""
    import http.server  # ~15 ms: where a server is wanted, not where this is imported

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            answer(self)

        def log_message(self, *_args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def send(req: Any, code: int, body: bytes, kind: str) -> None:
    """One answer to `req` (a BaseHTTPRequestHandler); a client gone meanwhile is fine."""
    with contextlib.suppress(OSError):
        req.send_response(code)
        req.send_header("Content-Type", kind)
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        req.wfile.write(body)
