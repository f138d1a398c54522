"""Horovod's gloo rendezvous store, served by the driver (on YARN: in the AM container).

`hvd.init()` with HOROVOD_CONTROLLER=gloo talks HTTP to it at
HOROVOD_GLOO_RENDEZVOUS_ADDR:PORT: PUT /SCOPE/KEY stores the body, GET returns it (404
while absent: Horovod polls), DELETE removes it. One server per job attempt, so every
attempt starts from an empty store (a fresh key scope). Owns the store and its HTTP
server; must not know about tasks, ranks or the job.
"""

from __future__ import annotations

import http.server
import threading

from tfyarn.system.serving import Serving


class RendezvousServer:
    """A thread-safe key-value store over HTTP, on an ephemeral port of every interface."""

    def __init__(self, advertise_host: str) -> None:
        self.advertise_host = advertise_host
        self.store: dict[str, bytes] = {}
        self.lock = threading.Lock()
        self.httpd = http.server.ThreadingHTTPServer(("0.0.0.0", 0), self._handler())
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

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _reply(self, code: int, body: bytes = b"") -> None:
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_PUT(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with server.lock:
                    server.store[self.path] = body
                self._reply(200)

            def do_GET(self) -> None:  # noqa: N802
                with server.lock:
                    body = server.store.get(self.path)
                self._reply(404) if body is None else self._reply(200, body)

            def do_DELETE(self) -> None:  # noqa: N802
                with server.lock:
                    server.store.pop(self.path, None)
                self._reply(200)

            def log_message(self, *_args: object) -> None:  # Horovod polls: stay quiet
                pass

        return Handler
