"""TensorBoard behind the job's token (`python -m tfyarn.runtime.tbgate --logdir D --host H
--port P`, the token in TOKEN_VAR): what the TensorBoard side task runs in place of
`tensorboard.main`.

TensorBoard has no login of its own, and it serves the job's event files (its outputs)
to whoever reaches its port: every local user (locally, on 127.0.0.1) or anyone on the
cluster's network (on YARN, the node's address). Here TensorBoard's own WSGI app and
server run behind a gate (its documented `server_class` hook): a request must carry the
job's token, as `?token=` in the URL the job publishes (the client prints it to the
owner; the job page links it, behind the owner's secret locally and YARN's view ACL on a
cluster) or as the cookie a first such request set. Anyone else gets 403 and nothing of
it. The token comes in the environment (a process's environment is its user's alone to
read; its command line is everyone's). Must not import TensorBoard at import.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tfyarn.system.serving import carries

TOKEN_VAR = "TFYARN_TENSORBOARD_TOKEN"
FORBIDDEN = (b"403: this TensorBoard is its job's alone: open it with the URL the job "
             b"published (tfyarn prints it; the job page links it).\n")

App = Callable[[dict, Callable[..., Any]], Iterable[bytes]]


def cookie_name(port: int) -> str:
    """One per port: two jobs' TensorBoards on one host are two cookies in a browser."""
    return f"tfyarn-tensorboard-{port}"


def gated(app: App, token: str, cookie: str) -> App:
    """`app` (WSGI) for requests that carry `token` (query or cookie); 403 for others."""

    def gate(environ: dict, start_response: Callable[..., Any]) -> Iterable[bytes]:
        ok, set_cookie = carries(environ.get("QUERY_STRING", ""), environ.get("HTTP_COOKIE"),
                                 token, cookie)
        if not ok:
            start_response("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8"),
                                             ("Content-Length", str(len(FORBIDDEN)))])
            return [FORBIDDEN]
        if not set_cookie:
            return app(environ, start_response)

        def start(status: str, headers: list, exc_info: Any = None) -> Any:
            return start_response(status, [*headers, ("Set-Cookie", set_cookie)], exc_info)
        return app(environ, start)
    return gate


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tfyarn.runtime.tbgate")
    p.add_argument("--logdir", required=True)
    p.add_argument("--host", required=True)
    p.add_argument("--port", required=True, type=int)
    ns = p.parse_args(argv)
    token = os.environ.pop(TOKEN_VAR, "")
    if not token:
        print(f"tbgate: no {TOKEN_VAR} in the environment: not serving without one",
              file=sys.stderr)
        return 2
    from tensorboard import default, program

    def server(app: App, flags: Any) -> Any:
        return program.WerkzeugServer(gated(app, token, cookie_name(ns.port)), flags)

    tb = program.TensorBoard(default.get_plugins(), server_class=server)
    tb.configure(argv=["tensorboard", "--logdir", ns.logdir, "--host", ns.host,
                       "--port", str(ns.port)])
    return int(tb.main() or 0)


if __name__ == "__main__":
    sys.exit(main())
