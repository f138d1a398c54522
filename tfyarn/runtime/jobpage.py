"""The job page: one small self-refreshing HTML page the driver serves (stdlib only).

On YARN it listens on 127.0.0.1 for skein's web UI in the same container alone (the
peer's uid is checked) and is registered with it, so the application's tracking URL
links it through the ResourceManager's proxy, which applies YARN's view ACL; locally it
is served on 127.0.0.1 to its owner's secret and el_submit prints its URL. Every request
reads the job's store afresh, so the page always says what the store says: job name, app
type, state and elapsed time, each task's address, state, exit code or reason, attempt
and log link, the failing task's stderr tail, earlier attempts, TensorBoard's link, and
the plots of the training the driver put (`core.training`: metrics, steps/s, attempts).
Links are relative, so the proxy path keeps working. Must not write to the store or
decide anything: it shows what `taskstate` reads.
"""

from __future__ import annotations

import html
import http.server
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field

from tfyarn.core.errors import StoreGone
from tfyarn.core.jobspec import JobSpec
from tfyarn.core.policy import elapsed_words, goodput_lines
from tfyarn.core.records import JobView, Outcome, TaskRow, TensorBoard, Training
from tfyarn.core.tfconfig import Task
from tfyarn.core.timing import PAGE_REFRESH_S
from tfyarn.core.training import plots
from tfyarn.protocol import kv as kvmod
from tfyarn.protocol import taskstate
from tfyarn.system.serving import Serving, http_server, send, send_file, with_secret

STYLE = """body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}
th{background:#f3f3f3}.SUCCEEDED,.exited-0{color:#176117}.FAILED,.failed,.lost{color:#a11}
.running{color:#1559b0}pre{background:#f6f6f6;padding:.6em;overflow-x:auto}
figure{margin:.8em 0}figcaption{font-size:.9em;color:#555}"""


def read_view(spec: JobSpec, store: kvmod.KV, job_id: str, started: float,
              logs: Callable[[Task], str | None], user: str = "") -> JobView:
    """The page's data from the store: the current attempt's tasks, or the final status.
    `started`: the job's start, epoch seconds."""
    hide = spec.redactor()  # what a page shows or keeps holds no secret
    attempt, earlier, states = taskstate.current(store, spec.tasks())
    rows = tuple(TaskRow(str(s.task), s.addr or "-", s.state.value, hide(s.detail()),
                         logs(s.task), s.progress()) for s in states)
    raw_status, tb = store.get(kvmod.STATUS), store.get(kvmod.TENSORBOARD)
    raw_training = store.get(kvmod.TRAINING)
    training = Training.from_json(raw_training, kvmod.TRAINING) if raw_training else None
    tensorboard = TensorBoard.from_json(tb, kvmod.TENSORBOARD).url if tb else None
    said = hide.lines(a.words() for a in earlier)
    common = {"name": spec.name, "app_type": spec.app_type, "job_id": job_id,
              "elapsed": elapsed_words(time.time() - started), "attempt": attempt,
              "attempts": spec.attempts, "rows": rows, "earlier": said,
              "tensorboard": tensorboard, "user": user, "queue": spec.yarn.queue or "",
              "started": started, "view_acls": spec.yarn.view_acls, "training": training}
    if raw_status is None:
        phase = store.get(kvmod.PHASE) or "starting"
        return JobView(state="RUNNING", message=hide(phase), **common)
    out = Outcome.from_json(raw_status, kvmod.STATUS)
    return JobView(state=out.state, message=hide(out.message), failing=out.task,
                   tail=hide.lines(out.tail), refresh=False,
                   goodput=tuple(goodput_lines(out.goodput) if out.goodput else ()),
                   milestones=taskstate.milestones(store, len(spec.tasks())),  # kept, once
                   **common)


