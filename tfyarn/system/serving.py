"""An HTTP server in a daemon thread that stops at once.

`serve_forever` wakes every 0.5 s to look for a shutdown request, and `shutdown()` waits
for that wake-up: a third of a second at the end of every job, for nothing. Here the
serving loop also watches a pipe, and `stop` writes to it.
Must not know what it serves.
"""

from __future__ import annotations

import os
import selectors
import socketserver
import threading


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
