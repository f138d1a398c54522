"""Finished jobs' pages, kept at their end, and `tfyarn history`'s small web server.

Owns reading the history dirs the drivers save final pages to (`JOB_ID.json`, a
`JobView`: YARN jobs' in HDFS over WebHDFS, local jobs' on disk), the listing of those
with the running tfyarn jobs (the ResourceManager's applications; local job dirs that
have no final status yet), newest first, and serving it: the listing at `/`, each kept
page at `/job/ID/` (rendered by the live page's own `render`), a kept local job's logs
beside it. A kept page never changes, so each is read once per server. Who is served: the
owner alone by the secret, or, with a `Gate`, each Kerberos viewer (SPNEGO) the jobs
whose view ACL admits them. Must not write (the driver keeps the pages:
`runtime/site.py`) nor ask the cluster anything at import.
Long because the reader, its shelves and the server share one `Listed` shape and are
read together; each part is a section.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import grp
import hashlib
import hmac
import html
import http.server
import math
import os
import posixpath
import pwd
import secrets
import socket
import stat
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tfyarn.core.appreport import AppReport
from tfyarn.core.errors import EnvironmentMissing, TfYarnError
from tfyarn.core.jobspec import acl_admits
from tfyarn.core.records import JobView, RecordError
from tfyarn.core.timing import VIEWER_TTL_S
from tfyarn.core.training import final_metrics
from tfyarn.hdfs import spnego, webhdfs
from tfyarn.protocol import kv as kvmod
from tfyarn.runtime.jobpage import STYLE, render
from tfyarn.system import private
from tfyarn.system.serving import (
    Serving,
    cookie_value,
    http_server,
    send,
    send_file,
    set_cookie,
    with_secret,
)

PAGE_LIMIT = 4 << 20  # a kept page's most bytes (a 2,000-task job's is ~600 KB)
MAX_EPOCH = 1 << 35  # year ~3058: past it time.localtime overflows
MAX_ATTEMPTS = 1 << 20
LISTED = 500  # the newest kept pages a listing reads (a day of a busy team's jobs is ~200)
READERS = 16  # kept pages read at once (WebHDFS: two round trips each)
SUFFIX = ".json"


class Shelf(Protocol):
    """A history dir."""

    where: str

    def names(self) -> list[tuple[float, str]]:
        """(modified, job id) of every kept page."""

    def read(self, job_id: str) -> JobView | None:
        """A kept page, None when there is none; RecordError when it is not one to show."""


@dataclass
class LocalShelf:
    """Local jobs' kept pages (Settings.local_history, or a `--dir`). A page is read only
    as a regular file (no symlink, at most PAGE_LIMIT bytes) owned by the user the page
    names (in the user's own history dir: by this user), so in a dir other users write to
    (a team's 1777 dir) no one forges, hides or breaks another's pages (`checked`)."""

    where: str
    mine: bool = False  # the user's own dir: every page in it must be this user's

    def names(self) -> list[tuple[float, str]]:
        try:
            entries = list(os.scandir(self.where))
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for e in entries:
            if not e.name.endswith(SUFFIX) or e.name.startswith("."):
                continue
            with contextlib.suppress(OSError):  # gone since
                st = e.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode):
                    out.append((st.st_mtime, e.name[:-len(SUFFIX)]))
        return out

    def read(self, job_id: str) -> JobView | None:
        path = os.path.join(self.where, job_id + SUFFIX)
        try:
            found = private.read_checked(path, PAGE_LIMIT)
        except private.NotPrivate as exc:
            raise RecordError(str(exc)) from None
        if found is None:
            return None
        data, owner = found
        view = JobView.from_json(data.decode("utf-8", "replace"), path)
        want = os.geteuid() if self.mine else _uid_of(view.user)
        if owner != want:
            raise RecordError(f"{path}: the file's owner (uid {owner}) is not the user the "
                              f"page names ({view.user!r}); not shown")
        return view


def _uid_of(user: str) -> int | None:
    try:
        return pwd.getpwnam(user).pw_uid
    except (KeyError, ValueError):
        return None


@dataclass
class HdfsShelf:
    """YARN jobs' kept pages, over WebHDFS (`client`: webhdfs.client_for). As a local
    shelf's, a page is shown only where its file's owner is the user it names."""

    where: str
    client: Any

    def names(self) -> list[tuple[float, str]]:
        with webhdfs.failing_as(f"listing {self.where}"):
            if self.client.status(self._path(), strict=False) is None:
                return []
            found = self.client.list(self._path(), status=True)
        out = []
        for name, st in found:
            if name.endswith(SUFFIX) and not name.startswith(".") and st.get("type") == "FILE":
                out.append((st["modificationTime"] / 1000, name[:-len(SUFFIX)]))
        return out

    def read(self, job_id: str) -> JobView | None:
        from hdfs.util import HdfsError

        path = posixpath.join(self._path(), job_id + SUFFIX)
        with webhdfs.failing_as(f"reading {self.where}/{job_id}{SUFFIX}"):
            try:
                st = self.client.status(path, strict=False)
                if st is None:
                    return None
                if st.get("length", 0) > PAGE_LIMIT:
                    raise RecordError(f"{self.where}/{job_id}{SUFFIX}: {st['length']} bytes, "
                                      "more than a kept page has; not shown")
                with self.client.read(path, encoding="utf-8") as reader:
                    text = reader.read(PAGE_LIMIT + 1)
            except HdfsError as exc:
                if getattr(exc, "exception", None) == "FileNotFoundException":
                    return None
                raise
        view = JobView.from_json(text, f"{self.where}/{job_id}")
        if st.get("owner") != view.user:
            raise RecordError(f"{self.where}/{job_id}{SUFFIX}: the file's owner "
                              f"({st.get('owner')!r}) is not the user the page names "
                              f"({view.user!r}); not shown")
        return view

    def _path(self) -> str:
        return webhdfs.hdfs_path(self.where)


@dataclass(frozen=True)
class Listed:
    """One line of the listing: a kept page (`link` /job/ID/) or a running job (its live
    page)."""

    job_id: str
    name: str
    app_type: str
    user: str
    state: str
    started: float
    ended: float | None
    link: str | None
    goodput: str = ""
    view_acls: tuple[str, ...] = ()  # who else may see it (kept pages; a running app's: ())
    metric: str = ""  # the final metrics its tasks reported (kept pages)


def listed(view: JobView) -> Listed:
    first = view.goodput[0].split(", by attempt")[0] if view.goodput else ""
    return Listed(view.job_id, view.name, view.app_type, view.user, view.state, view.started,
                  view.ended, f"job/{urllib.parse.quote(view.job_id)}/", first, view.view_acls,
                  final_metrics(view.training))


@dataclass
class HistoryReader:
    """What `tfyarn history` serves: kept pages from `shelves`, and the jobs each of
    `running` lists, each read on its own: a ResourceManager that does not answer leaves
    out its applications, never the local jobs."""

    shelves: list[Shelf]
    running: Sequence[Callable[[], list[Listed]]] = ()
    job_dirs: Callable[[str], str | None] = lambda _job_id: None  # a kept local job's dir
    notes: list[str] = field(default_factory=list)  # what the listing leaves out, and why
    views: dict[str, JobView] = field(default_factory=dict)  # read once: never change
    lock: threading.Lock = field(default_factory=threading.Lock)

    def listing(self) -> tuple[list[Listed], list[str]]:
        """Every job, newest first (running ones, then the newest LISTED kept pages), and
        what could not be read."""
        problems: list[str] = list(self.notes)
        named: list[tuple[float, str, Shelf]] = []
        for shelf in self.shelves:
            try:
                named += [(mtime, job_id, shelf) for mtime, job_id in shelf.names()]
            except EnvironmentMissing as exc:
                problems.append(str(exc))
        named.sort(key=lambda n: n[0], reverse=True)
        kept = self._views([(job_id, shelf) for _, job_id, shelf in named[:LISTED]], problems)
        live: list[Listed] = []
        for source in self.running:
            try:
                live += [r for r in source() if r.job_id not in kept]
            except EnvironmentMissing as exc:
                problems.append(f"running jobs: {exc}")
        rows = live + [listed(v) for v in kept.values()]
        rows.sort(key=lambda r: r.started, reverse=True)
        return rows, problems

    def view(self, job_id: str) -> JobView | None:
        for shelf in self.shelves:
            found = self._views([(job_id, shelf)], [])
            if job_id in found:
                return found[job_id]
        return None

    def _views(self, wanted: Iterable[tuple[str, Shelf]], problems: list[str]
               ) -> dict[str, JobView]:
        """The kept pages asked for, read in parallel the first time, in the order asked."""
        wanted = list(wanted)
        with self.lock:
            todo = [(j, s) for j, s in wanted if j not in self.views]
        if todo:
            with concurrent.futures.ThreadPoolExecutor(READERS) as pool:
                for job_id, got in zip([j for j, _ in todo],
                                       pool.map(lambda js: _read(*js), todo), strict=True):
                    if isinstance(got, JobView):
                        with self.lock:
                            self.views[job_id] = got
                    elif got:
                        problems.append(got)
        with self.lock:
            return {j: self.views[j] for j, _ in wanted if j in self.views}


def _read(job_id: str, shelf: Shelf) -> JobView | str | None:
    """A kept page, or what went wrong reading it (another tfyarn's format, HDFS)."""
    try:
        view = shelf.read(job_id)
        return None if view is None else checked(view, job_id, f"{shelf.where}/{job_id}")
    except (RecordError, EnvironmentMissing) as exc:
        return str(exc)


def checked(view: JobView, job_id: str, where: str) -> JobView:
    """`view` if what the listing and the page compute from it is sane: its job id is
    the file's, its times are real dates, its counts small; else a RecordError naming
    the page (that page is skipped, the listing stands)."""
    def when(t: float | None) -> bool:
        return t is None or (math.isfinite(t) and 0 <= t < MAX_EPOCH)

    problem = ("its job id is not its file's" if view.job_id != job_id else
               "a time that is no date" if not (when(view.started) and when(view.ended)) else
               "an attempt count out of range"
               if not (0 <= view.attempt < MAX_ATTEMPTS and 0 <= view.attempts <= MAX_ATTEMPTS)
               else "")
    if problem:
        raise RecordError(f"{where}: not shown: {problem}")
    return view


# ---------------------------------------------------------------- running jobs


def running_yarn(apps: list[AppReport]) -> list[Listed]:
    """The ResourceManager's tfyarn applications (`RestClient.apps`), linked to their live
    page through the RM's proxy (the tracking URL)."""
    return [Listed(a.app_id, a.name, a.kind, a.user, str(a.state), a.started_ms / 1000,
                   None, a.tracking_url or None) for a in apps]


def running_local(tmp_root: str | None) -> list[Listed]:
    """Local jobs whose dir has no final status and whose page answers (a dir left by a
    killed client has none), linked to that page."""
    from tfyarn.client.jobdir import JOB_ID, JobDir, jobs_root
    from tfyarn.core.jobspec import JobSpec

    out = []
    me = pwd.getpwuid(os.geteuid()).pw_name
    root = jobs_root(tmp_root)  # this user's own: no other user's dir is listed
    for job_id in sorted(os.listdir(root)):
        folder = os.path.join(root, job_id)
        if not JOB_ID.fullmatch(job_id) or os.path.islink(folder):
            continue
        jd = JobDir(folder)
        store = kvmod.DirKV(jd.kv_root)
        try:
            page = store.get(kvmod.PAGE)
            if page is None or store.get(kvmod.STATUS) is not None or not _answers(page):
                continue
            with open(jd.job_json, encoding="utf-8") as f:
                spec = JobSpec.from_json(f.read())
            started = os.path.getmtime(jd.job_json)
        except (OSError, ValueError, TypeError, KeyError, TfYarnError):  # ended and gone since
            continue
        out.append(Listed(job_id, spec.name, spec.app_type, me, "RUNNING", started, None, page))
    return out


def _answers(url: str) -> bool:
    parsed = urllib.parse.urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 80),
                                      timeout=0.5):
            return True
    except OSError:
        return False


# ---------------------------------------------------------------- text and HTML


def task_lines(view: JobView) -> list[str]:
    """A kept page as `tfyarn status APP --tasks` prints it: each task's address, state,
    exit and progress, the goodput lines, the earlier attempts."""
    out = [f"{r.task:<12} {r.addr:<30} {r.state}"
           + (f" {r.step}" if r.step else "")
           + (f" ({r.detail})" if r.detail and not r.state.startswith("exited 0") else "")
           for r in view.rows]
    out += list(view.goodput)
    out += [f"earlier: {e}" for e in view.earlier]
    return out


def render_listing(rows: list[Listed], problems: list[str], now: float) -> str:
    e = html.escape
    lines = "".join(
        f'<tr class="job"><td>{_link(r)}</td><td>{e(r.name)}</td><td>{e(r.app_type)}</td>'
        f'<td>{e(r.user)}</td><td class="{e(r.state)}">{e(r.state)}</td>'
        f"<td>{_when(r.started)}</td><td>{_took(r, now)}</td><td>{e(r.goodput)}</td>"
        f'<td class="metric">{e(r.metric)}</td></tr>'
        for r in rows)
    notes = "".join(f'<p class="problem">{e(p)}</p>' for p in problems)
    return ("<!doctype html><html><head><meta charset=utf-8><title>tfyarn history</title>"
            f"<style>{STYLE}</style></head><body><h1>tfyarn jobs</h1>{notes}"
            f"<p>{len(rows)} jobs, newest first</p><table id=jobs><tr><th>job</th>"
            "<th>name</th><th>type</th><th>user</th><th>state</th><th>started</th>"
            f"<th>took</th><th>goodput</th><th>final metrics</th></tr>{lines}</table>"
            "</body></html>")


def _link(r: Listed) -> str:
    e = html.escape
    from tfyarn.runtime.jobpage import safe_link

    if not r.link or not safe_link(r.link):
        return e(r.job_id)
    return f'<a href="{e(r.link, quote=True)}">{e(r.job_id)}</a>'


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch)) if epoch else "-"