def render(v: JobView) -> str:
    """The HTML of a view; every value escaped."""
    e = html.escape
    head = (f'<meta http-equiv="refresh" content="{PAGE_REFRESH_S:g}">' if v.refresh else "")
    rows = "".join(
        f'<tr class="task"><td>{e(r.task)}</td><td>{e(r.addr)}</td>'
        f'<td class="{e(r.state.replace(" ", "-"))}">{e(r.state)}</td><td>{e(r.detail)}</td>'
        f"<td>{e(r.step)}</td>"
        f"<td>{v.attempt + 1}</td>"
        f'<td>{f"<a href={_q(r.log)}>log</a>" if r.log else "-"}</td></tr>'
        for r in v.rows)
    parts = [
        f"<!doctype html><html><head><meta charset=utf-8><title>{e(v.name)} - tfyarn</title>"
        f"{head}<style>{STYLE}</style></head><body>",
        f"<h1>{e(v.name)}</h1>",
        f'<p>{e(v.app_type)} &middot; {e(v.job_id)} &middot; <b id="state" class="{e(v.state)}">'
        f"{e(v.state)}</b> &middot; {e(v.elapsed)} &middot; attempt {v.attempt + 1}/"
        f"{v.attempts}</p>",
        f'<p id="message">{e(v.message)}</p>',
    ]
    if v.tensorboard:
        parts.append(f'<p>TensorBoard: <a id="tensorboard" href={_q(v.tensorboard)}>'
                     f"{e(v.tensorboard)}</a></p>")
    parts.append("<table id=tasks><tr><th>task</th><th>host:port</th><th>state</th>"
                 "<th>exit / reason</th><th>progress</th><th>attempt</th><th>log</th></tr>"
                 f"{rows}</table>")
    if v.training is not None:
        parts.append(plots(v.training))
    if v.goodput:
        parts.append("<h2>goodput</h2><ul id=goodput>"
                     + "".join(f"<li>{e(x)}</li>" for x in v.goodput) + "</ul>")
    if v.tail:
        parts.append(f"<h2>last stderr lines of {e(v.failing or '')}</h2>"
                     f"<pre id=tail>{e(chr(10).join(v.tail))}</pre>")
    if v.earlier:
        parts.append("<h2>earlier attempts</h2><ul>"
                     + "".join(f"<li>{e(x)}</li>" for x in v.earlier) + "</ul>")
    return "".join(parts) + "</body></html>"


def _q(url: str) -> str:
    """A link's quoted href: http(s) or relative only (a page's values may be forged: no
    `javascript:`)."""
    return '"' + html.escape(url if safe_link(url) else "#refused", quote=True) + '"'


def safe_link(url: str) -> bool:
    """Whether a browser given `url` as a link goes to an http(s) or relative address."""
    bare = "".join(c for c in url if c > " " and c != "\x7f")  # browsers drop these
    scheme = bare.split(":", 1)[0] if ":" in bare.split("/", 1)[0].split("?", 1)[0] else ""
    return scheme.lower() in ("", "http", "https")


@dataclass
class JobPage:
    """The page's HTTP server, in a daemon thread of the driver."""

    view: Callable[[], JobView]
    log_file: Callable[[str], str | None] = lambda _name: None  # local: /logs/NAME -> path
    secret: str | None = None  # locally: the owner's (every request must carry it)
    admit: Callable[[http.server.BaseHTTPRequestHandler], bool] | None = None  # YARN's rule
    serving: Serving | None = field(default=None, init=False)

    def start(self, host: str) -> str:
        """Serve; the page's URL as its owner opens it (with the secret, if any)."""
        server = http_server(host, 0, self.answer, self.secret, self.admit)
        self.serving = Serving(server).start()
        return with_secret(f"http://{host}:{server.server_address[1]}/", self.secret)

    def answer(self, req: http.server.BaseHTTPRequestHandler) -> None:
        path = urllib.parse.urlparse(req.path).path
        if path.startswith("/logs/"):
            file = self.log_file(urllib.parse.unquote(path[len("/logs/"):]))
            if file is None or not send_file(req, file, "text/plain; charset=utf-8"):
                return send(req, 404, b"no such log", "text/plain")
            return None
        try:
            body = render(self.view()).encode()
        except (StoreGone, OSError) as exc:  # the store went away while the page was asked for
            return send(req, 503, f"job state unavailable: {exc}".encode(), "text/plain")
        send(req, 200, body, "text/html; charset=utf-8")

    def stop(self) -> None:
        if self.serving is not None:
            self.serving.stop()