def _took(r: Listed, now: float) -> str:
    from tfyarn.core.policy import elapsed_words

    if not r.started:
        return "-"
    return elapsed_words((r.ended or now) - r.started) + ("" if r.ended else " so far")


# ---------------------------------------------------------------- the server


VIEWER_COOKIE = "tfyarn-viewer"


@dataclass
class Gate:
    """Kerberos viewers of `tfyarn history --spnego-keytab`: a request proves its
    principal by SPNEGO (the server's keytab: HTTP/HOST@REALM), answered with a cookie
    this server signs (its own random key) for VIEWER_TTL_S, as Hadoop's web UIs sign
    theirs. A viewer sees a job when it is theirs (the page's user is their local name),
    its view ACL names them or a group of theirs (this host's groups, as Hadoop's shell
    group mapping), or they are YARN's admins (`admins`: yarn.admin.acl)."""

    acceptor: spnego.Acceptor
    admins: tuple[str, ...] = ()
    key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)

    def viewer(self, req: http.server.BaseHTTPRequestHandler) -> str | None:
        """The viewer's local user name; None when `req` has been answered (401 asking for
        a login, 403 naming why one was refused)."""
        user = self._from_cookie(cookie_value(req.headers.get("Cookie"), VIEWER_COOKIE))
        if user:
            return user
        header = req.headers.get("Authorization")
        if not header:
            req.extra_headers = (("WWW-Authenticate", "Negotiate"),)  # type: ignore[attr-defined]
            _send(req, 401, "401: log in by Kerberos (kinit, then a browser set up for "
                  "SPNEGO, or curl --negotiate -u :)", "text/plain")
            return None
        try:
            user = self.acceptor.accept(header).user
        except spnego.NegotiateRefused as exc:
            _send(req, 403, f"403: {exc}", "text/plain")
            return None
        signed = self.signed(user, time.time() + VIEWER_TTL_S)
        req.extra_headers = (  # type: ignore[attr-defined]
            ("Set-Cookie", set_cookie(VIEWER_COOKIE, signed)),)
        return user

    def signed(self, user: str, until: float) -> str:
        text = f"{urllib.parse.quote(user, safe='')}.{int(until)}"
        return f"{text}.{hmac.new(self.key, text.encode(), hashlib.sha256).hexdigest()}"

    def _from_cookie(self, value: str | None) -> str | None:
        """The viewer a cookie this server signed names, while it holds; else None."""
        if not value:
            return None
        text, _, mac = value.rpartition(".")
        user, _, until = text.rpartition(".")
        want = hmac.new(self.key, text.encode(), hashlib.sha256).hexdigest()
        if not (hmac.compare_digest(mac, want) and until.isdigit()
                and time.time() < int(until)):
            return None
        return urllib.parse.unquote(user)

    def sight(self, viewer: str) -> Sight:
        """What `viewer` may see (their groups looked up once a request, not once a job)."""
        groups = tuple(_groups(viewer))
        return Sight(viewer, groups, acl_admits(self.admins, viewer, groups))


@dataclass(frozen=True)
class Sight:
    """One viewer's: their own jobs, those whose view ACL names them or a group of
    theirs, and every job (with the listing's notes on unreadable pages) for an admin."""

    viewer: str
    groups: tuple[str, ...]
    admin: bool

    def shows(self, owner: str, view_acls: tuple[str, ...]) -> bool:
        return self.admin or (bool(owner) and owner == self.viewer) or \
            acl_admits(view_acls, self.viewer, self.groups)


def _groups(user: str) -> list[str]:
    """`user`'s groups on this host; none for a name with no account here."""
    try:
        gids = os.getgrouplist(user, pwd.getpwnam(user).pw_gid)
    except (KeyError, OSError):
        return []
    out = []
    for gid in gids:
        with contextlib.suppress(KeyError):
            out.append(grp.getgrgid(gid).gr_name)
    return out


@dataclass
class HistoryServer:
    """`tfyarn history`'s HTTP server (a daemon thread; `stop` ends it): for its owner
    alone by `secret`, or with a `gate` for every Kerberos viewer, each shown theirs."""

    history: HistoryReader
    secret: str | None  # the owner's (private.user_secret); unused with a gate
    gate: Gate | None = None
    serving: Serving | None = None

    def start(self, host: str, port: int) -> str:
        """Serve; the URL as its owner opens it (with the secret, where one is asked)."""
        secret = None if self.gate is not None else self.secret
        server = http_server(host, port, self.answer, secret)
        self.serving = Serving(server).start()
        return with_secret(f"http://{host}:{server.server_address[1]}/", secret)

    def answer(self, req: http.server.BaseHTTPRequestHandler) -> None:
        sight = None  # the owner, by the secret: every job
        if self.gate is not None:
            viewer = self.gate.viewer(req)
            if viewer is None:
                return None
            sight = self.gate.sight(viewer)
        path = urllib.parse.unquote(urllib.parse.urlparse(req.path).path)
        parts = [p for p in path.split("/") if p]
        if not parts:
            rows, problems = self.history.listing()
            if sight is not None:
                rows = [r for r in rows if sight.shows(r.user, r.view_acls)]
                problems = problems if sight.admin else []
            return _send(req, 200, render_listing(rows, problems, time.time()), "text/html")
        if parts[0] != "job" or len(parts) < 2:
            return _send(req, 404, "no such page: the listing is at /", "text/plain")
        view = self.history.view(parts[1])
        if view is not None and sight is not None and not sight.shows(view.user,
                                                                       view.view_acls):
            view = None  # the same answer as no page: a job's existence is not told
        if view is None:
            return _send(req, 404, f"no kept page for {parts[1]}", "text/plain")
        if len(parts) == 2:
            return _send(req, 200, render(view), "text/html")
        return self._log(req, parts[1], parts[2:])

    def _log(self, req: http.server.BaseHTTPRequestHandler, job_id: str,
             rest: list[str]) -> None:
        """A kept local job's log (`logs/NAME` on its page), while its dir is there."""
        root = self.history.job_dirs(job_id)
        if rest[0] != "logs" or len(rest) != 2 or root is None or "/" in rest[1]:
            return _send(req, 404, "that log is gone with its job dir", "text/plain")
        file = os.path.join(root, "logs", f"{rest[1]}.log")
        if not send_file(req, file, "text/plain; charset=utf-8"):
            return _send(req, 404, "that log is gone with its job dir", "text/plain")
        return None

    def stop(self) -> None:
        if self.serving is not None:
            self.serving.stop()


def _send(req: http.server.BaseHTTPRequestHandler, code: int, body: str, kind: str) -> None:
    send(req, code, body.encode("utf-8"), f"{kind}; charset=utf-8")
